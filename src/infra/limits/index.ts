import { LeasedLimiter } from './leased.js';
import { type AccountPlanReads, MemoryLimiter } from './memory.js';
import type { Limiter, QuotaUsedBefore } from './port.js';
import { RedisLimiter } from './redis.js';
import { ResilientLimiter } from './resilient.js';

export { LeasedLimiter } from './leased.js';
export { MemoryLimiter } from './memory.js';
export type { LimitDecision, Limiter, LimitRequest } from './port.js';
export { RedisLimiter } from './redis.js';
export { ResilientLimiter } from './resilient.js';

export interface OpenLimiterOptions {
  /** Redis for counters shared by every gateway instance; without it, counts live in this process. */
  redisUrl?: string;
  /** With Redis: refuse calls while Redis is unreachable instead of counting in memory. */
  failClosed?: boolean;
  /**
   * What each bucket used in a month before its counter counted it, so a restart gives no fresh
   * quota: in process, read with each bucket's first call; with Redis, when a month counter is
   * made mid-month (Redis restarted empty, a failover to a replica behind), and while Redis is
   * away, for a bucket this process has no count of from Redis.
   */
  usedBefore?: QuotaUsedBefore;
  /**
   * In process: what an account's month needs to follow a plan change that turns custom limits
   * off or on (MemoryLimiter.accountPlanChanged; with Redis the projector moves it, planChange.ts).
   */
  accounts?: AccountPlanReads;
}

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedLimiter = Limiter & { whenReady(timeoutMs?: number): Promise<void> };

/**
 * How long a fail-closed gateway waits for a lease. Fail-open's 50 ms suits a gateway that then
 * counts in process; one that refuses instead would answer 503 for any pause longer than that (a
 * graceful failover moves a master in 20–215 ms), and a wait is better than a refusal.
 */
const FAIL_CLOSED_LEASE_DEADLINE_MS = 500;

export function openLimiter(options: OpenLimiterOptions = {}): OpenedLimiter {
  if (options.redisUrl) {
    const failClosed = options.failClosed ?? false;
    const redis = new RedisLimiter(options.redisUrl, {
      ...(failClosed ? { commandTimeoutMs: FAIL_CLOSED_LEASE_DEADLINE_MS } : {}),
      ...(options.usedBefore ? { restoreFrom: options.usedBefore } : {}),
    });
    return new ResilientLimiter(new LeasedLimiter(redis), { failClosed, ...(options.usedBefore ? { usedBefore: options.usedBefore } : {}) });
  }
  // In process: the runtime opens one and hands it to every role of the process.
  return Object.assign(new MemoryLimiter(options.usedBefore ?? null, options.accounts ?? null), { whenReady: async () => {} });
}
