/**
 * Gateway throughput and added latency (issue 3), against references measured in the same run,
 * all on 127.0.0.1 and in front of the same instant upstream (bench/servers/upstream.ts):
 *   direct       wrk → upstream
 *   nginx        wrk → nginx (plain reverse proxy, one worker, keep-alive upstream) → upstream
 *   bare node    wrk → bench/servers/bareProxy.ts (node:http + undici, nothing else) → upstream
 *   gateway      wrk → the service (embedded stores; then with REDIS_URL) → upstream,
 *                with a valid token of an Unlimited account whose rps is raised (PLANS_CONFIG)
 * Throughput: wrk, one thread, 32 connections, 1 s warm-up then 4 s, with the CPU time the
 * process in front of the upstream spent per request (from /proc: steadier than req/s when
 * other work shares the cores). Latency: about 1,000 req/s from wrk with random think times
 * (bench/lib/load.ts, pacedLatency) for 3 s; added = the same percentile through the proxy − direct.
 *
 *   npx tsx bench/gateway.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type PacedResult, pacedLatency, wrk } from './lib/load.js';
import { cpuSeconds, Processes, requireTool, rssMb, runMain, timeLimit } from './lib/processes.js';
import { emit, type Figure, log, round } from './lib/report.js';
import { checkCall, type Service, seedOneToken, startBareProxy, startGateway, startNginx, startRedis, startUpstream, writeBenchPlans } from './lib/services.js';

const COMMAND = 'npx tsx bench/gateway.ts';
const CONNECTIONS = 32;
const WARMUP_SECONDS = 1;
const SECONDS = 4;
const LATENCY_RATE = 1000;
const LATENCY_SECONDS = 3;

interface Measured {
  name: string;
  rps: number;
  /** CPU time (all threads) the measured process spent per request during the throughput run. */
  cpuUsPerRequest: number;
  latency: PacedResult;
  rssMb: number;
}

/** `service` is the process in front of the upstream (the upstream itself for the direct run). */
async function measure(name: string, url: string, service: Service): Promise<Measured> {
  const pid = service.process.child.pid as number;
  await checkCall(url);
  await wrk(url, { seconds: WARMUP_SECONDS, connections: CONNECTIONS });
  const cpuBefore = cpuSeconds(pid);
  const throughput = await wrk(url, { seconds: SECONDS, connections: CONNECTIONS });
  const cpuUsPerRequest = ((cpuSeconds(pid) - cpuBefore) * 1e6) / throughput.requests;
  if (throughput.failures > 0) throw new Error(`${name}: ${throughput.failures} failed requests under load:\n${throughput.output}`);
  const rss = rssMb(pid);
  const latency = await pacedLatency(url, { rate: LATENCY_RATE, seconds: LATENCY_SECONDS });
  if (latency.failures > 0) throw new Error(`${name}: ${latency.failures} failed requests at ${LATENCY_RATE} req/s`);
  log(
    `${name.padEnd(16)} ${String(Math.round(throughput.requestsPerSecond)).padStart(6)} req/s ${String(Math.round(cpuUsPerRequest)).padStart(5)} µs CPU/req   at ${Math.round(latency.rate)} req/s: p50 ${latency.p50Ms.toFixed(3)} ms, p99 ${latency.p99Ms.toFixed(3)} ms   RSS ${Math.round(rss)} MB`,
  );
  return { name, rps: throughput.requestsPerSecond, cpuUsPerRequest, latency, rssMb: rss };
}

async function main(): Promise<void> {
  timeLimit(120);
  requireTool('wrk', 'apt-get install -y wrk');
  requireTool('nginx', 'apt-get install -y nginx');
  requireTool('redis-server', 'apt-get install -y redis-server');
  const processes = new Processes();
  const workDir = mkdtempSync(join(tmpdir(), 'bench-gateway-'));
  try {
    const plansFile = writeBenchPlans(workDir);
    const dataDir = join(workDir, 'data');
    const token = await seedOneToken(dataDir, plansFile);
    const path = `/eth/${token}`;

    const upstream = await startUpstream(processes);
    const direct = await measure('direct', upstream.url + path, upstream);

    const nginx = await startNginx(processes, Number(new URL(upstream.url).port));
    const viaNginx = await measure('nginx', nginx.url + path, nginx);
    await processes.stop(nginx.process);

    const bare = await startBareProxy(processes, upstream.url);
    const viaBare = await measure('bare node proxy', bare.url + path, bare);
    await processes.stop(bare.process);

    const embedded = await startGateway(processes, { dataDir, upstreamUrl: upstream.url, plansFile, label: 'gateway (embedded)' });
    const viaEmbedded = await measure('gateway embedded', embedded.url + path, embedded);
    await processes.stop(embedded.process, 15_000);

    const redis = await startRedis(processes);
    const withRedis = await startGateway(processes, { dataDir, upstreamUrl: upstream.url, plansFile, redisUrl: redis.url, label: 'gateway (redis)' });
    const viaRedis = await measure('gateway redis', withRedis.url + path, withRedis);
    await processes.stop(withRedis.process, 15_000);

    const method = `wrk -t1 -c${CONNECTIONS}, ${WARMUP_SECONDS} s warm-up then ${SECONDS} s, POST eth_blockNumber (bench/wrk/post.lua) to /eth/<token>; every process on the same 2 cores`;
    const figures: Figure[] = [];
    for (const gw of [viaEmbedded, viaRedis]) {
      const mode = gw === viaEmbedded ? 'embedded' : 'redis';
      figures.push(
        {
          name: `gateway_${mode}_vs_bare_node_throughput`,
          target: '>= 0.9',
          result: round(gw.rps / viaBare.rps),
          unit: '×',
          baseline: `gateway ${Math.round(gw.rps)} req/s ÷ bare Node proxy ${Math.round(viaBare.rps)} req/s`,
          command: COMMAND,
          method,
        },
        {
          name: `gateway_${mode}_vs_nginx_throughput`,
          target: null,
          result: round(gw.rps / viaNginx.rps),
          unit: '×',
          baseline: `gateway ${Math.round(gw.rps)} req/s ÷ nginx ${Math.round(viaNginx.rps)} req/s (direct to upstream ${Math.round(direct.rps)} req/s)`,
          command: COMMAND,
          method,
        },
        {
          name: `gateway_${mode}_cpu_per_request_vs_bare_node`,
          target: null,
          result: round(gw.cpuUsPerRequest / viaBare.cpuUsPerRequest),
          unit: '×',
          baseline: `gateway ${Math.round(gw.cpuUsPerRequest)} µs ÷ bare Node proxy ${Math.round(viaBare.cpuUsPerRequest)} µs of CPU per request (nginx ${Math.round(viaNginx.cpuUsPerRequest)} µs, upstream ${Math.round(direct.cpuUsPerRequest)} µs)`,
          command: COMMAND,
          method: `${method}; CPU time (user + system, all threads) of the process from /proc/<pid>/stat over the measured run ÷ requests served`,
        },
      );
    }
    const latencyMethod = `wrk -t1 -c50 --latency for ${LATENCY_SECONDS} s right after the throughput run, each connection waiting a random 0–100 ms before each request (bench/wrk/paced.lua): about ${LATENCY_RATE} req/s (achieved: direct ${Math.round(direct.latency.rate)}, nginx ${Math.round(viaNginx.latency.rate)}, bare ${Math.round(viaBare.latency.rate)}, embedded ${Math.round(viaEmbedded.latency.rate)}, redis ${Math.round(viaRedis.latency.rate)}); added = the percentile through the proxy − the same percentile direct`;
    for (const m of [viaNginx, viaBare, viaEmbedded, viaRedis]) {
      const key = m.name.replaceAll(' ', '_');
      for (const [p, value, directValue] of [
        ['p50', m.latency.p50Ms, direct.latency.p50Ms],
        ['p99', m.latency.p99Ms, direct.latency.p99Ms],
      ] as const) {
        figures.push({
          name: `added_latency_${p}_${key}`,
          target: null,
          result: round(value - directValue),
          unit: 'ms',
          ratio: round(value / directValue),
          baseline: `${p} ${value.toFixed(3)} ms vs direct ${directValue.toFixed(3)} ms`,
          command: COMMAND,
          method: latencyMethod,
        });
      }
    }
    for (const m of [viaEmbedded, viaRedis]) {
      figures.push({
        name: `rss_after_load_${m.name.replaceAll(' ', '_')}`,
        target: null,
        result: round(m.rssMb),
        unit: 'MB',
        ratio: round(m.rssMb / viaBare.rssMb),
        baseline: `bare Node proxy ${Math.round(viaBare.rssMb)} MB`,
        command: COMMAND,
        method: 'VmRSS of the process right after its throughput run (one token in use)',
      });
    }
    for (const f of figures) emit(f);
  } finally {
    await processes.stopAll();
    rmSync(workDir, { recursive: true, force: true });
  }
}

runMain(main);
