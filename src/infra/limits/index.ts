import { LeasedLimiter } from './leased.js';
import { MemoryLimiter, type QuotaUsedBefore } from './memory.js';
import type { Limiter } from './port.js';
import { RedisLimiter } from './redis.js';
import { ResilientLimiter } from './resilient.js';

export type { LimitDecision, LimitRequest, Limiter } from './port.js';
export { LeasedLimiter } from './leased.js';
export { MemoryLimiter } from './memory.js';
export { RedisLimiter } from './redis.js';
export { ResilientLimiter } from './resilient.js';

export interface OpenLimiterOptions {
  /** Redis for counters shared by every gateway instance; without it, counts live in this process. */
  redisUrl?: string;
  /** With Redis: refuse calls while Redis is unreachable instead of counting in memory. */
  failClosed?: boolean;
  /**
   * In process: what each bucket used in a month before this process counted it, so a restart
   * gives no fresh quota (with Redis the counts live there).
   */
  usedBefore?: QuotaUsedBefore;
}

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedLimiter = Limiter & { whenReady(timeoutMs?: number): Promise<void> };

export function openLimiter(options: OpenLimiterOptions = {}): OpenedLimiter {
  if (options.redisUrl) {
    return new ResilientLimiter(new LeasedLimiter(new RedisLimiter(options.redisUrl)), { failClosed: options.failClosed ?? false });
  }
  // In process: the runtime opens one and hands it to every role of the process.
  return Object.assign(new MemoryLimiter(options.usedBefore ?? null), { whenReady: async () => {} });
}
