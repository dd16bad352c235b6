import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import type { UsageRecord } from '../../src/domain/usage.js';
import { DEFAULT_CACHE_BYTES } from '../../src/gateway/cache/responseCache.js';
import type { UpstreamPoolOptions } from '../../src/gateway/upstream.js';
import { Telemetry } from '../../src/infra/telemetry.js';
import { until } from '../support/eventually.js';
import { type EvmNodeFake, type FakeBlock, FakeEvmChain, type FakeUpstream, startEvmNodeFake, startFake } from '../support/fakeUpstreams.js';
import { startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * What the gateway does with the nodes behind it (issue 34): head and finality tracking, the
 * finality-aware cache, coalescing, hedging, archive routing, and nodes that lie or misbehave.
 * Fake nodes serve one moving chain; head polls are run by the test (`poll`), not by time.
 */

const gatekeeper = new TestGatekeeper();
const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((o) => o.close()));
});

async function setUp(
  nodes: number,
  options: { chain?: FakeEvmChain; pool?: UpstreamPoolOptions; extra?: Record<string, unknown>; archive?: number[]; chainIds?: string[] } = {},
): Promise<{ chain: FakeEvmChain; fakes: EvmNodeFake[]; gateway: TestGateway; poll: () => Promise<void> }> {
  const chain = options.chain ?? new FakeEvmChain(200, 8);
  const fakes = await Promise.all(Array.from({ length: nodes }, () => startEvmNodeFake(chain)));
  opened.push(...fakes);
  for (const [i, chainId] of (options.chainIds ?? []).entries()) (fakes[i] as EvmNodeFake).chainId = chainId;
  const entry = chainEntry(
    'evm',
    fakes.map((f) => f.url),
    { headPollMs: 600_000, maxLagBlocks: 5, ...options.extra },
  );
  for (const i of options.archive ?? []) (entry.upstreams as Array<Record<string, unknown>>)[i]!.archive = true;
  const gateway = await startGateway({ gatekeeper, chains: [entry], pool: { random: () => 0, ...options.pool } });
  opened.push(gateway);
  const heads = gateway.pools.get('evm')!.heads!;
  const poll = async (): Promise<void> => {
    heads.touch();
    await heads.poll();
  };
  await poll();
  return { chain, fakes, gateway, poll };
}

let nextId = 1;
async function rpc(
  gateway: TestGateway,
  method: string,
  params?: unknown[],
  id: unknown = nextId++,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await fetch(`${gateway.url}/evm/${gatekeeper.token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) }),
  });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
}

type RpcAnswer = { jsonrpc: string; id: unknown; result?: unknown; error?: { code: number; message: string } };

async function rpcBatch(
  gateway: TestGateway,
  calls: Array<{ id?: unknown; method: string; params?: unknown[] }>,
): Promise<{ status: number; body: RpcAnswer[] }> {
  const r = await fetch(`${gateway.url}/evm/${gatekeeper.token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(calls.map((c) => ({ jsonrpc: '2.0', ...c }))),
  });
  return { status: r.status, body: (await r.json()) as RpcAnswer[] };
}

/** The usage records of the last batch (their request ids end in :<member>), in member order. */
const lastBatchUsage = (gateway: TestGateway): UsageRecord[] => {
  const members = gateway.usage.filter((u) => /:\d+$/.test(u.requestId));
  const request = members.at(-1)?.requestId.split(':')[0];
  return members.filter((u) => u.requestId.startsWith(`${request}:`));
};

const hex = (n: number): string => `0x${n.toString(16)}`;
const calledMethods = (f: EvmNodeFake): string[] => f.calls.map((c) => (JSON.parse(c.body) as { method: string }).method);
const cacheOf = (usage: UsageRecord[]): Array<string | undefined> => usage.map((u) => u.cache);

describe('head and finality tracking', () => {
  it('follows each node head, keeps head calls off a lagging node, and still sends it old blocks', async () => {
    const { fakes, gateway, chain, poll } = await setUp(2);
    const [behind, good] = fakes as [EvmNodeFake, EvmNodeFake];
    behind.behaviour = 'behind';
    behind.lagBlocks = 20;
    await poll();
    const health = gateway.pools.health().evm!;
    expect(health.map((h) => [h.label, h.head, h.lag, h.state])).toEqual([
      ['evm-1', chain.head - 20, 20, 'lagging'],
      ['evm-2', chain.head, 0, 'ok'],
    ]);
    expect(health[1]!.finalized).toBe(chain.finalized);

    // The pool would pick the first node (random 0): head calls skip it, a call for an old block does not.
    expect((await rpc(gateway, 'eth_blockNumber')).body.result).toBe(hex(chain.head));
    await rpc(gateway, 'eth_getBalance', ['0x01', 'latest']);
    await rpc(gateway, 'eth_getBlockByNumber', [hex(10), false]);
    expect(calledMethods(behind)).toEqual(['eth_getBlockByNumber']);
    expect(calledMethods(good)).toEqual(['eth_blockNumber', 'eth_getBalance']);

    behind.behaviour = 'honest';
    await poll();
    expect(gateway.pools.health().evm!.map((h) => h.state)).toEqual(['ok', 'ok']);
  });
});

describe('heads pushed over WebSocket', () => {
  it("follows a node's newHeads where it has a ws URL, drops answers for the old head at once, and polls while the push is down", async () => {
    const node = await startFakeWsUpstream();
    opened.push(node);
    for (let i = 0; i < 5; i++) node.mine();
    const entry = chainEntry('evm', [node.httpUrl], { headPollMs: 600_000, finality: 2 });
    (entry.upstreams as Array<Record<string, unknown>>)[0]!.ws = node.wsUrl;
    const gateway = await startGateway({ gatekeeper, chains: [entry] });
    opened.push(gateway);
    const heads = gateway.pools.get('evm')!.heads!;
    const blockNumber = async (): Promise<unknown> => (await rpc(gateway, 'eth_blockNumber')).body.result;

    // The first call starts polling (once: the next poll is 10 minutes away) and the push.
    expect(await blockNumber()).toBe('0x5');
    await until(() => heads.best === 5 && node.subscribeCalls === 1);
    expect(await blockNumber()).toBe('0x5');
    expect(await blockNumber()).toBe('0x5');
    expect(cacheOf(gateway.usage.slice(-2))).toEqual(['miss', 'hit']);
    node.mine();
    await until(() => heads.best === 6);
    expect(heads.finalized).toBe(4);
    expect(await blockNumber()).toBe('0x6');
    expect(gateway.usage.at(-1)?.cache).toBe('miss');

    // The socket drops and blocks come unseen: a poll finds them; the push comes back on its own.
    node.drop();
    node.mine({ quiet: true });
    node.mine({ quiet: true });
    // Polled once the gateway saw the socket close (until then the poll trusts the push).
    await until(async () => {
      await heads.poll();
      return heads.best === 8;
    });
    await until(() => node.subscribeCalls === 2, 5_000);
    node.mine();
    await until(() => heads.best === 9);
    expect(gateway.pools.health().evm![0]).toMatchObject({ head: 9, finalized: 7, state: 'ok' });
  });
});

describe('a stalled head push', () => {
  it('polls a node whose push went silent on an open socket, and follows its head', async () => {
    const node = await startFakeWsUpstream();
    opened.push(node);
    for (let i = 0; i < 5; i++) node.mine();
    const entry = chainEntry('evm', [node.httpUrl], { headPollMs: 100, finality: 2 });
    (entry.upstreams as Array<Record<string, unknown>>)[0]!.ws = node.wsUrl;
    const gateway = await startGateway({ gatekeeper, chains: [entry] });
    opened.push(gateway);
    const heads = gateway.pools.get('evm')!.heads!;
    await rpc(gateway, 'eth_blockNumber');
    await until(() => heads.best === 5 && node.subscribeCalls === 1);
    node.mine();
    await until(() => heads.best === 6);

    // The node stops pushing (stuck, or a half-open connection) while its head moves: polls find it.
    node.mine({ quiet: true });
    node.mine({ quiet: true });
    await until(() => heads.best === 8, 1_000);
    expect(node.connectionsAccepted).toBe(1);
    expect(gateway.pools.health().evm![0]).toMatchObject({ head: 8, finalized: 6, state: 'ok' });
  });
});

describe('the finality-aware cache', () => {
  it('keeps what cannot change, answers each caller with its own id, and meters a hit as a call', async () => {
    const { fakes, gateway, chain } = await setUp(1);
    const [node] = fakes as [EvmNodeFake];
    const final = chain.block(chain.finalized - 2)!;
    const recent = chain.block(chain.head - 1)!;
    const ids = ['"a"', 7, 'x'];
    for (const id of ids) expect((await rpc(gateway, 'eth_chainId', [], id)).body).toEqual({ jsonrpc: '2.0', id, result: '0x2a' });
    for (let i = 0; i < 2; i++) {
      expect(((await rpc(gateway, 'eth_getBlockByNumber', [hex(final.number), false])).body.result as { hash: string }).hash).toBe(final.hash);
      await rpc(gateway, 'eth_getBlockByNumber', [hex(recent.number), false]);
      await rpc(gateway, 'eth_getTransactionReceipt', [final.transactions[0]]);
      await rpc(gateway, 'eth_getTransactionReceipt', [recent.transactions[0]]);
      await rpc(gateway, 'eth_getBalance', ['0x01', hex(final.number)]);
      await rpc(gateway, 'eth_getLogs', [{ fromBlock: hex(final.number - 3), toBlock: hex(final.number) }]);
      await rpc(gateway, 'eth_getTransactionReceipt', [`0x${'ee'.repeat(32)}`]);
      await rpc(gateway, 'eth_getBalance', ['0x01', hex(chain.head + 50)]);
      await rpc(gateway, 'eth_sendRawTransaction', ['0x02']);
    }
    const counts = new Map<string, number>();
    for (const m of calledMethods(node)) counts.set(m, (counts.get(m) ?? 0) + 1);
    expect(Object.fromEntries(counts)).toEqual({
      eth_chainId: 1,
      // Final: once. Not final (a recent block and its receipt), a null (unknown receipt), an error and a write: every time.
      eth_getBlockByNumber: 3,
      eth_getTransactionReceipt: 5,
      eth_getBalance: 3,
      eth_getLogs: 1,
      eth_sendRawTransaction: 2,
    });
    const chainIdUsage = gateway.usage.filter((u) => u.method === 'eth_chainId');
    expect(cacheOf(chainIdUsage)).toEqual(['miss', 'hit', 'hit']);
    expect(chainIdUsage.every((u) => u.charged === true && u.status === 200)).toBe(true);
    expect(chainIdUsage[1]).toMatchObject({ upstream: null, upstreamMs: null });
  });

  it('keeps an answer that depends on the head only until the tracked head moves', async () => {
    const { fakes, gateway, chain, poll } = await setUp(1);
    const [node] = fakes as [EvmNodeFake];
    expect((await rpc(gateway, 'eth_blockNumber')).body.result).toBe(hex(chain.head));
    expect((await rpc(gateway, 'eth_blockNumber')).body.result).toBe(hex(chain.head));
    expect(node.calls).toHaveLength(1);
    chain.advance(1);
    await poll();
    expect((await rpc(gateway, 'eth_blockNumber')).body.result).toBe(hex(chain.head));
    expect(node.calls).toHaveLength(2);
  });

  it('serves nothing replaced by a reorg once the head moved, and never fetches final data again', async () => {
    const { fakes, gateway, chain, poll } = await setUp(1);
    const [node] = fakes as [EvmNodeFake];
    const final = chain.block(chain.finalized)!;
    const latestBefore = (await rpc(gateway, 'eth_getBlockByNumber', ['latest', false])).body.result as { hash: string; transactions: string[] };
    const balanceBefore = (await rpc(gateway, 'eth_getBalance', ['0x01', 'latest'])).body.result;
    await rpc(gateway, 'eth_getBlockByNumber', [hex(final.number), true]);
    await rpc(gateway, 'eth_getTransactionReceipt', [final.transactions[0]]);
    const replaced = chain.reorg(3);
    await poll();
    node.calls.length = 0;

    const latest = (await rpc(gateway, 'eth_getBlockByNumber', ['latest', false])).body.result as { hash: string; transactions: string[] };
    expect(latest.hash).not.toBe(latestBefore.hash);
    expect(latest.hash).toBe(chain.block(chain.head)!.hash);
    expect((await rpc(gateway, 'eth_getBalance', ['0x01', 'latest'])).body.result).not.toBe(balanceBefore);
    for (const old of replaced) {
      expect(((await rpc(gateway, 'eth_getBlockByNumber', [hex(old.number), false])).body.result as { hash: string }).hash).toBe(chain.block(old.number)!.hash);
      expect((await rpc(gateway, 'eth_getBlockByHash', [old.hash, false])).body.result).toBeNull();
      expect((await rpc(gateway, 'eth_getTransactionReceipt', [old.transactions[0]])).body.result).toBeNull();
    }
    await rpc(gateway, 'eth_getBlockByNumber', [hex(final.number), true]);
    await rpc(gateway, 'eth_getTransactionReceipt', [final.transactions[0]]);
    expect(calledMethods(node).filter((m) => m === 'eth_getTransactionReceipt')).toHaveLength(3);
    expect(node.calls.map((c) => c.body).filter((b) => b.includes(hex(final.number)))).toEqual([]);
  });
});

describe('the cache bound (RESPONSE_CACHE_MB)', () => {
  it('is 64 MiB unless set; 0 turns the cache off: every call goes to the node', async () => {
    expect(loadConfig({}).responseCacheBytes).toBe(DEFAULT_CACHE_BYTES);
    expect(() => loadConfig({ RESPONSE_CACHE_MB: '-1' })).toThrow(/RESPONSE_CACHE_MB/);
    const { responseCacheBytes } = loadConfig({ RESPONSE_CACHE_MB: '0' });
    expect(responseCacheBytes).toBe(0);
    const { fakes, gateway, chain } = await setUp(1, { pool: { cacheBytes: responseCacheBytes } });
    expect(gateway.pools.cache).toBeNull();
    for (let i = 0; i < 3; i++) {
      await rpc(gateway, 'eth_chainId');
      await rpc(gateway, 'eth_getBlockByNumber', [hex(chain.finalized - 1), false]);
    }
    await rpcBatch(gateway, [{ id: 1, method: 'eth_chainId' }]);
    expect(fakes[0]!.calls).toHaveLength(7);
    expect(new Set(cacheOf(gateway.usage))).toEqual(new Set(['miss']));
  });

  it('evicts the least recently used answers past a small bound', async () => {
    const { responseCacheBytes } = loadConfig({ RESPONSE_CACHE_MB: String(8 / 1024) });
    expect(responseCacheBytes).toBe(8192);
    const { fakes, gateway, chain } = await setUp(1, { pool: { cacheBytes: responseCacheBytes } });
    const [node] = fakes as [EvmNodeFake];
    const balance = (i: number) => rpc(gateway, 'eth_getBalance', [`0x${i.toString(16).padStart(40, '0')}`, hex(chain.finalized)]);
    await balance(0);
    await balance(0);
    expect(cacheOf(gateway.usage)).toEqual(['miss', 'hit']);
    // ~350 bytes an entry: 40 more answers do not fit in 8 KiB, and the first, unused since, goes.
    for (let i = 1; i <= 40; i++) await balance(i);
    const cache = gateway.pools.cache!;
    expect(cache.bytes).toBeLessThanOrEqual(8192);
    expect(cache.size).toBeGreaterThan(10);
    expect(cache.size).toBeLessThan(41);
    gateway.usage.length = 0;
    node.calls.length = 0;
    await balance(40);
    await balance(0);
    expect(cacheOf(gateway.usage)).toEqual(['hit', 'miss']);
    expect(node.calls).toHaveLength(1);
  });
});

describe('coalescing', () => {
  it('shares one upstream call among identical reads in flight, each caller with its own id', async () => {
    const { fakes, gateway } = await setUp(1);
    const [node] = fakes as [EvmNodeFake];
    node.latency = () => 150;
    const answers = await Promise.all([1, 2, 3, 'four', 5].map((id) => rpc(gateway, 'eth_getBalance', ['0x0abc', 'pending'], id)));
    expect(answers.map((a) => a.body.id)).toEqual([1, 2, 3, 'four', 5]);
    expect(new Set(answers.map((a) => a.body.result)).size).toBe(1);
    expect(node.calls).toHaveLength(1);
    expect(cacheOf(gateway.usage).sort()).toEqual(['coalesced', 'coalesced', 'coalesced', 'coalesced', 'miss']);
  });
});

describe('batches', () => {
  it('serves each member from the cache, by sharing an identical call in flight, or in one upstream batch, in order with the callers ids', async () => {
    const { fakes, gateway, chain } = await setUp(1);
    const [node] = fakes as [EvmNodeFake];
    const final = chain.block(chain.finalized - 2)!;
    const recent = chain.block(chain.head - 1)!;
    await rpc(gateway, 'eth_chainId');
    await rpc(gateway, 'eth_getBlockByNumber', [hex(final.number), false]);
    node.latency = () => 150;
    // A single call in flight that a member repeats.
    const inFlight = rpc(gateway, 'eth_getCode', ['0x02', 'pending'], 'single');
    await until(() => node.calls.length >= 3);

    const balanceAtFinal = ['0x01', hex(final.number)];
    const { status, body } = await rpcBatch(gateway, [
      { id: 'a', method: 'eth_chainId' },
      { id: 'b', method: 'eth_getBlockByNumber', params: [hex(final.number), false] },
      { id: 'c', method: 'eth_getBalance', params: balanceAtFinal },
      { id: 7, method: 'eth_getBlockByNumber', params: [hex(recent.number), false] },
      { id: 'c', method: 'eth_getBalance', params: balanceAtFinal },
      { id: null, method: 'eth_getCode', params: ['0x02', 'pending'] },
    ]);
    const single = await inFlight;
    expect(status).toBe(200);
    expect(body.map((a) => a.id)).toEqual(['a', 'b', 'c', 7, 'c', null]);
    expect(body[0]!.result).toBe('0x2a');
    expect((body[1]!.result as { hash: string }).hash).toBe(final.hash);
    expect((body[3]!.result as { hash: string }).hash).toBe(recent.hash);
    expect(body[4]!.result).toBe(body[2]!.result);
    expect(body[5]!.result).toBe(single.body.result);
    expect(body.every((a) => a.error === undefined)).toBe(true);

    // Two warm-up calls, the single call, and one batch of the two members nothing else served.
    expect(node.calls).toHaveLength(4);
    const sent = JSON.parse(node.calls[3]!.body) as Array<{ method: string; params: unknown[] }>;
    expect(sent.map((c) => [c.method, c.params])).toEqual([
      ['eth_getBalance', balanceAtFinal],
      ['eth_getBlockByNumber', [hex(recent.number), false]],
    ]);
    const usage = lastBatchUsage(gateway);
    expect(usage.map((u) => [u.method, u.cache, u.upstream, u.charged])).toEqual([
      ['eth_chainId', 'hit', null, true],
      ['eth_getBlockByNumber', 'hit', null, true],
      ['eth_getBalance', 'miss', 'evm-1', true],
      ['eth_getBlockByNumber', 'miss', 'evm-1', true],
      ['eth_getBalance', 'coalesced', 'evm-1', true],
      ['eth_getCode', 'coalesced', 'evm-1', true],
    ]);

    // A final answer a batch member got is kept; the recent block is not.
    expect((await rpc(gateway, 'eth_getBalance', balanceAtFinal, 'later')).body).toEqual({ jsonrpc: '2.0', id: 'later', result: body[2]!.result });
    await rpc(gateway, 'eth_getBlockByNumber', [hex(recent.number), false]);
    expect(cacheOf(gateway.usage.slice(-2))).toEqual(['hit', 'miss']);
    expect(node.calls).toHaveLength(5);
  });

  it('answers a batch whose node answer holds a malformed result, keeps nothing, and answers a later identical call', async () => {
    const { fakes, gateway, chain } = await setUp(1);
    const [node] = fakes as [EvmNodeFake];
    const final = chain.block(chain.finalized - 2)!;
    // A trailing comma inside the block: the batch scan does not read into results, the cache's check of the block does.
    node.rewrite = (body, call) => (call.body.startsWith('[') ? body.replace(']},"id"', '],},"id"') : body);
    const byHash = { jsonrpc: '2.0', id: 'x', method: 'eth_getBlockByHash', params: [final.hash, false] };
    const r = await fetch(`${gateway.url}/evm/${gatekeeper.token}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([byHash]),
      signal: AbortSignal.timeout(3_000),
    });
    expect(r.status).toBe(200);
    expect(await r.text()).toContain('"id":"x"');

    // The identical call is not left waiting for the batch's answer: it gets its own, which is kept.
    const later = await Promise.race([
      rpc(gateway, 'eth_getBlockByHash', [final.hash, false], 'later'),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the later call hangs')), 3_000)),
    ]);
    expect((later.body.result as { hash: string }).hash).toBe(final.hash);
    expect(cacheOf(gateway.usage.slice(-1))).toEqual(['miss']);
    expect(node.calls).toHaveLength(2);
  });

  it('answers a batch with 200 when the cache answered some members and the node failed the rest', async () => {
    const { fakes, gateway } = await setUp(1, { extra: { timeoutMs: 150 } });
    const [node] = fakes as [EvmNodeFake];
    await rpc(gateway, 'eth_chainId');
    node.latency = () => 1_000;
    const { status, body } = await rpcBatch(gateway, [
      { id: 'a', method: 'eth_chainId' },
      { id: 'b', method: 'eth_getBalance', params: ['0x01', 'latest'] },
    ]);
    // Clients (viem, ethers) drop a whole batch answered 5xx, the cached member with it.
    expect(status).toBe(200);
    expect(body.map((a) => [a.id, a.result ?? a.error?.code])).toEqual([
      ['a', '0x2a'],
      ['b', -32015],
    ]);
    expect(cacheOf(lastBatchUsage(gateway))).toEqual(['hit', 'miss']);
  });

  it('rejects a batch answer under ids it did not send: another node answers, or -32010 per member, and nothing is kept', async () => {
    const chain = new FakeEvmChain(200, 8);
    const liar = await startBatchIdLiar(chain);
    const honest = await startEvmNodeFake(chain);
    opened.push(liar, honest);
    const final = chain.block(chain.finalized - 1)!;
    const calls = [
      { id: 1, method: 'eth_getBlockByNumber', params: [hex(final.number), false] },
      { id: 1, method: 'eth_chainId' },
    ];
    const start = async (urls: string[]): Promise<TestGateway> => {
      const gateway = await startGateway({
        gatekeeper,
        chains: [chainEntry('evm', urls, { headPollMs: 600_000 })],
        pool: { random: () => 0, hedge: false },
      });
      opened.push(gateway);
      const heads = gateway.pools.get('evm')!.heads!;
      heads.touch();
      await heads.poll();
      return gateway;
    };

    const both = await start([liar.url, honest.url]);
    const answered = await rpcBatch(both, calls);
    expect(answered.status).toBe(200);
    expect(answered.body.map((a) => [a.id, a.error])).toEqual([
      [1, undefined],
      [1, undefined],
    ]);
    expect((answered.body[0]!.result as { hash: string }).hash).toBe(final.hash);
    expect(answered.body[1]!.result).toBe('0x2a');
    expect([liar.calls.length, honest.calls.length]).toEqual([1, 1]);
    expect(lastBatchUsage(both).map((u) => u.upstream)).toEqual(['evm-2', 'evm-2']);

    const alone = await start([liar.url]);
    const refused = await rpcBatch(alone, calls);
    expect(refused.status).toBe(502);
    expect(refused.body.map((a) => [a.id, a.error?.code])).toEqual([
      [1, -32010],
      [1, -32010],
    ]);
    expect(lastBatchUsage(alone).map((u) => [u.rpcErrorCode, u.cache])).toEqual([
      [-32010, 'miss'],
      [-32010, 'miss'],
    ]);
    // Nothing of the rejected answer was kept: the same calls, one at a time, go to the node (which answers singles honestly).
    for (const c of calls) await rpc(alone, c.method, c.params, 'again');
    expect(cacheOf(alone.usage.slice(-2))).toEqual(['miss', 'miss']);
    expect(liar.calls).toHaveLength(4);
  });
});

/**
 * A node that answers single calls as it should (head polls included) and every batch under ids
 * it was not sent (each sent id + 1000): another call's answers, as a confused proxy would send.
 */
function startBatchIdLiar(chain: FakeEvmChain): Promise<FakeUpstream> {
  const block = (b: FakeBlock | undefined): unknown =>
    b ? { number: hex(b.number), hash: b.hash, parentHash: b.parentHash, timestamp: hex(1_700_000_000 + b.number * 12), transactions: b.transactions } : null;
  const resultOf = (method: string, params: unknown[]): unknown => {
    if (method === 'eth_chainId') return '0x2a';
    const tag = params[0];
    const n = tag === 'latest' ? chain.head : tag === 'finalized' ? chain.finalized : Number.parseInt(String(tag), 16);
    return block(chain.block(n));
  };
  return startFake((call) => {
    const parsed = JSON.parse(call.body) as { id: number; method: string; params?: unknown[] } | Array<{ id: number; method: string; params?: unknown[] }>;
    if (!Array.isArray(parsed)) return { body: { jsonrpc: '2.0', id: parsed.id, result: resultOf(parsed.method, parsed.params ?? []) } };
    return { body: parsed.map((c) => ({ jsonrpc: '2.0', id: c.id + 1000, result: resultOf(c.method, c.params ?? []) })) };
  });
}

describe('notifications', () => {
  it('answers notifications and batches of only notifications with 204 when the node sends an empty body, and never counts it a failure', async () => {
    const { fakes, gateway } = await setUp(2);
    const send = async (body: unknown): Promise<{ status: number; text: string }> => {
      const r = await fetch(`${gateway.url}/evm/${gatekeeper.token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: r.status, text: await r.text() };
    };
    gateway.usage.length = 0;
    for (let i = 0; i < 5; i++) {
      const batch = await send([
        { jsonrpc: '2.0', method: 'eth_getBalance', params: ['0x01', 'latest'] },
        { jsonrpc: '2.0', method: 'eth_chainId' },
      ]);
      expect(batch).toEqual({ status: 204, text: '' });
      expect(await send({ jsonrpc: '2.0', method: 'eth_blockNumber' })).toEqual({ status: 204, text: '' });
    }
    // Each sent once (no node tried again), and no node has a failure to its name.
    expect(fakes.reduce((n, f) => n + f.calls.length, 0)).toBe(10);
    expect(gateway.pools.health().evm!.map((h) => [h.healthy, h.consecutiveFailures])).toEqual([
      [true, 0],
      [true, 0],
    ]);
    expect(gateway.usage).toHaveLength(15);
    expect(gateway.usage.every((u) => u.rpcErrorCode === null && u.errorMessage === null && u.charged === true)).toBe(true);
  });
});

describe('hedging', () => {
  it('sends a slow read to a second node and answers with the first answer; never hedges a write', async () => {
    const { fakes, gateway } = await setUp(2, { pool: { hedge: { quantile: 0.9, minDelayMs: 20, maxShare: 0.5 } } });
    const [slow, fast] = fakes as [EvmNodeFake, EvmNodeFake];
    // Recent latencies for the hedge delay: both nodes answer at once.
    for (let i = 0; i < 40; i++) await rpc(gateway, 'eth_getBalance', [`0x${i.toString(16)}`, 'pending']);
    slow.latency = () => 1_500;
    gateway.usage.length = 0;
    const read = await rpc(gateway, 'eth_getBalance', ['0xdead', 'pending']);
    expect(read.body.result).toMatch(/^0x/);
    expect(gateway.usage[0]).toMatchObject({ cache: 'hedged', upstream: 'evm-2' });

    fast.calls.length = 0;
    const write = await rpc(gateway, 'eth_sendRawTransaction', ['0x02']);
    expect(write.status).toBe(200);
    expect(fast.calls).toHaveLength(0);
    expect(gateway.usage[1]).toMatchObject({ cache: 'miss', upstream: 'evm-1' });
  });
});

describe('archive routing', () => {
  it('sends state older than a full node keeps to an archive node, and retries a "missing trie node" there', async () => {
    const { fakes, gateway, chain } = await setUp(2, { archive: [1], extra: { fullNodeHistoryBlocks: 128 } });
    const [full, archive] = fakes as [EvmNodeFake, EvmNodeFake];
    full.historyBlocks = 16;
    const old = await rpc(gateway, 'eth_getBalance', ['0x01', hex(chain.head - 150)]);
    expect(old.body.result).toMatch(/^0x/);
    expect(full.calls).toHaveLength(0);
    expect(archive.calls).toHaveLength(1);
    // 50 blocks back: a full node should have it by the chain's setting; this one answers "missing trie node".
    const pruned = await rpc(gateway, 'eth_getBalance', ['0x02', hex(chain.head - 50)]);
    expect(pruned.body.result).toMatch(/^0x/);
    expect(full.calls).toHaveLength(1);
    expect(archive.calls).toHaveLength(2);
    expect(gateway.usage.map((u) => u.upstream)).toEqual(['evm-2', 'evm-2']);
    expect(gateway.pools.health().evm!.map((h) => h.healthy)).toEqual([true, true]);
  });
});

describe('bad upstreams', () => {
  it('marks a node claiming a head 10^9 blocks ahead as unhealthy, and it poisons neither routing nor the cache', async () => {
    const { fakes, gateway, chain, poll } = await setUp(2);
    const [liar, honest] = fakes as [EvmNodeFake, EvmNodeFake];
    liar.behaviour = 'liar';
    await poll();
    const health = gateway.pools.health().evm!;
    expect(health.map((h) => [h.state, h.healthy])).toEqual([
      ['liar', false],
      ['ok', true],
    ]);
    const heads = gateway.pools.get('evm')!.heads!;
    expect([heads.best, heads.finalized]).toEqual([chain.head, chain.finalized]);
    // A block far beyond the real finalized one is not final: asked each time, never kept.
    for (let i = 0; i < 2; i++) await rpc(gateway, 'eth_getBlockByNumber', [hex(chain.head + 1), false]);
    expect(liar.calls).toHaveLength(0);
    expect(honest.calls).toHaveLength(2);
  });

  it('takes a node syncing from far behind for a lagging one, with two nodes: the other is no liar and serves the calls', async () => {
    const { fakes, gateway, chain, poll } = await setUp(2, { chain: new FakeEvmChain(12_000, 8) });
    const [good, syncing] = fakes as [EvmNodeFake, EvmNodeFake];
    // A node added to the pool (or resynced) while it catches up: 11,500 blocks behind, past the lie bound of 10,000.
    syncing.behaviour = 'behind';
    syncing.lagBlocks = 11_500;
    syncing.syncing = true;
    await poll();
    expect(gateway.pools.health().evm!.map((h) => [h.state, h.healthy])).toEqual([
      ['ok', true],
      ['lagging', true],
    ]);
    good.calls.length = 0;
    syncing.calls.length = 0;
    // Before: the good node was the liar, and every call went to the one syncing (eth_blockNumber 0x1f4).
    for (let i = 0; i < 4; i++) expect((await rpc(gateway, 'eth_blockNumber', [])).body.result).toBe(hex(chain.head));
    expect(syncing.calls).toHaveLength(0);
  });

  it('sends no call to a node on another network than the chain names (chainId), shows it, and serves it again once it is back on it', async () => {
    const warnings: string[] = [];
    // The first node's URL reaches a BNB Smart Chain node: before, it got the calls (random 0), and a cached eth_chainId could be its 0x38.
    const { fakes, gateway, poll } = await setUp(2, { extra: { chainId: 42 }, pool: { warn: (m) => warnings.push(m) }, chainIds: ['0x38'] });
    const [other, good] = fakes as [EvmNodeFake, EvmNodeFake];
    expect(gateway.pools.health().evm!.map((h) => [h.label, h.state, h.healthy])).toEqual([
      ['evm-1', 'wrong_network', false],
      ['evm-2', 'ok', true],
    ]);
    expect(warnings).toEqual([expect.stringMatching(/^chain evm: node evm-1 is on network 56, not the chain's 42 \(chainId in its config\)/)]);
    for (let i = 0; i < 4; i++) expect((await rpc(gateway, 'eth_getBalance', [`0x0${i}`, 'latest'])).status).toBe(200);
    expect(other.calls).toHaveLength(0);
    expect(good.calls).toHaveLength(4);
    const telemetry = new Telemetry({ upstreams: () => gateway.pools.health() });
    opened.push({ close: async () => telemetry.close() });
    expect(await telemetry.metrics()).toContain('gateway_upstream_head_state{chain="evm",upstream="evm-1",state="wrong_network"} 1');

    other.chainId = '0x2a';
    await poll();
    expect(gateway.pools.health().evm!.map((h) => h.state)).toEqual(['ok', 'ok']);
    expect(warnings[1]).toMatch(/node evm-1 is on the chain's network \(42\) again/);
  });

  it('answers "filter not found" for a filter of a node found on another network since, and sends that node nothing', async () => {
    const { fakes, gateway, poll } = await setUp(2, { extra: { chainId: 42 } });
    const [first, second] = fakes as [EvmNodeFake, EvmNodeFake];
    for (const f of [first, second]) {
      f.rewrite = (body, call) => {
        const req = JSON.parse(call.body) as { id: unknown; method: string };
        if (req.method === 'eth_newBlockFilter') return JSON.stringify({ jsonrpc: '2.0', id: req.id, result: '0x1' });
        if (req.method === 'eth_getFilterChanges') return JSON.stringify({ jsonrpc: '2.0', id: req.id, result: [] });
        return body;
      };
    }
    const id = (await rpc(gateway, 'eth_newBlockFilter')).body.result as string;
    expect(calledMethods(first)).toEqual(['eth_newBlockFilter']);
    // Its URL now reaches a BNB Smart Chain node, found after a failed poll.
    first.chainId = '0x38';
    first.mode = 'fail';
    await poll();
    first.mode = 'ok';
    await poll();
    expect(gateway.pools.health().evm!.map((h) => h.state)).toEqual(['wrong_network', 'ok']);
    first.calls.length = 0;
    // Before: the call went to it, and the caller got the other chain's blocks.
    const changes = await rpc(gateway, 'eth_getFilterChanges', [id]);
    expect([changes.status, changes.body.error]).toEqual([200, { code: -32000, message: 'filter not found' }]);
    expect(first.calls).toHaveLength(0);
  });

  it("serves the chain's eth_chainId once the network is learned, not one a node on another kept while the two disagreed", async () => {
    const warnings: string[] = [];
    const { fakes, gateway, poll } = await setUp(2, { pool: { warn: (m) => warnings.push(m) }, chainIds: ['0x38'] });
    const [other] = fakes as [EvmNodeFake, EvmNodeFake];
    expect(warnings).toEqual([expect.stringMatching(/nodes disagree on the network/)]);
    expect((await rpc(gateway, 'eth_chainId')).body.result).toBe('0x38');
    other.chainId = '0x2a';
    other.mode = 'fail';
    await poll();
    other.mode = 'ok';
    await poll();
    expect(gateway.pools.get('evm')!.heads!.network).toBe('42');
    expect((await rpc(gateway, 'eth_chainId')).body.result).toBe('0x2a');
  });

  it('takes a node stalled far behind (not syncing, its head a day and a half old) for a lagging one, with two nodes: the other, current, serves the calls', async () => {
    const chain = new FakeEvmChain(12_000, 8);
    chain.headAt(Date.now());
    const { fakes, gateway } = await setUp(2, { chain });
    const [good, stalled] = fakes as [EvmNodeFake, EvmNodeFake];
    // Lost its peers 11,500 blocks (38 h of 12 s blocks) ago and says it is not syncing: past the lie bound of 10,000.
    stalled.behaviour = 'behind';
    stalled.lagBlocks = 11_500;
    const heads = gateway.pools.get('evm')!.heads!;
    heads.touch();
    await heads.poll();
    await until(() => gateway.pools.health().evm!.every((h) => h.state !== 'unknown'), 5_000);
    expect(gateway.pools.health().evm!.map((h) => [h.state, h.healthy])).toEqual([
      ['ok', true],
      ['lagging', true],
    ]);
    good.calls.length = 0;
    stalled.calls.length = 0;
    // Before: the current node was the liar, and every call went to the stalled one (its head 38 h old).
    for (let i = 0; i < 4; i++) expect((await rpc(gateway, 'eth_blockNumber', [])).body.result).toBe(hex(chain.head));
    expect(stalled.calls).toHaveLength(0);
  });

  it('answers from another node when one answers garbage, another call id, or nothing in time', async () => {
    // 300 ms a node, 600 ms the call: time for another node after one that answers nothing in time.
    const { fakes, gateway } = await setUp(2, { extra: { timeoutMs: 300, callTimeoutMs: 600 }, pool: { hedge: false } });
    const [bad, good] = fakes as [EvmNodeFake, EvmNodeFake];
    for (const mode of ['garbage', 'wrongId', 'slow'] as const) {
      bad.mode = mode;
      bad.delayMs = 1_000;
      const r = await rpc(gateway, 'eth_getBalance', ['0x01', 'pending'], 'mine');
      expect([mode, r.status, r.body.id, r.body.error]).toEqual([mode, 200, 'mine', undefined]);
      expect(r.body.result).toMatch(/^0x[0-9a-f]{64}$/);
    }
    expect(bad.calls).toHaveLength(3);
    expect(good.calls).toHaveLength(3);
    expect(gateway.usage.map((u) => u.upstream)).toEqual(['evm-2', 'evm-2', 'evm-2']);
  });

  it('answers -32010 when every node sends another call id, and keeps nothing', async () => {
    const { fakes, gateway } = await setUp(2);
    for (const f of fakes) f.mode = 'wrongId';
    const r = await rpc(gateway, 'eth_chainId', [], 'mine');
    expect(r.status).toBe(502);
    expect(r.body).toMatchObject({ id: 'mine', error: { code: -32010 } });
    for (const f of fakes) f.mode = 'ok';
    expect((await rpc(gateway, 'eth_chainId', [], 'again')).body).toEqual({ jsonrpc: '2.0', id: 'again', result: '0x2a' });
    expect(gateway.usage.map((u) => u.cache)).toEqual(['miss', 'miss']);
  });
});

describe('visibility', () => {
  it('shows each upstream head, lag and state, and served reads by cache result, in /metrics', async () => {
    const { fakes, gateway, chain, poll } = await setUp(2);
    fakes[0]!.behaviour = 'behind';
    fakes[0]!.lagBlocks = 30;
    await poll();
    for (let i = 0; i < 3; i++) await rpc(gateway, 'eth_chainId');
    const telemetry = new Telemetry({ upstreams: () => gateway.pools.health() });
    opened.push({ close: async () => telemetry.close() });
    for (const record of gateway.usage) telemetry.observeCall(record);
    const text = await telemetry.metrics();
    expect(text).toContain(`gateway_upstream_head_block{chain="evm",upstream="evm-1"} ${chain.head - 30}`);
    expect(text).toContain('gateway_upstream_lag_blocks{chain="evm",upstream="evm-1"} 30');
    expect(text).toContain('gateway_upstream_head_state{chain="evm",upstream="evm-1",state="lagging"} 1');
    expect(text).toContain('gateway_upstream_head_state{chain="evm",upstream="evm-2",state="ok"} 1');
    expect(text).toContain('gateway_cache_calls_total{chain="evm",result="hit"} 2');
    expect(text).toContain('gateway_cache_calls_total{chain="evm",result="miss"} 1');
  });
});
