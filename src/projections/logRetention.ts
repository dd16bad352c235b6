import type { PlanCatalog } from '../domain/plans.js';
import { usageStream } from '../domain/usage.js';
import {
  type ChainMethodCount,
  type MonthCounts,
  monthStartMs,
  nextMonth,
  summaryParts,
  type TokenMonth,
  USAGE_MONTH_CLOSED,
  type UsageMonthClosedData,
  usageMonthClosedId,
  usageSummaryStream,
} from '../domain/usageSummary.js';
import type { EventStore, StoredEvent } from '../infra/eventstore/port.js';
import type { Doc, ReadModelStore } from '../infra/readmodels/port.js';
import { type AccountDoc, COLLECTIONS } from './core.js';
import { DAY_MS, floorTo } from './usageBuckets.js';
import { granularityPrefix, parseRollupKey, USAGE_METRICS } from './usageMetrics.js';
import { usageRecordsOf } from './usageRecord.js';
import { type MonthTotals, monthKey, USAGE_TOTALS, usageTotalsProjection } from './usageTotals.js';

/**
 * Retention of the usage log (docs/decisions.md, "Usage log retention"): once a month is over
 * (and a grace period for late records has passed), each account's month is summarised in a
 * UsageMonthClosed event on `usagesummary-<account>`, a stream never truncated; then the
 * account's `usage-<account>` stream loses the events whose calls are all older than the first
 * month the plan still shows (its retention plus a margin, back to the start of that month).
 * The log so keeps whole months, each either all there or summarised, and a rebuild replays
 * the summaries and the retained window only.
 */

/** Beyond the plan's retention, days the log keeps usage: read models are purged on their own schedule, and a clock may be a little off. */
export const LOG_MARGIN_DAYS = 2;

/** After a month ends, how long it waits for late records before it is summarised. */
export const MONTH_CLOSE_GRACE_MS = 2 * DAY_MS;

/**
 * EventStoreDB's `$maxAge` on a usage stream, as a backstop for a retention pass that does not
 * run: the retention and margin, plus a month and the grace period, so that it never drops a
 * call before its month was summarised and the pass would have dropped it.
 */
export const maxAgeSecondsFor = (retentionDays: number): number => (retentionDays + LOG_MARGIN_DAYS + 31 + MONTH_CLOSE_GRACE_MS / DAY_MS) * 86_400;

/** The job's own record per account (no projection's: a rebuild leaves it). */
export const LOG_RETENTION_STATE = 'usage_log_retention';
interface LogRetentionState extends Doc {
  /** Every month up to this one (`YYYY-MM`) is summarised, or had no usage. */
  closedThrough?: string;
  /** The time the account's usage stream was last truncated to (epoch ms): its events before it are gone. */
  truncatedTo?: number;
  /** EventStoreDB: the `$maxAge` set on the usage stream (seconds). */
  maxAgeSeconds?: number;
}

/**
 * The first time the log keeps of an account whose plan keeps usage `retentionDays`, at `nowMs`:
 * the start of the month holding its retention's start less the margin. Every read model the
 * retention job keeps (month roll-ups included) comes from calls at or after it, so a rebuild
 * gives them back as they are.
 */
export const logCutoff = (nowMs: number, retentionDays: number): number => floorTo(nowMs - (retentionDays + LOG_MARGIN_DAYS) * DAY_MS, 'month');

/** The last month that is summarised by `nowMs`: ended at least the grace period ago. */
export const lastClosableMonth = (nowMs: number): string => new Date(floorTo(nowMs - MONTH_CLOSE_GRACE_MS, 'month') - 1).toISOString().slice(0, 7);

export interface LogRetentionOptions {
  store: EventStore;
  readModels: ReadModelStore;
  plans: PlanCatalog;
  now: () => Date;
  /** How long a pass waits for the usage totals to project what the log held when it began, before it summarises (30 s). */
  settleTimeoutMs?: number;
  /** Asked between accounts: true ends the pass early. */
  stopped?: () => boolean;
}

export interface LogRetentionReport {
  /** Months summarised (UsageMonthClosed appended, all parts). */
  monthsClosed: number;
  /** Usage streams truncated, and the events they lost. */
  streamsTruncated: number;
  eventsDropped: number;
  /** Accounts whose months could not be closed this pass (the usage totals were behind the log). */
  deferred: number;
}

const PAGE = 500;
/** While a long stream is read, a truncation every this many old events: progress a restart does not lose. */
const TRUNCATE_EVERY = 10_000;
/** Parts of a summary appended together: under the stores' 1 MiB an append. */
const PARTS_PER_APPEND = 3;

/** One pass over every account: closes the months due, truncates the usage streams, sets EventStoreDB's `$maxAge`. */
export async function runLogRetentionPass(options: LogRetentionOptions): Promise<LogRetentionReport> {
  const { readModels: rm, plans } = options;
  const report: LogRetentionReport = { monthsClosed: 0, streamsTruncated: 0, eventsDropped: 0, deferred: 0 };
  const nowMs = options.now().getTime();
  let settled: Promise<boolean> | undefined;
  const totalsSettled = (): Promise<boolean> => {
    settled ??= totalsReachHead(options.store, rm, options.settleTimeoutMs ?? 30_000);
    return settled;
  };
  let gte = '';
  for (;;) {
    const accounts = await rm.range<AccountDoc>(COLLECTIONS.accounts, { gte, limit: PAGE });
    for (const { key, doc } of accounts) {
      if (options.stopped?.()) return report;
      const retentionDays = plans[doc.plan]?.retention_days;
      if (retentionDays !== undefined) await retainAccount(options, key, retentionDays, nowMs, totalsSettled, report);
    }
    const last = accounts[accounts.length - 1];
    if (accounts.length < PAGE || !last) return report;
    gte = `${last.key}\0`;
  }
}

async function retainAccount(
  options: LogRetentionOptions,
  accountId: string,
  retentionDays: number,
  nowMs: number,
  totalsSettled: () => Promise<boolean>,
  report: LogRetentionReport,
): Promise<void> {
  const { store, readModels: rm } = options;
  const state = (await rm.get<LogRetentionState>(LOG_RETENTION_STATE, accountId)) ?? {};
  const next: LogRetentionState = { ...state };

  const closable = lastClosableMonth(nowMs);
  if (state.closedThrough === undefined || state.closedThrough < closable) {
    if (await totalsSettled()) {
      report.monthsClosed += await closeMonths(options, accountId, state.closedThrough, closable, nowMs);
      next.closedThrough = closable;
    } else report.deferred++;
  }

  // Only months already summarised lose their calls.
  if (next.closedThrough !== undefined) {
    const cut = Math.min(logCutoff(nowMs, retentionDays), monthStartMs(nextMonth(next.closedThrough)));
    if (state.truncatedTo === undefined || cut > state.truncatedTo) {
      const late = new LateCalls(options, accountId, next.closedThrough, nowMs, totalsSettled);
      await late.load();
      const dropped = await truncateUsage(store, usageStream(accountId), cut, late);
      if (dropped < 0) {
        // Late calls to summarise again first, and the totals behind the log: next pass.
        report.deferred++;
        return;
      }
      if (dropped > 0) {
        report.streamsTruncated++;
        report.eventsDropped += dropped;
      }
      next.truncatedTo = cut;
    }
  }

  if (store.limitStreamAge) {
    const maxAgeSeconds = maxAgeSecondsFor(retentionDays);
    if (state.maxAgeSeconds !== maxAgeSeconds) {
      await store.limitStreamAge(usageStream(accountId), maxAgeSeconds);
      next.maxAgeSeconds = maxAgeSeconds;
    }
  }

  if (next.closedThrough !== state.closedThrough || next.truncatedTo !== state.truncatedTo || next.maxAgeSeconds !== state.maxAgeSeconds) {
    await rm.write([{ op: 'put', collection: LOG_RETENTION_STATE, key: accountId, doc: next }]);
  }
}

/**
 * Whether the usage totals have projected everything the log held when the pass began: a
 * summary copies them, so a call appended before it must be in them. Late records of a month
 * (later than the grace period) come after its summary in the log and count on top of it.
 */
async function totalsReachHead(store: EventStore, rm: ReadModelStore, timeoutMs: number): Promise<boolean> {
  const head = await store.headPosition();
  if (head === null) return true;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const checkpoint = await rm.checkpoint(usageTotalsProjection.name);
    if (checkpoint !== null && checkpoint >= head) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Summarises the account's months after `after` up to `through` that had usage and are not summarised yet; returns how many. */
async function closeMonths(options: LogRetentionOptions, accountId: string, after: string | undefined, through: string, nowMs: number): Promise<number> {
  const { store, readModels: rm } = options;
  const prefix = `${accountId}/`;
  const months = await rm.range<MonthTotals>(USAGE_TOTALS.byAccount, {
    gte: prefix + (after === undefined ? '' : nextMonth(after)),
    lt: prefix + nextMonth(through),
  });
  if (months.length === 0) return 0;
  const stream = usageSummaryStream(accountId);
  // The parts of each month the stream holds: a month is closed once all its parts are there (a
  // pass stopped between two appends left the rest to write).
  const written = new Map<unknown, { parts: unknown; seen: Set<unknown> }>();
  for (const e of await store.readStream(stream)) {
    if (e.type !== USAGE_MONTH_CLOSED) continue;
    const month = written.get(e.data['month']) ?? { parts: e.data['parts'], seen: new Set() };
    month.seen.add(e.data['part']);
    written.set(e.data['month'], month);
  }
  let count = 0;
  for (const { key, doc } of months) {
    const month = key.slice(prefix.length);
    const held = written.get(month);
    if (held !== undefined && held.seen.size === held.parts) continue;
    const parts = (await summarise(rm, accountId, month, doc, new Date(nowMs).toISOString())).filter((part) => !held?.seen.has(part.part));
    for (let i = 0; i < parts.length; i += PARTS_PER_APPEND) {
      const events = parts.slice(i, i + PARTS_PER_APPEND).map((part) => ({
        id: usageMonthClosedId(accountId, month, part.part),
        type: USAGE_MONTH_CLOSED,
        data: { ...part },
      }));
      await store.append(stream, events, 'any');
    }
    count++;
  }
  return count;
}

const countsOf = (doc: MonthTotals): MonthCounts => {
  const whole = (n: unknown): number => (typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : 0);
  const counts: MonthCounts = { requests: whole(doc.requests), errors: whole(doc.errors) };
  if (doc.uncharged !== undefined) counts.uncharged = whole(doc.uncharged);
  return counts;
};

/**
 * The month's summary from the read models: the account's and each token's totals (exact: the
 * usage totals are never purged), each token's calls by chain and method from the month's
 * roll-ups (complete while the retention job has not purged them: it keeps a month's roll-ups
 * the plan's retention past the month's end, at least 7 days, beyond the grace period).
 */
async function summarise(rm: ReadModelStore, accountId: string, month: string, accountDoc: MonthTotals, closedAt: string): Promise<UsageMonthClosedData[]> {
  const tokenIds = new Set<string>();
  for (const { doc } of await rm.range<{ tokenId: string }>(COLLECTIONS.tokensByAccount, { prefix: `${accountId}/` })) tokenIds.add(doc.tokenId);
  const calls = new Map<string, Map<string, ChainMethodCount>>();
  const rollups = `${granularityPrefix(accountId, 'month')}${month}/`;
  let gte = rollups;
  for (;;) {
    const page = await rm.range<{ requests?: number; errors?: number }>(USAGE_METRICS.rollups, { prefix: rollups, gte, limit: 1000 });
    for (const { key, doc } of page) {
      const { tokenId, chain, method } = parseRollupKey(key);
      tokenIds.add(tokenId);
      const byCombo = calls.get(tokenId) ?? new Map<string, ChainMethodCount>();
      calls.set(tokenId, byCombo);
      const combo = `${chain}\0${method}`;
      const counted = byCombo.get(combo) ?? [chain, method, 0, 0];
      counted[2] += doc.requests ?? 0;
      counted[3] += doc.errors ?? 0;
      byCombo.set(combo, counted);
    }
    const last = page[page.length - 1];
    if (page.length < 1000 || !last) break;
    gte = `${last.key}\0`;
  }
  let complete = true;
  const tokens: TokenMonth[] = [];
  for (const tokenId of [...tokenIds].sort()) {
    const doc = await rm.get<MonthTotals>(USAGE_TOTALS.byToken, monthKey(tokenId, month));
    if (doc === null) continue;
    const list = [...(calls.get(tokenId)?.values() ?? [])].sort((a, b) => b[2] - a[2] || a[0].localeCompare(b[0]) || a[1].localeCompare(b[1]));
    const counts = countsOf(doc);
    if (list.reduce((sum, c) => sum + c[2], 0) !== counts.requests) complete = false;
    tokens.push({ tokenId, ...counts, ...(typeof doc.lastUsedAt === 'string' ? { lastUsedAt: doc.lastUsedAt } : {}), calls: list });
  }
  return summaryParts({ accountId, month, account: countsOf(accountDoc), closedAt }, tokens, complete);
}

/** Whether every call an event records is before `cut` (an event with none: appended before it). */
function olderThan(event: StoredEvent, cut: number): boolean {
  const created = Date.parse(event.created);
  const calls = usageRecordsOf(event);
  if (calls.length === 0) return created < cut;
  return calls.every((call) => {
    const at = Date.parse(call.at);
    return (Number.isFinite(at) ? at : created) < cut;
  });
}

/**
 * Drops the stream's leading events whose calls are all before `cut`, up to the first that has
 * one at or after it (a stream is in time order but for late records, which then stay: the log
 * keeps more, never less). The stream's last event always stays, old or not: the usage
 * appender reads it to number the calls it appends next (src/infra/usage/exactlyOnce.ts).
 * Reads from the stream's first event still there, so each event is read once before it goes.
 * Returns how many went.
 */
async function truncateUsage(store: EventStore, streamId: string, cut: number, late: LateCalls): Promise<number> {
  let first: number | undefined;
  let from = 0;
  let before: number | undefined; // the first revision kept
  let truncatedTo: number | undefined;
  for (;;) {
    const page = await store.readStream(streamId, { fromRevision: from, maxCount: PAGE });
    const last = page.at(-1);
    if (last === undefined) break;
    first ??= page[0]!.revision;
    const keepAt = page.findIndex((event) => !olderThan(event, cut));
    // The events this page drops (its last stays while it is the last read): late calls among them are summarised again before they go.
    late.note(keepAt < 0 ? page.slice(0, -1) : page.slice(0, keepAt));
    if (keepAt >= 0) {
      before = (page[keepAt] as StoredEvent).revision;
      break;
    }
    before = last.revision; // all old so far: the last one read stays, unless more follow
    from = last.revision + 1;
    if (before - (truncatedTo ?? first) >= TRUNCATE_EVERY) {
      if (!(await late.summariseAgain())) return -1;
      await store.truncateBefore(streamId, before);
      truncatedTo = before;
    }
  }
  if (first === undefined || before === undefined || before <= first) return 0;
  if (before !== truncatedTo) {
    if (!(await late.summariseAgain())) return -1;
    await store.truncateBefore(streamId, before);
  }
  return before - first;
}

/**
 * Calls of a summarised month that reached the log after its summary: counted on top of it live
 * (the totals projection adds what follows a summary), so before retention drops them, their
 * month is summarised again with them in it (a new generation of its summary, appended after
 * them); else a rebuild, seeing the old summary and not the calls, would answer less than live.
 */
class LateCalls {
  /** Each summarised month's newest summary position. */
  private readonly summarised = new Map<string, string>();
  private readonly generations = new Map<string, number>();
  private readonly months = new Set<string>();

  constructor(
    private readonly options: LogRetentionOptions,
    private readonly accountId: string,
    private readonly closedThrough: string,
    private readonly nowMs: number,
    private readonly totalsSettled: () => Promise<boolean>,
  ) {}

  async load(): Promise<void> {
    for (const e of await this.options.store.readStream(usageSummaryStream(this.accountId))) {
      if (e.type !== USAGE_MONTH_CLOSED || typeof e.data['month'] !== 'string') continue;
      const month = e.data['month'];
      this.summarised.set(month, e.position);
      this.generations.set(month, (this.generations.get(month) ?? 0) + (e.data['part'] === 0 ? 1 : 0));
    }
  }

  /** Events about to be dropped: the months of their calls that came after those months' summaries. */
  note(events: readonly StoredEvent[]): void {
    for (const event of events) {
      for (const call of usageRecordsOf(event)) {
        const month = call.at.slice(0, 7);
        const summary = this.summarised.get(month);
        if (summary !== undefined && month <= this.closedThrough && event.position > summary) this.months.add(month);
      }
    }
  }

  /** Summarises the noted months again; false when the totals are behind the log (nothing dropped then). */
  async summariseAgain(): Promise<boolean> {
    if (this.months.size === 0) return true;
    if (!(await this.totalsSettled())) return false;
    const { store, readModels: rm } = this.options;
    const stream = usageSummaryStream(this.accountId);
    for (const month of this.months) {
      const doc = await rm.get<MonthTotals>(USAGE_TOTALS.byAccount, monthKey(this.accountId, month));
      if (doc === null) continue;
      const generation = this.generations.get(month) ?? 1;
      const parts = await summarise(rm, this.accountId, month, doc, new Date(this.nowMs).toISOString());
      for (let i = 0; i < parts.length; i += PARTS_PER_APPEND) {
        const events = parts.slice(i, i + PARTS_PER_APPEND).map((part) => ({
          id: usageMonthClosedId(this.accountId, month, part.part, generation),
          type: USAGE_MONTH_CLOSED,
          data: { ...part },
        }));
        const { position } = await store.append(stream, events, 'any');
        this.summarised.set(month, position);
      }
      this.generations.set(month, generation + 1);
    }
    this.months.clear();
    return true;
  }
}
