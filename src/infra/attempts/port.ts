/**
 * Attempts counted per key within a window: log-in failures per email and per client address,
 * sign-ups per address. Redis when configured, so the API instances count together; in process
 * otherwise.
 *
 * A key's window opens with the first attempt counted and lasts `windowMs`. Once it holds
 * `limit` attempts, further ones are refused, and not counted, until it ends. Times are the
 * caller's `nowMs`, never the server's, so tests can step a clock through a window.
 */
export interface AttemptRule {
  limit: number;
  windowMs: number;
}

export type AttemptVerdict = { allowed: true } | { allowed: false; retryAfterMs: number };

export interface AttemptCounter {
  /** Counts an attempt against `key`, or refuses it when the key's window is full. */
  take(key: string, rule: AttemptRule, nowMs: number): Promise<AttemptVerdict>;
  /** Uncounts one attempt of the key's current window (it turned out not to be a failure). */
  giveBack(key: string, nowMs: number): Promise<void>;
  /** Ends the key's window. */
  reset(key: string): Promise<void>;
  close(): Promise<void>;
}
