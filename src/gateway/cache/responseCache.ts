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

  /**
   * `ttlMs`: for answers that depend on the head, a bound in case head tracking stops. The key
   * and the result are kept as copies of their own: the key holds the call's params and the
   * result is the node's answer, both slices of a whole body, which V8 keeps alive whole behind
   * a slice of 13 characters or more. Kept as given, each entry held the caller's request body
   * (up to MAX_BODY_BYTES: a batch padded with whitespace, or a member beside a big one) and the
   * node's whole answer, while the cache counted the slices' length only: 100 calls padded to
   * 200 KB kept 22 MB alive for 28 KB counted (found by bench/soak.ts's heap diffs).
   */
  set(key: string, resultText: string, ttlMs?: number): void {
    if ((resultText.length + key.length) * 2 + 64 > this.maxBytes / 16) return;
    this.lru.set(ownCopy(key), ownCopy(resultText), ttlMs === undefined ? undefined : { ttl: ttlMs });
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

/** A string with storage of its own (JSON's round trip is exact for any string): not a view into a bigger one, nor a concatenation of its parts. */
const ownCopy = (s: string): string => JSON.parse(JSON.stringify(s)) as string;

/** The default bound: 64 MiB (RESPONSE_CACHE_MB's default, src/config.ts). */
export const DEFAULT_CACHE_BYTES = 64 * 1024 * 1024;
