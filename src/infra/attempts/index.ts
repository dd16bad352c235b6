import { MemoryAttemptCounter } from './memory.js';
import type { AttemptCounter } from './port.js';
import { RedisAttemptCounter } from './redis.js';
import { ResilientAttemptCounter } from './resilient.js';

export { MemoryAttemptCounter } from './memory.js';
export type { AttemptCounter, AttemptRule, AttemptVerdict } from './port.js';
export { RedisAttemptCounter } from './redis.js';
export { ResilientAttemptCounter } from './resilient.js';

export interface OpenAttemptCounterOptions {
  /** Redis, for counts shared by every API instance; without it, counts live in this process. */
  redisUrl?: string | undefined;
}

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedAttemptCounter = AttemptCounter & { whenReady(timeoutMs?: number): Promise<void> };

export function openAttemptCounter(options: OpenAttemptCounterOptions = {}): OpenedAttemptCounter {
  if (options.redisUrl) return new ResilientAttemptCounter(new RedisAttemptCounter(options.redisUrl));
  return Object.assign(new MemoryAttemptCounter(), { whenReady: async () => {} });
}
