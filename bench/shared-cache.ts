/**
 * The response cache's shared level (RESPONSE_CACHE_REDIS, issue 34 item 2): what a final read
 * costs when it is answered from the gateway's own memory, from Redis (another instance asked the
 * node first), or by the node (20–60 ms), without and with the shared level (a Redis miss, then
 * a write after the node's answer). One gateway process of its own (this file with
 * SHARED_CACHE_SERVE=1: a gateway without the shared level and one with it, same code as
 * rpcHandler.ts runs), a real redis-server, and a fake EVM node in this process. Per mode:
 * latency seen by one client calling one call at a time (p50/p99), then the gateway's CPU per
 * call (its process alone, /proc) with CONCURRENCY clients. Calls are eth_getBalance of distinct
 * addresses at one final block (one call each, so none is answered twice unless the mode says so).
 * ROUNDS rounds, the modes in turn, each after WARMUP untimed calls; the medians of the rounds.
 *
 *   npx tsx bench/shared-cache.ts   (CALLS=2000 per hit mode, NODE_CALLS=300 per node mode, CONCURRENCY=16, ROUNDS=3)
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { openSharedCache, type RedisSharedCache, sharedKey } from '../src/gateway/cache/sharedCache.js';
import { FakeEvmChain, startEvmNodeFake } from '../test/support/fakeUpstreams.js';
import { chainEntry, startGateway, type TestGateway } from '../test/support/gatewayApp.js';
import { TestGatekeeper } from '../test/support/gatewayTestGatekeeper.js';
import { startTestRedisServer } from '../test/support/redisServer.js';
import { cpuSeconds, Processes, runMain, timeLimit, tsNodeArgs } from './lib/processes.js';
import { emit, log } from './lib/report.js';

const CALLS = Number(process.env.CALLS ?? 2_000);
const NODE_CALLS = Number(process.env.NODE_CALLS ?? 300);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 16);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const WARMUP = 200;
const COMMAND = 'npx tsx bench/shared-cache.ts';
const FINAL_BLOCK = '0xb4';

interface Served {
  plain: string;
  shared: string;
  control: string;
  token: string;
}

/** The gateway process: two gateways over one node (without and with the shared level), and a control port for their counts. */
async function serve(): Promise<void> {
  const gatekeeper = new TestGatekeeper();
  const gateway = async (): Promise<TestGateway> => {
    const g = await startGateway({
      gatekeeper,
      chains: [chainEntry('evm', [process.env.NODE_URL as string], { headPollMs: 600_000, timeoutMs: 10_000 })],
      pool: { hedge: false },
    });
    const heads = g.pools.get('evm')!.heads!;
    heads.touch();
    await heads.poll();
    return g;
  };
  const plain = await gateway();
  const withShared = await gateway();
  const shared: RedisSharedCache = openSharedCache(process.env.REDIS_URL as string);
  withShared.pools.cache!.shareWith(shared);
  const counts = (g: TestGateway): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const u of g.usage) out[u.cache ?? 'none'] = (out[u.cache ?? 'none'] ?? 0) + 1;
    g.usage.length = 0;
    return out;
  };
  const control = createServer((_req, res) => {
    res.end(JSON.stringify({ plain: counts(plain), shared: counts(withShared), redis: shared.stats }));
  });
  await new Promise<void>((resolve) => control.listen(0, '127.0.0.1', resolve));
  const served: Served = {
    plain: plain.url,
    shared: withShared.url,
    control: `http://127.0.0.1:${(control.address() as AddressInfo).port}`,
    token: gatekeeper.token,
  };
  process.stdout.write(`${JSON.stringify(served)}\n`);
}

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
};
const round = (x: number, digits = 2): number => Number(x.toFixed(digits));

let sequence = 0;
/** A final read nobody asked before. */
const freshCall = (): string =>
  `{"jsonrpc":"2.0","id":${++sequence},"method":"eth_getBalance","params":["0x${sequence.toString(16).padStart(40, '0')}","${FINAL_BLOCK}"]}`;

async function call(pool: Pool, path: string, body: string): Promise<number> {
  const t0 = performance.now();
  const res = await pool.request({ method: 'POST', path, headers: { 'content-type': 'application/json' }, body });
  const text = await res.body.text();
  if (res.statusCode !== 200 || !text.includes('"result"')) throw new Error(`bad answer ${res.statusCode}: ${text}`);
  return performance.now() - t0;
}

/** `bodies` from `concurrency` clients; the latencies (ms) in order of completion. */
async function run(pool: Pool, path: string, bodies: string[], concurrency: number): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < bodies.length) latencies.push(await call(pool, path, bodies[next++] as string));
    }),
  );
  return latencies;
}

async function main(): Promise<void> {
  timeLimit(600);
  const processes = new Processes();
  const redis = await startTestRedisServer();
  const node = await startEvmNodeFake(new FakeEvmChain(200, 8));
  const nodeLatency = { on: false };
  node.latency = () => (nodeLatency.on ? 20 + Math.random() * 40 : 0);
  const child = processes.start('gateway', process.execPath, tsNodeArgs('bench/shared-cache.ts'), {
    env: { SHARED_CACHE_SERVE: '1', NODE_URL: node.url, REDIS_URL: redis.url, NODE_ENV: 'production' },
  });
  let served: Served | null = null;
  for (let i = 0; i < 300 && served === null; i++) {
    const line = child
      .output()
      .split('\n')
      .find((l) => l.startsWith('{"plain"'));
    if (line) served = JSON.parse(line) as Served;
    else await new Promise((r) => setTimeout(r, 100));
  }
  if (served === null) throw new Error(`the gateway did not start:\n${child.output()}`);
  const pid = child.child.pid as number;
  const path = (origin: string): string => `${new URL(origin).pathname.replace(/\/$/, '')}/evm/${served.token}`;
  const plain = new Pool(served.plain, { connections: CONCURRENCY });
  const shared = new Pool(served.shared, { connections: CONCURRENCY });
  const counts = async (): Promise<{ plain: Record<string, number>; shared: Record<string, number>; redis: Record<string, number> }> =>
    (await (await fetch(served.control)).json()) as { plain: Record<string, number>; shared: Record<string, number>; redis: Record<string, number> };

  // Redis holds answers another instance got from the node: the plain gateway asks the node, and
  // what it answered is written as a shared-level gateway would have (same key, same value).
  const prefilled = Array.from({ length: ROUNDS * (CALLS * 2 + WARMUP) }, freshCall);
  const writer = openSharedCache(redis.url);
  await new Promise((r) => setTimeout(r, 200));
  await Promise.all(
    Array.from({ length: 32 }, async (_, k) => {
      for (let i = k; i < prefilled.length; i += 32) {
        const body = prefilled[i] as string;
        const res = await plain.request({ method: 'POST', path: path(served.plain), headers: { 'content-type': 'application/json' }, body });
        const answer = JSON.parse(await res.body.text()) as { result: unknown };
        const params = (JSON.parse(body) as { params: unknown[] }).params;
        writer.set(sharedKey('evm', 'eth_getBalance', JSON.stringify(params)) as string, JSON.stringify(answer.result));
      }
    }),
  );
  await new Promise((r) => setTimeout(r, 500));
  await counts();
  log(`prefilled ${prefilled.length} answers in Redis (${writer.stats.writes} writes)`);

  const repeated = freshCall();
  await call(shared, path(served.shared), repeated);
  await counts();
  let unread = 0;
  /** The next `n` prefilled calls (in Redis, never asked of this gateway). */
  const fromRedis = (n: number): string[] => {
    unread += n;
    return prefilled.slice(unread - n, unread);
  };
  const fresh = (n: number): string[] => Array.from({ length: n }, freshCall);
  /**
   * Per mode: where, the calls of a phase (warm-up, latency, CPU), whether the node is slow, and
   * how its calls may be served (a Redis lookup past its deadline goes to the node: a miss).
   */
  const modes: Array<{ name: string; pool: Pool; origin: string; calls: (n: number) => string[]; count: number; node: boolean; uses: string[] }> = [
    { name: 'in_process_hit', pool: shared, origin: served.shared, calls: (n) => Array(n).fill(repeated), count: CALLS, node: false, uses: ['hit'] },
    { name: 'redis_hit', pool: shared, origin: served.shared, calls: fromRedis, count: CALLS, node: false, uses: ['hit', 'miss'] },
    { name: 'node_without_shared', pool: plain, origin: served.plain, calls: fresh, count: NODE_CALLS, node: true, uses: ['miss'] },
    { name: 'node_after_redis_miss', pool: shared, origin: served.shared, calls: fresh, count: NODE_CALLS, node: true, uses: ['miss'] },
  ];
  const rounds: Record<string, Array<{ p50: number; p99: number; cpuUs: number; hitShare: number }>> = {};
  for (let r = 1; r <= ROUNDS; r++) {
    for (const mode of modes) {
      nodeLatency.on = mode.node;
      await run(mode.pool, path(mode.origin), mode.calls(WARMUP), mode.node ? 64 : CONCURRENCY);
      const latencies = await run(mode.pool, path(mode.origin), mode.calls(mode.count / 2), 1);
      const cpuCalls = mode.calls(mode.node ? mode.count * 4 : (mode.count * 3) / 2);
      const cpu0 = cpuSeconds(pid);
      await run(mode.pool, path(mode.origin), cpuCalls, mode.node ? 64 : CONCURRENCY);
      const cpuUs = ((cpuSeconds(pid) - cpu0) * 1e6) / cpuCalls.length;
      const seen = await counts();
      const byUse = mode.pool === plain ? seen.plain : seen.shared;
      if (Object.keys(byUse).some((use) => !mode.uses.includes(use))) throw new Error(`${mode.name}: served ${JSON.stringify(byUse)}, expected ${mode.uses}`);
      const total = Object.values(byUse).reduce((a, b) => a + b, 0);
      const result = { p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), cpuUs, hitShare: (byUse.hit ?? 0) / total };
      const ofMode = rounds[mode.name] ?? [];
      ofMode.push(result);
      rounds[mode.name] = ofMode;
      log(
        `round ${r} ${mode.name}: p50 ${result.p50.toFixed(3)} ms, p99 ${result.p99.toFixed(3)} ms, ${result.cpuUs.toFixed(1)} µs CPU a call, served ${JSON.stringify(byUse)}; redis ${JSON.stringify(seen.redis)}`,
      );
    }
  }
  const medianOf = (xs: number[]): number => quantile(xs, 0.5);
  const results: Record<string, { p50: number; p99: number; cpuUs: number; hitShare: number }> = {};
  for (const [name, rs] of Object.entries(rounds)) {
    results[name] = {
      p50: round(medianOf(rs.map((x) => x.p50)), 3),
      p99: round(medianOf(rs.map((x) => x.p99)), 3),
      cpuUs: round(medianOf(rs.map((x) => x.cpuUs)), 1),
      hitShare: round(medianOf(rs.map((x) => x.hitShare)), 4),
    };
    log(`median ${name}: p50 ${results[name]!.p50} ms, p99 ${results[name]!.p99} ms, ${results[name]!.cpuUs} µs CPU a call, hits ${results[name]!.hitShare}`);
  }
  const method = `medians of ${ROUNDS} rounds; one client one call at a time (latency), then ${CONCURRENCY} clients (64 against the node) for CPU (/proc of the gateway process); eth_getBalance at a final block, distinct params`;
  for (const [name, r] of Object.entries(results)) {
    emit({ name: `shared_cache_${name}_p50_ms`, target: null, result: r.p50, unit: 'ms', command: COMMAND, method });
    emit({ name: `shared_cache_${name}_p99_ms`, target: null, result: r.p99, unit: 'ms', command: COMMAND, method });
    emit({
      name: `shared_cache_${name}_cpu_us`,
      target: null,
      result: r.cpuUs,
      unit: 'µs/call',
      ratio: round(r.cpuUs / results.node_without_shared!.cpuUs),
      baseline: `a node call without the shared level ${results.node_without_shared!.cpuUs} µs`,
      command: COMMAND,
      method,
    });
  }
  emit({
    name: 'shared_cache_redis_hit_share',
    target: null,
    result: results.redis_hit!.hitShare,
    unit: 'share',
    command: COMMAND,
    method: `calls of the redis_hit mode answered from Redis; the rest missed the ${10} ms deadline and went to the node`,
  });
  await writer.close();
  await plain.close();
  await shared.close();
  await processes.stopAll();
  await node.close();
  await redis.stop();
}

if (process.env.SHARED_CACHE_SERVE === '1') void serve();
else runMain(main);
