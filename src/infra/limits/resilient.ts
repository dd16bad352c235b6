import type { MaybePromise } from '../../domain/maybePromise.js';
import { withinDeadline } from '../deadline.js';
import { MemoryLimiter } from './memory.js';
import type { LimitDecision, Limiter, LimitRequest, QuotaUsedBefore, RefundRequest } from './port.js';
import type { MonthAdjustment, UnsettledUnits } from './redis.js';
import { nextMonthStart, rateWindow } from './window.js';

const REDIS_COOLDOWN_MS = 500;
/** How long a call counted in process waits for its bucket's month from the usage totals. */
const FALLBACK_READ_MS = 250;

/** The shared limiter under the fallback: Redis (through its leases). */
export type SharedLimiter = Limiter & {
  readonly ready: boolean;
  whenReady(timeoutMs?: number): Promise<void>;
  /** Holds month units counted or given back without Redis, sent once it answers again (RedisLimiter.owe). */
  owe(adjustment: MonthAdjustment): void;
  readonly unsettled: UnsettledUnits;
};

export interface ResilientLimiterOptions {
  /**
   * What to do while Redis is unreachable.
   * - fail-open (default): answer from an in-process limiter, so each gateway instance
   *   enforces the limits on its own share of traffic (N instances may admit up to N × rps
   *   in total); the monthly counts made meanwhile are held and added to Redis's months once it
   *   answers again (`SharedLimiter.owe`).
   * - fail-closed: refuse every call as the limits being unavailable (`granted: 0`,
   *   `refusedBy: 'unavailable'`, `retryAfterSeconds: 1`): the gateway answers 503, not a 429
   *   that would tell the caller it exceeded a limit; the monthly `remaining` is null (unknown).
   */
  failClosed?: boolean;
  /**
   * Fail-open: what a bucket this process has no Redis count of used in the month (the usage
   * totals), read with its first call counted in process; without it, such a bucket's month
   * starts at 0 in process.
   */
  usedBefore?: QuotaUsedBefore;
}

/**
 * The Redis limiter, with a fallback when Redis is unreachable (disconnected, a command error
 * or a timeout): never a stalled or failed call on the gateway's hot path. It goes back to
 * Redis as soon as the connection is ready again (ioredis reconnects on its own).
 */
export class ResilientLimiter implements Limiter {
  private readonly fallback: MemoryLimiter;
  /** After a failed command, Redis is left alone this long, so a hung server costs one timeout, not one per call. */
  private skipRedisUntil = 0;
  /** Number of calls answered without Redis (for /metrics and tests). */
  fallbackCount = 0;
  lastError: Error | null = null;

  constructor(
    private readonly redis: SharedLimiter,
    private readonly options: ResilientLimiterOptions = {},
  ) {
    const { usedBefore } = options;
    // A call waits for the read: at most FALLBACK_READ_MS, then the bucket counts from 0 in process (its later calls wait no more).
    this.fallback = new MemoryLimiter(
      usedBefore === undefined
        ? null
        : (bucket, nowMs) => withinDeadline(usedBefore(bucket, nowMs), FALLBACK_READ_MS, () => new Error('no totals')).catch(() => 0),
    );
  }

  /** Where the next call goes. */
  get backend(): 'redis' | 'fallback' {
    return this.useRedis() ? 'redis' : 'fallback';
  }

  /** Resolves once Redis is connected (at startup, to start counting there at once), or rejects after `timeoutMs`. */
  async whenReady(timeoutMs = 5000): Promise<void> {
    await this.redis.whenReady(timeoutMs);
  }

  /** At once when Redis's lease (or the fallback) decides without I/O. */
  take(request: LimitRequest): MaybePromise<LimitDecision> {
    if (!this.useRedis()) return this.withoutRedis(request);
    let decision: MaybePromise<LimitDecision>;
    try {
      decision = this.redis.take(request);
    } catch (error) {
      return this.failedOver(request, error);
    }
    if (decision instanceof Promise) {
      return decision.then(
        (d) => this.seeded(request, d),
        (error: unknown) => this.failedOver(request, error),
      );
    }
    return this.seeded(request, decision);
  }

  /** Remembers the month's count, so a later fallback starts from it rather than from 0. */
  private seeded(request: LimitRequest, decision: LimitDecision): LimitDecision {
    if (decision.monthly.limit !== null && decision.monthly.remaining !== null) {
      this.fallback.seedMonthly(request.monthly.key, request.nowMs, decision.monthly.limit - decision.monthly.remaining);
    }
    return decision;
  }

  private failedOver(request: LimitRequest, error: unknown): MaybePromise<LimitDecision> {
    this.failed(error);
    return this.withoutRedis(request);
  }

  private withoutRedis(request: LimitRequest): MaybePromise<LimitDecision> {
    this.fallbackCount += 1;
    if (this.options.failClosed) return refuseAll(request);
    const decision = this.fallback.take(request);
    return decision instanceof Promise ? decision.then((d) => this.owedFor(request, d)) : this.owedFor(request, decision);
  }

  /** What the fallback granted, owed to Redis's months. */
  private owedFor(request: LimitRequest, decision: LimitDecision): LimitDecision {
    if (decision.granted > 0) this.redis.owe({ tokenId: request.tokenId, bucket: request.monthly.key, nowMs: request.nowMs, units: decision.granted });
    return decision;
  }

  /** Monthly units Redis did not take and this process no longer holds (for /metrics and tests). */
  get unsettled(): UnsettledUnits {
    return this.redis.unsettled;
  }

  /**
   * Gives back units where the next call is decided: to Redis while it is used, and to the
   * fallback's month in any case (seeded from Redis's counts, it would otherwise start an outage
   * above them). While Redis is not used the units are owed to it, with the counts made
   * meanwhile, and sent once it answers again; one Redis refuses is owed by the Redis limiter.
   */
  refund(request: RefundRequest): MaybePromise<void> {
    void this.fallback.refund(request);
    const owed = { tokenId: request.tokenId, bucket: request.bucket, nowMs: request.nowMs, units: -request.units };
    if (!this.useRedis()) return this.redis.owe(owed);
    try {
      return this.redis.refund(request);
    } catch (error) {
      this.failed(error);
      this.redis.owe(owed);
    }
  }

  async monthlyUsed(key: string, nowMs: number): Promise<number> {
    if (this.useRedis()) {
      try {
        return await this.redis.monthlyUsed(key, nowMs);
      } catch (error) {
        this.failed(error);
      }
    }
    return this.fallback.monthlyUsed(key, nowMs);
  }

  private useRedis(): boolean {
    return this.redis.ready && Date.now() >= this.skipRedisUntil;
  }

  private failed(error: unknown): void {
    this.lastError = error instanceof Error ? error : new Error(String(error));
    this.skipRedisUntil = Date.now() + REDIS_COOLDOWN_MS;
  }

  async close(): Promise<void> {
    await this.redis.close();
    await this.fallback.close();
  }
}

function refuseAll(request: LimitRequest): LimitDecision {
  return {
    granted: 0,
    refusedBy: request.cost > 0 ? 'unavailable' : null,
    rate: { limit: request.rps, remaining: 0, resetAt: rateWindow(request.nowMs) + 1 },
    monthly: { limit: request.monthly.limit, remaining: null, resetAt: nextMonthStart(request.nowMs) },
    retryAfterSeconds: request.cost > 0 ? 1 : null,
  };
}
