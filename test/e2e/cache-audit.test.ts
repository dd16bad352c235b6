import { createServer, request, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import type { UpstreamPoolOptions } from '../../src/gateway/upstream.js';
import { until } from '../support/eventually.js';
import { type EvmNodeFake, FakeEvmChain, startEvmNodeFake } from '../support/fakeUpstreams.js';
import { GANACHE_ACCOUNT_0, GANACHE_ACCOUNT_1, type GanacheNode, startGanache } from '../support/ganache.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * An audit of the response cache, coalescing and hedging through the real gateway, as a
 * developer comparing it with Infura or eRPC would run it: calls written differently, the
 * caller's id in every shape JSON allows, errors and empty answers, identical calls in flight
 * that fail or lose a caller, and slow nodes. A real node (ganache) where its answers matter;
 * fake nodes where latency, failures or a lagging head are needed. docs/decisions.md "Upstream
 * intelligence" says what may be kept; the entries "Audit of the cache …" what this file found.
 */

const gatekeeper = new TestGatekeeper();
const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((o) => o.close()));
});

type RpcAnswer = { jsonrpc: string; id: unknown; result?: unknown; error?: { code: number; message: string } };
const hex = (n: number): string => `0x${n.toString(16)}`;

/** Posts `body` as written (ids and params exactly as the test spells them); the answer's text and status. */
async function postRaw(url: string, body: string, signal?: AbortSignal): Promise<{ status: number; text: string }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: signal ?? AbortSignal.timeout(5_000) });
  return { status: r.status, text: await r.text() };
}

const callText = (idText: string, method: string, params?: unknown[]): string =>
  `{"jsonrpc":"2.0","id":${idText},"method":"${method}"${params ? `,"params":${JSON.stringify(params)}` : ''}}`;

/** Whether a single answer's text carries `"id":<idText>` as a member, byte for byte. */
const carriesId = (text: string, idText: string): boolean => text.includes(`"id":${idText},`) || text.includes(`"id":${idText}}`);

let nextId = 1;
async function post(url: string, method: string, params?: unknown[]): Promise<RpcAnswer> {
  const { text } = await postRaw(url, callText(String(nextId++), method, params));
  return JSON.parse(text) as RpcAnswer;
}

/** What a caller sees: the result, or the error's code (ganache's messages carry stack traces). */
const seen = (a: RpcAnswer): unknown => (a.error === undefined ? { result: a.result } : { error: a.error.code });

interface Ganache {
  node: GanacheNode;
  gateway: TestGateway;
  endpoint: string;
  direct(method: string, params?: unknown[]): Promise<RpcAnswer>;
  via(method: string, params?: unknown[]): Promise<RpcAnswer>;
  poll(): Promise<void>;
  lastUse(): string | undefined;
}

/** A ganache node behind the gateway (chain `local`); head polls are run by the test. */
async function withGanache(extraChains: Record<string, unknown>[] = []): Promise<Ganache> {
  const node = await startGanache();
  opened.push(node);
  const gateway = await startGateway({ gatekeeper, chains: [chainEntry('local', [node.url], { headPollMs: 600_000 }), ...extraChains] });
  opened.push(gateway);
  const endpoint = `${gateway.url}/local/${gatekeeper.token}`;
  const heads = gateway.pools.get('local')?.heads;
  if (!heads) throw new Error('the local chain should track heads');
  const poll = async (): Promise<void> => {
    heads.touch();
    await heads.poll();
  };
  await poll();
  return {
    node,
    gateway,
    endpoint,
    direct: (method, params) => post(node.url, method, params),
    via: (method, params) => post(endpoint, method, params),
    poll,
    lastUse: () => gateway.usage.at(-1)?.cache,
  };
}

/** Fake nodes serving one moving chain behind the gateway (chain `evm`); the pool's choice is the test's. */
async function withFakes(
  count: number,
  options: { extra?: Record<string, unknown>; pool?: UpstreamPoolOptions; random?: () => number } = {},
): Promise<{ chain: FakeEvmChain; fakes: EvmNodeFake[]; gateway: TestGateway; endpoint: string; poll(): Promise<void> }> {
  const chain = new FakeEvmChain(200, 8);
  const fakes = await Promise.all(Array.from({ length: count }, () => startEvmNodeFake(chain)));
  opened.push(...fakes);
  const gateway = await startGateway({
    gatekeeper,
    chains: [
      chainEntry(
        'evm',
        fakes.map((f) => f.url),
        { headPollMs: 600_000, maxLagBlocks: 5, ...options.extra },
      ),
    ],
    pool: { random: options.random ?? (() => 0), ...options.pool },
  });
  opened.push(gateway);
  const heads = gateway.pools.get('evm')?.heads;
  if (!heads) throw new Error('the evm chain should track heads');
  const poll = async (): Promise<void> => {
    heads.touch();
    await heads.poll();
  };
  await poll();
  return { chain, fakes, gateway, endpoint: `${gateway.url}/evm/${gatekeeper.token}`, poll };
}

const usageOf = (gateway: TestGateway, method: string): UsageRecord[] => gateway.usage.filter((u) => u.method === method);

describe("the caller's id", () => {
  // JSON allows each of these; a node re-serialising the call (ganache, Nethermind, Besu) answers `1.0` as 1,
  // `"\u0041"` as "A": the gateway must still answer with the caller's own text and not blame the node.
  const ids = ['0', '"0"', '""', '9007199254740991', '12345678901234567890', '-7', '1.0', '-0', '1e2', '"\\u0041"', '"a\\/b"', '"é"'];

  it('is the caller’s own, byte for byte, on a miss and on a hit, for every id JSON allows, and the node stays healthy', async () => {
    const g = await withGanache();
    for (const [i, idText] of ids.entries()) {
      // A call only this id makes (a miss), then the same call (a hit).
      const params = [`0xcafe${(i + 1).toString(16).padStart(36, '0')}`, 'latest'];
      for (const use of ['miss', 'hit']) {
        const { status, text } = await postRaw(g.endpoint, callText(idText, 'eth_getBalance', params));
        expect([idText, use, status, carriesId(text, idText), (JSON.parse(text) as RpcAnswer).result]).toEqual([idText, use, 200, true, '0x0']);
        expect(g.lastUse()).toBe(use);
      }
    }
    expect(g.gateway.pools.health().local?.map((h) => [h.healthy, h.consecutiveFailures])).toEqual([[true, 0]]);
  });

  it('is each caller’s own when identical calls in flight share one node call', async () => {
    const { fakes, gateway, endpoint } = await withFakes(1);
    const [node] = fakes as [EvmNodeFake];
    node.latency = () => 150;
    const answers = await Promise.all(ids.map((idText) => postRaw(endpoint, callText(idText, 'eth_getBalance', ['0x0abc', 'pending']))));
    expect(answers.map((a, i) => [ids[i], a.status, carriesId(a.text, ids[i] as string)])).toEqual(ids.map((idText) => [idText, 200, true]));
    expect(new Set(answers.map((a) => (JSON.parse(a.text) as RpcAnswer).result)).size).toBe(1);
    expect(node.calls).toHaveLength(1);
    expect(
      usageOf(gateway, 'eth_getBalance')
        .map((u) => u.cache)
        .sort(),
    ).toEqual(['miss', ...Array(ids.length - 1).fill('coalesced')].sort());
  });
});

describe('a batch mixing hits, misses, errors and a notification', () => {
  it('answers in the callers’ order, each member with its own id text', async () => {
    const g = await withGanache();
    await g.via('eth_chainId');
    await g.via('eth_getBalance', [GANACHE_ACCOUNT_0, '0x0']);
    const members: Array<[string | null, string, unknown[]]> = [
      ['0', 'eth_chainId', []],
      ['"0"', 'eth_getBalance', [GANACHE_ACCOUNT_0, '0x0']],
      ['12345678901234567890', 'eth_getBalance', [GANACHE_ACCOUNT_1, 'latest']],
      [null, 'eth_blockNumber', []],
      ['1.0', 'eth_getBalance', [GANACHE_ACCOUNT_1, '0x9']],
      ['0', 'eth_chainId', []],
      ['"\\u0041"', 'eth_getBlockByNumber', ['0x0', false]],
    ];
    const body = `[${members.map(([id, method, params]) => (id === null ? `{"jsonrpc":"2.0","method":"${method}","params":${JSON.stringify(params)}}` : callText(id, method, params))).join(',')}]`;
    const { status, text } = await postRaw(g.endpoint, body);
    expect(status).toBe(200);
    const answered = members.filter(([id]) => id !== null);
    // Each element's id as the caller wrote it, in order.
    const idTexts = [...text.matchAll(/(?:^\[|\},)\{(?:"jsonrpc":"2\.0",)?"id":("(?:[^"\\]|\\.)*"|[^,}]+)/g)].map((m) => m[1]);
    expect(idTexts).toEqual(answered.map(([id]) => id));
    const parsed = JSON.parse(text) as RpcAnswer[];
    for (const [i, [, method, params]] of answered.entries()) {
      expect([method, params, seen(parsed[i] as RpcAnswer)]).toEqual([method, params, seen(await g.direct(method, params))]);
    }
    const usage = g.gateway.usage.filter((u) => /:\d+$/.test(u.requestId));
    expect(usage.map((u) => [u.method, u.cache])).toEqual([
      ['eth_chainId', 'hit'],
      ['eth_getBalance', 'hit'],
      ['eth_getBalance', 'miss'],
      ['eth_blockNumber', 'miss'],
      ['eth_getBalance', 'miss'],
      ['eth_chainId', 'hit'],
      ['eth_getBlockByNumber', 'miss'],
    ]);
  });
});

describe('calls written differently', () => {
  it('gives each spelling the node’s own answer: ids, member order, hex case, leading zeros, tags and numbers, EIP-1898 objects', async () => {
    const g = await withGanache();
    // Identity precompile (0x…04): eth_call echoes the data, whatever its case.
    const identity = '0x0000000000000000000000000000000000000004';
    for (let i = 0; i < 2; i++) await g.direct('evm_mine');
    const head = 2;
    const headHash = ((await g.direct('eth_getBlockByNumber', [hex(head), false])).result as { hash: string }).hash;
    await g.poll();
    const checksummed = '0xFFcf8FDEE72ac11b5c542428B35EEF5769C409f0';
    const calls: Array<[string, unknown[]]> = [
      ['eth_call', [{ to: identity, data: '0xdeadbeef' }, hex(head)]],
      ['eth_call', [{ data: '0xdeadbeef', to: identity }, hex(head)]],
      ['eth_call', [{ to: identity, data: '0xDEADBEEF' }, hex(head)]],
      ['eth_call', [{ to: identity, data: '0xdeadbeef' }, 'latest']],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, hex(head)]],
      ['eth_getBalance', [checksummed, hex(head)]],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, '0x02']],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, '0x002']],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, 'latest']],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, 'pending']],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, { blockNumber: hex(head) }]],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, { blockHash: headHash, requireCanonical: true }]],
      ['eth_getBlockByNumber', ['0x1', false]],
      ['eth_getBlockByNumber', ['0x01', false]],
      ['eth_getBlockByNumber', ['0X1', false]],
    ];
    // Each twice through the gateway (the second may be a hit), interleaved, against the node's own answer.
    for (let round = 0; round < 2; round++) {
      for (const [method, params] of calls)
        expect([method, params, seen(await g.via(method, params))]).toEqual([method, params, seen(await g.direct(method, params))]);
    }

    // The head moves by a transfer sent through the gateway: `latest` and `pending` follow, the number stays.
    const before = (await g.via('eth_getBalance', [GANACHE_ACCOUNT_1, hex(head)])).result;
    const tx = await g.via('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: GANACHE_ACCOUNT_1, value: '0x64' }]);
    expect(tx.error).toBeUndefined();
    const after = (await g.direct('eth_getBalance', [GANACHE_ACCOUNT_1, 'latest'])).result;
    expect(after).not.toBe(before);
    for (const tag of ['latest', 'pending', hex(head + 1)])
      expect([tag, (await g.via('eth_getBalance', [GANACHE_ACCOUNT_1, tag])).result]).toEqual([tag, after]);
    expect((await g.via('eth_getBalance', [GANACHE_ACCOUNT_1, hex(head)])).result).toBe(before);
    expect(g.lastUse()).toBe('hit');

    // A block mined on the node directly: `latest` follows once a poll saw it, never the answer kept for the old head.
    await g.via('eth_getBlockByNumber', ['latest', false]);
    await g.direct('evm_mine');
    await g.poll();
    expect(((await g.via('eth_getBlockByNumber', ['latest', false])).result as { number: string }).number).toBe(hex(head + 2));
    expect(g.lastUse()).toBe('miss');
  });

  it('never answers `pending`, safe or finalized from the cache', async () => {
    const g = await withGanache();
    for (const tag of ['pending', 'safe', 'finalized']) {
      for (let i = 0; i < 2; i++) {
        await g.via('eth_getBalance', [GANACHE_ACCOUNT_0, tag]);
        await g.via('eth_getBlockByNumber', [tag, false]);
      }
    }
    expect(new Set(g.gateway.usage.map((u) => u.cache))).toEqual(new Set(['miss']));
  });

  it('keeps each chain’s answers to itself, on one gateway', async () => {
    const other = await startGanache();
    opened.push(other);
    // The same node software, another chain id: the same calls, other answers.
    const { startDevnet } = await import('../../src/infra/devnet.js');
    const third = await startDevnet({ chainId: 4242 });
    opened.push(third);
    const g = await withGanache([
      chainEntry('other', [third.url], { headPollMs: 600_000 }),
      chainEntry('plain', [other.url], { headPollMs: 600_000, finality: 'none' }),
    ]);
    await g.direct('evm_mine');
    const at = (chain: string): string => `${g.gateway.url}/${chain}/${gatekeeper.token}`;
    for (let i = 0; i < 2; i++) {
      expect((await post(at('local'), 'eth_chainId')).result).toBe('0x539');
      expect((await post(at('other'), 'eth_chainId')).result).toBe(hex(4242));
      expect((await post(at('plain'), 'eth_chainId')).result).toBe('0x539');
      expect((await post(at('local'), 'eth_blockNumber')).result).toBe('0x1');
      expect((await post(at('other'), 'eth_blockNumber')).result).toBe('0x0');
    }
  });
});

describe('errors and empty answers', () => {
  it('keeps none of them: a block not yet mined, its state, its logs', async () => {
    const g = await withGanache();
    const next = hex(1);
    const reads: Array<[string, unknown[]]> = [
      ['eth_getBlockByNumber', [next, false]],
      ['eth_getBalance', [GANACHE_ACCOUNT_1, next]],
      ['eth_getLogs', [{ fromBlock: next, toBlock: next }]],
      ['eth_getTransactionByBlockNumberAndIndex', [next, '0x0']],
    ];
    const early: unknown[] = [];
    for (const [method, params] of reads) {
      for (let i = 0; i < 2; i++) early.push(seen(await g.via(method, params)));
    }
    // null, "header not found" (ganache's code: -32700), [] and null: the node's own answers for a block it does not have.
    const errorCode = (await g.direct('eth_getBalance', [GANACHE_ACCOUNT_1, next])).error?.code;
    expect(errorCode).toEqual(expect.any(Number));
    expect(early).toEqual([
      { result: null },
      { result: null },
      { error: errorCode },
      { error: errorCode },
      { result: [] },
      { result: [] },
      { result: null },
      { result: null },
    ]);

    // Block 1 is mined (with a transfer: a transaction to find); the same calls now get it.
    const tx = await g.direct('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: GANACHE_ACCOUNT_1, value: '0x1' }]);
    expect(tx.error).toBeUndefined();
    for (const [method, params] of reads) expect([method, seen(await g.via(method, params))]).toEqual([method, seen(await g.direct(method, params))]);
    expect(((await g.via('eth_getBlockByNumber', [next, false])).result as { number: string }).number).toBe(next);
  });
});

describe('errors at final blocks', () => {
  it('keeps neither a pruned node’s error nor a null for a final block: the next call asks again', async () => {
    const { chain, fakes, gateway, endpoint } = await withFakes(1);
    const [node] = fakes as [EvmNodeFake];
    const final = chain.finalized - 100;
    node.historyBlocks = 16;
    const balance = callText('1', 'eth_getBalance', ['0x01', hex(final)]);
    const pruned = JSON.parse((await postRaw(endpoint, balance)).text) as RpcAnswer;
    expect(pruned.error?.message).toMatch(/missing trie node/);
    node.historyBlocks = null;
    const answered = JSON.parse((await postRaw(endpoint, balance)).text) as RpcAnswer;
    expect(answered.result).toMatch(/^0x[0-9a-f]{64}$/);
    // An unknown transaction hash: null, asked each time.
    for (let i = 0; i < 2; i++) await postRaw(endpoint, callText('2', 'eth_getTransactionReceipt', [`0x${'ee'.repeat(32)}`]));
    expect(usageOf(gateway, 'eth_getBalance').map((u) => u.cache)).toEqual(['miss', 'miss']);
    expect(usageOf(gateway, 'eth_getTransactionReceipt').map((u) => u.cache)).toEqual(['miss', 'miss']);
    expect(node.calls).toHaveLength(4);
  });
});

describe('answers that depend on the head', () => {
  it('keeps none from a node behind the tracked head: a later caller is not served an older head than the gateway knows', async () => {
    let choice = 0;
    const { chain, fakes, gateway, endpoint, poll } = await withFakes(2, { random: () => choice, pool: { hedge: false } });
    const [behind, upToDate] = fakes as [EvmNodeFake, EvmNodeFake];
    // Two blocks behind: within maxLagBlocks (5), so it still takes head calls.
    behind.behaviour = 'behind';
    behind.lagBlocks = 2;
    await poll();
    expect(gateway.pools.health().evm?.map((h) => h.state)).toEqual(['ok', 'ok']);
    const latest = callText('1', 'eth_getBlockByNumber', ['latest', false]);
    const numberOf = async (): Promise<string> => ((JSON.parse((await postRaw(endpoint, latest)).text) as RpcAnswer).result as { number: string }).number;
    // Head calls go to the node at the head while it can take them (upstream-intelligence-audit): here it fails, and the node behind answers.
    upToDate.mode = 'fail';
    expect(await numberOf()).toBe(hex(chain.head - 2));
    expect(behind.calls).toHaveLength(1);
    upToDate.mode = 'ok';
    // The next caller's call goes to the node at the head: it gets the head, not the older block kept from the first.
    choice = 0.99;
    expect(await numberOf()).toBe(hex(chain.head));
    expect(upToDate.calls).toHaveLength(2);
    // The head's own answer is kept for the head.
    choice = 0;
    expect(await numberOf()).toBe(hex(chain.head));
    expect(usageOf(gateway, 'eth_getBlockByNumber').map((u) => u.cache)).toEqual(['miss', 'miss', 'hit']);
  });
});

describe('coalescing', () => {
  it('hands each caller the shared call’s failure (a timeout, a 500, a dropped connection), none hangs, each metered once', async () => {
    const node = await startHeldNode();
    // No head tracking: the node sees callers' calls only; coalescing is the same on every JSON-RPC chain.
    const gateway = await startGateway({
      gatekeeper,
      chains: [chainEntry('held', [node.url], { timeoutMs: 300, finality: 'none' })],
      // Three failures in a row would eject the node, and the last call would not reach it.
      pool: { hedge: false, ejectAfterFailures: 10 },
    });
    opened.push(gateway);
    const endpoint = `${gateway.url}/held/${gatekeeper.token}`;
    const cases = [
      { end: 'never', code: -32015, status: 504 },
      { end: 'fail', code: -32010, status: 502 },
      { end: 'hangup', code: -32010, status: 502 },
    ] as const;
    for (const [c, { end, code, status }] of cases.entries()) {
      gateway.usage.length = 0;
      const params = [`0x${c + 1}`, 'pending'];
      const answers = Promise.all([0, 1, 2, 3].map((i) => postRaw(endpoint, callText(`"${end}-${i}"`, 'eth_getBalance', params))));
      // The node holds the first caller's call until the three others wait on it, then ends it so.
      await until(() => node.held.length === 1 && gateway.pools.get('held')?.waiting.values().next().value?.length === 3);
      node.end(end);
      expect((await answers).map((a) => [a.status, JSON.parse(a.text).id, JSON.parse(a.text).error?.code])).toEqual(
        [0, 1, 2, 3].map((i) => [status, `${end}-${i}`, code]),
      );
      expect([end, node.calls]).toEqual([end, c + 1]);
      // A timeout is charged; a call the nodes failed is not, for the caller who led it and each who shared it.
      expect(gateway.usage.map((u) => [u.rpcErrorCode, u.charged])).toEqual([0, 1, 2, 3].map(() => [code, status === 504]));
      expect(gateway.usage.map((u) => u.cache).sort()).toEqual(['coalesced', 'coalesced', 'coalesced', 'miss']);
    }
    // Nothing of it was kept, and nothing waits on it: the same call goes to the node again.
    const again = postRaw(endpoint, callText('1', 'eth_getBalance', ['0x3', 'pending']));
    await until(() => node.held.length === 1);
    node.end('ok');
    expect(JSON.parse((await again).text)).toEqual({ jsonrpc: '2.0', id: 1, result: '0x1' });
    expect(gateway.pools.get('held')?.waiting.size).toBe(0);
  });

  it('hands a batch member’s failure to the single calls waiting on it', async () => {
    const { fakes, gateway, endpoint } = await withFakes(1, { extra: { timeoutMs: 300 }, pool: { hedge: false } });
    const [node] = fakes as [EvmNodeFake];
    node.mode = 'slow';
    node.delayMs = 2_000;
    const batch = postRaw(endpoint, `[${callText('"b"', 'eth_getBalance', ['0x09', 'pending'])},${callText('"c"', 'eth_chainId')}]`);
    await until(() => node.calls.length === 1);
    const singles = await Promise.all([1, 2].map((i) => postRaw(endpoint, callText(String(i), 'eth_getBalance', ['0x09', 'pending']))));
    const batchAnswer = JSON.parse((await batch).text) as RpcAnswer[];
    expect(batchAnswer.map((a) => [a.id, a.error?.code])).toEqual([
      ['b', -32015],
      ['c', -32015],
    ]);
    expect(singles.map((s) => [s.status, (JSON.parse(s.text) as RpcAnswer).id, (JSON.parse(s.text) as RpcAnswer).error?.code])).toEqual([
      [504, 1, -32015],
      [504, 2, -32015],
    ]);
    expect(node.calls).toHaveLength(1);
    expect(usageOf(gateway, 'eth_getBalance').map((u) => u.cache)).toEqual(['miss', 'coalesced', 'coalesced']);
  });

  it('answers the other callers when the caller whose call it is hangs up', async () => {
    const { fakes, gateway, endpoint } = await withFakes(1);
    const [node] = fakes as [EvmNodeFake];
    node.latency = () => 300;
    // The first caller on a connection of its own, closed while its call is out.
    const first = request(endpoint, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
    const closed = new Promise<void>((resolve) => first.on('error', () => resolve()).on('close', () => resolve()));
    first.end(callText('"first"', 'eth_getBalance', ['0x0f', 'pending']));
    await until(() => node.calls.length === 1);
    const others = Promise.all([1, 2, 3].map((i) => postRaw(endpoint, callText(String(i), 'eth_getBalance', ['0x0f', 'pending']))));
    await until(() => gateway.pools.get('evm')?.waiting.values().next().value?.length === 3);
    first.destroy();
    await closed;
    const answers = await others;
    expect(answers.map((a) => [a.status, (JSON.parse(a.text) as RpcAnswer).id, typeof (JSON.parse(a.text) as RpcAnswer).result])).toEqual([
      [200, 1, 'string'],
      [200, 2, 'string'],
      [200, 3, 'string'],
    ]);
    expect(node.calls).toHaveLength(1);
    expect(usageOf(gateway, 'eth_getBalance').map((u) => u.cache)).toEqual(['miss', 'coalesced', 'coalesced', 'coalesced']);
  });
});

/**
 * A node that holds each call until the test ends it: answered (`0x1`), failed with a 500, its
 * connection dropped, or never answered (the gateway's timeout ends it).
 */
async function startHeldNode(): Promise<{
  url: string;
  calls: number;
  held: ServerResponse[];
  end(how: 'ok' | 'fail' | 'hangup' | 'never'): void;
  close(): Promise<void>;
}> {
  const node = {
    url: '',
    calls: 0,
    held: [] as ServerResponse[],
    end(how: 'ok' | 'fail' | 'hangup' | 'never') {
      for (const res of node.held.splice(0)) {
        if (how === 'ok') res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":"0x1"}');
        else if (how === 'fail') res.writeHead(500, { 'content-type': 'text/plain' }).end('internal error');
        else if (how === 'hangup') res.socket?.destroy();
      }
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      node.calls++;
      node.held.push(res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  node.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  opened.push(node);
  return node;
}

describe('hedging', () => {
  /** Two nodes, both fast for 40 reads (the hedge delay's latencies), then the first slow. */
  async function slowFirst(): Promise<{ fakes: EvmNodeFake[]; gateway: TestGateway; endpoint: string; chain: FakeEvmChain }> {
    const setup = await withFakes(2, { pool: { hedge: { quantile: 0.9, minDelayMs: 20, maxShare: 0.5 } } });
    for (let i = 0; i < 40; i++) await postRaw(setup.endpoint, callText(String(i), 'eth_getBalance', [hex(i), 'pending']));
    const [slow] = setup.fakes as [EvmNodeFake];
    slow.latency = () => 600;
    // The slow node's answers are marked: none may reach a caller.
    slow.rewrite = (body) => body.replace(/"result":"0x[0-9a-f]+"/, '"result":"0x5104"');
    for (const f of setup.fakes) f.calls.length = 0;
    setup.gateway.usage.length = 0;
    return setup;
  }

  it('meters a hedged read once and answers it with the fast node’s answer, which is the one kept', async () => {
    const { fakes, gateway, endpoint, chain } = await slowFirst();
    const [slow, fast] = fakes as [EvmNodeFake, EvmNodeFake];
    const call = callText('"h"', 'eth_getBalance', ['0x0abc', hex(chain.finalized - 1)]);
    const first = JSON.parse((await postRaw(endpoint, call)).text) as RpcAnswer;
    expect(first.id).toBe('h');
    expect(first.result).not.toBe('0x5104');
    expect([slow.calls.length, fast.calls.length]).toEqual([1, 1]);
    expect(gateway.usage.map((u) => [u.cache, u.upstream])).toEqual([['hedged', 'evm-2']]);
    // The slow node's answer comes after the caller's: it reaches neither the cache nor a later caller.
    await new Promise((r) => setTimeout(r, 700));
    const later = JSON.parse((await postRaw(endpoint, call)).text) as RpcAnswer;
    expect(later.result).toBe(first.result);
    expect(gateway.usage.map((u) => u.cache)).toEqual(['hedged', 'hit']);
  });

  it('never hedges or retries a submission, alone or in a batch', async () => {
    const { fakes, gateway, endpoint } = await slowFirst();
    const [slow, fast] = fakes as [EvmNodeFake, EvmNodeFake];
    const send = callText('"tx"', 'eth_sendRawTransaction', ['0x02']);
    expect((JSON.parse((await postRaw(endpoint, send)).text) as RpcAnswer).id).toBe('tx');
    await postRaw(endpoint, `[${send},${callText('"r"', 'eth_getBalance', ['0x0d', 'pending'])}]`);
    expect([slow.calls.length, fast.calls.length]).toEqual([2, 0]);
    expect(gateway.usage.map((u) => [u.method, u.cache])).toEqual([
      ['eth_sendRawTransaction', 'miss'],
      ['eth_sendRawTransaction', 'miss'],
      ['eth_getBalance', 'miss'],
    ]);
    // A node that drops the connection: the submission fails, no other node gets it.
    slow.mode = 'hangup';
    const failed = await postRaw(endpoint, send);
    expect([failed.status, (JSON.parse(failed.text) as RpcAnswer).error?.code]).toEqual([502, -32010]);
    expect([slow.calls.length, fast.calls.length]).toEqual([3, 0]);
  });

  it('never hedges the other submissions: EIP-7966 eth_sendRawTransactionSync, ERC-4337 eth_sendUserOperation', async () => {
    const { fakes, gateway, endpoint } = await slowFirst();
    const [slow, fast] = fakes as [EvmNodeFake, EvmNodeFake];
    await postRaw(endpoint, callText('1', 'eth_sendRawTransactionSync', ['0x02']));
    await postRaw(endpoint, callText('2', 'eth_sendUserOperation', [{ sender: '0x01' }, '0x0000000071727de22e5e9d8baf0edac6f37da032']));
    expect([slow.calls.length, fast.calls.length]).toEqual([2, 0]);
    expect(gateway.usage.map((u) => [u.method, u.cache, u.upstream])).toEqual([
      ['eth_sendRawTransactionSync', 'miss', 'evm-1'],
      ['eth_sendUserOperation', 'miss', 'evm-1'],
    ]);
  });
});
