/** How failed deliveries are retried: exponential delays with jitter, a bounded number of attempts. */
export interface RetryPolicy {
  maxAttempts: number;
  /** Delay after the first failed attempt; each later one is `factor` times longer, up to `maxMs`. */
  baseMs: number;
  factor: number;
  maxMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 8, baseMs: 5_000, factor: 3, maxMs: 3_600_000 };

/**
 * The wait after `attemptsMade` failed attempts. "Equal jitter": half the delay is fixed, half
 * random, so receivers that failed together do not get the retries all at once.
 */
export function retryDelayMs(policy: RetryPolicy, attemptsMade: number, random: () => number = Math.random): number {
  const raw = Math.min(policy.maxMs, policy.baseMs * policy.factor ** Math.max(0, attemptsMade - 1));
  return Math.round(raw / 2 + (raw / 2) * random());
}
