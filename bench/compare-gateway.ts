/**
 * A quick same-run comparison for development, not a recorded figure: the bare Node proxy and
 * the gateway in the modes asked for, measured in turn for a few rounds, each run printed with
 * its throughput, the CPU per request of the process in front of the upstream, and its ratio to
 * the bare proxy's run of the same round. For a ROLE=all mode it also prints the usage queue's
 * depth right after each run (from /metrics): a gateway that left most of its ingestion for
 * later would look faster than it is. With GATEWAY_CPU_PROF=<dir>, each gateway and the bare proxy write a CPU
 * profile there when it stops (bench/profile-summary.ts reads it). bench/gateway.ts is what
 * records the figures. With BASELINE_REV=<git revision>, each mode also runs as that revision
 * built (bench/lib/services.ts buildRevision) and is measured in turn with the working tree's:
 * a change's effect in one run, where runs minutes apart differ by more than most changes.
 *
 *   npx tsx bench/compare-gateway.ts [role] [embedded] [redis]   (default: role; ROUNDS=3, SECONDS=3)
 */
import { cpSync } from 'node:fs';
import { join } from 'node:path';
import { measuredThroughput, type Throughput, wrk } from './lib/load.js';
import { Processes, requireTool, runMain, timeLimit, waitForIdle } from './lib/processes.js';
import { log } from './lib/report.js';
import { buildRevision, checkCall, type Service, seedOneToken, startBareProxy, startGateway, startRedis, startUpstream, writeBenchPlans } from './lib/services.js';

const MODES = ['role', 'embedded', 'redis'] as const;
type Mode = (typeof MODES)[number];

const ROUNDS = Number(process.env.ROUNDS ?? 3);
const SECONDS = Number(process.env.SECONDS ?? 3);
const CONNECTIONS = 32;

interface Target {
  name: string;
  url: string;
  service: Service;
  /** ROLE=all: it ingests its own usage, whose backlog is printed after each run. */
  ingests: boolean;
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

  const processes = new Processes();
  const workDir = processes.workDir('bench-compare-');
  try {
    const plansFile = writeBenchPlans(workDir);
    const seeded = join(workDir, 'seed');
    const token = await seedOneToken(seeded, plansFile);
    const upstream = await startUpstream(processes);
    const bare = await startBareProxy(processes, upstream.url);
    const targets: Target[] = [{ name: 'bare node proxy', url: `${bare.url}/eth/${token}`, service: bare, ingests: false }];
    const pids = [upstream.process.child.pid as number, bare.process.child.pid as number];
    const baselineRev = process.env.BASELINE_REV;
    const builds: Array<{ suffix: string; buildDir?: string }> = [{ suffix: '' }];
    if (baselineRev) builds.push({ suffix: ` @${baselineRev}`, buildDir: await buildRevision(baselineRev) });
    for (const mode of modes) {
      for (const { suffix, buildDir } of builds) {
        // LevelDB lets one process open a directory: each gateway gets its own copy.
        const dataDir = join(workDir, `${mode}${buildDir ? '-baseline' : ''}`);
        cpSync(seeded, dataDir, { recursive: true });
        const redis = mode === 'embedded' ? null : await startRedis(processes);
        if (redis) pids.push(redis.process.child.pid as number);
        const name = `gateway ${mode}${suffix}`;
        const service = await startGateway(processes, {
          dataDir, upstreamUrl: upstream.url, plansFile, redisUrl: redis?.url, label: name, buildDir,
          entry: mode === 'role' ? 'bench/servers/gatewayRole.ts' : undefined,
        });
        pids.push(service.process.child.pid as number);
        targets.push({ name, url: `${service.url}/eth/${token}`, service, ingests: mode !== 'role' });
      }
    }
    for (const t of targets) {
      await checkCall(t.url);
      await wrk(t.url, { seconds: 2, connections: CONNECTIONS });
    }
    const ratios = new Map<string, Array<{ rps: number; cpu: number }>>();
    for (let round = 1; round <= ROUNDS; round++) {
      let baseline: Throughput | null = null;
      for (const t of targets) {
        await waitForIdle(pids);
        const run = await measuredThroughput(t.name, t.url, t.service.process.child.pid as number, { seconds: SECONDS, connections: CONNECTIONS });
        baseline ??= run;
        ratios.set(t.name, [...(ratios.get(t.name) ?? []), { rps: run.rps / baseline.rps, cpu: run.cpuUsPerRequest / baseline.cpuUsPerRequest }]);
        const backlog = t.ingests ? `, usage queue ${await queueDepth(t)} records behind` : '';
        log(`round ${round}: ${t.name.padEnd(process.env.BASELINE_REV ? 30 : 16)} ${String(Math.round(run.rps)).padStart(6)} req/s ${String(Math.round(run.cpuUsPerRequest)).padStart(4)} µs CPU/req, ${(run.rps / baseline.rps).toFixed(3)}× the bare proxy${backlog}`);
      }
    }
    const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
    for (const t of targets.slice(1)) {
      const r = ratios.get(t.name) ?? [];
      log(`median of ${r.length} rounds: ${t.name.padEnd(process.env.BASELINE_REV ? 30 : 16)} ${median(r.map((x) => x.rps)).toFixed(3)}× the bare proxy's throughput, ${median(r.map((x) => x.cpu)).toFixed(3)}× its CPU per request`);
    }
  } finally {
    await processes.stopAll();
  }
}

runMain(main);
