/**
 * Rebuild time against the age of the log, with usage log retention (issue 33 item 4): a rebuild
 * should grow with the retained window, not with how long the service has run. For 3 and for 12
 * simulated months of usage (`CALLS_PER_MONTH` calls a month over `ACCOUNTS` Professional
 * accounts, 90-day retention, written as the ingester writes them: compact batch events of
 * `BATCH` calls), each in a fresh embedded store with the clock at NOW:
 *   1. the projections catch up from empty read models: a rebuild of the whole log (timed);
 *   2. one retention pass (src/projections/logRetention.ts, the job the projector runs):
 *      closed months summarised, usage streams truncated, then the store compacts what went;
 *   3. a rebuild as `rebuildProjections` does it, of what the log holds now (timed), `ROUNDS`
 *      times, the two logs' rebuilds alternated (the machine's load moves; medians).
 * Figures: the 12-month rebuild after retention over the 3-month one (target ≤ 1.3), the
 * 12-month full-log rebuild over the same baseline (what it was without retention), and the
 * log's bytes on disk before and after the pass.
 *
 *   npx tsx bench/log-retention.ts                      (200,000 calls a month, ~4 min)
 *   CALLS_PER_MONTH=1000000 npx tsx bench/log-retention.ts   (the issue's 1M a month)
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeEvent } from '../src/domain/eventCodec.js';
import { STREAM } from '../src/domain/events.js';
import { DEFAULT_PLANS } from '../src/domain/plans.js';
import { type UsageRecord, usageStream } from '../src/domain/usage.js';
import { LevelEventStore } from '../src/infra/eventstore/level.js';
import { openReadModels } from '../src/infra/readmodels/index.js';
import { usageBatchCodec } from '../src/infra/usage/ingester.js';
import { PROJECTIONS } from '../src/projections/all.js';
import { logCutoff, runLogRetentionPass } from '../src/projections/logRetention.js';
import { rebuildProjections } from '../src/projections/rebuild.js';
import { ProjectionRunner } from '../src/projections/runner.js';
import { seedAccounts } from './lib/eventMix.js';
import { runMain, timeLimit } from './lib/processes.js';
import { emit, log, median, round } from './lib/report.js';

const COMMAND = 'npx tsx bench/log-retention.ts';
const CALLS_PER_MONTH = Number(process.env.CALLS_PER_MONTH ?? 200_000);
const ACCOUNTS = Number(process.env.ACCOUNTS ?? 10);
const BATCH = Number(process.env.BATCH ?? 100);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
/** Mid-month: the log keeps whole months, so the window is 92 days back to that month's start (3.5 months here; 3.0-3.9 by the day of the month). */
const NOW = Date.parse(process.env.NOW ?? '2027-03-15T12:00:00.000Z');
const MONTH_MS = 30.44 * 86_400_000;
const CHAINS = ['eth', 'bsc', 'matic', 'arb', 'base'];
const METHODS = ['eth_blockNumber', 'eth_getBalance', 'eth_call', 'eth_getTransactionReceipt', 'eth_chainId', 'eth_getLogs'];
const RETENTION_DAYS = DEFAULT_PLANS.professional.retention_days;

const bytesUnder = (dir: string): number =>
  readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .reduce((sum, entry) => sum + statSync(join(entry.parentPath, entry.name)).size, 0);

/** `months` of usage ending at NOW, in time order, appended per account in batches as the ingester does; returns the calls written, and those in the log's window. */
async function seed(store: LevelEventStore, months: number): Promise<{ calls: number; inWindow: number }> {
  const start = NOW - months * MONTH_MS;
  const tokens = await seedAccounts(store, ACCOUNTS, 5, new Date(start - 86_400_000).toISOString());
  const accounts = [...new Set(tokens.map((t) => t.accountId))];
  for (const accountId of accounts) {
    const plan = encodeEvent({
      type: 'AccountPlanChanged',
      version: 1,
      data: { accountId, from: 'unlimited', to: 'professional', at: new Date(start).toISOString() },
    });
    await store.append(STREAM.account(accountId), [plan], 'any');
  }
  const total = months * CALLS_PER_MONTH;
  const cut = logCutoff(NOW, RETENTION_DAYS);
  let inWindow = 0;
  const stem = randomBytes(8).toString('hex');
  const pending = new Map<string, UsageRecord[]>();
  const callsBefore = new Map<string, number>();
  let inFlight: Array<Promise<unknown>> = [];
  const flush = async (accountId: string): Promise<void> => {
    const records = pending.get(accountId) ?? [];
    if (records.length === 0) return;
    pending.set(accountId, []);
    const before = callsBefore.get(accountId) ?? 0;
    callsBefore.set(accountId, before + records.length);
    inFlight.push(store.append(usageStream(accountId), [usageBatchCodec.eventOf(records, before)], 'any'));
    if (inFlight.length >= 16) {
      await Promise.all(inFlight);
      inFlight = [];
    }
  };
  for (let i = 0; i < total; i++) {
    const token = tokens[i % tokens.length]!;
    const failed = i % 33 === 7;
    const totalMs = 20 + (i % 200);
    const record: UsageRecord = {
      requestId: `${stem}${i.toString(36)}`,
      at: new Date(start + Math.floor((i / total) * (NOW - start - 3_600_000))).toISOString(),
      accountId: token.accountId,
      tokenId: token.tokenId,
      chain: CHAINS[i % CHAINS.length]!,
      method: METHODS[(i >> 3) % METHODS.length]!,
      status: failed ? 502 : 200,
      rpcErrorCode: failed ? -32010 : null,
      errorMessage: failed ? 'upstream unavailable' : null,
      totalMs,
      upstreamMs: totalMs - 3,
      clientIp: `203.0.113.${i % 250}`,
      upstream: 'publicnode',
      retentionDays: RETENTION_DAYS,
      charged: !failed,
    };
    if (Date.parse(record.at) >= cut) inWindow++;
    const batch = pending.get(token.accountId) ?? [];
    batch.push(record);
    pending.set(token.accountId, batch);
    if (batch.length >= BATCH) await flush(token.accountId);
  }
  for (const accountId of accounts) await flush(accountId);
  await Promise.all(inFlight);
  return { calls: total, inWindow };
}

interface Prepared {
  months: number;
  calls: number;
  inWindow: number;
  fullRebuildSeconds: number;
  logBytesBefore: number;
  logBytesAfter: number;
  eventsDropped: number;
  monthsClosed: number;
  rebuild(): Promise<number>;
  close(): Promise<void>;
}

/** A store of `months` of usage, projected, then one retention pass; `rebuild` times a rebuild of what is left. */
async function prepare(months: number): Promise<Prepared> {
  const dataDir = mkdtempSync(join(tmpdir(), `gw-bench-log-retention-${months}-`));
  const storeDir = join(dataDir, 'eventstore');
  const store = await LevelEventStore.open(storeDir, { sync: false });
  const readModels = await openReadModels({ dataDir, bulkLoad: true });
  const close = async (): Promise<void> => {
    await readModels.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    let t = performance.now();
    const { calls, inWindow } = await seed(store, months);
    log(`${months} months: wrote ${calls} calls in ${round((performance.now() - t) / 1000)} s`);

    // 1. The whole log into empty read models: what a rebuild cost before retention.
    t = performance.now();
    const runner = new ProjectionRunner(store, readModels, PROJECTIONS, null, () => NOW);
    await runner.start();
    await runner.caughtUp;
    await runner.stop();
    const fullRebuildSeconds = (performance.now() - t) / 1000;
    log(`${months} months: the whole log projected in ${round(fullRebuildSeconds)} s`);

    // 2. One retention pass at NOW, and the compaction that gives the space back.
    await store.compactDropped();
    const logBytesBefore = bytesUnder(storeDir);
    t = performance.now();
    const report = await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now: () => new Date(NOW) });
    await store.compactDropped();
    const logBytesAfter = bytesUnder(storeDir);
    log(
      `${months} months: retention pass in ${round((performance.now() - t) / 1000)} s: ${report.monthsClosed} months closed, ${report.eventsDropped} events dropped (calls before ${new Date(logCutoff(NOW, RETENTION_DAYS)).toISOString()}, ${inWindow} calls after); log ${round(logBytesBefore / 1e6)} → ${round(logBytesAfter / 1e6)} MB`,
    );
    if (report.deferred > 0) throw new Error(`${report.deferred} accounts deferred: the usage totals did not reach the log's head`);
    return {
      months,
      calls,
      inWindow,
      fullRebuildSeconds,
      logBytesBefore,
      logBytesAfter,
      eventsDropped: report.eventsDropped,
      monthsClosed: report.monthsClosed,
      // 3. A rebuild of what the log holds now.
      rebuild: async () => (await rebuildProjections(store, readModels, PROJECTIONS, { now: () => NOW })).ms / 1000,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

async function main(): Promise<void> {
  timeLimit(3600);
  const three = await prepare(3);
  try {
    const twelve = await prepare(12);
    try {
      const times: Record<number, number[]> = { 3: [], 12: [] };
      for (let r = 0; r < ROUNDS; r++) {
        for (const p of [three, twelve]) {
          const seconds = await p.rebuild();
          times[p.months]!.push(seconds);
          log(`round ${r + 1}: ${p.months} months rebuilt after retention in ${round(seconds)} s`);
        }
      }
      const [rebuild3, rebuild12] = [median(times[3]!), median(times[12]!)];
      const baseline = `3 simulated months: ${round(rebuild3)} s (median of ${ROUNDS}; ${three.calls} calls, nothing past the window)`;
      const method = `${CALLS_PER_MONTH} calls a month over ${ACCOUNTS} Professional accounts (90 days), ${BATCH} calls an event, clock at ${new Date(NOW).toISOString()}; rebuilds alternated, ${ROUNDS} each`;
      emit({
        name: 'log_retention_rebuild_12_vs_3_months',
        target: '<= 1.3',
        result: round(rebuild12 / rebuild3),
        unit: 'x',
        ratio: round(rebuild12 / rebuild3),
        baseline,
        command: COMMAND,
        method: `rebuild after one retention pass; 12 months: ${round(rebuild12)} s (${twelve.inWindow} calls in the kept window, ${round(twelve.inWindow / three.calls)}× the 3 months'); ${method}`,
      });
      emit({
        name: 'log_retention_rebuild_12_months_without_retention',
        target: null,
        result: round(twelve.fullRebuildSeconds / three.fullRebuildSeconds),
        unit: 'x',
        ratio: round(twelve.fullRebuildSeconds / three.fullRebuildSeconds),
        baseline: `the whole 3-month log projected from empty read models: ${round(three.fullRebuildSeconds)} s`,
        command: COMMAND,
        method: `the whole 12-month log (${twelve.calls} calls) projected from empty read models, before the pass: ${round(twelve.fullRebuildSeconds)} s (the replay skips writing documents already expired); ${method}`,
      });
      emit({
        name: 'log_retention_log_bytes_12_months',
        target: null,
        result: round(twelve.logBytesAfter / 1e6),
        unit: 'MB',
        ratio: round(twelve.logBytesAfter / twelve.logBytesBefore),
        baseline: `before the pass: ${round(twelve.logBytesBefore / 1e6)} MB`,
        command: COMMAND,
        method: `embedded event store on disk after one retention pass and its compaction (${twelve.monthsClosed} account-months closed, ${twelve.eventsDropped} events dropped); ${method}`,
      });
    } finally {
      await twelve.close();
    }
  } finally {
    await three.close();
  }
}

runMain(main);
