/**
 * The management API during a log-in flood (issue 32): `GET /api/v1/tokens` latency alone, then
 * while 16 clients log in back to back, each log-in from an address of its own
 * (X-Forwarded-For, TRUST_PROXY=true) so the per-address limit does not stop the flood: half the
 * right password of one of 4 accounts (never limited), half a wrong one for an unknown email
 * (a new email each time: never locked), so every log-in costs a scrypt. The whole service runs
 * as its own process on the embedded default, once per PASSWORD_HASH_CONCURRENCY: 64 (no cap,
 * as before: the hashes take all of libuv's 4 pool threads, which the stores' LevelDB reads
 * need too), 2, and the default 1. Target: p99 ≤ 50 ms during the flood with the default.
 *
 *   npx tsx bench/login-flood.ts
 */
import { DEFAULT_HASH_CONCURRENCY } from '../src/commands/passwords.js';
import { runMain, Processes, timeLimit } from './lib/processes.js';
import { emit, log, round } from './lib/report.js';
import { startGateway, writeBenchPlans } from './lib/services.js';

const COMMAND = 'npx tsx bench/login-flood.ts';
const CLIENTS = 16;
const ACCOUNTS = 4;
const PASSWORD = 'correct horse battery';
const ALONE_CALLS = 300;
const FLOOD_SECONDS = 10;
/** Latencies of the first second of the flood are left out: the queue is filling. */
const FLOOD_WARMUP_MS = 1000;
const CAPS = [64, 2, 1] as const;

const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number;

interface Latencies {
  p50: number;
  p99: number;
  count: number;
}

function summary(times: number[]): Latencies {
  const sorted = [...times].sort((a, b) => a - b);
  return { p50: round(percentile(sorted, 0.5)), p99: round(percentile(sorted, 0.99)), count: sorted.length };
}

let nextAddress = 0;
/** A client address of its own per log-in (10.x.y.z). */
function address(): string {
  nextAddress += 1;
  return `10.${(nextAddress >> 16) & 255}.${(nextAddress >> 8) & 255}.${nextAddress & 255}`;
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': address(), ...headers }, body: JSON.stringify(body) });
}

/** Signs up `ACCOUNTS` accounts; answers their emails and the first one's session cookie, with two API tokens to list. */
async function prepare(base: string): Promise<{ emails: string[]; cookie: string }> {
  const emails = Array.from({ length: ACCOUNTS }, (_, i) => `flood-${i}-${Date.now()}@example.com`);
  let cookie = '';
  for (const email of emails) {
    const res = await post(`${base}/api/v1/auth/signup`, { email, password: PASSWORD });
    if (res.status !== 201) throw new Error(`sign-up: ${res.status} ${await res.text()}`);
    cookie ||= String(res.headers.get('set-cookie')).split(';')[0] as string;
  }
  for (const name of ['first', 'second']) {
    const res = await post(`${base}/api/v1/tokens`, { name }, { cookie });
    if (res.status !== 201) throw new Error(`token: ${res.status} ${await res.text()}`);
  }
  return { emails, cookie };
}

async function timedList(base: string, cookie: string): Promise<number> {
  const started = performance.now();
  const res = await fetch(`${base}/api/v1/tokens`, { headers: { cookie } });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`GET /api/v1/tokens: ${res.status}`);
  return performance.now() - started;
}

interface Flood {
  list: Latencies;
  logins: Latencies & { perSecond: number; statuses: Record<string, number> };
}

async function measure(base: string, cookie: string, emails: string[]): Promise<{ alone: Latencies; flood: Flood }> {
  for (let i = 0; i < 20; i++) await timedList(base, cookie); // warms the JIT and the LevelDB cache
  const aloneTimes: number[] = [];
  for (let i = 0; i < ALONE_CALLS; i++) aloneTimes.push(await timedList(base, cookie));

  const started = performance.now();
  const until = started + FLOOD_SECONDS * 1000;
  const loginTimes: number[] = [];
  const statuses: Record<string, number> = {};
  let sent = 0;
  const client = async (): Promise<void> => {
    while (performance.now() < until) {
      sent += 1;
      const right = sent % 2 === 0;
      const email = right ? (emails[sent % ACCOUNTS] as string) : `nobody-${sent}-${Date.now()}@example.com`;
      const t0 = performance.now();
      const res = await post(`${base}/api/v1/auth/login`, { email, password: right ? PASSWORD : 'not the password' });
      await res.arrayBuffer();
      if (t0 - started >= FLOOD_WARMUP_MS) loginTimes.push(performance.now() - t0);
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
    }
  };
  const flood = Promise.all(Array.from({ length: CLIENTS }, client));
  const listTimes: number[] = [];
  await new Promise((resolve) => setTimeout(resolve, FLOOD_WARMUP_MS));
  while (performance.now() < until) listTimes.push(await timedList(base, cookie));
  await flood;
  const floodSeconds = (performance.now() - started - FLOOD_WARMUP_MS) / 1000;
  return {
    alone: summary(aloneTimes),
    flood: { list: summary(listTimes), logins: { ...summary(loginTimes), perSecond: round(loginTimes.length / floodSeconds), statuses } },
  };
}

async function main(): Promise<void> {
  timeLimit(400);
  const processes = new Processes();
  try {
    const results = new Map<number, { alone: Latencies; flood: Flood }>();
    for (const cap of CAPS) {
      const dataDir = processes.workDir('bench-login-flood-');
      const service = await startGateway(processes, {
        dataDir,
        upstreamUrl: 'http://127.0.0.1:9',
        plansFile: writeBenchPlans(dataDir),
        label: `service (${cap} hashes at once)`,
        env: { TRUST_PROXY: 'true', PASSWORD_HASH_CONCURRENCY: String(cap) },
      });
      const { emails, cookie } = await prepare(service.url);
      const result = await measure(service.url, cookie, emails);
      results.set(cap, result);
      log(
        `PASSWORD_HASH_CONCURRENCY=${cap}: GET /api/v1/tokens alone p50 ${result.alone.p50} ms p99 ${result.alone.p99} ms; during the flood p50 ${result.flood.list.p50} ms p99 ${result.flood.list.p99} ms (${result.flood.list.count} calls); log-ins ${result.flood.logins.perSecond}/s p50 ${result.flood.logins.p50} ms p99 ${result.flood.logins.p99} ms ${JSON.stringify(result.flood.logins.statuses)}`,
      );
      await processes.stop(service.process);
    }
    const uncapped = results.get(64);
    for (const [cap, r] of results) {
      const method = `GET /api/v1/tokens back to back during ${FLOOD_SECONDS} s of ${CLIENTS} clients logging in (half right, half unknown emails, each from its own X-Forwarded-For), PASSWORD_HASH_CONCURRENCY=${cap}; alone p50 ${r.alone.p50} / p99 ${r.alone.p99} ms; during p50 ${r.flood.list.p50} ms; log-ins ${r.flood.logins.perSecond}/s, p50 ${r.flood.logins.p50} / p99 ${r.flood.logins.p99} ms`;
      emit({
        name: cap === DEFAULT_HASH_CONCURRENCY ? 'login_flood_tokens_p99_ms' : `login_flood_tokens_p99_ms_cap${cap}`,
        target: cap === DEFAULT_HASH_CONCURRENCY ? '<= 50' : null,
        result: r.flood.list.p99,
        unit: 'ms',
        command: COMMAND,
        method,
        ...(uncapped && cap !== 64
          ? { ratio: round(r.flood.list.p99 / uncapped.flood.list.p99), baseline: `no cap (64): p99 ${uncapped.flood.list.p99} ms` }
          : {}),
      });
    }
  } finally {
    await processes.stopAll();
  }
}

runMain(main);
