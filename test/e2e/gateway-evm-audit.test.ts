import { request } from 'node:http';
import { id as eventTopic, JsonRpcProvider } from 'ethers';
import { createPublicClient, encodeAbiParameters, type Hex, http, parseAbiItem } from 'viem';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, until } from '../support/eventually.js';
import { deployCode, loggingRuntime, postJsonRpc } from '../support/evmContracts.js';
import { GANACHE_ACCOUNT_0, GANACHE_CHAIN, type GanacheNode, startGanache } from '../support/ganache.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * An audit of the gateway's EVM JSON-RPC as ethers v6, viem and curl users meet it, each answer
 * compared with ganache's own: JSON-RPC 2.0 batch rules, block parameters and what the cache
 * keeps of them, filters over HTTP with two nodes behind one chain, and big payloads.
 * docs/decisions.md "Filters live on the node that made them" says what this file found.
 */

const NOTE_TOPIC = eventTopic('Note(uint256)') as Hex;
const NOTE = parseAbiItem('event Note(uint256 value)');

let a: GanacheNode;
let b: GanacheNode;
/** A node that goes away in a test while it holds a filter. */
let c: GanacheNode;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();
/** The contract emitting Note(calldata) at the same address on both nodes (deployed first on each). */
let noter: Hex;

/** Which node the pool picks among those eligible: the first, the last, or each in turn. */
let pick: 'first' | 'last' | 'alternate' = 'first';
let flip = false;
const random = (): number => {
  if (pick === 'alternate') flip = !flip;
  return pick === 'first' || (pick === 'alternate' && flip) ? 0 : 0.9999;
};

type RpcAnswer = { jsonrpc: string; id: unknown; result?: unknown; error?: { code: number; message: string } };
let nextId = 1;
const call = (method: string, params: unknown[] = []) => ({ jsonrpc: '2.0', id: nextId++, method, params });
const endpoint = (chain: string): string => `${gateway.url}/${chain}/${gatekeeper.token}`;

async function rpc(url: string, method: string, params: unknown[] = []): Promise<RpcAnswer> {
  return (await postJsonRpc(url, call(method, params))).json as RpcAnswer;
}

async function result<T>(url: string, method: string, params: unknown[] = []): Promise<T> {
  const answer = await rpc(url, method, params);
  if (answer.error) throw new Error(`${method}: ${answer.error.message}`);
  return answer.result as T;
}

async function deploy(url: string, runtime: string): Promise<Hex> {
  const hash = await result<string>(url, 'eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, data: deployCode(runtime), gas: '0x100000' }]);
  return (await result<{ contractAddress: Hex }>(url, 'eth_getTransactionReceipt', [hash])).contractAddress;
}

const headHash = async (url: string): Promise<string> => (await result<{ hash: string }>(url, 'eth_getBlockByNumber', ['latest', false])).hash;
const usageOf = (method: string) => gateway.usage.filter((u) => u.method === method);

beforeAll(async () => {
  [a, b, c] = await Promise.all([startGanache(), startGanache(), startGanache()]);
  const [onA, onB] = await Promise.all([deploy(a.url, loggingRuntime(NOTE_TOPIC)), deploy(b.url, loggingRuntime(NOTE_TOPIC))]);
  expect(onB).toBe(onA);
  noter = onA;
  // Node B one block ahead: the two devnets' blocks differ (else equal calls at the same second make equal hashes).
  await rpc(b.url, 'evm_mine');
  gateway = await startGateway({
    gatekeeper,
    chains: [chainEntry('one', [a.url]), chainEntry('two', [a.url, b.url], { headPollMs: 200 }), chainEntry('gone', [c.url, b.url])],
    pool: { random, hedge: false },
  });
});
afterAll(async () => {
  await gateway?.close();
  await Promise.all([a?.close(), b?.close(), c?.close().catch(() => undefined)]);
});
beforeEach(() => {
  pick = 'first';
});

describe('filters over HTTP, two nodes behind one chain', () => {
  it("a filter's calls reach the node that made it, whatever node the pool would pick, alone and in a batch; another caller's filter on the other node stays theirs", async () => {
    // Another caller's block filter on node B: ganache numbers filters 0x1, 0x2… on each node, as ours on A will be.
    const theirs = await result<string>(b.url, 'eth_newBlockFilter');
    const ours = await result<string>(endpoint('two'), 'eth_newBlockFilter');
    expect(usageOf('eth_newBlockFilter').at(-1)?.upstream).toBe('two-1');
    await rpc(a.url, 'evm_mine');
    await rpc(b.url, 'evm_mine');
    const minedOnA = await headHash(a.url);

    pick = 'last';
    expect(await rpc(endpoint('two'), 'eth_getFilterChanges', [ours])).toMatchObject({ result: [minedOnA] });
    await rpc(a.url, 'evm_mine');
    const batch = await postJsonRpc(endpoint('two'), [call('eth_getFilterChanges', [ours]), call('eth_chainId')]);
    expect((batch.json as RpcAnswer[]).map((m) => m.result)).toEqual([[await headHash(a.url)], '0x539']);
    expect(await rpc(endpoint('two'), 'eth_uninstallFilter', [ours])).toMatchObject({ result: true });
    expect(usageOf('eth_getFilterChanges').map((u) => [u.upstream, u.rpcErrorCode])).toEqual([
      ['two-1', null],
      ['two-1', null],
    ]);
    expect(usageOf('eth_uninstallFilter').map((u) => u.upstream)).toEqual(['two-1']);
    // Theirs still holds B's block, untouched by our polls.
    expect(await rpc(b.url, 'eth_getFilterChanges', [theirs])).toMatchObject({ result: [await headHash(b.url)] });
  });

  it('ethers v6 (contract events by filter id, blocks by polling) and viem (watchEvent) get each event once while the pool spreads calls over both nodes', async () => {
    pick = 'alternate';
    // This test's polls (an earlier test's filter was made on the other node: node B, a block ahead, makes this test's).
    const pollsBefore = usageOf('eth_getFilterChanges').length;
    const provider = new JsonRpcProvider(endpoint('two'), 1337, { staticNetwork: true, pollingInterval: 100 });
    const client = createPublicClient({ chain: GANACHE_CHAIN, transport: http(endpoint('two'), { retryCount: 0 }), pollingInterval: 100 });
    const byEthers: bigint[] = [];
    const byViem: bigint[] = [];
    const blocks: number[] = [];
    await provider.on('block', (n: number) => blocks.push(n));
    await provider.on({ address: noter, topics: [NOTE_TOPIC] }, (log: { data: string }) => byEthers.push(BigInt(log.data)));
    const unwatch = client.watchEvent({ address: noter, event: NOTE, onLogs: (logs) => byViem.push(...logs.map((l) => l.args.value as bigint)) });
    try {
      await until(() => usageOf('eth_newFilter').length >= 2, 10_000);
      // The same transactions on both nodes: whichever node holds a filter sees them.
      for (const value of [1n, 2n, 3n]) {
        const tx = { from: GANACHE_ACCOUNT_0, to: noter, data: encodeAbiParameters([{ type: 'uint256' }], [value]), gas: '0x100000' };
        await Promise.all([result(a.url, 'eth_sendTransaction', [tx]), result(b.url, 'eth_sendTransaction', [tx])]);
      }
      await until(() => byEthers.length >= 3 && byViem.length >= 3, 15_000);
      // A few more polls: nothing comes twice.
      const polls = usageOf('eth_getFilterChanges').length;
      await until(() => usageOf('eth_getFilterChanges').length >= polls + 4, 10_000);
    } finally {
      unwatch();
      provider.destroy();
    }
    expect([byEthers, byViem]).toEqual([
      [1n, 2n, 3n],
      [1n, 2n, 3n],
    ]);
    expect(blocks.length).toBeGreaterThan(0);
    const made = new Set(usageOf('eth_newFilter').map((u) => u.upstream));
    const polls = usageOf('eth_getFilterChanges').slice(pollsBefore);
    expect(polls.filter((u) => u.rpcErrorCode !== null || !made.has(u.upstream))).toEqual([]);
  });
});

describe('filters: failures and batches', () => {
  it('a poll whose node is gone is that node’s clear error, never another node’s answer', async () => {
    const ours = await result<string>(endpoint('gone'), 'eth_newBlockFilter');
    expect(usageOf('eth_newBlockFilter').at(-1)?.upstream).toBe('gone-1');
    await c.close();
    pick = 'last';
    const answers: Array<[number, RpcAnswer]> = [];
    for (let i = 0; i < 4; i++) {
      const r = await postJsonRpc(endpoint('gone'), call('eth_getFilterChanges', [ours]));
      answers.push([r.status, r.json as RpcAnswer]);
    }
    expect(answers.map(([status, answer]) => [status, answer.error?.code])).toEqual(Array(4).fill([502, -32010]));
    expect(answers[0]?.[1].error?.message).toMatch(/^upstream gone-1: /);
    // Ejected after three failures: the answer says which node holds the filter and that it rests.
    expect(answers[3]?.[1].error?.message).toMatch(/gone-1, the node holding this filter, is resting/);
    expect(
      usageOf('eth_getFilterChanges')
        .slice(-4)
        .map((u) => u.upstream),
    ).toEqual(['gone-1', 'gone-1', 'gone-1', null]);
  });

  it('a batch mixing filter calls, reads, denied, unknown and invalid calls and a notification: each answered in order as the node would, one usage record each', async () => {
    const ours = await result<string>(endpoint('two'), 'eth_newBlockFilter');
    await rpc(a.url, 'evm_mine');
    // B kept at A's height or above: a head poll seeing A ahead would leave B out as lagging, and the pick (the last node) with it.
    const height = async (url: string) => BigInt(await result<string>(url, 'eth_blockNumber'));
    while ((await height(b.url)) < (await height(a.url))) await rpc(b.url, 'evm_mine');
    // …and seen so by head tracking (a poll in between would still see A ahead).
    const [atA, atB] = [Number(await height(a.url)), Number(await height(b.url))];
    await until(() => {
      const seen = gateway.pools.get('two')?.heads?.upstreams;
      return seen?.[0]?.head === atA && seen?.[1]?.head === atB;
    });
    pick = 'last';
    const members = [
      call('eth_getFilterChanges', [ours]),
      call('eth_chainId'),
      call('admin_peers'),
      call('nope_nothing'),
      { jsonrpc: '1.0', id: 'old', method: 'eth_chainId' },
      { jsonrpc: '2.0', method: 'eth_blockNumber', params: [] },
      call('eth_newBlockFilter'),
      call('eth_uninstallFilter', [ours]),
      7,
    ];
    const r = await postJsonRpc(endpoint('two'), members);
    expect(r.status).toBe(200);
    const answers = r.json as RpcAnswer[];
    const direct = ((await postJsonRpc(b.url, [call('nope_nothing')])).json as RpcAnswer[])[0];
    expect(answers.map((m) => m.result ?? m.error?.code)).toEqual([
      [await headHash(a.url)],
      '0x539',
      -32601,
      direct?.error?.code,
      -32600,
      expect.stringMatching(/^0x[0-9a-f]{5,}$/),
      true,
      -32600,
    ]);
    expect(answers.map((m) => m.id)).toEqual([...members.slice(0, 5), ...members.slice(6, 8)].map((m) => (m as { id: unknown }).id).concat(null));
    const batchUsage = gateway.usage.filter((u) =>
      u.requestId.startsWith(`${gateway.usage.find((x) => x.method === 'admin_peers')?.requestId.split(':')[0]}:`),
    );
    expect(batchUsage.map((u) => [u.requestId.split(':')[1], u.method, u.rpcErrorCode])).toEqual([
      ['0', 'eth_getFilterChanges', null],
      ['1', 'eth_chainId', null],
      ['2', 'admin_peers', -32601],
      ['3', 'nope_nothing', direct?.error?.code],
      ['4', 'eth_chainId', -32600],
      ['5', 'eth_blockNumber', null],
      ['6', 'eth_newBlockFilter', null],
      ['7', 'eth_uninstallFilter', null],
      ['8', '(invalid)', -32600],
    ]);
    // Each filter call on its filter's node; the new filter on the node the pool picked.
    expect(batchUsage.filter((u) => u.method.includes('Filter')).map((u) => [u.method, u.upstream])).toEqual([
      ['eth_getFilterChanges', 'two-1'],
      ['eth_newBlockFilter', 'two-2'],
      ['eth_uninstallFilter', 'two-1'],
    ]);
    // The new filter (made on B, the pick) is B's: a poll goes there whatever the pick.
    pick = 'first';
    await rpc(b.url, 'evm_mine');
    // ganache adds a mined block to its filters on an event after evm_mine answered: a poll right then may see none yet (not consumed).
    // In process with the test, that event can wait past 5 s while the machine runs the rest of the suite; in one clean-clone
    // run no block came in 20 s (the filter's node was not checked then: it is now, above).
    const changes = await eventually(
      () => rpc(endpoint('two'), 'eth_getFilterChanges', [answers[5]?.result]),
      (r) => Array.isArray(r.result) && r.result.length > 0,
      20_000,
    );
    expect(changes).toMatchObject({ result: [await headHash(b.url)] });
  });
});

describe('block parameters: eth_getLogs by tag, range and hash, and EIP-1898 objects', () => {
  it('answers as the node does, and keeps nothing that is not final: a `latest` range moves with the head', async () => {
    const one = endpoint('one');
    const heads = gateway.pools.get('one')?.heads;
    const hash = await headHash(a.url);
    const logsCalls: unknown[][] = [
      [{ address: noter, blockHash: hash }],
      [{ address: noter, fromBlock: 'earliest', toBlock: 'latest' }],
      [{ address: noter, fromBlock: '0x0', toBlock: 'safe' }],
      [{ address: noter, fromBlock: '0x0', toBlock: 'finalized' }],
      [{ address: noter, fromBlock: '0x0', toBlock: 'pending' }],
      [{ address: noter, fromBlock: '0x00', toBlock: 'latest' }],
      [{ address: noter, fromBlock: '0x0', toBlock: '0xffffff' }],
    ];
    const byObject: Array<[string, unknown[]]> = [
      [
        'eth_call',
        [
          { to: noter, data: '0x' },
          { blockHash: hash, requireCanonical: true },
        ],
      ],
      ['eth_getBalance', [GANACHE_ACCOUNT_0, { blockNumber: '0x0' }]],
      ['eth_getCode', [noter, { blockHash: hash }]],
      ['eth_getStorageAt', [noter, '0x0', { blockNumber: '0x1' }]],
    ];
    const seen = (x: RpcAnswer): unknown => (x.error ? { error: x.error.code } : { result: x.result });
    for (let round = 0; round < 2; round++) {
      for (const params of logsCalls)
        expect([params, seen(await rpc(one, 'eth_getLogs', params))]).toEqual([params, seen(await rpc(a.url, 'eth_getLogs', params))]);
      for (const [method, params] of byObject) expect([method, seen(await rpc(one, method, params))]).toEqual([method, seen(await rpc(a.url, method, params))]);
    }
    const hits = usageOf('eth_getLogs').filter((u) => u.chain === 'one' && u.cache === 'hit');
    // Only `earliest`..`latest` may be kept (for the head it was asked at); the rest are not final.
    expect(hits).toHaveLength(1);
    // A Note mined on the node directly: once a poll sees the new head, the `latest` range has it.
    await result(a.url, 'eth_sendTransaction', [
      { from: GANACHE_ACCOUNT_0, to: noter, data: encodeAbiParameters([{ type: 'uint256' }], [9n]), gas: '0x100000' },
    ]);
    heads?.touch();
    await heads?.poll();
    const latest = logsCalls[1] as unknown[];
    expect(await rpc(one, 'eth_getLogs', latest)).toMatchObject({ result: (await rpc(a.url, 'eth_getLogs', latest)).result as object });
    expect(usageOf('eth_getLogs').at(-1)?.cache).toBe('miss');
  });
});

/** POSTs `size` bytes of JSON chunked (no Content-Length): the status and the body. */
function postChunked(url: string, size: number): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8');
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    req.write('{"jsonrpc":"2.0","id":7,"method":"eth_chainId","params":[],"pad":"');
    let sent = 0;
    const pump = (): void => {
      while (sent < size) {
        sent += chunk.length;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      req.end('"}');
    };
    pump();
  });
}

describe('big payloads', () => {
  it('passes an eth_getLogs answer of ~6 MB byte for byte, alone and in a batch; a body over the limit sent chunked is a 413 JSON-RPC error', async () => {
    // Five LOG0s of 150,000 zero bytes of memory each call: four calls, ~6 MB of hex.
    const bigLogger = await deploy(a.url, `${`620249f06000a0`.repeat(5)}00`);
    for (let i = 0; i < 4; i++) await result(a.url, 'eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: bigLogger, gas: '0x7a1200' }]);
    const body = JSON.stringify(call('eth_getLogs', [{ address: bigLogger, fromBlock: '0x0', toBlock: 'latest' }]));
    const post = async (url: string, text: string) => {
      const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });
      return { status: r.status, text: await r.text() };
    };
    const direct = await post(a.url, body);
    expect(direct.text.length).toBeGreaterThan(6_000_000);
    expect(await post(endpoint('one'), body)).toEqual(direct);
    const batch = await post(endpoint('one'), `[${body}]`);
    expect(batch.status).toBe(200);
    expect(JSON.parse(batch.text)).toEqual([JSON.parse(direct.text)]);

    expect(await postChunked(endpoint('one'), 900 * 1024)).toEqual({ status: 200, text: '{"id":7,"jsonrpc":"2.0","result":"0x539"}' });
    const tooBig = await postChunked(endpoint('one'), 2 * 1024 * 1024);
    expect(tooBig.status).toBe(413);
    expect(JSON.parse(tooBig.text)).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Request body larger than 1048576 bytes' } });
  });
});
