import type { PlanCatalog } from '../domain/plans.js';
import { isErrorUsage, type UsageRecord, usageStream, usedQuota } from '../domain/usage.js';
import {
  type ChainMethodCount,
  type MonthCounts,
  monthStartMs,
  nextMonth,
  summaryParts,
  type TokenMonth,
  USAGE_MONTH_CLOSED,
  usageMonthClosedId,
  usageSummaryStream,
} from '../domain/usageSummary.js';
import type { EventStore, Position, StoredEvent } from '../infra/eventstore/port.js';
import type { Doc, ReadModelStore } from '../infra/readmodels/port.js';
import { type AccountDoc, COLLECTIONS } from './core.js';
import { DAY_MS, floorTo } from './usageBuckets.js';
import { methodLabel } from './usageMethod.js';
import { granularityPrefix, parseRollupKey, USAGE_METRICS } from './usageMetrics.js';
import { usageRecordsOf } from './usageRecord.js';
import { type MonthTotals, monthKey, monthOf, USAGE_TOTALS, usageTotalsProjection } from './usageTotals.js';

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
/** A call's month as the usage totals key it (`YYYY-MM`). */
const MONTH = /^\d{4}-\d{2}$/;
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
    const { closed, behind } = (await totalsSettled())
      ? await closeMonths(options, accountId, state.closedThrough, closable, nowMs)
      : { closed: 0, behind: true };
    report.monthsClosed += closed;
    if (behind) report.deferred++;
    else next.closedThrough = closable;
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
 * summary copies them, so a call appended before it must be in them (those appended while the
 * pass reads the month and appends its summary are added: `appendSummary`). Late records of a
 * month (later than the grace period) come after its summary in the log and count on top of it.
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

/** Summarises the account's months after `after` up to `through` that had usage and are not summarised yet; how many, and whether the totals kept moving under the reads (the rest then waits). */
async function closeMonths(
  options: LogRetentionOptions,
  accountId: string,
  after: string | undefined,
  through: string,
  nowMs: number,
): Promise<{ closed: number; behind: boolean }> {
  const { store, readModels: rm } = options;
  const prefix = `${accountId}/`;
  const months = await rm.range<MonthTotals>(USAGE_TOTALS.byAccount, {
    gte: prefix + (after === undefined ? '' : nextMonth(after)),
    lt: prefix + nextMonth(through),
  });
  if (months.length === 0) return { closed: 0, behind: false };
  // A month is closed once every part of its newest summary is there (a pass stopped between
  // two appends left the rest to write).
  const written = await readSummaries(store, accountId);
  let closed = 0;
  for (const { key } of months) {
    const month = key.slice(prefix.length);
    const held = written.get(month);
    if (held !== undefined && held.seen.size === held.parts) continue;
    const summary = await appendSummary(options, accountId, month, held?.generation ?? 0, new Date(nowMs).toISOString(), held?.seen);
    if (summary === null) return { closed, behind: true };
    closed++;
  }
  return { closed, behind: false };
}

/** Per month, its newest summary: its generation, its parts and those written; and where the newest whole one begins. */
interface SummaryHeld {
  generation: number;
  parts: number;
  seen: Set<number>;
  /** Where this generation's first part is. */
  start: Position;
  /**
   * Where the newest generation with every part written begins (none: no summary holds the
   * whole month yet). A call of the month after it may be missing from it, so it is late: a
   * generation a later pass finished (closeMonths) has first parts older than the calls that
   * came in between, and one left unfinished sets only its written parts' tokens.
   */
  wholeFrom?: Position;
}

/** The account's summaries, each event's generation known by its id (usageMonthClosedId). */
async function readSummaries(store: EventStore, accountId: string): Promise<Map<string, SummaryHeld>> {
  const months = new Map<string, SummaryHeld>();
  for (const e of await store.readStream(usageSummaryStream(accountId))) {
    const { month, part, parts } = e.data;
    if (e.type !== USAGE_MONTH_CLOSED || typeof month !== 'string' || typeof part !== 'number' || typeof parts !== 'number') continue;
    let held = months.get(month);
    const known = held?.generation ?? -1;
    let generation: number | undefined;
    for (let g = Math.max(0, known); g <= known + 1 && generation === undefined; g++) {
      if (e.id === usageMonthClosedId(accountId, month, part, g)) generation = g;
    }
    // An id of no generation expected here: a part 0 starts one.
    generation ??= part === 0 ? known + 1 : Math.max(0, known);
    if (held === undefined || generation > held.generation) {
      held = { generation, parts, seen: new Set(), start: e.position, wholeFrom: held?.wholeFrom };
      months.set(month, held);
    }
    held.seen.add(part);
    if (held.seen.size === held.parts) held.wholeFrom = held.start;
  }
  return months;
}

/** A month's summary before it is split in parts. */
interface MonthSummary {
  account: MonthCounts;
  tokens: TokenMonth[];
}

/** Times the month is read again while calls of it are projected under the read, before the pass leaves the account to the next. */
const SNAPSHOT_TRIES = 5;
/** New generations at most while calls of the month keep reaching the log under its appends. */
const SUMMARY_ROUNDS = 10;

/**
 * Appends the account's month's summary, generation `generation` (all its parts but those
 * `written`), such that it counts every call of the month before it in the log; returns where
 * it ends and the next generation, or null when the usage totals kept moving under the month's
 * reads (nothing appended).
 *
 * The month is read from the read models at one checkpoint of the usage totals (read before
 * and after; read again while calls of the month were projected in between), so the summary
 * holds exactly the calls up to it. Calls of the month that reach the usage stream after that
 * point and before the summary (an ingester catching up, more than the grace period late: the
 * pass reads the totals, the call is appended, then the summary) would be counted and then set
 * away by it, live and in a rebuild: the stream is read from that point to the summary, and
 * when it holds such calls a new generation (the summary plus them) is appended, until none
 * came in between.
 */
async function appendSummary(
  options: LogRetentionOptions,
  accountId: string,
  month: string,
  generation: number,
  closedAt: string,
  written?: ReadonlySet<number>,
): Promise<{ position?: Position; next: number } | null> {
  const { store, readModels: rm } = options;
  let summary: MonthSummary | null = null;
  let tail: StreamTail | undefined;
  for (let attempt = 1; tail === undefined; attempt++) {
    const before = await rm.checkpoint(usageTotalsProjection.name);
    const doc = await rm.get<MonthTotals>(USAGE_TOTALS.byAccount, monthKey(accountId, month));
    const read = doc === null ? null : await readMonth(rm, accountId, month, doc);
    const after = await rm.checkpoint(usageTotalsProjection.name);
    const stream = await StreamTail.after(store, usageStream(accountId), before);
    if (after === before || callsOf(await stream.readTo(after, true), month).length === 0) {
      summary = read;
      tail = stream;
    } else if (attempt >= SNAPSHOT_TRIES) return null;
  }
  if (summary === null) {
    // No usage of the month in the totals at that checkpoint: calls of it that they have not
    // projected yet (late ones, a month closed with none) are summarised from the log.
    const unprojected = callsOf(await tail.readTo(await store.headPosition(), true), month);
    if (unprojected.length === 0) return { next: generation };
    summary = withCalls({ account: { requests: 0, errors: 0 }, tokens: [] }, unprojected);
  }
  let position: Position | undefined;
  for (let round = 1; ; round++) {
    position = (await appendParts(store, accountId, month, generation, summary, closedAt, written)) ?? position;
    if (position === undefined) return { next: generation + 1 };
    const missed = callsOf(await tail.readTo(position, false), month);
    if (missed.length === 0) return { position, next: generation + 1 };
    if (round >= SUMMARY_ROUNDS) throw new Error(`log retention: calls of ${month} keep reaching usage-${accountId} under its summaries`);
    summary = withCalls(summary, missed);
    generation++;
    written = undefined;
  }
}

/** Appends a summary's parts (but those `written`) as generation `generation`; the position of the last, or undefined when none was to write. */
async function appendParts(
  store: EventStore,
  accountId: string,
  month: string,
  generation: number,
  summary: MonthSummary,
  closedAt: string,
  written?: ReadonlySet<number>,
): Promise<Position | undefined> {
  const complete = summary.tokens.every((t) => t.calls.reduce((sum, c) => sum + c[2], 0) === t.requests);
  const parts = summaryParts({ accountId, month, account: summary.account, closedAt }, summary.tokens, complete).filter((part) => !written?.has(part.part));
  let position: Position | undefined;
  for (let i = 0; i < parts.length; i += PARTS_PER_APPEND) {
    const events = parts.slice(i, i + PARTS_PER_APPEND).map((part) => ({
      id: usageMonthClosedId(accountId, month, part.part, generation),
      type: USAGE_MONTH_CLOSED,
      data: { ...part },
    }));
    ({ position } = await store.append(usageSummaryStream(accountId), events, 'any'));
  }
  return position;
}

/** The calls of `month` that the events record. */
const callsOf = (events: readonly StoredEvent[], month: string): UsageRecord[] =>
  events.flatMap((event) => usageRecordsOf(event).filter((call) => monthOf(call.at) === month));

/** The summary with these calls counted too, as the usage totals and the month roll-ups count them. */
function withCalls(summary: MonthSummary, calls: readonly UsageRecord[]): MonthSummary {
  const account = { ...summary.account, uncharged: summary.account.uncharged ?? 0 };
  const tokens = new Map(summary.tokens.map((t) => [t.tokenId, { ...t, uncharged: t.uncharged ?? 0, calls: t.calls.map((c): ChainMethodCount => [...c]) }]));
  for (const call of calls) {
    const failed = isErrorUsage(call) ? 1 : 0;
    const uncharged = usedQuota(call) ? 0 : 1;
    const token = tokens.get(call.tokenId) ?? { tokenId: call.tokenId, requests: 0, errors: 0, uncharged: 0, calls: [] };
    tokens.set(call.tokenId, token);
    for (const counts of [account, token]) {
      counts.requests++;
      counts.errors += failed;
      counts.uncharged += uncharged;
    }
    token.lastUsedAt = call.at; // the last in log order, as the usage totals set it
    const method = methodLabel(call.method);
    const combo = token.calls.find((c) => c[0] === call.chain && c[1] === method);
    if (combo === undefined) token.calls.push([call.chain, method, 1, failed]);
    else {
      combo[2]++;
      combo[3] += failed;
    }
  }
  return {
    account,
    tokens: [...tokens.values()]
      .sort((a, b) => (a.tokenId < b.tokenId ? -1 : a.tokenId > b.tokenId ? 1 : 0))
      .map((t) => ({ ...t, calls: t.calls.sort(byMostCalls) })),
  };
}

const byMostCalls = (a: ChainMethodCount, b: ChainMethodCount): number => b[2] - a[2] || a[0].localeCompare(b[0]) || a[1].localeCompare(b[1]);

/**
 * A usage stream read from its first event after a position on: the calls a read of the usage
 * totals at that checkpoint did not count. Found by a search over revisions (a stream's
 * positions grow with them), one event a read, so a long stream is not read from its start.
 */
class StreamTail {
  private constructor(
    private readonly store: EventStore,
    private readonly streamId: string,
    private next: number,
  ) {}

  static async after(store: EventStore, streamId: string, position: Position | null): Promise<StreamTail> {
    const at = async (revision: number) => (await store.readStream(streamId, { fromRevision: revision, maxCount: 1 }))[0];
    const first = await at(0);
    if (first === undefined || position === null || first.position > position) return new StreamTail(store, streamId, first?.revision ?? 0);
    // The event at `lo` is at or before the position; none from `hi` on is.
    let lo = first.revision;
    let hi: number | undefined;
    for (let step = 1; hi === undefined; step *= 2) {
      const probe = await at(lo + step);
      if (probe === undefined || probe.position > position) hi = lo + step;
      else lo = probe.revision;
    }
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      const probe = await at(mid);
      if (probe === undefined || probe.position > position) hi = mid;
      else lo = probe.revision;
    }
    return new StreamTail(store, streamId, hi);
  }

  /** The next events up to `bound` (with it when `inclusive`); the reading goes on from there. */
  async readTo(bound: Position | null, inclusive: boolean): Promise<StoredEvent[]> {
    const read: StoredEvent[] = [];
    if (bound === null) return read;
    for (;;) {
      const page = await this.store.readStream(this.streamId, { fromRevision: this.next, maxCount: PAGE });
      for (const event of page) {
        if (inclusive ? event.position > bound : event.position >= bound) return read;
        read.push(event);
        this.next = event.revision + 1;
      }
      if (page.length < PAGE) return read;
    }
  }
}

const countsOf = (doc: MonthTotals): MonthCounts => {
  const whole = (n: unknown): number => (typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : 0);
  const counts: MonthCounts = { requests: whole(doc.requests), errors: whole(doc.errors) };
  if (doc.uncharged !== undefined) counts.uncharged = whole(doc.uncharged);
  return counts;
};

/**
 * The month from the read models: the account's and each token's totals (exact: the usage
 * totals are never purged), each token's calls by chain and method from the month's roll-ups
 * (complete while the retention job has not purged them: it keeps a month's roll-ups the plan's
 * retention past the month's end, at least 7 days, beyond the grace period).
 */
async function readMonth(rm: ReadModelStore, accountId: string, month: string, accountDoc: MonthTotals): Promise<MonthSummary> {
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
  const tokens: TokenMonth[] = [];
  for (const tokenId of [...tokenIds].sort()) {
    const doc = await rm.get<MonthTotals>(USAGE_TOTALS.byToken, monthKey(tokenId, month));
    if (doc === null) continue;
    const list = [...(calls.get(tokenId)?.values() ?? [])].sort(byMostCalls);
    tokens.push({ tokenId, ...countsOf(doc), ...(typeof doc.lastUsedAt === 'string' ? { lastUsedAt: doc.lastUsedAt } : {}), calls: list });
  }
  return { account: countsOf(accountDoc), tokens };
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
 * Calls of a closed month that reached the log after its summary (after the first part of its
 * newest generation written whole, see SummaryHeld.wholeFrom): counted on top of it live
 * (the totals projection adds what follows a summary), so before retention drops them, their
 * month is summarised again with them in it (a new generation of its summary, appended after
 * them); else a rebuild, seeing the old summary and not the calls, would answer less than live.
 * A month closed with no usage has no summary: any call of it is late, and its first summary is
 * written the same way, once the totals have caught up with the log (a projector stopped keeps
 * the calls in the log), from them and the calls the log holds past their checkpoint.
 */
class LateCalls {
  /** Each month's summaries: where the newest whole one begins (a call after it is late), the generation that comes next. */
  private summarised = new Map<string, { from?: Position; next: number }>();
  private readonly months = new Set<string>();

  constructor(
    private readonly options: LogRetentionOptions,
    private readonly accountId: string,
    private readonly closedThrough: string,
    private readonly nowMs: number,
    private readonly totalsSettled: () => Promise<boolean>,
  ) {}

  async load(): Promise<void> {
    const held = await readSummaries(this.options.store, this.accountId);
    this.summarised = new Map([...held].map(([month, { wholeFrom, generation }]) => [month, { from: wholeFrom, next: generation + 1 }]));
  }

  /** Events about to be dropped: the months of their calls that came after those months' summaries, or that have none. */
  note(events: readonly StoredEvent[]): void {
    for (const event of events) {
      for (const call of usageRecordsOf(event)) {
        const month = monthOf(call.at);
        if (month > this.closedThrough) continue;
        const from = this.summarised.get(month)?.from;
        if (from === undefined ? MONTH.test(month) : event.position > from) this.months.add(month);
      }
    }
  }

  /** Summarises the noted months again; false when the totals are behind the log (nothing dropped then). */
  async summariseAgain(): Promise<boolean> {
    if (this.months.size === 0) return true;
    if (!(await this.totalsSettled())) return false;
    for (const month of this.months) {
      const held = this.summarised.get(month);
      const summary = await appendSummary(this.options, this.accountId, month, held?.next ?? 0, new Date(this.nowMs).toISOString());
      if (summary === null) return false;
      // Written whole just now, with no call of the month between its parts: its end will do.
      this.summarised.set(month, { from: summary.position ?? held?.from, next: summary.next });
      this.months.delete(month);
    }
    return true;
  }
}
