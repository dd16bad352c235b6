/**
 * A quick same-run comparison for development, not a recorded figure: the bare Node proxy and
 * the gateway in the modes asked for, measured in turn for a few rounds (each round in another
 * order), each run printed with its throughput, the CPU per request of the process in front of
 * the upstream, and its ratio to the bare proxy's run of the same round. For a ROLE=all mode it
 * also prints the usage queue's depth right after each run (from /metrics): a gateway that left
 * most of its ingestion for later would look faster than it is. With GATEWAY_CPU_PROF=<dir>, each gateway and the bare proxy write a CPU
 * profile there when it stops (bench/profile-summary.ts reads it). bench/gateway.ts is what
 * records the figures. With BASELINE_REV=<git revision>, each mode also runs as that revision
 * built (bench/lib/services.ts buildRevision) and is measured in turn with the working tree's:
 * a change's effect in one run, where runs minutes apart differ by more than most changes.
 * With BASELINE_NODE_MODULES=<dir> too, that revision runs on those dependencies: a
 * dependency's version measured against another in one run.
 * With MEASURE=latency, each round measures latency instead, as bench/gateway.ts does (about
 * 1,000 req/s from wrk after a 3 s warm-up, each target with the others stopped; OWN_CORE=1 puts the measured
 * event loop alone on CPU 1), direct to the upstream first, and prints each target's added p50
 * and p99 over that round's direct run. With NODE_FLAGS="<flags>" the working tree's gateways
 * run with these node flags too (beside npm start's), so with BASELINE_REV=HEAD a flag is
 * measured against the same code without it. With GATEWAY_ALLOC_PROBE=<dir> and MEASURE=latency,
 * each latency run also prints what the process allocated per request and its collections per
 * 1,000 requests (bench/servers/allocationProbe.ts): nearly the same from run to run, so it
 * shows a change of a few hundred bytes per call where latency and throughput cannot.
 * With WITHOUT="<features>;<features>;…" (modes role and embedded), each also runs once per group with
 * those features taken out (bench/servers/withoutFeatures.ts: usage, metrics, limits, headers,
 * auth; e.g. WITHOUT="usage;headers;auth,headers,usage,metrics"): what each costs a call,
 * against the same build with it. With BARE_HEADERS=1 a second bare proxy also sends the seven
 * headers the gateway adds: what writing them costs Node alone. With VIA=bearer the gateways
 * are called with the token in an Authorization header (POST /eth) instead of in the path.
 * With BODY=varied every call is an eth_getBalance of another address (bench/wrk/post.lua and
 * paced.lua, WRK_BODY=varied) instead of one identical eth_blockNumber body from every connection:
 * no two calls in flight are identical, so the gateway's coalescing merges none and each run
 * measures the proxied (non-cached, non-shared) path a call takes.
 * With THREADS=1 each throughput run also prints the CPU per request of the process's threads
 * (the event loop first, then the busiest: the storage thread, LevelDB's compaction thread,
 * libuv's pool and V8's helpers have no names to tell them apart), and the end of the run what
 * each LevelDB store of a ROLE=all gateway wrote in compactions (from its LOG).
 *
 *   npx tsx bench/compare-gateway.ts [role] [embedded] [redis]   (default: role; ROUNDS=3, SECONDS=3, or 10 with MEASURE=latency)
 */
import { cpSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { compactionOutput } from './lib/leveldb.js';
import { measuredThroughput, pacedLatency, pacedWarmUp, type Throughput, wrk } from './lib/load.js';
import { measureAlone, Processes, requireTool, runMain, timeLimit, waitForIdle } from './lib/processes.js';
import { log, median } from './lib/report.js';
import {
  allocationWindow,
  buildRevision,
  checkCall,
  type Service,
  seedOneToken,
  startBareProxy,
  startGateway,
  startRedis,
  startUpstream,
  writeBenchPlans,
} from './lib/services.js';
import type { AllocationWindow } from './servers/allocationProbe.js';
import { parseFeatures } from './servers/withoutFeatures.js';

const MODES = ['role', 'embedded', 'redis'] as const;
type Mode = (typeof MODES)[number];

const LATENCY = process.env.MEASURE === 'latency';
const OWN_CORE = process.env.OWN_CORE === '1';
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const SECONDS = Number(process.env.SECONDS ?? (LATENCY ? 10 : 3));
const CONNECTIONS = 32;
/** Node flags for the working tree's gateways only (NODE_FLAGS, space-separated). */
const FLAGS_UNDER_TEST = (process.env.NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
const LATENCY_RATE = 1000;
/** GATEWAY_ALLOC_PROBE=<dir> (with MEASURE=latency): each latency run also reports what the process allocated per request (bench/servers/allocationProbe.ts). */
const PROBE = Boolean(process.env.GATEWAY_ALLOC_PROBE);
/**
 * VIA=bearer: the token goes in an Authorization header (bench/wrk/post.lua reads
 * WRK_AUTHORIZATION), not in the path; the bare proxy gets the same header and ignores it.
 */
const BEARER = process.env.VIA === 'bearer';
/** BODY=varied: a distinct call each request (WRK_BODY, read by bench/wrk/post.lua and paced.lua); BODY=same (default): one eth_blockNumber body. */
const BODY = process.env.BODY ?? 'same';
const NAME_WIDTH = process.env.WITHOUT ? 44 : process.env.BASELINE_REV ? 30 : 20;
/** WITHOUT="usage;limits,headers": the role and the embedded gateway once more per group, with those features taken out (checked here, before anything starts). */
const WITHOUT = (process.env.WITHOUT ?? '')
  .split(';')
  .map((group) => parseFeatures(group).join(','))
  .filter((group) => group !== '');

interface Target {
  name: string;
  url: string;
  service: Service;
  /** ROLE=all: it ingests its own usage, whose backlog is printed after each run. */
  ingests: boolean;
  /** Its Redis: kept running while it is measured alone. */
  needs: number[];
  /** Its DATA_DIR, for a gateway. */
  dataDir?: string;
}

const THREADS = process.env.THREADS === '1';
/** Threads named one by one in a THREADS=1 line (after the event loop); the rest are summed. */
const THREADS_SHOWN = 3;

function describeThreads(run: Throughput): string {
  const [main, ...others] = run.threadUsPerRequest;
  const shown = others.slice(0, THREADS_SHOWN).map((t) => t.us.toFixed(1));
  const rest = others.slice(THREADS_SHOWN);
  const restUs = rest.reduce((sum, t) => sum + t.us, 0);
  return `; threads µs/req: event loop ${main?.main ? main.us.toFixed(1) : '?'}, others ${shown.join(', ')}${rest.length > 0 ? `, ${rest.length} more ${restUs.toFixed(1)}` : ''}`;
}

async function queueDepth(t: Target): Promise<string> {
  const metrics = await (await fetch(`${new URL(t.url).origin}/metrics`)).text();
  return /^gateway_usage_queue_depth (\d+)/m.exec(metrics)?.[1] ?? '?';
}

async function main(): Promise<void> {
  timeLimit(180 + ROUNDS * 7 * (SECONDS + 25));
  requireTool('wrk', 'apt-get install -y wrk');
  const asked = process.argv.slice(2);
  const unknown = asked.filter((m) => !MODES.includes(m as Mode));
  if (unknown.length > 0) throw new Error(`unknown mode(s) ${unknown.join(', ')}: choose from ${MODES.join(', ')}`);
  const modes = (asked.length > 0 ? asked : ['role']) as Mode[];
  if (modes.some((m) => m !== 'embedded')) requireTool('redis-server', 'apt-get install -y redis-server');
  if (BODY !== 'same' && BODY !== 'varied') throw new Error(`unknown BODY=${BODY}: choose from same, varied`);
  if (BODY === 'varied') process.env.WRK_BODY = 'varied';

  if (PROBE) mkdirSync(process.env.GATEWAY_ALLOC_PROBE as string, { recursive: true });
  const processes = new Processes();
  const workDir = processes.workDir('bench-compare-');
  try {
    const plansFile = writeBenchPlans(workDir);
    const seeded = join(workDir, 'seed');
    const token = await seedOneToken(seeded, plansFile);
    if (BEARER) process.env.WRK_AUTHORIZATION = `Bearer ${token}`;
    const gatewayPath = BEARER ? '/eth' : `/eth/${token}`;
    const upstream = await startUpstream(processes);
    const bare = await startBareProxy(processes, upstream.url);
    const targets: Target[] = [{ name: 'bare node proxy', url: `${bare.url}/eth/${token}`, service: bare, ingests: false, needs: [] }];
    const pids = [upstream.process.child.pid as number, bare.process.child.pid as number];
    if (process.env.BARE_HEADERS === '1') {
      const withHeaders = await startBareProxy(processes, upstream.url, { withGatewayHeaders: true });
      targets.push({ name: 'bare proxy + headers', url: `${withHeaders.url}/eth/${token}`, service: withHeaders, ingests: false, needs: [] });
      pids.push(withHeaders.process.child.pid as number);
    }
    const baselineRev = process.env.BASELINE_REV;
    type Variant = { suffix: string; buildDir?: string; without?: string };
    const builds: Variant[] = [{ suffix: '' }];
    if (baselineRev) builds.push({ suffix: ` @${baselineRev}`, buildDir: await buildRevision(baselineRev) });
    for (const mode of modes) {
      const variants: Variant[] = mode === 'redis' ? builds : [...builds, ...WITHOUT.map((without) => ({ suffix: ` -${without}`, without }))];
      for (const [index, { suffix, buildDir, without }] of variants.entries()) {
        // LevelDB lets one process open a directory: each gateway gets its own copy.
        const dataDir = join(workDir, `${mode}-${index}`);
        cpSync(seeded, dataDir, { recursive: true });
        const redis = mode === 'embedded' ? null : await startRedis(processes);
        if (redis) pids.push(redis.process.child.pid as number);
        const name = `gateway ${mode}${suffix}`;
        const service = await startGateway(processes, {
          dataDir,
          upstreamUrl: upstream.url,
          plansFile,
          redisUrl: redis?.url,
          label: name,
          buildDir,
          nodeFlags: buildDir ? [] : FLAGS_UNDER_TEST,
          // The role, and a gateway with features out, run from the bench's entry; the embedded gateway as is from src/main.ts.
          entry: mode === 'role' || without ? 'bench/servers/benchGateway.ts' : undefined,
          env: { ...(mode === 'role' ? { BENCH_ROLE: 'gateway' } : {}), ...(without ? { BENCH_WITHOUT: without } : {}) },
        });
        pids.push(service.process.child.pid as number);
        targets.push({
          name,
          url: `${service.url}${gatewayPath}`,
          service,
          ingests: mode !== 'role',
          needs: redis ? [redis.process.child.pid as number] : [],
          dataDir,
        });
      }
    }
    for (const t of targets) {
      await checkCall(t.url, process.env.WRK_AUTHORIZATION);
      await wrk(t.url, { seconds: 2, connections: CONNECTIONS });
    }
    if (LATENCY) {
      await compareLatency({ name: 'direct', url: `${upstream.url}/eth/${token}`, service: upstream, ingests: false, needs: [] }, targets, pids);
      return;
    }
    const ratios = new Map<string, Array<{ rps: number; cpu: number }>>();
    for (let round = 1; round <= ROUNDS; round++) {
      // Each round in another order (as bench/gateway.ts does): no target is always measured first or right after another.
      const runs = new Map<Target, { run: Throughput; backlog: string }>();
      for (let i = 0; i < targets.length; i++) {
        const t = targets[(i + round - 1) % targets.length] as Target;
        await waitForIdle(pids);
        const run = await measuredThroughput(t.name, t.url, t.service.process.child.pid as number, { seconds: SECONDS, connections: CONNECTIONS });
        runs.set(t, { run, backlog: t.ingests ? `, usage queue ${await queueDepth(t)} records behind` : '' });
      }
      const baseline = runs.get(targets[0] as Target)?.run as Throughput;
      for (const t of targets) {
        const { run, backlog } = runs.get(t) as { run: Throughput; backlog: string };
        ratios.set(t.name, [...(ratios.get(t.name) ?? []), { rps: run.rps / baseline.rps, cpu: run.cpuUsPerRequest / baseline.cpuUsPerRequest }]);
        const threads = THREADS ? describeThreads(run) : '';
        log(
          `round ${round}: ${t.name.padEnd(NAME_WIDTH)} ${String(Math.round(run.rps)).padStart(6)} req/s ${String(Math.round(run.cpuUsPerRequest)).padStart(4)} µs CPU/req, ${(run.rps / baseline.rps).toFixed(3)}× the bare proxy${backlog}${threads}`,
        );
      }
    }
    for (const t of targets.slice(1)) {
      const r = ratios.get(t.name) ?? [];
      log(
        `median of ${r.length} rounds: ${t.name.padEnd(NAME_WIDTH)} ${median(r.map((x) => x.rps)).toFixed(3)}× the bare proxy's throughput, ${median(r.map((x) => x.cpu)).toFixed(3)}× its CPU per request`,
      );
    }
    if (THREADS) for (const t of targets) if (t.ingests && t.dataDir) log(`${t.name}: LevelDB compaction output so far: ${compactionOutput(t.dataDir)}`);
  } finally {
    await processes.stopAll();
  }
}

/** MEASURE=latency: each round, direct and then every target alone at ~1,000 req/s; added = its percentile − direct's in the round. */
async function compareLatency(direct: Target, targets: Target[], pids: number[]): Promise<void> {
  const upstreamPid = direct.service.process.child.pid as number;
  const added = new Map<string, Array<{ p50: number; p99: number; allocation: AllocationRate | null }>>();
  for (let round = 1; round <= ROUNDS; round++) {
    let baseline: { p50Ms: number; p99Ms: number } | null = null;
    for (const t of [direct, ...targets]) {
      const pid = t.service.process.child.pid as number;
      const run = await measureAlone([pid, upstreamPid, ...t.needs], pids, OWN_CORE, async () => {
        await waitForIdle(pids);
        const cpus = OWN_CORE ? '0' : undefined;
        await pacedWarmUp(t.url, { rate: LATENCY_RATE, cpus });
        const probed = PROBE && t !== direct;
        if (probed) await allocationWindow(t.service);
        const latency = await pacedLatency(t.url, { rate: LATENCY_RATE, seconds: SECONDS, cpus });
        return { ...latency, allocation: probed ? perThousand(await allocationWindow(t.service)) : null };
      });
      if (run.failures > 0) throw new Error(`${t.name}: ${run.failures} failed requests (${run.failureDetail})`);
      baseline ??= run;
      let extra = t === direct ? '' : `, added p50 ${(run.p50Ms - baseline.p50Ms).toFixed(3)} ms, p99 ${(run.p99Ms - baseline.p99Ms).toFixed(2)} ms`;
      if (run.allocation) extra += `; ${describeAllocation(run.allocation)}`;
      if (t !== direct)
        added.set(t.name, [...(added.get(t.name) ?? []), { p50: run.p50Ms - baseline.p50Ms, p99: run.p99Ms - baseline.p99Ms, allocation: run.allocation }]);
      log(
        `round ${round}: ${t.name.padEnd(NAME_WIDTH)} at ${Math.round(run.rate)} req/s: p50 ${run.p50Ms.toFixed(3)} ms, p99 ${run.p99Ms.toFixed(3)} ms${extra}`,
      );
    }
  }
  for (const t of targets) {
    const r = added.get(t.name) ?? [];
    const allocations = r.flatMap((x) => (x.allocation ? [x.allocation] : []));
    const allocation =
      allocations.length === 0
        ? ''
        : `; ${describeAllocation({
            kbPerRequest: median(allocations.map((a) => a.kbPerRequest)),
            scavenges: median(allocations.map((a) => a.scavenges)),
            otherCollections: median(allocations.map((a) => a.otherCollections)),
            gcMs: median(allocations.map((a) => a.gcMs)),
          })}`;
    log(
      `median of ${r.length} rounds${OWN_CORE ? ' (event loop on its own core)' : ''}: ${t.name.padEnd(NAME_WIDTH)} added p50 ${median(r.map((x) => x.p50)).toFixed(3)} ms, p99 ${median(r.map((x) => x.p99)).toFixed(2)} ms (by round: ${r.map((x) => x.p99.toFixed(2)).join(', ')})${allocation}`,
    );
  }
}

/** A probe window per request: KB allocated, and per 1,000 requests the collections and their pauses. */
interface AllocationRate {
  kbPerRequest: number;
  scavenges: number;
  otherCollections: number;
  gcMs: number;
}

function perThousand(w: AllocationWindow): AllocationRate {
  const per = (x: number): number => (1000 * x) / Math.max(1, w.requests);
  return {
    kbPerRequest: w.allocatedBytes / 1024 / Math.max(1, w.requests),
    scavenges: per(w.scavenges),
    otherCollections: per(w.otherCollections),
    gcMs: per(w.gcPauseMs),
  };
}

const describeAllocation = (a: AllocationRate): string =>
  `allocated ${a.kbPerRequest.toFixed(2)} KB/request; per 1,000 requests ${a.scavenges.toFixed(2)} scavenges, ${a.otherCollections.toFixed(2)} other collections, ${a.gcMs.toFixed(1)} ms of GC pauses`;

runMain(main);
