/**
 * The WebSocket connection cap across gateway instances (src/infra/wsconnections): what an
 * upgrade's decision costs in Redis against in process, and what the heartbeat costs the
 * gateway and Redis while one instance holds connections of many tokens.
 *
 *   npx tsx bench/ws-connections.ts
 *
 * 1. Decision latency: ACQUIRES sequential acquire + release pairs, each on a token of its own,
 *    in process and in Redis (one redis-server on loopback), alternated in ROUNDS rounds.
 * 2. A burst: 2 instances × 5,000 upgrades at once over 1,000 tokens (cap 5): wall time, and
 *    that exactly 5 per token were granted.
 * 3. Heartbeat: one instance holding HELD tokens (TTL 3 s, so a beat a second) for 10 s: its
 *    CPU and Redis's per beat (process.cpuUsage; Redis's INFO cpu), Redis memory per token.
 */
import { Redis } from 'ioredis';
import { MemoryConnectionCounter } from '../src/infra/wsconnections/memory.js';
import type { ConnectionCounter } from '../src/infra/wsconnections/port.js';
import { RedisConnectionCounter } from '../src/infra/wsconnections/redis.js';
import { Processes, runMain, timeLimit } from './lib/processes.js';
import { emit, log, median, round } from './lib/report.js';
import { startRedis } from './lib/services.js';

const COMMAND = 'npx tsx bench/ws-connections.ts';
const ACQUIRES = 5000;
const ROUNDS = 3;
const HELD = 10_000;

const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number;

async function decisionLatencies(counter: ConnectionCounter, prefix: string): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < ACQUIRES; i++) {
    const started = performance.now();
    const verdict = await counter.acquire(`${prefix}-${i}`, 2);
    times.push((performance.now() - started) * 1000);
    if (verdict.granted) verdict.release();
  }
  return times.sort((a, b) => a - b);
}

async function redisCpuSeconds(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return field('used_cpu_sys') + field('used_cpu_user');
}

async function usedMemory(redis: Redis): Promise<number> {
  return Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1] ?? 0);
}

async function main(): Promise<void> {
  timeLimit(180);
  const processes = new Processes();
  const server = await startRedis(processes);
  const redis = new Redis(server.url);
  try {
    // 1. Decision latency, in process and in Redis, alternated.
    const memory = new MemoryConnectionCounter();
    const shared = new RedisConnectionCounter(server.url, { commandTimeoutMs: 2000 });
    await shared.whenReady();
    const p50 = { memory: [] as number[], redis: [] as number[] };
    const p99 = { memory: [] as number[], redis: [] as number[] };
    for (let round_ = 0; round_ < ROUNDS; round_++) {
      for (const [name, counter] of [
        ['memory', memory],
        ['redis', shared],
      ] as const) {
        const times = await decisionLatencies(counter, `lat-${name}-${round_}`);
        p50[name].push(percentile(times, 0.5));
        p99[name].push(percentile(times, 0.99));
        log(`round ${round_ + 1} ${name}: acquire p50 ${round(percentile(times, 0.5))} µs, p99 ${round(percentile(times, 0.99))} µs`);
      }
    }
    if (shared.fallbackCount > 0) throw new Error(`${shared.fallbackCount} decisions fell back to memory`);
    emit({
      name: 'ws_connection_acquire_redis_p99_us',
      target: null,
      result: round(median(p99.redis)),
      unit: 'µs',
      ratio: round(median(p99.redis) / median(p99.memory)),
      baseline: `in process p99 ${round(median(p99.memory))} µs`,
      command: COMMAND,
      method: `${ACQUIRES} sequential acquire+release per round, ${ROUNDS} rounds alternated; Redis p50 ${round(median(p50.redis))} µs, in process p50 ${round(median(p50.memory))} µs (medians over rounds)`,
    });

    // 2. A burst from two instances.
    const other = new RedisConnectionCounter(server.url, { commandTimeoutMs: 2000 });
    await other.whenReady();
    const started = performance.now();
    const verdicts = await Promise.all(
      Array.from({ length: 10_000 }, (_, i) => ((i & 1) === 0 ? shared : other).acquire(`burst-${i % 1000}`, 5).then((v) => ({ token: i % 1000, v }))),
    );
    const burstMs = performance.now() - started;
    const perToken = new Map<number, number>();
    for (const { token, v } of verdicts) if (v.granted) perToken.set(token, (perToken.get(token) ?? 0) + 1);
    const exact = [...perToken.values()].every((n) => n === 5) && perToken.size === 1000;
    log(`burst: 10,000 upgrades from 2 instances over 1,000 tokens in ${round(burstMs)} ms; exactly 5 granted per token: ${exact}`);
    if (!exact) throw new Error('the cap did not hold in the burst');
    for (const { v } of verdicts) if (v.granted) v.release();
    await Promise.all([other.close(), shared.close()]);
    await new Promise((r) => setTimeout(r, 200));

    // 3. Heartbeat of one instance holding HELD tokens.
    const before = await usedMemory(redis);
    const holder = new RedisConnectionCounter(server.url, { instanceTtlMs: 3000, commandTimeoutMs: 5000 });
    await holder.whenReady();
    for (let i = 0; i < HELD; i += 500) await Promise.all(Array.from({ length: 500 }, (_, j) => holder.acquire(`held-${i + j}`, 2)));
    const bytesPerToken = ((await usedMemory(redis)) - before) / HELD;
    const windowS = 10;
    const cpu0 = process.cpuUsage();
    const redisCpu0 = await redisCpuSeconds(redis);
    await new Promise((r) => setTimeout(r, windowS * 1000));
    const cpu = process.cpuUsage(cpu0);
    const redisCpu = (await redisCpuSeconds(redis)) - redisCpu0;
    const beats = windowS; // every third of 3 s
    const gatewayMsPerBeat = (cpu.user + cpu.system) / 1000 / beats;
    const redisMsPerBeat = (redisCpu * 1000) / beats;
    log(
      `heartbeat, ${HELD} tokens held: gateway ${round(gatewayMsPerBeat)} ms CPU a beat (${round((gatewayMsPerBeat * 1000) / HELD)} µs a token), redis ${round(redisMsPerBeat)} ms a beat (${round((redisMsPerBeat * 1000) / HELD)} µs a token); redis memory ${round(bytesPerToken)} B a token`,
    );
    emit({
      name: 'ws_connection_heartbeat_gateway_us_per_token',
      target: null,
      result: round((gatewayMsPerBeat * 1000) / HELD),
      unit: 'µs',
      command: COMMAND,
      method: `one instance holding ${HELD} tokens, a beat a second for ${windowS} s: its CPU per token per beat; Redis ${round((redisMsPerBeat * 1000) / HELD)} µs per token per beat, ${round(bytesPerToken)} B of Redis memory per token`,
    });
    await holder.close();
  } finally {
    redis.disconnect();
    await processes.stopAll();
  }
}

runMain(main);
