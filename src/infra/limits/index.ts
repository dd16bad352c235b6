import { MemoryLimiter } from './memory.js';
import type { Limiter } from './port.js';
import { RedisLimiter } from './redis.js';
import { ResilientLimiter } from './resilient.js';

export type { LimitDecision, LimitRequest, Limiter } from './port.js';
export { MemoryLimiter } from './memory.js';
export { RedisLimiter } from './redis.js';
export { ResilientLimiter } from './resilient.js';

export interface OpenLimiterOptions {
  /** Redis for counters shared by every gateway instance; without it, counts live in this process. */
  redisUrl?: string;
  /** With Redis: refuse calls while Redis is unreachable instead of counting in memory. */
  failClosed?: boolean;
}

/** One in-process limiter per process, so roles run together (gateway, api) see the same counts. */
let processLimiter: MemoryLimiter | undefined;

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedLimiter = Limiter & { whenReady(timeoutMs?: number): Promise<void> };

export function openLimiter(options: OpenLimiterOptions = {}): OpenedLimiter {
  if (options.redisUrl) {
    return new ResilientLimiter(new RedisLimiter(options.redisUrl), { failClosed: options.failClosed ?? false });
  }
  processLimiter ??= new MemoryLimiter();
  const shared = processLimiter;
  return {
    take: (request) => shared.take(request),
    monthlyUsed: (key, nowMs) => shared.monthlyUsed(key, nowMs),
    // Other roles of this process still use the counts.
    close: async () => {},
    whenReady: async () => {},
  };
}
