import { LRUCache } from 'lru-cache';
import type { SharedCache } from './sharedCache.js';

/**
 * Answers that cannot change (or not before the tracked head moves), kept in process: the
 * `result` of a JSON-RPC answer as JSON text by the call's key, bounded by bytes with the least
 * recently used entries evicted first. The answer a caller gets is rebuilt around the result
 * with its own id. What may be kept is decided by src/gateway/cache/rpcReads.ts.
 */
export class ResponseCache {
  private readonly lru: LRUCache<string, string>;
  /** The second level shared by every gateway instance (final answers only); null: in process only. */
  private sharedLevel: SharedCache | null = null;

  constructor(readonly maxBytes: number) {
    // Keys hold the call's params (an eth_call's data can be kilobytes): they count too.
    this.lru = new LRUCache<string, string>({ maxSize: maxBytes, sizeCalculation: (value, key) => (value.length + key.length) * 2 + 64 });
  }

  get(key: string): string | undefined {
    return this.lru.get(key);
  }

  /** `ttlMs`: for answers that depend on the head, a bound in case head tracking stops. */
  set(key: string, resultText: string, ttlMs?: number): void {
    if ((resultText.length + key.length) * 2 + 64 > this.maxBytes / 16) return;
    this.lru.set(key, resultText, ttlMs === undefined ? undefined : { ttl: ttlMs });
  }

  get shared(): SharedCache | null {
    return this.sharedLevel;
  }

  /** Adds the shared second level (RESPONSE_CACHE_REDIS, wired by src/runtime.ts). */
  shareWith(shared: SharedCache): void {
    this.sharedLevel = shared;
  }

  get size(): number {
    return this.lru.size;
  }

  get bytes(): number {
    return this.lru.calculatedSize;
  }
}

/** The default bound: 64 MiB (RESPONSE_CACHE_MB's default, src/config.ts). */
export const DEFAULT_CACHE_BYTES = 64 * 1024 * 1024;
