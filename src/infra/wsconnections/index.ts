import { MemoryConnectionCounter } from './memory.js';
import type { ConnectionCounter } from './port.js';
import { RedisConnectionCounter, type RedisConnectionCounterOptions } from './redis.js';

export { MemoryConnectionCounter } from './memory.js';
export type { ConnectionCounter, ConnectionVerdict } from './port.js';
export { RedisConnectionCounter } from './redis.js';

export interface OpenConnectionCounterOptions {
  /** Redis, for counts shared by every gateway instance; without it, this process counts its own. */
  redisUrl?: string | undefined;
  /** With Redis: how long a vanished instance's connections keep counting (WS_INSTANCE_TTL_MS). */
  instanceTtlMs?: number;
  /** With Redis: where the start and end of counting without it are said. */
  log?: RedisConnectionCounterOptions['log'];
}

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedConnectionCounter = ConnectionCounter & { whenReady(timeoutMs?: number): Promise<void> };

export function openConnectionCounter(options: OpenConnectionCounterOptions = {}): OpenedConnectionCounter {
  if (options.redisUrl) {
    return new RedisConnectionCounter(options.redisUrl, {
      ...(options.instanceTtlMs === undefined ? {} : { instanceTtlMs: options.instanceTtlMs }),
      ...(options.log === undefined ? {} : { log: options.log }),
    });
  }
  return Object.assign(new MemoryConnectionCounter(), { whenReady: async () => {} });
}
