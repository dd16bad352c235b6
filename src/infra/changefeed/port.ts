/**
 * Change notifications between processes (token revoked, disabled, limits changed...), so
 * every gateway instance drops a stale cache entry within a second. Redis pub/sub in
 * production, an in-process emitter on the embedded default.
 */
/**
 * Delivered to every handler of every topic when the feed may have lost messages: a Redis
 * subscriber reconnected (pub/sub keeps nothing for a subscriber that is away). Whatever a
 * subscriber holds from before may be stale: it drops or checks it all again.
 */
export const FEED_RESUMED = 'feed:resumed';

export interface ChangeFeed {
  publish(topic: string, message: string): Promise<void>;
  /** Returns a function that unsubscribes. */
  subscribe(topic: string, handler: (message: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}
