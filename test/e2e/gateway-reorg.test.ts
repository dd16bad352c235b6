import { FetchRequest, JsonRpcProvider } from 'ethers';
import { afterEach, describe, expect, it } from 'vitest';
import { openSharedCache, sharedKey, sharedValue } from '../../src/gateway/cache/sharedCache.js';
import type { UpstreamPoolOptions } from '../../src/gateway/upstream.js';
import { closeClient, redisClient } from '../../src/infra/redis/client.js';
import { until } from '../support/eventually.js';
import { GANACHE_ACCOUNT_0, GANACHE_ACCOUNT_1, type GanacheNode, startGanache } from '../support/ganache.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';
import { startTestRedisServer } from '../support/redisServer.js';

/**
 * The finality-aware cache, coalescing and head tracking against a real chain reorganisation: a
 * ganache node rewound with evm_snapshot / evm_revert and mined again with other transactions at
 * the same heights. Every answer the gateway gives is compared with the node's own answer, asked
 * directly. docs/decisions.md "Upstream intelligence": final answers (at or under the finalized
 * block) are kept; answers that depend on the head are kept for the head's epoch only (until the
 * next poll sees the new head); nothing above the finalized block, no null, is kept as final.
 */

const gatekeeper = new TestGatekeeper();
const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((o) => o.close()));
});

// Init code of a contract that logs its call data (LOG0 of calldata) on any call.
const LOGS_CALLDATA_INIT = '0x600b600c600039600b6000f3366000600037366000a000';
// An address nobody holds: its balance is what the reorged transfers put there.
const ACCOUNT_2 = '0x00000000000000000000000000000000000000d2';

type RpcAnswer = { jsonrpc: string; id: unknown; result?: unknown; error?: { code: number; message: string } };
type Call = [method: string, params?: unknown[]];

let nextId = 1;
async function post(url: string, method: string, params?: unknown[]): Promise<RpcAnswer> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, ...(params ? { params } : {}) }),
  });
  expect(r.status).toBe(200);
  return (await r.json()) as RpcAnswer;
}

/** What a caller sees: the result, or the error's code (messages carry ganache's stack traces). */
const seen = (a: RpcAnswer): unknown => (a.error === undefined ? { result: a.result } : { error: a.error.code });
const hex = (n: number): string => `0x${n.toString(16)}`;

interface Setup {
  node: GanacheNode;
  gateway: TestGateway;
  endpoint: string;
  /** A call sent to the node itself. */
  direct(method: string, params?: unknown[]): Promise<RpcAnswer>;
  /** A call through the gateway. */
  via(method: string, params?: unknown[]): Promise<RpcAnswer>;
  /** One round of head polls now (the test drives them: headPollMs is ten minutes). */
  poll(): Promise<void>;
  /** The cache use of the gateway's last call (hit, miss, coalesced). */
  lastUse(): string | undefined;
}

async function setUp(extra: Record<string, unknown>, pool?: UpstreamPoolOptions): Promise<Setup> {
  const node = await startGanache();
  opened.push(node);
  const gateway = await startGateway({ gatekeeper, pool, chains: [chainEntry('local', [node.url], { headPollMs: 600_000, ...extra })] });
  opened.push(gateway);
  const endpoint = `${gateway.url}/local/${gatekeeper.token}`;
  const heads = gateway.pools.get('local')?.heads;
  if (!heads) throw new Error('the local chain should track heads');
  return {
    node,
    gateway,
    endpoint,
    direct: (method, params) => post(node.url, method, params),
    via: (method, params) => post(endpoint, method, params),
    poll: async () => {
      heads.touch();
      await heads.poll();
    },
    lastUse: () => gateway.usage.at(-1)?.cache,
  };
}

/** Asks each call through the gateway and of the node, and expects the same answers. */
async function expectSameAnswers(s: Setup, calls: Call[]): Promise<void> {
  const through: unknown[] = [];
  const own: unknown[] = [];
  for (const [method, params] of calls) {
    through.push([method, params, seen(await s.via(method, params))]);
    own.push([method, params, seen(await s.direct(method, params))]);
  }
  expect(through).toEqual(own);
}

async function blockHash(s: Setup, n: number): Promise<string> {
  const block = (await s.direct('eth_getBlockByNumber', [hex(n), false])).result as { hash: string };
  return block.hash;
}

async function sendLogging(s: Setup, contract: string, data: string, value: string, viaGateway = false): Promise<string> {
  const tx = { from: GANACHE_ACCOUNT_0, to: contract, data, value };
  const answer = viaGateway ? await s.via('eth_sendTransaction', [tx]) : await s.direct('eth_sendTransaction', [tx]);
  expect(answer.error).toBeUndefined();
  return answer.result as string;
}

async function deployLogger(s: Setup): Promise<string> {
  const hash = (await s.direct('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, data: LOGS_CALLDATA_INIT }])).result as string;
  const receipt = (await s.direct('eth_getTransactionReceipt', [hash])).result as { contractAddress: string };
  return receipt.contractAddress;
}

function ethersProvider(endpoint: string): JsonRpcProvider {
  const request = new FetchRequest(endpoint);
  request.retryFunc = async () => false;
  return new JsonRpcProvider(request, 1337, { staticNetwork: true, cacheTimeout: -1 });
}

/** Every read the brief names, at the reorged heights, by the dropped hashes, and at the head. */
function readsAround(reorged: { from: number; to: number; hashes: string[]; txs: string[] }, contract: string): Call[] {
  const calls: Call[] = [];
  for (let n = reorged.from; n <= reorged.to; n++) {
    calls.push(['eth_getBlockByNumber', [hex(n), false]]);
    calls.push(['eth_getBlockByNumber', [hex(n), true]]);
    calls.push(['eth_getBalance', [ACCOUNT_2, hex(n)]]);
    calls.push(['eth_getBalance', [contract, hex(n)]]);
    calls.push(['eth_getBlockTransactionCountByNumber', [hex(n)]]);
    calls.push(['eth_getTransactionByBlockNumberAndIndex', [hex(n), '0x0']]);
  }
  for (const h of reorged.hashes) {
    calls.push(['eth_getBlockByHash', [h, false]]);
    calls.push(['eth_getBlockTransactionCountByHash', [h]]);
    calls.push(['eth_getTransactionByBlockHashAndIndex', [h, '0x0']]);
    calls.push(['eth_getLogs', [{ blockHash: h }]]);
  }
  for (const t of reorged.txs) {
    calls.push(['eth_getTransactionReceipt', [t]]);
    calls.push(['eth_getTransactionByHash', [t]]);
  }
  calls.push(['eth_getLogs', [{ fromBlock: hex(reorged.from), toBlock: hex(reorged.to) }]]);
  calls.push(['eth_getLogs', [{ fromBlock: '0x0', toBlock: hex(reorged.to), address: contract }]]);
  calls.push(['eth_getBlockByNumber', [hex(reorged.to + 1), false]]);
  // EIP-1898 block objects (ganache refuses them: the node's own error is the answer to match).
  calls.push(['eth_getBalance', [ACCOUNT_2, { blockNumber: hex(reorged.from) }]]);
  calls.push(['eth_getBalance', [ACCOUNT_2, { blockHash: reorged.hashes[0] }]]);
  return calls;
}

const headReads = (contract: string): Call[] => [
  ['eth_blockNumber'],
  ['eth_getBlockByNumber', ['latest', false]],
  ['eth_getBalance', [ACCOUNT_2, 'latest']],
  ['eth_getBalance', [ACCOUNT_2]],
  ['eth_getLogs', [{ fromBlock: '0x0', toBlock: 'latest', address: contract }]],
  ['eth_getLogs', [{ address: contract }]],
  ['eth_getTransactionCount', [GANACHE_ACCOUNT_0, 'latest']],
];

describe('a reorg above the finalized block (finality: 2 blocks under the head)', () => {
  it('serves the new chain at the reorged heights, hashes and transactions, and the head once a poll sees it', async () => {
    const s = await setUp({ finality: 2 });
    const contract = await deployLogger(s);
    for (let i = 0; i < 3; i++) await s.direct('evm_mine');
    // Head 4, finalized 2.
    const snapshot = (await s.direct('evm_snapshot')).result as string;
    const dropped = [
      await sendLogging(s, contract, '0xaaaa', '0x0'),
      (await s.direct('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: ACCOUNT_2, value: '0x111' }])).result as string,
    ];
    await s.poll();
    const heads = s.gateway.pools.get('local')?.heads;
    expect([heads?.best, heads?.finalized]).toEqual([6, 4]);
    const droppedHashes = [await blockHash(s, 5), await blockHash(s, 6)];
    const reorged = { from: 5, to: 6, hashes: droppedHashes, txs: dropped };

    // The dropped chain read through the gateway, each call twice: nothing above block 4 may be kept.
    await expectSameAnswers(s, readsAround(reorged, contract));
    for (const [method, params] of readsAround(reorged, contract)) {
      await s.via(method, params);
      expect([method, params, s.lastUse()]).toEqual([method, params, 'miss']);
    }
    await expectSameAnswers(s, headReads(contract));
    const provider = ethersProvider(s.endpoint);
    expect((await provider.getTransactionReceipt(dropped[0] as string))?.blockHash).toBe(droppedHashes[0]);

    // Final blocks are kept (the cache is at work), and a reorg above them does not touch them.
    await s.via('eth_getBlockByNumber', [hex(3), false]);
    await s.via('eth_getBlockByNumber', [hex(3), false]);
    expect(s.lastUse()).toBe('hit');

    // The node reorganises: back to block 4, then two other blocks at heights 5 and 6.
    expect((await s.direct('evm_revert', [snapshot])).result).toBe(true);
    const kept = [
      (await s.direct('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: ACCOUNT_2, value: '0x222' }])).result as string,
      await sendLogging(s, contract, '0xbbbbbb', '0x0'),
    ];
    const newHashes = [await blockHash(s, 5), await blockHash(s, 6)];
    expect(newHashes).not.toEqual(droppedHashes);
    expect((await s.direct('eth_getTransactionReceipt', [dropped[0]])).result).toBeNull();

    // Before the gateway polls: everything addressed by number or hash is already the new chain's.
    await expectSameAnswers(s, readsAround(reorged, contract));
    await expectSameAnswers(s, readsAround({ ...reorged, hashes: newHashes, txs: kept }, contract));
    expect(await provider.getTransactionReceipt(dropped[0] as string)).toBeNull();
    expect((await provider.getBlock(5))?.hash).toBe(newHashes[0]);
    expect((await provider.getLogs({ fromBlock: 5, toBlock: 6, address: contract })).map((l) => l.data)).toEqual(['0xbbbbbb']);
    expect(await provider.getBalance(ACCOUNT_2, 6)).toBe(0x222n);
    expect((await s.via('eth_getBlockByNumber', [hex(3), false])).result).toEqual((await s.direct('eth_getBlockByNumber', [hex(3), false])).result);

    // The head (same height, other hash): one poll and the answers kept for the old head are gone.
    await s.poll();
    expect([heads?.best, heads?.bestHash, heads?.finalized]).toEqual([6, newHashes[1], 4]);
    await expectSameAnswers(s, headReads(contract));
    expect((await provider.getBlock('latest'))?.hash).toBe(newHashes[1]);
    expect(await provider.getBlockNumber()).toBe(6);
  });

  it('keeps answers for the dropped head no longer than until the next poll sees the new head', async () => {
    const s = await setUp({ finality: 2 });
    for (let i = 0; i < 4; i++) await s.direct('evm_mine');
    const snapshot = (await s.direct('evm_snapshot')).result as string;
    await s.direct('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: ACCOUNT_2, value: '0x1' }]);
    await s.poll();
    const oldHead = (await s.via('eth_getBlockByNumber', ['latest', false])).result as { hash: string };
    await s.via('eth_getBlockByNumber', ['latest', false]);
    expect(s.lastUse()).toBe('hit');
    expect((await s.via('eth_getBalance', [ACCOUNT_2, 'latest'])).result).toBe('0x1');

    // Reorged to a chain one block longer: the head's number and hash both change.
    await s.direct('evm_revert', [snapshot]);
    await s.direct('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: ACCOUNT_2, value: '0x2' }]);
    await s.direct('evm_mine');
    await s.poll();
    const latest = (await s.via('eth_getBlockByNumber', ['latest', false])).result as { hash: string; number: string };
    expect(latest.hash).not.toBe(oldHead.hash);
    expect(latest.hash).toBe(await blockHash(s, 6));
    expect((await s.via('eth_getBalance', [ACCOUNT_2, 'latest'])).result).toBe('0x2');
    expect((await s.via('eth_blockNumber')).result).toBe('0x6');

    // Reorged to a shorter chain (a head lower than before): followed too.
    const again = (await s.direct('evm_snapshot')).result as string;
    await s.direct('evm_mine');
    await s.poll();
    expect((await s.via('eth_blockNumber')).result).toBe('0x7');
    await s.direct('evm_revert', [again]);
    await s.poll();
    await expectSameAnswers(s, [['eth_blockNumber'], ['eth_getBlockByNumber', ['latest', false]], ['eth_getBlockByNumber', ['0x7', false]]]);
  });

  it('keeps neither a pending receipt nor a block above the head', async () => {
    const s = await setUp({ finality: 2 });
    for (let i = 0; i < 4; i++) await s.direct('evm_mine');
    await s.poll();
    // Mining stopped on the node: the transaction waits, its receipt is null.
    await s.direct('miner_stop');
    const tx = (await s.direct('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: ACCOUNT_2, value: '0x5' }])).result as string;
    expect((await s.via('eth_getTransactionReceipt', [tx])).result).toBeNull();
    expect((await s.via('eth_getTransactionReceipt', [tx])).result).toBeNull();
    expect(s.lastUse()).toBe('miss');
    const pendingTx = (await s.via('eth_getTransactionByHash', [tx])).result as { blockNumber: string | null };
    expect(pendingTx.blockNumber).toBeNull();
    expect((await s.via('eth_getBlockByNumber', ['0x5', false])).result).toBeNull();
    expect((await s.via('eth_getBlockByNumber', ['0x6', false])).result).toBeNull();

    // Mined, then buried under the finalized block: the receipt and the blocks are the node's.
    await s.direct('miner_start');
    for (let i = 0; i < 3; i++) await s.direct('evm_mine');
    await s.poll();
    const heads = s.gateway.pools.get('local')?.heads;
    expect(heads?.finalized).toBe(6);
    const receipt = (await s.via('eth_getTransactionReceipt', [tx])).result as { blockNumber: string; status: string };
    expect([receipt.blockNumber, receipt.status]).toEqual(['0x5', '0x1']);
    expect(((await s.via('eth_getTransactionByHash', [tx])).result as { blockNumber: string }).blockNumber).toBe('0x5');
    await expectSameAnswers(s, [
      ['eth_getTransactionReceipt', [tx]],
      ['eth_getBlockByNumber', ['0x5', false]],
      ['eth_getBlockByNumber', ['0x6', false]],
    ]);
    // Final now: kept.
    await s.via('eth_getTransactionReceipt', [tx]);
    expect(s.lastUse()).toBe('hit');
  });
});

describe('ganache as the local chain is shipped (finality by the node\'s "finalized" tag: its head)', () => {
  it('does not serve the rewound chain after evm_revert through the gateway', async () => {
    const s = await setUp({});
    const contract = await deployLogger(s);
    for (let i = 0; i < 3; i++) await s.direct('evm_mine');
    await s.poll();
    const snapshot = (await s.via('evm_snapshot')).result as string;
    const dropped = [await sendLogging(s, contract, '0xaaaa', '0x0', true)];
    await s.poll();
    const heads = s.gateway.pools.get('local')?.heads;
    // ganache calls its head final.
    expect([heads?.best, heads?.finalized]).toEqual([5, 5]);
    const droppedHashes = [await blockHash(s, 5)];
    const reorged = { from: 5, to: 5, hashes: droppedHashes, txs: dropped };
    await expectSameAnswers(s, readsAround(reorged, contract));
    await expectSameAnswers(s, readsAround(reorged, contract));

    expect((await s.via('evm_revert', [snapshot])).result).toBe(true);
    // At once, not at the next poll: the gateway passed the revert on, so it knows.
    await expectSameAnswers(s, readsAround(reorged, contract));
    const kept = [await sendLogging(s, contract, '0xbbbbbb', '0x0', true)];
    await s.poll();
    const newHashes = [await blockHash(s, 5)];
    expect(newHashes).not.toEqual(droppedHashes);
    await expectSameAnswers(s, readsAround(reorged, contract));
    await expectSameAnswers(s, readsAround({ ...reorged, hashes: newHashes, txs: kept }, contract));
    await expectSameAnswers(s, headReads(contract));
  });
});

describe('ganache rewound through the gateway and mined past the old head in one batch', () => {
  it('serves the new chain: the gateway knows of the revert it passed on, no poll could tell', async () => {
    const s = await setUp({});
    const contract = await deployLogger(s);
    for (let i = 0; i < 3; i++) await s.direct('evm_mine');
    const snapshot = (await s.via('evm_snapshot')).result as string;
    const dropped = [await sendLogging(s, contract, '0xaaaa', '0x0', true)];
    await s.poll();
    const reorged = { from: 5, to: 5, hashes: [await blockHash(s, 5)], txs: dropped };
    await expectSameAnswers(s, readsAround(reorged, contract));
    await s.via('eth_getBlockByNumber', ['0x5', false]);
    expect(s.lastUse()).toBe('hit');

    // One batch: back to block 4, then blocks 5 and 6 with other transactions. The next poll sees
    // a head (6) above the block the node called final before (5): nothing there says it rewound.
    const tx = (data: string) => ({ jsonrpc: '2.0', id: nextId++, method: 'eth_sendTransaction', params: [{ from: GANACHE_ACCOUNT_0, to: contract, data }] });
    const r = await fetch(s.endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([{ jsonrpc: '2.0', id: nextId++, method: 'evm_revert', params: [snapshot] }, tx('0xbbbbbb'), tx('0xcccc')]),
    });
    const answers = (await r.json()) as RpcAnswer[];
    expect(answers.map((a) => a.error)).toEqual([undefined, undefined, undefined]);
    await s.poll();
    expect(s.gateway.pools.get('local')?.heads?.best).toBe(6);
    await expectSameAnswers(s, readsAround(reorged, contract));
    const kept = answers.slice(1).map((a) => a.result as string);
    await expectSameAnswers(s, readsAround({ from: 5, to: 6, hashes: [await blockHash(s, 5), await blockHash(s, 6)], txs: kept }, contract));
    await expectSameAnswers(s, headReads(contract));
  });
});

describe('ganache rewound by a caller of its own (not through the gateway), as the local chain is shipped', () => {
  it.each([
    ['its head falls under the block it called final', 0],
    ['its final block is replaced at the same height', 1],
  ])('serves the new chain once a poll sees that %s', async (_name, blocksAfter) => {
    const s = await setUp({});
    const contract = await deployLogger(s);
    for (let i = 0; i < 3; i++) await s.direct('evm_mine');
    const snapshot = (await s.direct('evm_snapshot')).result as string;
    const dropped = [await sendLogging(s, contract, '0xaaaa', '0x0')];
    await s.poll();
    const heads = s.gateway.pools.get('local')?.heads;
    expect([heads?.best, heads?.finalized]).toEqual([5, 5]);
    const reorged = { from: 5, to: 5, hashes: [await blockHash(s, 5)], txs: dropped };
    await expectSameAnswers(s, readsAround(reorged, contract));
    await s.via('eth_getBlockByNumber', ['0x5', false]);
    expect(s.lastUse()).toBe('hit');

    await s.direct('evm_revert', [snapshot]);
    const kept: string[] = [];
    for (let i = 0; i < blocksAfter; i++) kept.push(await sendLogging(s, contract, '0xbbbbbb', '0x0'));
    await s.poll();
    await expectSameAnswers(s, readsAround(reorged, contract));
    if (blocksAfter > 0) await expectSameAnswers(s, readsAround({ ...reorged, hashes: [await blockHash(s, 5)], txs: kept }, contract));
    await expectSameAnswers(s, headReads(contract));
    // Still a cache: the new chain's final answers are kept.
    await s.via('eth_getBlockByNumber', ['0x4', false]);
    await s.via('eth_getBlockByNumber', ['0x4', false]);
    expect(s.lastUse()).toBe('hit');
  });
});

describe('final answers shared through Redis (RESPONSE_CACHE_REDIS) on a chain whose node rewound them', () => {
  it("are no longer read from Redis, where the dropped chain's answers still are", async () => {
    const redis = await startTestRedisServer();
    opened.push({ close: () => redis.stop() });
    const inspector = redisClient(redis.url);
    opened.push({ close: () => closeClient(inspector) });
    const s = await setUp({});
    const shared = openSharedCache(redis.url);
    opened.unshift(shared);
    s.gateway.pools.cache?.shareWith(shared);
    await until(() => inspector.status === 'ready');
    await until(async () => (await Promise.resolve(shared.get('rc:warm-up'))) === undefined && shared.stats.misses > 0);

    for (let i = 0; i < 4; i++) await s.direct('evm_mine');
    const snapshot = (await s.direct('evm_snapshot')).result as string;
    const dropped = await sendLogging(s, GANACHE_ACCOUNT_1, '0xaaaa', '0x1');
    await s.poll();
    const reorged = { from: 5, to: 5, hashes: [await blockHash(s, 5)], txs: [dropped] };
    await expectSameAnswers(s, readsAround(reorged, GANACHE_ACCOUNT_1));
    const block5 = sharedKey('local', 'eth_getBlockByNumber', '["0x5",false]') as string;
    const receipt = sharedKey('local', 'eth_getTransactionReceipt', JSON.stringify([dropped])) as string;
    await until(async () => (await inspector.exists(block5)) === 1 && (await inspector.exists(receipt)) === 1);

    await s.direct('evm_revert', [snapshot]);
    const kept = await sendLogging(s, GANACHE_ACCOUNT_1, '0xbbbbbb', '0x2');
    await s.poll();
    await expectSameAnswers(s, readsAround(reorged, GANACHE_ACCOUNT_1));
    await expectSameAnswers(s, readsAround({ ...reorged, hashes: [await blockHash(s, 5)], txs: [kept] }, GANACHE_ACCOUNT_1));
  });
});

describe("two nodes, one behind on a fork the other dropped (finality: 2 blocks under each node's head)", () => {
  it("does not keep the behind node's answer at a height only the other node has finalized", async () => {
    const forked = await startGanache();
    opened.push(forked);
    const canonical = await startGanache();
    opened.push(canonical);
    // 0: the first node (the forked one) takes the call; 0.99: the second.
    let random = 0;
    const gateway = await startGateway({
      gatekeeper,
      pool: { random: () => random, hedge: false },
      chains: [chainEntry('local', [forked.url, canonical.url], { headPollMs: 600_000, finality: 2 })],
    });
    opened.push(gateway);
    const endpoint = `${gateway.url}/local/${gatekeeper.token}`;
    const heads = gateway.pools.get('local')?.heads;
    if (!heads) throw new Error('the local chain should track heads');
    // The same heights, other transactions: the forked node's blocks 1-6 are not the chain's.
    for (let i = 0; i < 6; i++) await post(forked.url, 'eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: ACCOUNT_2, value: '0x1' }]);
    for (let i = 0; i < 10; i++) await post(canonical.url, 'eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: ACCOUNT_2, value: '0x2' }]);
    heads.touch();
    await heads.poll();
    expect(heads.upstreams.map((u) => [u.label, u.head, u.finalized])).toEqual([
      ['local-1', 6, 4],
      ['local-2', 10, 8],
    ]);
    expect(heads.finalized).toBe(8);
    const lastUse = () => [gateway.usage.at(-1)?.upstream, gateway.usage.at(-1)?.cache];

    const calls: Call[] = [
      ['eth_getBlockByNumber', ['0x6', false]],
      ['eth_getBalance', [ACCOUNT_2, '0x6']],
      ['eth_getTransactionByBlockNumberAndIndex', ['0x5', '0x0']],
    ];
    for (const [method, params] of calls) {
      // The forked node answers first: its block 6 is above the block it finalized (4).
      random = 0;
      const first = await post(endpoint, method, params);
      expect(lastUse()).toEqual(['local-1', 'miss']);
      expect(first.result).toEqual((await post(forked.url, method, params)).result);
      // So it was not kept as final: the next caller gets the chain's answer, which is.
      random = 0.99;
      const again = await post(endpoint, method, params);
      expect([method, lastUse()]).toEqual([method, ['local-2', 'miss']]);
      expect(again.result).toEqual((await post(canonical.url, method, params)).result);
      expect(again.result).not.toEqual(first.result);
      random = 0;
      expect((await post(endpoint, method, params)).result).toEqual(again.result);
      expect(lastUse()).toEqual([null, 'hit']);
    }
  });
});

describe('the Redis level (RESPONSE_CACHE_REDIS) after a node rewound final blocks', () => {
  it('stays off as long as the entries written before the rewind can live (their TTL), then is used again', async () => {
    const redis = await startTestRedisServer();
    opened.push({ close: () => redis.stop() });
    const inspector = redisClient(redis.url);
    opened.push({ close: () => closeClient(inspector) });
    // The gateway's clock (head tracking's too): moved by the test.
    let clock = Date.now();
    const s = await setUp({}, { now: () => clock });
    const shared = openSharedCache(redis.url);
    opened.unshift(shared);
    s.gateway.pools.cache?.shareWith(shared);
    await until(() => inspector.status === 'ready');
    await until(async () => (await Promise.resolve(shared.get('rc:warm-up'))) === undefined && shared.stats.misses > 0);
    expect(shared.ttlMs).toBe(3_600_000);

    for (let i = 0; i < 4; i++) await s.direct('evm_mine');
    const snapshot = (await s.direct('evm_snapshot')).result as string;
    const dropped = await sendLogging(s, GANACHE_ACCOUNT_1, '0xaaaa', '0x1');
    await s.poll();
    const reorged = { from: 5, to: 5, hashes: [await blockHash(s, 5)], txs: [dropped] };
    await expectSameAnswers(s, readsAround(reorged, GANACHE_ACCOUNT_1));
    const block5 = sharedKey('local', 'eth_getBlockByNumber', '["0x5",false]') as string;
    await until(async () => (await inspector.exists(block5)) === 1);

    // Rewound by a caller of its own, seen at the next poll: the rewind is dated then.
    await s.direct('evm_revert', [snapshot]);
    const kept = await sendLogging(s, GANACHE_ACCOUNT_1, '0xbbbbbb', '0x2');
    await s.poll();
    // A second short of the TTL: the dropped chain's entries may still be in Redis (they are): not read, nothing written.
    clock += shared.ttlMs - 1000;
    await s.poll();
    const before = { ...shared.stats };
    await expectSameAnswers(s, readsAround(reorged, GANACHE_ACCOUNT_1));
    await expectSameAnswers(s, readsAround({ ...reorged, hashes: [await blockHash(s, 5)], txs: [kept] }, GANACHE_ACCOUNT_1));
    expect(shared.stats).toEqual(before);

    // The TTL since the rewind: every entry written before it has expired (Redis's clock is not the
    // gateway's here: they are removed as their expiry would have), and the level is used again.
    await inspector.flushdb();
    clock += 1000;
    await s.poll();
    const block3 = sharedKey('local', 'eth_getBlockByNumber', '["0x3",false]') as string;
    await s.via('eth_getBlockByNumber', ['0x3', false]);
    expect(shared.stats.misses).toBe(before.misses + 1);
    await until(async () => (await inspector.exists(block3)) === 1);
    // Read again: an answer another gateway shared is served from Redis.
    const block2 = (await s.direct('eth_getBlockByNumber', ['0x2', false])).result;
    const block2Key = sharedKey('local', 'eth_getBlockByNumber', '["0x2",false]') as string;
    await inspector.set(block2Key, sharedValue(block2Key, JSON.stringify(block2)), 'EX', 3600);
    expect((await s.via('eth_getBlockByNumber', ['0x2', false])).result).toEqual(block2);
    expect(s.lastUse()).toBe('hit');
    expect(shared.stats.hits).toBe(before.hits + 1);
  });
});
