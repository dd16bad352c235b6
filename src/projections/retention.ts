import type { PlanCatalog } from '../domain/plans.js';
import type { EventStore } from '../infra/eventstore/port.js';
import type { Doc, ReadModelStore, ReadModelWrite } from '../infra/readmodels/port.js';
import { type AccountDoc, COLLECTIONS } from './core.js';
import { type LogRetentionReport, runLogRetentionPass } from './logRetention.js';
import { bucketName, bucketStart, DAY_MS, GRANULARITIES, type Granularity } from './usageBuckets.js';
import { bucketEnd, granularityRetention, retentionStart, usageExpiry } from './usageExpiry.js';
import { ERROR_GROUP_GRANULARITIES, granularityPrefix, USAGE_METRICS } from './usageMetrics.js';

const PAGE = 1000;

/** The oldest time a plan still shows: `now` minus its retention, to the minute. */
export const retentionCutoff = (now: Date, retentionDays: number): number => retentionStart(now.getTime(), retentionDays);

/** Deletes the keys of [gte, lt) page by page; returns how many. */
async function deleteRange(rm: ReadModelStore, collection: string, gte: string, lt: string): Promise<number> {
  let deleted = 0;
  for (;;) {
    const page = await rm.range(collection, { gte, lt, limit: PAGE });
    if (page.length === 0) return deleted;
    await rm.write(page.map(({ key }) => ({ op: 'delete' as const, collection, key })));
    deleted += page.length;
  }
}

/**
 * Where an account's usage documents are, as key ranges that start with a time: a range per
 * roll-up and error-group granularity, the per-call documents, the request blocks (by hour), and each
 * token's client IPs. Within one, `prefix + from` is the first key at or after the range's
 * cutoff (`from` names the bucket holding it, or the cutoff itself for per-call documents; the
 * cutoff is per granularity: minute documents are kept for less, see granularityRetention),
 * and `covers` reads a key back to the end of the time its document covers.
 */
interface UsageRange {
  collection: string;
  /** Of the documents' buckets; null for per-call documents. */
  granularity: Granularity | null;
  prefix: string;
  from: string;
  covers: (key: string) => number;
}

async function usageRanges(rm: ReadModelStore, accountId: string, cutoffOf: (g: Granularity | null) => number): Promise<UsageRange[]> {
  const ranges: UsageRange[] = [];
  const own = `${accountId}/`;
  const bucketed = (collection: string, prefix: string, g: Granularity, bucketOf: (rest: string) => string): UsageRange => ({
    collection,
    granularity: g,
    prefix,
    from: bucketName(cutoffOf(g), g),
    covers: (key) => bucketEnd(bucketStart(bucketOf(key.slice(prefix.length))), g),
  });
  const firstSegment = (rest: string): string => rest.split('/', 1)[0] ?? '';
  for (const g of GRANULARITIES) ranges.push(bucketed(USAGE_METRICS.rollups, granularityPrefix(accountId, g), g, firstSegment));
  for (const g of ERROR_GROUP_GRANULARITIES) ranges.push(bucketed(USAGE_METRICS.errorGroups, granularityPrefix(accountId, g), g, firstSegment));
  ranges.push(bucketed(USAGE_METRICS.requestBlocks, own, 'hour', firstSegment));
  for (const collection of [USAGE_METRICS.requests, USAGE_METRICS.recentErrors]) {
    ranges.push({
      collection,
      granularity: null,
      prefix: own,
      from: new Date(cutoffOf(null)).toISOString(),
      covers: (key) => Date.parse(firstSegment(key.slice(own.length))),
    });
  }
  const tokens = await rm.range(COLLECTIONS.tokensByAccount, { prefix: own });
  for (const { key } of tokens) {
    ranges.push(bucketed(USAGE_METRICS.clientIps, `${own}${key.slice(own.length)}/`, 'day', firstSegment));
  }
  return ranges;
}

/**
 * Deletes an account's usage read models that a plan keeping usage `retentionDays` no longer
 * keeps at `now`: every roll-up, error-group and request-block bucket that ends before its
 * granularity's cutoff (the bucket holding the cutoff stays, it is partly inside the window),
 * per-call documents, and client-IP days. Keys lead with the account and then the time, so
 * each is one key-range delete.
 */
export async function purgeAccountUsage(rm: ReadModelStore, accountId: string, now: Date, retentionDays: number): Promise<number> {
  let deleted = 0;
  const cutoffOf = (g: Granularity | null): number => retentionCutoff(now, granularityRetention(g, retentionDays));
  for (const { collection, prefix, from } of await usageRanges(rm, accountId, cutoffOf)) {
    deleted += await deleteRange(rm, collection, prefix, prefix + from);
  }
  return deleted;
}

/**
 * After an upgrade from a plan keeping usage `fromDays` to one keeping it `toDays`, on a store
 * that expires documents: the account's usage documents get the expiry of the new retention,
 * so that what the account has keeps as long as its plan now says. Expiries only move later
 * (the furthest is kept), nothing else is written (counts may be moving), only documents a
 * day inside the old window are touched, so that none is written back after the store dropped
 * it, and granularities whose retention does not change (minutes past MINUTE_RETENTION_DAYS)
 * are left alone. Returns how many were touched.
 */
export async function extendAccountUsage(rm: ReadModelStore, accountId: string, now: Date, fromDays: number, toDays: number): Promise<number> {
  let extended = 0;
  const cutoffOf = (g: Granularity | null): number => retentionCutoff(now, granularityRetention(g, fromDays)) + DAY_MS;
  for (const range of await usageRanges(rm, accountId, cutoffOf)) {
    const retentionDays = granularityRetention(range.granularity, toDays);
    if (retentionDays === granularityRetention(range.granularity, fromDays)) continue;
    let gte = range.prefix + range.from;
    for (;;) {
      const page = await rm.range(range.collection, { prefix: range.prefix, gte, limit: PAGE });
      const writes: ReadModelWrite[] = [];
      for (const { key } of page) {
        const covered = range.covers(key);
        if (Number.isFinite(covered)) {
          writes.push({ op: 'merge', collection: range.collection, key, fields: {}, expiresAt: usageExpiry(covered, retentionDays) });
        }
      }
      if (writes.length > 0) await rm.write(writes);
      extended += writes.length;
      const last = page[page.length - 1];
      if (page.length < PAGE || !last) break;
      gte = `${last.key}\0`;
    }
  }
  return extended;
}

/** The job's own record per account (no projection's: a rebuild leaves it): the retention applied last, and the last full sweep. */
export const RETENTION_STATE = 'usage_retention';
interface RetentionState extends Doc {
  retentionDays: number;
  sweptAt: number;
}

export interface RetentionJob {
  /** One pass over every account (the usage log's retention, then the read models'); resolves with the number of documents deleted. */
  runOnce(): Promise<number>;
  /** Stops the timer and waits for a pass in progress. */
  stop(): Promise<void>;
}

export interface RetentionOptions {
  readModels: ReadModelStore;
  /**
   * The event store, where the usage log is kept for the plans' retention too: each pass first
   * summarises the months due and truncates the usage streams (logRetention.ts). Without it,
   * only the read models are purged.
   */
  store?: EventStore;
  /** Hears each pass's log retention. */
  onLogPass?: (report: LogRetentionReport) => void;
  plans: PlanCatalog;
  now: () => Date;
  /** Between passes; an hour by default (retention is counted in days). */
  intervalMs?: number;
  /** Before the first pass, so that start-up is not slowed down. */
  initialDelayMs?: number;
  /**
   * On a store that expires documents itself: how often an account's usage is still swept by
   * key ranges when its plan did not change (documents written without an expiry: events
   * recorded before it was carried, replayed by a rebuild). A day by default.
   */
  sweepEveryMs?: number;
  onError?: (error: unknown) => void;
}

/**
 * Applies each plan's data retention (Free 7 days … Unlimited 365) to the usage read models,
 * and, given the event store, to the usage log (logRetention.ts). Queries clamp to the same window, so what is past retention is never shown even before it is
 * deleted.
 *
 * - A store without expiry (the embedded LevelDB): every pass deletes what falls out of each
 *   account's window, by key ranges.
 * - A store that expires documents (MongoDB's TTL index on the expiry each call carries, from
 *   the plan it was metered under): the store deletes; a pass only handles what the expiries
 *   cannot know — a downgrade (key-range delete at the new, shorter window), an upgrade (the
 *   documents still there get the longer expiry), and once a day a sweep for documents written
 *   without an expiry.
 */
export function startRetentionJob(options: RetentionOptions): RetentionJob {
  const { readModels: rm, plans, now } = options;
  const sweepEveryMs = options.sweepEveryMs ?? DAY_MS;
  let pass: Promise<number> | null = null;
  let stopped = false;

  /** One account on a store that expires documents; returns the documents deleted. */
  const applyExpiring = async (accountId: string, retentionDays: number): Promise<number> => {
    const state = await rm.get<RetentionState>(RETENTION_STATE, accountId);
    const t = now();
    let deleted = 0;
    if (state && state.retentionDays < retentionDays) {
      await extendAccountUsage(rm, accountId, t, state.retentionDays, retentionDays);
    }
    const sweep = !state || state.retentionDays > retentionDays || t.getTime() - state.sweptAt >= sweepEveryMs;
    if (sweep) deleted = await purgeAccountUsage(rm, accountId, t, retentionDays);
    if (!state || sweep || state.retentionDays !== retentionDays) {
      const next: RetentionState = { retentionDays, sweptAt: sweep ? t.getTime() : state.sweptAt };
      await rm.write([{ op: 'put', collection: RETENTION_STATE, key: accountId, doc: next }]);
    }
    return deleted;
  };

  const sweep = async (): Promise<number> => {
    let deleted = 0;
    let gte = '';
    for (;;) {
      const accounts = await rm.range<AccountDoc>(COLLECTIONS.accounts, { gte, limit: 500 });
      for (const { key, doc } of accounts) {
        if (stopped) return deleted;
        const retentionDays = plans[doc.plan]?.retention_days;
        if (retentionDays === undefined) continue;
        deleted += rm.expires ? await applyExpiring(key, retentionDays) : await purgeAccountUsage(rm, key, now(), retentionDays);
      }
      const last = accounts[accounts.length - 1];
      if (accounts.length < 500 || !last) return deleted;
      gte = `${last.key}\0`;
    }
  };

  /** The log first: a month is summarised before the read models it is summarised from go (retention of 7 days and more). */
  const logThenReadModels = async (): Promise<number> => {
    if (options.store) {
      try {
        const report = await runLogRetentionPass({ store: options.store, readModels: rm, plans, now, stopped: () => stopped });
        options.onLogPass?.(report);
      } catch (error) {
        options.onError?.(error); // the read models are purged all the same
      }
    }
    return sweep();
  };

  const runOnce = (): Promise<number> => {
    pass ??= logThenReadModels().finally(() => {
      pass = null;
    });
    return pass;
  };

  const tick = () => {
    runOnce().catch((e: unknown) => options.onError?.(e));
  };
  const first = setTimeout(tick, options.initialDelayMs ?? 60_000);
  const timer = setInterval(tick, options.intervalMs ?? 60 * 60_000);
  first.unref();
  timer.unref();

  return {
    runOnce,
    async stop() {
      stopped = true;
      clearTimeout(first);
      clearInterval(timer);
      await pass?.catch(() => undefined);
    },
  };
}
