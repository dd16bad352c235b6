import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { openSharedCache, type RedisSharedCache, resultOfValue, sharedKey, sharedValue } from '../../src/gateway/cache/sharedCache.js';
import { closeClient, type RedisClient, redisClient } from '../../src/infra/redis/client.js';
import { until } from '../support/eventually.js';
import { type EvmNodeFake, FakeEvmChain, startEvmNodeFake } from '../support/fakeUpstreams.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';

/**
 * The response cache's shared level (issue 34, item 2): two gateway instances, each with its own
 * fake node and in-process cache, sharing one real Redis. Only answers that can never change cross
 * it; a stalled, stopped or poisoned Redis never costs more than the lookup deadline nor serves
 * a wrong answer.
 */

const DEADLINE_MS = 10;
const gatekeeper = new TestGatekeeper();
const opened: Array<{ close(): Promise<void> }> = [];
let redis: TestRedisServer;
let inspector: RedisClient;

beforeAll(async () => {
  redis = await startTestRedisServer();
  inspector = redisClient(redis.url);
});
afterAll(async () => {
  await closeClient(inspector);
  await redis.stop();
});
afterEach(async () => {
  redis.resume();
  await Promise.all(opened.splice(0).map((o) => o.close()));
  await until(async () => {
    try {
      await inspector.flushall();
      return true;
    } catch {
      return false;
    }
  });
});

interface Instance {
  node: EvmNodeFake;
  gateway: TestGateway;
  shared: RedisSharedCache;
}

/** A gateway instance with its own node and its own connection to the shared Redis. */
async function instance(chain: FakeEvmChain): Promise<Instance> {
  const node = await startEvmNodeFake(chain);
  opened.push(node);
  const gateway = await startGateway({
    gatekeeper,
    chains: [chainEntry('evm', [node.url], { headPollMs: 600_000 })],
    pool: { random: () => 0, hedge: false },
  });
  opened.push(gateway);
  const shared = openSharedCache(redis.url, { deadlineMs: DEADLINE_MS });
  opened.push(shared);
  gateway.pools.cache!.shareWith(shared);
  const heads = gateway.pools.get('evm')!.heads!;
  heads.touch();
  await heads.poll();
  await until(() => inspector.status === 'ready');
  await until(async () => (await Promise.resolve(shared.get('rc:warm-up'))) === undefined && shared.stats.misses > 0);
  return { node, gateway, shared };
}

async function twoInstances(): Promise<{ chain: FakeEvmChain; a: Instance; b: Instance }> {
  const chain = new FakeEvmChain(200, 8);
  return { chain, a: await instance(chain), b: await instance(chain) };
}

async function rpc(gateway: TestGateway, method: string, params: unknown[] | undefined, id: unknown): Promise<Record<string, unknown>> {
  const r = await fetch(`${gateway.url}/evm/${gatekeeper.token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) }),
  });
  expect(r.status).toBe(200);
  return (await r.json()) as Record<string, unknown>;
}

const hex = (n: number): string => `0x${n.toString(16)}`;
const calledMethods = (node: EvmNodeFake): string[] => node.calls.map((c) => (JSON.parse(c.body) as { method: string }).method);
const keyOf = (method: string, params: unknown[]): string => sharedKey('evm', method, JSON.stringify(params)) as string;
const stored = async (method: string, params: unknown[]): Promise<boolean> => (await inspector.exists(keyOf(method, params))) === 1;

describe('answers that can never change', () => {
  it("are answered by instance A's node once and served to instance B from Redis, with B's caller's id, metered as hits", async () => {
    const { chain, a, b } = await twoInstances();
    const final = chain.block(chain.finalized - 3)!;
    const blockCall: [string, unknown[]] = ['eth_getBlockByNumber', [hex(final.number), false]];
    const receiptCall: [string, unknown[]] = ['eth_getTransactionReceipt', [final.transactions[0]]];

    const fromNode = await rpc(a.gateway, ...blockCall, 1);
    await rpc(a.gateway, ...receiptCall, 2);
    await rpc(a.gateway, 'eth_chainId', undefined, 3);
    expect(calledMethods(a.node)).toEqual(['eth_getBlockByNumber', 'eth_getTransactionReceipt', 'eth_chainId']);
    // Written without waiting for Redis: they land shortly after the answers left.
    await until(async () => (await stored(...blockCall)) && (await stored(...receiptCall)) && (await stored('eth_chainId', [])));
    expect(await inspector.ttl(keyOf(...blockCall))).toBeGreaterThan(3500);

    const served = await rpc(b.gateway, ...blockCall, 'caller-b');
    expect(served).toEqual({ ...fromNode, id: 'caller-b' });
    expect(await rpc(b.gateway, 'eth_getTransactionReceipt', [final.transactions[0]], 7)).toMatchObject({ id: 7, result: { blockHash: final.hash } });
    expect((await rpc(b.gateway, 'eth_chainId', undefined, null)).result).toBe('0x2a');
    expect(b.node.calls).toEqual([]);
    expect(b.gateway.usage.map((u) => [u.method, u.cache, u.upstream])).toEqual([
      ['eth_getBlockByNumber', 'hit', null],
      ['eth_getTransactionReceipt', 'hit', null],
      ['eth_chainId', 'hit', null],
    ]);
    expect(b.shared.stats.hits).toBe(3);

    // Kept in B's process too: the next one does not ask Redis.
    await rpc(b.gateway, ...blockCall, 9);
    expect(b.shared.stats.hits).toBe(3);
    // The same call written otherwise (hex in capitals) is another key in process but the same one in Redis.
    await rpc(b.gateway, 'eth_getBlockByNumber', [hex(final.number).toUpperCase().replace('0X', '0x'), false], 10);
    expect(b.shared.stats.hits).toBe(4);
    expect(b.gateway.usage.at(-1)?.cache).toBe('hit');
    expect(b.node.calls).toEqual([]);
  });

  it("serves a batch's final members from Redis, each with its own id, the others from the node", async () => {
    const { chain, a, b } = await twoInstances();
    const n = chain.finalized - 1;
    await rpc(a.gateway, 'eth_getBlockByNumber', [hex(n), false], 1);
    await until(() => stored('eth_getBlockByNumber', [hex(n), false]));

    const r = await fetch(`${b.gateway.url}/evm/${gatekeeper.token}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([
        { jsonrpc: '2.0', id: 'x', method: 'eth_getBlockByNumber', params: [hex(n), false] },
        { jsonrpc: '2.0', id: 'y', method: 'eth_getBlockByNumber', params: [hex(n - 1), false] },
        { jsonrpc: '2.0', id: 'z', method: 'eth_blockNumber' },
      ]),
    });
    const answers = (await r.json()) as Array<{ id: unknown; result: { hash?: string } | string }>;
    expect(answers.map((x) => x.id)).toEqual(['x', 'y', 'z']);
    expect((answers[0]!.result as { hash: string }).hash).toBe(chain.block(n)!.hash);
    expect((answers[1]!.result as { hash: string }).hash).toBe(chain.block(n - 1)!.hash);
    expect(answers[2]!.result).toBe(hex(chain.head));
    expect(b.gateway.usage.map((u) => u.cache)).toEqual(['hit', 'miss', 'miss']);
    expect(b.node.calls.map((c) => c.body)).toHaveLength(1);
    expect(b.node.calls[0]!.body).not.toContain(`"${hex(n)}"`);
    // B's node answer for the other final block is shared in turn.
    await until(() => stored('eth_getBlockByNumber', [hex(n - 1), false]));
  });
});

describe('answers that depend on the head', () => {
  it('are never written to Redis, nor are nulls or blocks not yet final: each instance asks its own node', async () => {
    const { chain, a, b } = await twoInstances();
    const recent = chain.block(chain.head - 1)!;
    const calls: Array<[string, unknown[] | undefined]> = [
      ['eth_blockNumber', undefined],
      ['eth_getBlockByNumber', ['latest', false]],
      ['eth_getBalance', ['0x01', 'latest']],
      ['eth_getBlockByNumber', [hex(recent.number), false]],
      ['eth_getTransactionReceipt', [recent.transactions[0]]],
      ['eth_getBlockByNumber', [hex(chain.head + 5), false]],
      ['eth_getBalance', ['0x01', 'finalized']],
    ];
    for (const [i, [method, params]] of calls.entries()) await rpc(a.gateway, method, params, i);
    // Twice on A: what may be kept in process is (the head's answers until it moves).
    for (const [i, [method, params]] of calls.entries()) await rpc(a.gateway, method, params, i);
    expect(a.gateway.usage.slice(calls.length).map((u) => u.cache)).toEqual(['hit', 'hit', 'hit', 'miss', 'miss', 'miss', 'miss']);
    expect(a.shared.stats.writes).toBe(0);

    for (const [i, [method, params]] of calls.entries()) await rpc(b.gateway, method, params, i);
    expect(calledMethods(b.node)).toEqual(calls.map(([method]) => method));
    expect(b.gateway.usage.map((u) => u.cache)).toEqual(calls.map(() => 'miss'));
    expect(b.shared.stats.hits).toBe(0);
    expect(await inspector.dbsize()).toBe(0);
  });
});

describe('a Redis in trouble', () => {
  it('stalled: calls are answered by the node, at most a few lookups wait out the deadline, then Redis is left alone until it answers again', async () => {
    const { chain, a, b } = await twoInstances();
    redis.pause();
    const started = b.shared.stats.late;
    const durations: number[] = [];
    for (let i = 0; i < 12; i++) {
      const n = chain.finalized - i;
      const t0 = performance.now();
      const answer = await rpc(b.gateway, 'eth_getBlockByNumber', [hex(n), false], i);
      durations.push(performance.now() - t0);
      expect((answer.result as { hash: string }).hash).toBe(chain.block(n)!.hash);
    }
    expect(b.node.calls).toHaveLength(12);
    expect(b.gateway.usage.map((u) => u.cache)).toEqual(Array(12).fill('miss'));
    // Three late lookups pause the others (no I/O at all, not even a deadline to wait).
    expect(b.shared.stats.late - started).toBe(3);
    expect(b.shared.stats.skipped).toBeGreaterThanOrEqual(9);
    // The deadline, not the stalled Redis, bounds each: well under a second (a shared machine's margin).
    expect(Math.max(...durations)).toBeLessThan(DEADLINE_MS + 300);
    expect(durations.slice(3).sort((x, y) => x - y)[4]).toBeLessThan(DEADLINE_MS + 100);

    redis.resume();
    await recovers(chain, a, b);
  });

  it('stopped: calls are answered by the node without waiting, and sharing resumes once Redis is back', async () => {
    const { chain, a, b } = await twoInstances();
    await redis.stop();
    for (let i = 0; i < 5; i++) {
      const n = chain.finalized - i;
      const t0 = performance.now();
      const answer = await rpc(b.gateway, 'eth_getBlockByNumber', [hex(n), false], i);
      expect(performance.now() - t0).toBeLessThan(DEADLINE_MS + 300);
      expect((answer.result as { hash: string }).hash).toBe(chain.block(n)!.hash);
    }
    expect(b.node.calls).toHaveLength(5);
    expect(b.shared.stats.hits).toBe(0);
    expect(b.shared.stats.late).toBe(0);

    await redis.start();
    await recovers(chain, a, b);
  });
});

/** Within a few seconds, a final block A's node answers is served to B from Redis again. */
async function recovers(chain: FakeEvmChain, a: Instance, b: Instance): Promise<void> {
  let n = 10;
  await until(async () => {
    n++;
    await rpc(a.gateway, 'eth_getBlockByNumber', [hex(n), true], n);
    await new Promise((r) => setTimeout(r, 50));
    const answer = await rpc(b.gateway, 'eth_getBlockByNumber', [hex(n), true], n);
    expect((answer.result as { hash: string }).hash).toBe(chain.block(n)!.hash);
    return b.gateway.usage.at(-1)?.cache === 'hit';
  }, 8000);
}

describe('a poisoned Redis', () => {
  it('serves no value that fails its check (garbage, truncated, another key’s): the node answers, and its answer replaces the value', async () => {
    const { chain, a, b } = await twoInstances();
    const blocks = [chain.finalized - 1, chain.finalized - 2, chain.finalized - 3, chain.finalized - 4];
    const params = (n: number): unknown[] => [hex(n), false];
    const key = (n: number): string => keyOf('eth_getBlockByNumber', params(n));
    const lie = JSON.stringify({ number: hex(blocks[0]!), hash: `0x${'66'.repeat(32)}`, transactions: [] });
    await inspector.set(key(blocks[0]!), 'garbage{{');
    await inspector.set(key(blocks[1]!), sharedValue(key(blocks[1]!), lie).slice(0, -3));
    await inspector.set(key(blocks[2]!), sharedValue(key(blocks[3]!), lie));
    await inspector.set(key(blocks[3]!), `1${lie}`);

    for (const n of blocks) {
      const answer = await rpc(b.gateway, 'eth_getBlockByNumber', params(n), `id-${n}`);
      expect(answer).toMatchObject({ id: `id-${n}`, result: { hash: chain.block(n)!.hash } });
    }
    expect(b.node.calls).toHaveLength(4);
    expect(b.gateway.usage.map((u) => u.cache)).toEqual(['miss', 'miss', 'miss', 'miss']);
    expect(b.shared.stats.rejected).toBe(4);
    expect(b.shared.stats.hits).toBe(0);

    // B's node answers were written over the poison: A now gets the true blocks from Redis.
    await until(async () => {
      const values = await Promise.all(blocks.map((n) => inspector.get(key(n))));
      return values.every((v, i) => v !== null && resultOfValue(key(blocks[i]!), v) !== null);
    });
    for (const n of blocks) expect(await rpc(a.gateway, 'eth_getBlockByNumber', params(n), n)).toMatchObject({ result: { hash: chain.block(n)!.hash } });
    expect(a.node.calls).toEqual([]);
    expect(a.gateway.usage.map((u) => u.cache)).toEqual(['hit', 'hit', 'hit', 'hit']);
  });
});

describe('RESPONSE_CACHE_REDIS', () => {
  it('is off unless set; on, it needs a Redis and the in-process cache, and may have a Redis of its own', () => {
    expect(loadConfig({}).responseCacheRedisUrl).toBeNull();
    expect(loadConfig({ REDIS_URL: 'redis://r:6379' }).responseCacheRedisUrl).toBeNull();
    expect(loadConfig({ REDIS_URL: 'redis://r:6379', RESPONSE_CACHE_REDIS: 'on' }).responseCacheRedisUrl).toBe('redis://r:6379');
    expect(
      loadConfig({ REDIS_URL: 'redis://r:6379', RESPONSE_CACHE_REDIS: 'on', RESPONSE_CACHE_REDIS_URL: 'redis+cluster://c1:7000,c2:7000' })
        .responseCacheRedisUrl,
    ).toBe('redis+cluster://c1:7000,c2:7000');
    expect(() => loadConfig({ RESPONSE_CACHE_REDIS: 'on' })).toThrow(/needs REDIS_URL/);
    expect(() => loadConfig({ REDIS_URL: 'redis://r:6379', RESPONSE_CACHE_REDIS: 'on', RESPONSE_CACHE_MB: '0' })).toThrow(/RESPONSE_CACHE_MB/);
    expect(() => loadConfig({ RESPONSE_CACHE_REDIS: 'yes' })).toThrow(/RESPONSE_CACHE_REDIS/);
    expect(() => loadConfig({ RESPONSE_CACHE_REDIS: 'on', RESPONSE_CACHE_REDIS_URL: 'http://x' })).toThrow(/RESPONSE_CACHE_REDIS_URL/);
  });
});
