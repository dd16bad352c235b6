import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { log } from './report.js';

/** The repository root (bench/lib/ is two levels down). */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

export class MissingToolError extends Error {
  override name = 'MissingToolError';
}

/** Fails with the install command when a tool the benchmark needs is not on PATH (benchmarks install nothing). */
export function requireTool(tool: string, install: string): string {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, tool);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  throw new MissingToolError(`"${tool}" is not installed; install it with: ${install}`);
}

export interface Started {
  child: ChildProcess;
  label: string;
  /** Output kept for error messages (the last 64 KiB). */
  output(): string;
  /** Resolves with the exit code (or signal) once the process ended. */
  exited: Promise<number | string>;
}

/**
 * Every process a benchmark starts goes through here, so it is stopped on success, on failure,
 * on Ctrl-C and on the time limit alike.
 */
export class Processes {
  private readonly running = new Set<Started>();
  private readonly workDirs: string[] = [];

  constructor() {
    const killAll = (): void => {
      for (const p of this.running) p.child.kill('SIGKILL');
      for (const dir of this.workDirs) rmSync(dir, { recursive: true, force: true });
    };
    process.on('exit', killAll);
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.on(signal, () => {
        killAll();
        process.exit(130);
      });
    }
  }

  start(label: string, command: string, args: string[], options: { env?: Record<string, string | undefined>; cwd?: string } = {}): Started {
    const child = spawn(command, args, {
      cwd: options.cwd ?? ROOT,
      env: { ...process.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const keep = (chunk: Buffer): void => {
      output = (output + chunk.toString('utf8')).slice(-65_536);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    const exited = new Promise<number | string>((done) => {
      child.once('exit', (code, signal) => done(code ?? signal ?? 'unknown'));
      child.once('error', (error) => {
        output += `\n${error.message}`;
        done('spawn-error');
      });
    });
    const started: Started = { child, label, output: () => output, exited };
    this.running.add(started);
    void exited.then(() => this.running.delete(started));
    return started;
  }

  /** A working directory for a process of this set (redis-server's, nginx's), deleted when the script exits, however it exits. */
  workDir(prefix: string): string {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    this.workDirs.push(dir);
    return dir;
  }

  /** SIGTERM (so a gateway flushes and closes its stores), SIGKILL after `graceMs`. */
  async stop(p: Started, graceMs = 5000): Promise<void> {
    if (!this.running.has(p)) return;
    p.child.kill('SIGTERM');
    const timer = setTimeout(() => p.child.kill('SIGKILL'), graceMs);
    await p.exited;
    clearTimeout(timer);
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.running].map((p) => this.stop(p)));
  }
}

export async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => done(port));
    });
  });
}

/** Polls `url` until it answers `status`; fails early when the process died, with its output. */
export async function waitForHttp(url: string, p: Started | null, timeoutMs = 30_000, status = 200): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let dead = false;
  void p?.exited.then(() => {
    dead = true;
  });
  while (Date.now() < deadline) {
    if (dead) throw new Error(`${p?.label} exited before it was ready:\n${p?.output()}`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === status) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer ${status} within ${timeoutMs} ms${p ? `:\n${p.output()}` : ''}`);
}

/** Resident set size of a process in MB, from /proc (Linux). */
export function rssMb(pid: number, field: 'VmRSS' | 'RssAnon' | 'RssFile' = 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status);
  if (!m) throw new Error(`no ${field} for pid ${pid}`);
  return Number(m[1]) / 1024;
}

/** Resident MB of a process's memory mappings whose file path passes `test`, from /proc/<pid>/smaps (Linux). */
export function mappedRssMb(pid: number, test: (path: string) => boolean): number {
  let kb = 0;
  let counting = false;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    // A mapping's header: `<range> <perms> <offset> <dev> <inode> [path]`; its fields follow as `Name: value kB`.
    const header = /^[0-9a-f]+-[0-9a-f]+\s/.exec(line);
    if (header) {
      const path = line.split(/\s+/).slice(5).join(' ');
      counting = path !== '' && test(path);
    } else if (counting && line.startsWith('Rss:')) {
      kb += Number(/(\d+)/.exec(line)?.[1] ?? 0);
    }
  }
  return kb / 1024;
}

/** Keeps every thread of a process on `cpus` (taskset's list: "1", "0-1"), or only its main thread (its event loop, for Node). */
export function pinProcess(pid: number, cpus: string, threads: 'all' | 'main' = 'all'): void {
  execFileSync('taskset', [...(threads === 'all' ? ['-a'] : []), '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
}

/**
 * Runs `measure` with every process of `every` but those in `keep` stopped (SIGSTOP), and with
 * `ownCore`, the main thread of `keep[0]` (the event loop of the process measured) alone on
 * CPU 1 and every other thread of `every` (its own helpers, the load generator's core if
 * `measure` pins it there, the upstream, Redis) on CPU 0. Left running, a ROLE=all gateway's
 * timers (ingester, projector) showed in the measured proxy's p99; on two shared cores a p99
 * also shows which process the scheduler ran, which its own core takes out.
 */
export async function measureAlone<T>(keep: number[], every: number[], ownCore: boolean, measure: () => Promise<T>): Promise<T> {
  const others = every.filter((pid) => !keep.includes(pid));
  if (ownCore) {
    for (const pid of every) pinProcess(pid, '0');
    pinProcess(keep[0] as number, '1', 'main');
  }
  for (const pid of others) process.kill(pid, 'SIGSTOP');
  try {
    return await measure();
  } finally {
    for (const pid of others) process.kill(pid, 'SIGCONT');
    if (ownCore) for (const pid of every) pinProcess(pid, `0-${cpus().length - 1}`);
  }
}

/** User + system seconds from a /proc stat line (Linux; 100 ticks/s). */
function statCpuSeconds(stat: string): number {
  // Fields after the command name, which is in parentheses and may hold spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** CPU time (user + system, all threads) a process has used so far, in seconds, from /proc. */
export function cpuSeconds(pid: number): number {
  return statCpuSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'));
}

/** CPU time each thread of a process has used so far, in seconds, by thread id (the main thread's is the pid). */
export function threadCpuSeconds(pid: number): Map<number, number> {
  const threads = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      threads.set(Number(tid), statCpuSeconds(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')));
    } catch {
      // the thread ended meanwhile
    }
  }
  return threads;
}

/**
 * Waits until the processes together use less than `maxShare` of a core over `windowMs` (or
 * `timeoutMs` passes; returns how long it waited). A gateway that served a run keeps ingesting
 * and projecting that run's usage for a while: measured meanwhile, the next target would share
 * the cores with that backlog.
 */
export async function waitForIdle(pids: number[], options: { maxShare?: number; windowMs?: number; timeoutMs?: number } = {}): Promise<number> {
  const { maxShare = 0.05, windowMs = 500, timeoutMs = 20_000 } = options;
  const started = Date.now();
  const total = (): number => pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  while (Date.now() - started < timeoutMs) {
    const before = total();
    await new Promise((r) => setTimeout(r, windowMs));
    if ((total() - before) / (windowMs / 1000) < maxShare) break;
  }
  return Date.now() - started;
}

/** Node running a TypeScript file through tsx: the current source, no build step. */
export const tsNodeArgs = (file: string, nodeFlags: string[] = []): string[] => [...nodeFlags, '--import', 'tsx', file];

/**
 * Ends the benchmark when its time is up, however it got stuck; the `exit` handler above then
 * kills whatever it started.
 */
export function timeLimit(seconds: number): void {
  setTimeout(() => {
    log(`time limit of ${seconds} s reached: stopping`);
    process.exit(3);
  }, seconds * 1000).unref();
}

/** Runs a benchmark's main: a missing tool or any failure ends it with a clear message and a non-zero code. */
export function runMain(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (error: unknown) => {
      if (error instanceof MissingToolError) {
        log(`cannot run: ${error.message}`);
        process.exit(2);
      }
      log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      process.exit(1);
    },
  );
}
