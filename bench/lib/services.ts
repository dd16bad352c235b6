import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { PRODUCTION_NODE_ENV, PRODUCTION_NODE_FLAGS } from './productionEnv.js';
import { connect } from 'node:net';
import { loadConfig } from '../../src/config.js';
import { openRuntime } from '../../src/runtime.js';
import type { AllocationWindow } from '../servers/allocationProbe.js';
import { freePort, type Processes, requireTool, ROOT, type Started, waitForHttp } from './processes.js';

/** The processes the gateway benchmarks put on 127.0.0.1, each started through `Processes` so it is stopped. */

export interface Service {
  url: string;
  process: Started;
}

async function waitForPort(port: number, p: Started, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const open = await new Promise<boolean>((done) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        done(true);
      });
      socket.once('error', () => done(false));
    });
    if (open) return;
    if (p.child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${p.label} is not listening on ${port}:\n${p.output()}`);
}

/** Where buildServers compiles to: under the project (its node_modules and package.json apply), in dist/ (git-ignored, not linted, no test file vitest runs). */
const BUILD_DIR = join(ROOT, 'dist', 'bench-build');
let building: Promise<void> | null = null;

/**
 * Compiles the project (src and the bench's own servers, with source maps) once per benchmark
 * process: the gateway is measured as production runs it (`npm start` and the image run
 * `node dist/src/main.js`), and the servers it is compared with run the same way. Under tsx a
 * process also carries the loader's hooks thread and the transformed sources: ~30 MB more RSS,
 * measured on an idle ROLE=all process (134 vs 103 MB).
 */
function buildServers(): Promise<void> {
  building ??= new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'tsconfig.json'), '--outDir', BUILD_DIR, '--sourceMap'],
      { cwd: ROOT },
      (error, stdout) => {
        if (error) reject(new Error(`tsc failed:\n${stdout}`));
        else resolve();
      },
    );
  });
  return building;
}

/** Node's arguments to run `file` (a .ts path from the project root) compiled, after `nodeFlags`; from `buildDir` when given (buildRevision). */
async function builtEntryArgs(file: string, nodeFlags: string[] = [], buildDir?: string): Promise<string[]> {
  if (buildDir === undefined) await buildServers();
  return [...nodeFlags, join(buildDir ?? BUILD_DIR, file.replace(/\.ts$/, '.js'))];
}

const revisionBuilds = new Map<string, Promise<string>>();

/**
 * Compiles a git revision of the project (its committed tree, with this checkout's
 * node_modules, or BASELINE_NODE_MODULES=<dir> to A/B a dependency) into dist/bench-rev/<rev>/,
 * and answers its build directory: a same-run A/B of a change against the code before it
 * (bench/compare-gateway.ts, BASELINE_REV).
 */
export function buildRevision(rev: string): Promise<string> {
  let build = revisionBuilds.get(rev);
  if (!build) {
    build = (async () => {
      const sha = (await run('git', ['rev-parse', '--verify', `${rev}^{commit}`], ROOT)).trim();
      const tree = join(ROOT, 'dist', 'bench-rev', sha.slice(0, 12));
      rmSync(tree, { recursive: true, force: true });
      mkdirSync(tree, { recursive: true });
      await run('sh', ['-c', `git archive ${sha} | tar -x -C ${JSON.stringify(tree)}`], ROOT);
      symlinkSync(process.env.BASELINE_NODE_MODULES ?? join(ROOT, 'node_modules'), join(tree, 'node_modules'), 'dir');
      const out = join(tree, 'build');
      await run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(tree, 'tsconfig.json'), '--outDir', out], tree);
      return out;
    })();
    revisionBuilds.set(rev, build);
  }
  return build;
}

function run(command: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(' ')} failed:\n${stdout}${stderr}`));
      else resolve(stdout);
    });
  });
}

/** GATEWAY_CPU_PROF=<dir>: the gateways and the bare proxy write a V8 CPU profile there as they exit. */
const cpuProfileFlags = (): string[] =>
  process.env.GATEWAY_CPU_PROF
    ? [
        '--cpu-prof',
        `--cpu-prof-dir=${process.env.GATEWAY_CPU_PROF}`,
        ...(process.env.GATEWAY_CPU_PROF_INTERVAL ? [`--cpu-prof-interval=${process.env.GATEWAY_CPU_PROF_INTERVAL}`] : []),
      ]
    : [];

/**
 * GATEWAY_ALLOC_PROBE=<dir>: the gateways and the bare proxy load bench/servers/allocationProbe.ts
 * (the working tree's build, whatever revision the gateway is), which writes what each allocated
 * per request to <dir>/<pid>.json on every SIGUSR2 (allocationWindow).
 */
const allocationProbeFlags = async (): Promise<string[]> => {
  if (!process.env.GATEWAY_ALLOC_PROBE) return [];
  await buildServers();
  return [`--import=${join(BUILD_DIR, 'bench', 'servers', 'allocationProbe.js')}`];
};

/** The probe's window since the last call (or since the process started), ended and written by a SIGUSR2. */
export async function allocationWindow(service: Service): Promise<AllocationWindow> {
  const dir = process.env.GATEWAY_ALLOC_PROBE;
  if (!dir) throw new Error('GATEWAY_ALLOC_PROBE is not set');
  const pid = service.process.child.pid as number;
  const file = join(dir, `${pid}.json`);
  rmSync(file, { force: true });
  process.kill(pid, 'SIGUSR2');
  for (let waited = 0; waited < 5000; waited += 20) {
    await new Promise((r) => setTimeout(r, 20));
    try {
      return JSON.parse(readFileSync(file, 'utf8')) as AllocationWindow;
    } catch {
      // not written yet (or half written): wait
    }
  }
  throw new Error(`${service.process.label} wrote no allocation window (is it running with the probe?)`);
}

export async function startUpstream(processes: Processes): Promise<Service> {
  const port = await freePort();
  const p = processes.start('upstream', process.execPath, [...(await builtEntryArgs('bench/servers/upstream.ts')), String(port)], {
    env: { NODE_ENV: 'production' },
  });
  await waitForPort(port, p);
  return { url: `http://127.0.0.1:${port}`, process: p };
}

/** `withGatewayHeaders`: its answers also carry the seven headers the gateway adds (see bareProxy.ts). */
export async function startBareProxy(processes: Processes, upstreamUrl: string, options: { withGatewayHeaders?: boolean } = {}): Promise<Service> {
  const port = await freePort();
  const args = [String(port), upstreamUrl, ...(options.withGatewayHeaders ? ['with-gateway-headers'] : [])];
  const label = options.withGatewayHeaders ? 'bare Node proxy with headers' : 'bare Node proxy';
  const p = processes.start(
    label,
    process.execPath,
    [...(await builtEntryArgs('bench/servers/bareProxy.ts', [...cpuProfileFlags(), ...(await allocationProbeFlags())])), ...args],
    {
      env: { NODE_ENV: 'production' },
    },
  );
  await waitForPort(port, p);
  return { url: `http://127.0.0.1:${port}`, process: p };
}

export async function startNginx(processes: Processes, upstreamPort: number): Promise<Service> {
  const nginx = requireTool('nginx', 'apt-get install -y nginx');
  const prefix = processes.workDir('bench-nginx-');
  for (const d of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(prefix, d));
  const port = await freePort();
  const conf = readFileSync(join(ROOT, 'bench', 'nginx.conf.template'), 'utf8')
    .replaceAll('{{PREFIX}}', prefix)
    .replaceAll('{{LISTEN_PORT}}', String(port))
    .replaceAll('{{UPSTREAM_PORT}}', String(upstreamPort));
  writeFileSync(join(prefix, 'nginx.conf'), conf);
  const p = processes.start('nginx', nginx, ['-p', prefix, '-c', join(prefix, 'nginx.conf'), '-e', 'stderr']);
  await waitForPort(port, p);
  return { url: `http://127.0.0.1:${port}`, process: p };
}

export async function startRedis(processes: Processes): Promise<Service> {
  const redis = requireTool('redis-server', 'apt-get install -y redis-server');
  const port = await freePort();
  const dir = processes.workDir('bench-redis-');
  const p = processes.start('redis-server', redis, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]);
  await waitForPort(port, p);
  return { url: `redis://127.0.0.1:${port}`, process: p };
}

/**
 * The environment of a runtime a benchmark opens in its own process: embedded stores under
 * `dataDir`, no devnet. CHAINS_CONFIG passes through, for a run from a build (where the default
 * chain config path does not resolve).
 */
export function embeddedEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATA_DIR: dataDir,
    LOCAL_DEVNET: 'off',
    LOG_LEVEL: 'warn',
    ...(process.env.CHAINS_CONFIG ? { CHAINS_CONFIG: process.env.CHAINS_CONFIG } : {}),
    ...extra,
  };
}

/** Rate limits raised so nothing is refused: the benchmark measures the path a call takes, not the 429s. */
export function writeBenchPlans(dir: string): string {
  const file = join(dir, 'plans.json');
  writeFileSync(file, JSON.stringify({ unlimited: { rps: 10_000_000, monthly_requests: null } }));
  return file;
}

/** An Unlimited account with one token, written through the commands into `dataDir`. */
export async function seedOneToken(dataDir: string, plansFile: string): Promise<string> {
  const runtime = await openRuntime(loadConfig(embeddedEnv(dataDir, { PLANS_CONFIG: plansFile })));
  try {
    await runtime.projector?.start();
    const { accountId } = await runtime.commands.signUp(`bench-${randomUUID()}@example.com`, 'correct horse battery');
    await runtime.commands.changePlan(accountId, 'unlimited');
    const { token, position } = await runtime.commands.createApiToken(accountId, { name: 'bench' });
    await runtime.projector?.waitFor(position);
    return token;
  } finally {
    await runtime.close();
  }
}

export interface GatewayOptions {
  dataDir: string;
  upstreamUrl: string;
  plansFile: string;
  redisUrl?: string;
  label?: string;
  /** Another TypeScript entry than src/main.ts (bench/servers/warmGateway.ts). */
  entry?: string;
  /** A build of another revision (buildRevision); the working tree's by default. */
  buildDir?: string;
  nodeFlags?: string[];
  env?: Record<string, string>;
}

/**
 * The whole service (ROLE=all: ROLE=gateway alone needs EventStoreDB and MongoDB) as its own
 * process, so its CPU and memory are its own, compiled (see buildServers). GATEWAY_CPU_PROF=<dir>
 * writes a V8 CPU profile there on exit (bench/profile-summary.ts maps it to TypeScript lines).
 */
export async function startGateway(processes: Processes, options: GatewayOptions): Promise<Service> {
  const port = await freePort();
  const flags = [...PRODUCTION_NODE_FLAGS, ...(options.nodeFlags ?? []), ...cpuProfileFlags(), ...(await allocationProbeFlags())];
  const args = await builtEntryArgs(options.entry ?? 'src/main.ts', flags, options.buildDir);
  const p = processes.start(options.label ?? 'gateway', process.execPath, args, {
    env: {
      ...PRODUCTION_NODE_ENV,
      NODE_ENV: 'production',
      DATA_DIR: options.dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOCAL_DEVNET: 'off',
      CHAINS_CONFIG: join(ROOT, 'config', 'chains.json'),
      UPSTREAM_ETH: options.upstreamUrl,
      PLANS_CONFIG: options.plansFile,
      LOG_LEVEL: 'warn',
      REDIS_URL: options.redisUrl,
      EVENTSTORE_URL: undefined,
      MONGODB_URL: undefined,
      ...options.env,
    },
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/readyz`, p, 60_000);
  return { url, process: p };
}

/** One call through a service; fails unless it answers 200 with the upstream's result. */
export async function checkCall(url: string, authorization?: string): Promise<void> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
    body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}',
  });
  const text = await res.text();
  if (res.status !== 200 || !text.includes('"result"')) throw new Error(`${url} answered ${res.status}: ${text.slice(0, 300)}`);
}
