import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { cpuSeconds, ROOT, threadCpuSeconds } from './processes.js';

const run = promisify(execFile);

export const JSON_RPC_BODY = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}';

export interface WrkResult {
  requestsPerSecond: number;
  requests: number;
  /** Non-2xx/3xx answers plus socket errors: a throughput figure is worth nothing if these are not 0. */
  failures: number;
  output: string;
}

const WRK_SCRIPTS = join(ROOT, 'bench', 'wrk');

/** Closed-loop load at full speed: `connections` keep-alive connections on one wrk thread. */
export async function wrk(
  url: string,
  options: { seconds: number; connections: number; script?: string; env?: Record<string, string>; timeoutSeconds?: number },
): Promise<WrkResult> {
  const args = [
    '-t1',
    `-c${options.connections}`,
    `-d${options.seconds}s`,
    '--timeout',
    `${options.timeoutSeconds ?? 5}s`,
    '-s',
    join(WRK_SCRIPTS, options.script ?? 'post.lua'),
    url,
  ];
  const { stdout } = await run('wrk', args, { env: { ...process.env, ...options.env }, timeout: (options.seconds + 30) * 1000, maxBuffer: 1 << 20 });
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(stdout);
  const total = /(\d+) requests in/.exec(stdout);
  if (!rps || !total) throw new Error(`could not read wrk's output:\n${stdout}`);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(stdout)?.[1] ?? 0);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
  const socketErrors = socket ? socket.slice(1).reduce((a, b) => a + Number(b), 0) : 0;
  return { requestsPerSecond: Number(rps[1]), requests: Number(total[1]), failures: non2xx + socketErrors, output: stdout };
}

export interface Throughput {
  rps: number;
  /** CPU time (all threads) the measured process spent per request during the run. */
  cpuUsPerRequest: number;
  /** The same per thread, busiest first, the main thread (the event loop) first of all; threads that took none left out. */
  threadUsPerRequest: Array<{ main: boolean; us: number }>;
}

/**
 * The full-speed load each throughput run follows, not counted (2026-11-25): a target measured
 * right after sitting idle while the others ran (half a minute in bench/gateway.ts) started
 * slower, its first round's CPU per call highest, as with latency (LATENCY_WARMUP_SECONDS).
 * Every target, the bare proxy included, gets the same.
 */
export const THROUGHPUT_WARMUP_SECONDS = 1;

/**
 * A full-speed wrk run against `url`, after THROUGHPUT_WARMUP_SECONDS of the same load that are
 * not counted, with the CPU time process `pid` spent per request; fails on any failed request.
 */
export async function measuredThroughput(name: string, url: string, pid: number, options: { seconds: number; connections: number }): Promise<Throughput> {
  await wrk(url, { ...options, seconds: THROUGHPUT_WARMUP_SECONDS });
  const cpuBefore = cpuSeconds(pid);
  const threadsBefore = threadCpuSeconds(pid);
  const run = await wrk(url, options);
  const perRequest = (seconds: number): number => (seconds * 1e6) / run.requests;
  const cpuUsPerRequest = perRequest(cpuSeconds(pid) - cpuBefore);
  const threadUsPerRequest = [...threadCpuSeconds(pid)]
    .map(([tid, seconds]) => ({ main: tid === pid, us: perRequest(seconds - (threadsBefore.get(tid) ?? 0)) }))
    .filter((t) => t.us > 0)
    .sort((a, b) => Number(b.main) - Number(a.main) || b.us - a.us);
  if (run.failures > 0) throw new Error(`${name}: ${run.failures} failed requests under load:\n${run.output}`);
  return { rps: run.requestsPerSecond, cpuUsPerRequest, threadUsPerRequest };
}

export interface PacedResult {
  /** Requests per second actually sent. */
  rate: number;
  p50Ms: number;
  p99Ms: number;
  failures: number;
  /** What wrk counted as failed, by kind (non-2xx answers, socket errors). */
  failureDetail: string;
}

const toMs = (value: string, unit: string): number => Number(value) * (unit === 'us' ? 0.001 : unit === 's' ? 1000 : 1);

/**
 * Seconds each latency run is preceded by, at the same rate through the same target, not
 * counted: the figures are for a process under steady load. Measured 2026-11-24 (the embedded
 * gateway alone on its core, 1,000 req/s, a loop-stall and GC observer loaded into it): in the
 * first 2-3 s after it started or sat idle for a minute its event loop stalled over 2.5 ms 30-50
 * times a second, against 0-5 later, and most of a 10 s run's slowest 1 % fell in those seconds
 * (its CPU per call there was 3-6x the steady one: code still being optimised). Every target,
 * direct included, gets the same warm-up.
 */
export const LATENCY_WARMUP_SECONDS = 3;

/** The warm-up before a latency run: the same load for LATENCY_WARMUP_SECONDS, its figures dropped. */
export async function pacedWarmUp(url: string, options: { rate: number; cpus?: string }): Promise<void> {
  await pacedLatency(url, { ...options, seconds: LATENCY_WARMUP_SECONDS });
}

/**
 * Latency at about `rate` req/s, measured by wrk (C, so the client stays cheap when the cores are
 * busy; µs-resolution percentiles): `connections` = rate × mean delay / 1000 keep-alive
 * connections, each waiting a random 0…2×50 ms before each request (bench/wrk/paced.lua). wrk2
 * is not packaged here, and autocannon's `overallRate` sends each connection's quota for a
 * second in a burst at the start of that second. Closed loop: a proxy slower than a few ms gets
 * a little less than `rate` (reported).
 */
export async function pacedLatency(
  url: string,
  options: { rate: number; seconds: number /** wrk kept on these CPUs (taskset's list) */; cpus?: string },
): Promise<PacedResult> {
  const meanDelayMs = 50;
  const connections = Math.max(1, Math.round((options.rate * meanDelayMs) / 1000));
  const wrkArgs = ['-t1', `-c${connections}`, `-d${options.seconds}s`, '--timeout', '5s', '--latency', '-s', join(WRK_SCRIPTS, 'paced.lua'), url];
  const [command, args] = options.cpus === undefined ? ['wrk', wrkArgs] : ['taskset', ['-c', options.cpus, 'wrk', ...wrkArgs]];
  const { stdout } = await run(command, args, {
    env: { ...process.env, MEAN_DELAY_MS: String(meanDelayMs) },
    timeout: (options.seconds + 30) * 1000,
    maxBuffer: 1 << 20,
  });
  const at = (p: number): number => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s)\\s*$`, 'm').exec(stdout);
    if (!m) throw new Error(`no ${p}th percentile in wrk's output:\n${stdout}`);
    return toMs(m[1] as string, m[2] as string);
  };
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(stdout);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(stdout)?.[1] ?? 0);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
  const socketErrors = socket ? socket.slice(1).reduce((a, b) => a + Number(b), 0) : 0;
  const failureDetail = `${non2xx} non-2xx answers${socket ? `; ${socket[0].toLowerCase()}` : ''}`;
  return { rate: Number(rps?.[1] ?? 0), p50Ms: at(50), p99Ms: at(99), failures: non2xx + socketErrors, failureDetail };
}
