import type { MaybePromise } from '../../domain/maybePromise.js';
import { type LimitDecision, type Limiter, type LimitRequest, ownBucketBesides } from './port.js';
import { decide, MONTHLY_RETENTION_SECONDS, monthId, nextMonthStart, rateWindow } from './window.js';

interface RateWindow {
  second: number;
  used: number;
}

/** Old windows and months are swept at most this often (lazily, on a call: no timer to leak). */
const PRUNE_EVERY_SECONDS = 10;

/**
 * What a quota bucket (`token:<id>`, `account:<id>`) had used in a month before this process
 * counted it: read once per bucket and month, from what outlives the process (the usage totals).
 */
export type QuotaUsedBefore = (bucket: string, nowMs: number) => Promise<number>;

/**
 * In-process limiter with the same semantics as the Redis one: each `take` is one
 * synchronous step (check and count), so concurrent calls in this process never over-admit.
 * Counts live as long as the process; with `usedBefore`, a bucket's month starts from what it
 * had used before (a restart gives no fresh quota): its first call waits for that read, the
 * others take the synchronous step. A granted call also counts in its token's own month when
 * its bucket is the account's (`ownBucketBesides`).
 */
export class MemoryLimiter implements Limiter {
  private readonly rateWindows = new Map<string, RateWindow>();
  /** Monthly counts by `<bucket>|<YYYYMM>`, with the month's expiry (Unix s) for pruning. */
  private readonly monthly = new Map<string, { used: number; expireAt: number }>();
  /** Buckets whose month is being read from `usedBefore`, by monthly key: one read each. */
  private readonly seeding = new Map<string, Promise<void>>();
  private lastPruneSecond = 0;

  constructor(private readonly usedBefore: QuotaUsedBefore | null = null) {}

  take(request: LimitRequest): MaybePromise<LimitDecision> {
    const usedBefore = this.usedBefore;
    if (usedBefore === null) return this.takeNow(request);
    const { nowMs } = request;
    const key = monthlyKey(request.monthly.key, nowMs);
    const own = ownBucketBesides(request.tokenId, request.monthly.key);
    const ownKey = own === null ? null : monthlyKey(own, nowMs);
    const bucketSeeded = this.monthly.has(key);
    const ownSeeded = ownKey === null || this.monthly.has(ownKey);
    if (bucketSeeded && ownSeeded) return this.takeNow(request);
    // The token's own month is read with its first call whatever its bucket: counted from then
    // on, it needs no read when a monthly limit is set on the token mid-month.
    const seeds: Promise<void>[] = [];
    if (!bucketSeeded) seeds.push(this.seed(key, request.monthly.key, nowMs, usedBefore));
    if (own !== null && ownKey !== null && !ownSeeded) seeds.push(this.seed(ownKey, own, nowMs, usedBefore));
    return Promise.all(seeds).then(() => this.takeNow(request));
  }

  private seed(key: string, bucket: string, nowMs: number, usedBefore: QuotaUsedBefore): Promise<void> {
    let pending = this.seeding.get(key);
    if (pending === undefined) {
      pending = usedBefore(bucket, nowMs)
        .then((used) => this.seedMonthly(bucket, nowMs, used))
        .finally(() => this.seeding.delete(key));
      this.seeding.set(key, pending);
    }
    return pending;
  }

  /** The synchronous step, also used by the resilient limiter's fallback. */
  takeNow(request: LimitRequest): LimitDecision {
    const second = rateWindow(request.nowMs);
    this.pruneIfDue(second);

    const window = this.rateWindows.get(request.tokenId);
    const rateUsed = window && window.second === second ? window.used : 0;
    const monthKey = monthlyKey(request.monthly.key, request.nowMs);
    const month = this.monthly.get(monthKey);
    const decision = decide(request, rateUsed, month?.used ?? 0);

    if (decision.granted > 0) {
      // Counted in place: the common call allocates no new window or month entry.
      if (window === undefined) this.rateWindows.set(request.tokenId, { second, used: decision.granted });
      else {
        window.second = second;
        window.used = rateUsed + decision.granted;
      }
      this.count(month, monthKey, decision.granted, request.nowMs);
      const own = ownBucketBesides(request.tokenId, request.monthly.key);
      if (own !== null) {
        const ownKey = monthlyKey(own, request.nowMs);
        this.count(this.monthly.get(ownKey), ownKey, decision.granted, request.nowMs);
      }
    }
    return decision;
  }

  /** Adds `granted` to a month's count, in place when it has one. */
  private count(month: { used: number } | undefined, key: string, granted: number, nowMs: number): void {
    // The key holds the month, so an entry's expiry never changes.
    if (month !== undefined) month.used += granted;
    else this.monthly.set(key, { used: granted, expireAt: nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS });
  }

  async monthlyUsed(key: string, nowMs: number): Promise<number> {
    return this.monthly.get(monthlyKey(key, nowMs))?.used ?? 0;
  }

  /**
   * Raises a bucket's count for the month to at least `used` (the resilient limiter seeds its
   * fallback with the last count Redis reported, so an outage does not restart the quota at 0).
   */
  seedMonthly(key: string, nowMs: number, used: number): void {
    const k = monthlyKey(key, nowMs);
    const current = this.monthly.get(k);
    if (!current || current.used < used) {
      this.monthly.set(k, { used, expireAt: nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS });
    }
  }

  async close(): Promise<void> {
    this.rateWindows.clear();
    this.monthly.clear();
  }

  private pruneIfDue(second: number): void {
    if (second - this.lastPruneSecond < PRUNE_EVERY_SECONDS) return;
    this.lastPruneSecond = second;
    for (const [token, window] of this.rateWindows) {
      if (window.second < second) this.rateWindows.delete(token);
    }
    for (const [key, month] of this.monthly) {
      if (month.expireAt < second) this.monthly.delete(key);
    }
  }
}

const monthlyKey = (bucket: string, nowMs: number): string => `${bucket}|${monthId(nowMs)}`;
