import { bucketStart, DAY_MS, floorTo, type Granularity, nextBucket } from './usageBuckets.js';

/**
 * When a usage document may be dropped (MongoDB's TTL): the retention the call was metered
 * under after the end of what the document covers — its bucket, or the call itself for
 * per-call documents. The same rule as the retention job's cutoff (a bucket goes once it ended
 * more than the retention ago, a call once it is that old), so the TTL and the job agree.
 */
export const usageExpiry = (coveredUntil: number, retentionDays: number): number => coveredUntil + retentionDays * DAY_MS;

/** The end (exclusive, epoch ms) of the bucket of granularity `g` holding `t`. */
export const bucketEnd = (t: number, g: Granularity): number => nextBucket(floorTo(t, g), g);

/**
 * Minute roll-ups (and minute error groups) are kept this many days at most, whatever the plan:
 * past that, a period is counted in whole hours (src/api/period.ts), as
 * time-series stores downsample. A minute document per token, chain and method is most of what
 * usage costs to store and to rebuild; a year of them for every combination is of no use to a
 * chart. Eight days, so that the dashboard's "last 7 days" stays exact to the minute.
 */
export const MINUTE_RETENTION_DAYS = 8;

/** The oldest time a plan keeping `retentionDays` still shows, as of `nowMs`: to the minute. */
export const retentionStart = (nowMs: number, retentionDays: number): number => floorTo(nowMs - retentionDays * DAY_MS, 'minute');

/** The days documents of granularity `g` (null: per-call documents) are kept under a plan that keeps usage `retentionDays`. */
export const granularityRetention = (g: Granularity | null, retentionDays: number): number =>
  g === 'minute' ? Math.min(retentionDays, MINUTE_RETENTION_DAYS) : retentionDays;

/** No expiry: records from before the retention was carried (the retention job deletes those). */
const NONE = (): undefined => undefined;

/**
 * The expiry of each document of one call at `at` (canonical ISO) metered under
 * `retentionDays`: by the bucket's granularity, or `null` for per-call documents.
 */
export function usageExpiryOf(at: string, retentionDays: number | undefined): (g: Granularity | null) => number | undefined {
  const days = validRetention(retentionDays);
  if (days === undefined) return NONE;
  const t = Date.parse(at);
  return (g) => usageExpiry(g === null ? t : bucketEnd(t, g), granularityRetention(g, days));
}

/** A retention that gives documents an expiry (a positive whole number of days), else undefined. */
export const validRetention = (retentionDays: number | undefined): number | undefined =>
  retentionDays !== undefined && Number.isSafeInteger(retentionDays) && retentionDays > 0 ? retentionDays : undefined;

/** The longer of two retentions (undefined: none). */
export const longerRetention = (a: number | undefined, b: number | undefined): number | undefined =>
  a === undefined ? b : b === undefined ? a : Math.max(a, b);

/**
 * The expiry of the document of bucket `bucket` (its name) of granularity `g` whose calls' longest
 * valid retention is `retentionDays`: the furthest of the expiries its calls give it, since all
 * of them end with the bucket. Computed once per document instead of per call.
 */
export const bucketExpiry = (bucket: string, g: Granularity, retentionDays: number | undefined): number | undefined =>
  retentionDays === undefined ? undefined : usageExpiry(nextBucket(bucketStart(bucket), g), granularityRetention(g, retentionDays));
