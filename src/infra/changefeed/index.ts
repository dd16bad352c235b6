import { MemoryChangeFeed } from './memory.js';
import type { ChangeFeed } from './port.js';
import { RedisChangeFeed } from './redis.js';

export { MemoryChangeFeed } from './memory.js';
export { type ChangeFeed, FEED_RESUMED } from './port.js';
export { RedisChangeFeed } from './redis.js';

export interface OpenChangeFeedOptions {
  /** Redis pub/sub reaches every instance; without it, only this process's roles hear a change. */
  redisUrl?: string;
}

/** `whenReady` resolves once the backend is connected (at startup; rejects after the timeout). */
export type OpenedChangeFeed = ChangeFeed & { whenReady(timeoutMs?: number): Promise<void> };

export function openChangeFeed(options: OpenChangeFeedOptions = {}): OpenedChangeFeed {
  return options.redisUrl ? new RedisChangeFeed(options.redisUrl) : new MemoryChangeFeed();
}
