import { MemoryUsageBackend, MemoryUsageQueue } from './memory.js';
import type { UsageQueue } from './port.js';
import { RedisUsageQueue } from './redis.js';

export { UsageIngester, type UsageIngesterOptions } from './ingester.js';
export { MemoryUsageBackend, MemoryUsageQueue } from './memory.js';
export type { QueuedUsage, UsageQueue } from './port.js';
export { RedisUsageQueue } from './redis.js';

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
  /** Replicas a send's records must reach before their calls are answered (REDIS_USAGE_WAIT_REPLICAS; 0: none), and how long that waits at most (REDIS_USAGE_WAIT_MS). */
  replicaWait?: { replicas: number; timeoutMs: number } | undefined;
}

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedUsageQueue = UsageQueue & { whenReady(timeoutMs?: number): Promise<void> };

export function openUsageQueue(options: OpenUsageQueueOptions): OpenedUsageQueue {
  if (options.redisUrl) {
    return new RedisUsageQueue(options.redisUrl, {
      consumer: options.consumer,
      ...(options.streams ? { streams: options.streams } : {}),
      ...(options.replicaWait ? { waitReplicas: options.replicaWait.replicas, replicaWaitMs: options.replicaWait.timeoutMs } : {}),
    });
  }
  // In process: the runtime opens one and hands it to the gateway and the ingester alike.
  return new MemoryUsageQueue(new MemoryUsageBackend(), options.consumer);
}
