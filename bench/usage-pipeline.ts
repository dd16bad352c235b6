/**
 * The usage pipeline under sustained load (issue 4): usage records handed to the queue as the
 * gateway does, ingested into `usage-<account>` streams and projected into every read model,
 * in one embedded process as `npm start` runs it. Figures: records ingested and projected per
 * second (target: at least the gateway's own maximum rate, from bench/results.json when the
 * gateway benchmark has run), and the p99 time from handing a record to the queue to its
 * projection (target ≤ 1 s), measured at a steady offered rate; then the ingest ceiling (issue
 * 33): the same lag at twice the gateway's maximum rate (`CEILING_RATE` to set it), p99 ≤ 2 s
 * and flat (the second half's median no more than the first's plus 500 ms).
 *
 *   npx tsx bench/usage-pipeline.ts
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import type { UsageRecord } from '../src/domain/usage.js';
import { openRuntime, type Runtime } from '../src/runtime.js';
import { seedAccounts, type SeededToken } from './lib/eventMix.js';
import { ROOT, runMain, timeLimit } from './lib/processes.js';
import { emit, log, round } from './lib/report.js';
import { embeddedEnv } from './lib/services.js';

const COMMAND = 'npx tsx bench/usage-pipeline.ts';
const BURST = 60_000;
const STEADY_RATE = 1000;
const STEADY_SECONDS = 10;
const CEILING_SECONDS = Number(process.env.CEILING_SECONDS ?? 20);

/** Request ids as a gateway makes them (src/server.ts): a random prefix per process and a counter. */
const ID_PREFIX = randomBytes(12).toString('base64url');

const record = (t: SeededToken, i: number): UsageRecord => ({
  requestId: `${ID_PREFIX}-${i.toString(36)}`,
  at: new Date().toISOString(),
  accountId: t.accountId,
  tokenId: t.tokenId,
  chain: ['eth', 'bsc', 'matic'][i % 3] as string,
  method: ['eth_blockNumber', 'eth_call', 'eth_getBalance', 'eth_getLogs'][i % 4] as string,
  status: i % 50 === 0 ? 502 : 200,
  rpcErrorCode: i % 50 === 0 ? -32010 : null,
  errorMessage: i % 50 === 0 ? 'upstream unavailable' : null,
  totalMs: 3 + (i % 17),
  upstreamMs: 2 + (i % 13),
  clientIp: `198.51.100.${i % 200}`,
  upstream: 'eth-1',
});

/** Records of the account the read models have counted so far. */
const projected = (runtime: Runtime, accountId: string) => runtime.queries.accountMonthUsage(accountId);

async function waitUntilProjected(runtime: Runtime, accountId: string, count: number, deadlineMs: number): Promise<void> {
  while ((await projected(runtime, accountId)) < count) {
    if (performance.now() > deadlineMs) throw new Error(`only ${await projected(runtime, accountId)} of ${count} records projected in time`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function gatewayMaxRate(): number | null {
  const file = join(ROOT, 'bench', 'results.json');
  if (!existsSync(file)) return null;
  const results = JSON.parse(readFileSync(file, 'utf8')) as Record<string, { figures: Array<{ name: string; result: number; baseline?: string }> }>;
  // The gateway benchmark states its own rate in the baseline of its throughput ratio.
  for (const run of Object.values(results)) {
    for (const f of run.figures) {
      const m = f.name === 'gateway_embedded_vs_bare_node_throughput' ? /gateway ([\d.]+) req\/s/.exec(f.baseline ?? '') : null;
      if (m) return Number(m[1]);
    }
  }
  return null;
}

async function main(): Promise<void> {
  timeLimit(240);
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-usage-'));
  const runtime = await openRuntime(loadConfig(embeddedEnv(dataDir)));
  try {
    await runtime.projector?.start();
    runtime.ingester?.start();
    const tokens = await seedAccounts(runtime.store, 1, 10, new Date().toISOString());
    const head = await runtime.store.headPosition();
    if (head) await runtime.projector?.waitFor(head, 30_000);
    const accountId = (tokens[0] as SeededToken).accountId;

    // 1. Throughput: a burst handed over at once, then time until every record is projected.
    log(`burst of ${BURST} records`);
    const started = performance.now();
    for (let i = 0; i < BURST; i++) runtime.usageQueue.enqueue(record(tokens[i % tokens.length] as SeededToken, i));
    await waitUntilProjected(runtime, accountId, BURST, started + 100_000);
    const rate = BURST / ((performance.now() - started) / 1000);
    const gateway = gatewayMaxRate();
    emit({
      name: 'usage_pipeline_records_per_s',
      target: gateway ? `>= ${gateway}` : null,
      result: round(rate),
      unit: 'records/s',
      ...(gateway ? { ratio: round(rate / gateway), baseline: `gateway's maximum ${gateway} req/s (bench/gateway.ts)` } : {}),
      command: COMMAND,
      method: `${BURST} records enqueued at once; until the read models count them all (ingest + every projection)`,
    });

    // 2. Lag at a steady offered rate: every 100 ms a batch, and when it shows in the read models.
    let sent = BURST;
    const steady = async (rate: number, seconds: number): Promise<{ p: (q: number) => number; halves: [number, number]; batches: number }> => {
      log(`steady ${rate}/s for ${seconds} s`);
      const lags: number[] = [];
      const marks: Array<{ count: number; at: number }> = [];
      const steadyEnd = performance.now() + seconds * 1000;
      const sender = (async () => {
        const started = performance.now();
        const before = sent;
        while (performance.now() < steadyEnd) {
          // Paced by the clock: a late timer's records go with the next batch, the rate holds.
          const due = before + Math.round(((performance.now() - started) / 1000 + 0.1) * rate);
          while (sent < due) runtime.usageQueue.enqueue(record(tokens[sent % tokens.length] as SeededToken, sent++));
          marks.push({ count: sent, at: performance.now() });
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      while (performance.now() < steadyEnd + 10_000 && (marks.length > 0 || performance.now() < steadyEnd)) {
        const count = await projected(runtime, accountId);
        const now = performance.now();
        while (marks.length > 0 && (marks[0] as { count: number }).count <= count) lags.push(now - (marks.shift() as { at: number }).at);
        await new Promise((r) => setTimeout(r, 5));
      }
      await sender;
      const batches = lags.length + marks.length;
      // Batches never counted get the longest lag there is: they are not hidden by being late.
      for (const _ of marks) lags.push(Number.POSITIVE_INFINITY);
      const half = Math.floor(lags.length / 2);
      const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
      const halves: [number, number] = [median(lags.slice(0, half)), median(lags.slice(half))];
      lags.sort((a, b) => a - b);
      return { p: (q: number) => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))] ?? Number.NaN, halves, batches };
    };
    const { p, halves: _steadyHalves, batches } = await steady(STEADY_RATE, STEADY_SECONDS);
    emit({
      name: 'usage_projection_lag_p99_ms',
      target: '<= 1000',
      result: round(p(0.99)),
      unit: 'ms',
      command: COMMAND,
      method: `${STEADY_RATE} records/s for ${STEADY_SECONDS} s in batches every 100 ms; time from enqueue to the read models counting the batch (p50 ${round(p(0.5))} ms, ${batches} batches)`,
    });

    // 3. The ingest ceiling: twice the gateway's maximum, the lag p99 within 2 s and not growing.
    const ceilingRate = Number(process.env.CEILING_RATE ?? (gateway ? Math.round(2 * gateway) : 40_000));
    const ceiling = await steady(ceilingRate, CEILING_SECONDS);
    const flat = ceiling.halves[1] <= ceiling.halves[0] + 500;
    emit({
      name: 'usage_ingest_ceiling_lag_p99_ms',
      target: '<= 2000',
      result: round(ceiling.p(0.99)),
      unit: 'ms',
      command: COMMAND,
      method: `${ceilingRate} records/s (${process.env.CEILING_RATE ? 'CEILING_RATE' : gateway ? "twice the gateway's maximum" : 'no gateway figure: 40,000'}) for ${CEILING_SECONDS} s in batches every 100 ms, time from enqueue to the read models counting the batch: p50 ${round(ceiling.p(0.5))} ms; median ${round(ceiling.halves[0])} ms in the first half, ${round(ceiling.halves[1])} ms in the second (${flat ? 'flat' : 'growing'}); ${ceiling.batches} batches`,
    });
  } finally {
    await runtime.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runMain(main);
