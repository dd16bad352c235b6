import { MemoryUsageBackend, MemoryUsageQueue } from './memory.js';
import type { UsageQueue } from './port.js';
import { RedisUsageQueue } from './redis.js';

export type { QueuedUsage, UsageQueue } from './port.js';
export { MemoryUsageBackend, MemoryUsageQueue } from './memory.js';
export { RedisUsageQueue } from './redis.js';
export { UsageIngester, type UsageIngesterOptions } from './ingester.js';

export interface OpenUsageQueueOptions {
  /** A Redis stream shared by every gateway and ingester; without it, a queue in this process. */
  redisUrl?: string;
  /**
   * This process's consumer name (stable across restarts, e.g. the host name): a restarted
   * consumer resumes the records it had read but not acknowledged.
   */
  consumer: string;
  /** Redis streams the records are spread over by account (USAGE_STREAMS); default: RedisUsageQueue's. */
  streams?: number | undefined;
}

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedUsageQueue = UsageQueue & { whenReady(timeoutMs?: number): Promise<void> };

export function openUsageQueue(options: OpenUsageQueueOptions): OpenedUsageQueue {
  if (options.redisUrl) return new RedisUsageQueue(options.redisUrl, { consumer: options.consumer, ...(options.streams ? { streams: options.streams } : {}) });
  // In process: the runtime opens one and hands it to the gateway and the ingester alike.
  return new MemoryUsageQueue(new MemoryUsageBackend(), options.consumer);
}
