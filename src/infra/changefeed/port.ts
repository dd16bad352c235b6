/**
 * Change notifications between processes (token revoked, disabled, limits changed...), so
 * every gateway instance drops a stale cache entry within a second. Redis pub/sub in
 * production, an in-process emitter on the embedded default.
 */
export interface ChangeFeed {
  publish(topic: string, message: string): Promise<void>;
  /** Returns a function that unsubscribes. */
  subscribe(topic: string, handler: (message: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}
