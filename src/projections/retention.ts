import type { PlanCatalog } from '../domain/plans.js';
import type { ReadModelStore } from '../infra/readmodels/port.js';
import { type AccountDoc, COLLECTIONS } from './core.js';
import { bucketName, DAY_MS, floorTo, GRANULARITIES } from './usageBuckets.js';
import { ERROR_GROUP_GRANULARITIES, granularityPrefix, USAGE_METRICS } from './usageMetrics.js';

const PAGE = 1000;

/** The oldest time a plan still shows: `now` minus its retention, to the minute. */
export const retentionCutoff = (now: Date, retentionDays: number): number => floorTo(now.getTime() - retentionDays * DAY_MS, 'minute');

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
 * Deletes an account's usage read models older than `cutoff`: every roll-up and error-group
 * bucket that ends before it (the bucket holding the cutoff stays, it is partly inside the
 * window), raw rows, recent errors and client-IP days. Keys lead with the account and then the
 * time, so each is one key-range delete.
 */
export async function purgeAccountUsage(rm: ReadModelStore, accountId: string, cutoff: number): Promise<number> {
  let deleted = 0;
  for (const g of GRANULARITIES) {
    const prefix = granularityPrefix(accountId, g);
    deleted += await deleteRange(rm, USAGE_METRICS.rollups, prefix, prefix + bucketName(cutoff, g));
  }
  for (const g of ERROR_GROUP_GRANULARITIES) {
    const prefix = granularityPrefix(accountId, g);
    deleted += await deleteRange(rm, USAGE_METRICS.errorGroups, prefix, prefix + bucketName(cutoff, g));
  }
  const cutoffIso = new Date(cutoff).toISOString();
  for (const collection of [USAGE_METRICS.requests, USAGE_METRICS.recentErrors]) {
    deleted += await deleteRange(rm, collection, `${accountId}/`, `${accountId}/${cutoffIso}`);
  }
  const tokens = await rm.range(COLLECTIONS.tokensByAccount, { prefix: `${accountId}/` });
  for (const { key } of tokens) {
    const tokenId = key.slice(accountId.length + 1);
    const prefix = `${accountId}/${tokenId}/`;
    deleted += await deleteRange(rm, USAGE_METRICS.clientIps, prefix, prefix + bucketName(cutoff, 'day'));
  }
  return deleted;
}

export interface RetentionJob {
  /** One pass over every account; resolves with the number of documents deleted. */
  runOnce(): Promise<number>;
  /** Stops the timer and waits for a pass in progress. */
  stop(): Promise<void>;
}

export interface RetentionOptions {
  readModels: ReadModelStore;
  plans: PlanCatalog;
  now: () => Date;
  /** Between passes; an hour by default (retention is counted in days). */
  intervalMs?: number;
  /** Before the first pass, so that start-up is not slowed down. */
  initialDelayMs?: number;
  onError?: (error: unknown) => void;
}

/**
 * Applies each plan's data retention (Free 7 days … Unlimited 365) to the usage read models
 * by deleting what falls out of the window. Queries clamp to the same window, so what is past
 * retention is never shown even before a pass has deleted it. On MongoDB a TTL index would do
 * this server-side; the key-range deletes work on every adapter.
 */
export function startRetentionJob(options: RetentionOptions): RetentionJob {
  const { readModels: rm, plans, now } = options;
  let pass: Promise<number> | null = null;
  let stopped = false;

  const sweep = async (): Promise<number> => {
    let deleted = 0;
    let gte = '';
    for (;;) {
      const accounts = await rm.range<AccountDoc>(COLLECTIONS.accounts, { gte, limit: 500 });
      for (const { key, doc } of accounts) {
        if (stopped) return deleted;
        const retentionDays = plans[doc.plan]?.retention_days;
        if (retentionDays === undefined) continue;
        deleted += await purgeAccountUsage(rm, key, retentionCutoff(now(), retentionDays));
      }
      const last = accounts[accounts.length - 1];
      if (accounts.length < 500 || !last) return deleted;
      gte = `${last.key}\0`;
    }
  };

  const runOnce = (): Promise<number> => {
    pass ??= sweep().finally(() => {
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
