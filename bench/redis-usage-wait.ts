/**
 * What REDIS_USAGE_WAIT_REPLICAS costs the production gateway role: two gateways (BENCH_ROLE=gateway,
 * bench/servers/benchGateway.ts) on one Redis master with one replica (both redis-servers on this
 * machine), one with REDIS_USAGE_WAIT_REPLICAS=0 (the default: answers on the master's
 * acknowledgement, no WAIT), one with 1 (each send's XADDs followed by WAIT 1 REDIS_USAGE_WAIT_MS).
 * Throughput: `wrk -t1 -c32`, SECONDS (3) s a run after 1 s not counted, the two in turn for ROUNDS
 * (5) rounds, each round in the other order; then latency at ~1,000 req/s (bench/wrk/paced.lua,
 * 10 s after a 3 s warm-up) for LATENCY_ROUNDS (3) rounds. Prints every run and the medians, and
 * each gateway's gateway_usage_unreplicated_total at the end. It records nothing: the figures go
 * to bench/HISTORY.md and docs/operations.md by hand.
 *
 *   npx tsx bench/redis-usage-wait.ts   (ROUNDS=5, SECONDS=3, LATENCY_ROUNDS=3, WAIT_MS=100)
 */
import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { measuredThroughput, pacedLatency, pacedWarmUp, wrk } from './lib/load.js';
import { freePort, Processes, requireTool, runMain, timeLimit, waitForIdle } from './lib/processes.js';
import { log, median } from './lib/report.js';
import { checkCall, type Service, seedOneToken, startGateway, startUpstream, writeBenchPlans } from './lib/services.js';

const ROUNDS = Number(process.env.ROUNDS ?? 5);
const SECONDS = Number(process.env.SECONDS ?? 3);
const LATENCY_ROUNDS = Number(process.env.LATENCY_ROUNDS ?? 3);
const WAIT_MS = process.env.WAIT_MS ?? '100';
const CONNECTIONS = 32;

async function startRedisPair(processes: Processes): Promise<{ url: string; pids: number[] }> {
  const redis = requireTool('redis-server', 'apt-get install -y redis-server');
  const [masterPort, replicaPort] = [await freePort(), await freePort()];
  const common = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const master = processes.start('redis master', redis, [
    '--port',
    String(masterPort),
    ...common,
    '--repl-diskless-sync-delay',
    '0',
    '--dir',
    processes.workDir('bench-redis-'),
  ]);
  const replica = processes.start('redis replica', redis, [
    '--port',
    String(replicaPort),
    ...common,
    '--dir',
    processes.workDir('bench-redis-'),
    '--replicaof',
    '127.0.0.1',
    String(masterPort),
  ]);
  const client = new Redis({ port: replicaPort, host: '127.0.0.1', retryStrategy: (attempt) => (attempt > 100 ? null : 50) });
  // Refused until the replica listens: asked again below.
  client.on('error', () => {});
  try {
    const deadline = Date.now() + 20_000;
    while (!/master_link_status:up/.test(await client.info('replication').catch(() => ''))) {
      if (Date.now() > deadline) throw new Error('the replica did not sync within 20 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    client.disconnect();
  }
  return { url: `redis://127.0.0.1:${masterPort}`, pids: [master.child.pid as number, replica.child.pid as number] };
}

async function unreplicated(service: Service): Promise<string> {
  const metrics = await (await fetch(`${service.url}/metrics`)).text();
  return /^gateway_usage_unreplicated_total (\S+)/m.exec(metrics)?.[1] ?? '?';
}

async function main(): Promise<void> {
  timeLimit(120 + ROUNDS * 2 * (SECONDS + 25) + LATENCY_ROUNDS * 2 * 40);
  requireTool('wrk', 'apt-get install -y wrk');
  const processes = new Processes();
  const workDir = processes.workDir('bench-usage-wait-');
  try {
    const plansFile = writeBenchPlans(workDir);
    const seeded = join(workDir, 'seed');
    const token = await seedOneToken(seeded, plansFile);
    const upstream = await startUpstream(processes);
    const redis = await startRedisPair(processes);
    const pids = [upstream.process.child.pid as number, ...redis.pids];
    const targets: Array<{ name: string; service: Service; url: string }> = [];
    for (const replicas of ['0', '1']) {
      const dataDir = join(workDir, `gateway-${replicas}`);
      cpSync(seeded, dataDir, { recursive: true });
      const name = `gateway role, WAIT ${replicas === '0' ? 'off' : `${replicas} ${WAIT_MS} ms`}`;
      const service = await startGateway(processes, {
        dataDir,
        upstreamUrl: upstream.url,
        plansFile,
        redisUrl: redis.url,
        label: name,
        entry: 'bench/servers/benchGateway.ts',
        env: { BENCH_ROLE: 'gateway', REDIS_USAGE_WAIT_REPLICAS: replicas, REDIS_USAGE_WAIT_MS: WAIT_MS },
      });
      pids.push(service.process.child.pid as number);
      targets.push({ name, service, url: `${service.url}/eth/${token}` });
    }
    for (const t of targets) {
      await checkCall(t.url);
      await wrk(t.url, { seconds: 2, connections: CONNECTIONS });
    }
    const rps = new Map<string, number[]>();
    const cpu = new Map<string, number[]>();
    for (let round = 1; round <= ROUNDS; round++) {
      for (let i = 0; i < targets.length; i++) {
        const t = targets[(i + round - 1) % targets.length] as (typeof targets)[number];
        await waitForIdle(pids);
        const run = await measuredThroughput(t.name, t.url, t.service.process.child.pid as number, { seconds: SECONDS, connections: CONNECTIONS });
        rps.set(t.name, [...(rps.get(t.name) ?? []), run.rps]);
        cpu.set(t.name, [...(cpu.get(t.name) ?? []), run.cpuUsPerRequest]);
        log(
          `round ${round}: ${t.name.padEnd(28)} ${String(Math.round(run.rps)).padStart(6)} req/s ${String(Math.round(run.cpuUsPerRequest)).padStart(4)} µs CPU/req`,
        );
      }
    }
    const latency = new Map<string, Array<{ p50: number; p99: number }>>();
    for (let round = 1; round <= LATENCY_ROUNDS; round++) {
      for (let i = 0; i < targets.length; i++) {
        const t = targets[(i + round - 1) % targets.length] as (typeof targets)[number];
        await waitForIdle(pids);
        await pacedWarmUp(t.url, { rate: 1000 });
        const run = await pacedLatency(t.url, { rate: 1000, seconds: 10 });
        latency.set(t.name, [...(latency.get(t.name) ?? []), { p50: run.p50Ms, p99: run.p99Ms }]);
        log(`latency round ${round}: ${t.name.padEnd(28)} at ${Math.round(run.rate)} req/s: p50 ${run.p50Ms.toFixed(3)} ms, p99 ${run.p99Ms.toFixed(3)} ms`);
      }
    }
    const base = median(rps.get(targets[0]?.name as string) ?? []);
    for (const t of targets) {
      const r = rps.get(t.name) ?? [];
      const l = latency.get(t.name) ?? [];
      log(
        `median: ${t.name.padEnd(28)} ${Math.round(median(r))} req/s (${(median(r) / base).toFixed(3)}× WAIT off; by round ${r.map(Math.round).join(', ')}), ` +
          `${Math.round(median(cpu.get(t.name) ?? []))} µs CPU/req, p50 ${median(l.map((x) => x.p50)).toFixed(3)} ms, p99 ${median(l.map((x) => x.p99)).toFixed(3)} ms; ` +
          `gateway_usage_unreplicated_total ${await unreplicated(t.service)}`,
      );
    }
  } finally {
    await processes.stopAll();
  }
}

runMain(main);
