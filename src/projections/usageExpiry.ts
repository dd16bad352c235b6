import { DAY_MS, floorTo, type Granularity, nextBucket } from './usageBuckets.js';

/**
 * When a usage document may be dropped (MongoDB's TTL): the retention the call was metered
 * under after the end of what the document covers — its bucket, or the call itself for
 * per-call documents. The same rule as the retention job's cutoff (a bucket goes once it ended
 * more than the retention ago, a call once it is that old), so the TTL and the job agree.
 */
export const usageExpiry = (coveredUntil: number, retentionDays: number): number => coveredUntil + retentionDays * DAY_MS;

/** The end (exclusive, epoch ms) of the bucket of granularity `g` holding `t`. */
export const bucketEnd = (t: number, g: Granularity): number => nextBucket(floorTo(t, g), g);

/** No expiry: records from before the retention was carried (the retention job deletes those). */
const NONE = (): undefined => undefined;

/**
 * The expiry of each document of one call at `at` (canonical ISO) metered under
 * `retentionDays`: by the bucket's granularity, or `null` for per-call documents.
 */
export function usageExpiryOf(at: string, retentionDays: number | undefined): (g: Granularity | null) => number | undefined {
  if (retentionDays === undefined || !Number.isSafeInteger(retentionDays) || retentionDays <= 0) return NONE;
  const t = Date.parse(at);
  return (g) => usageExpiry(g === null ? t : bucketEnd(t, g), retentionDays);
}
