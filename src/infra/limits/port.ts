import type { MaybePromise } from '../../domain/maybePromise.js';

/**
 * The limiter port: per-second rate limit and monthly quota decided together, atomically, so
 * concurrent gateways never admit more than the limits (Redis: one Lua call; in process: one
 * synchronous step). A refused call uses no quota.
 */
export interface LimitRequest {
  tokenId: string;
  /** Requests per second allowed for this token (its own or its plan's). */
  rps: number;
  /**
   * Monthly quota bucket: `token:<id>` when the token has its own monthly limit, otherwise
   * `account:<id>` (the spec: a token with its own limit does not count against the account's).
   * `limit: null` is unlimited (still counted, for the headers and the dashboard). Whatever the
   * bucket, a granted call also counts in the token's own month (`ownBucketBesides`).
   */
  monthly: { key: string; limit: number | null };
  /** Calls asked for at once (a batch's size). Admission is partial: the first `granted` pass. */
  cost: number;
  nowMs: number;
}

/**
 * What a quota bucket (`token:<id>`, `account:<id>`) used in a month before a counter started
 * counting it (this process's, or a Redis month counter that was lost): read once per bucket and
 * month, from what outlives both (the usage totals).
 */
export type QuotaUsedBefore = (bucket: string, nowMs: number) => Promise<number>;

/** The monthly quota bucket of a token with its own limit, and of an account (every other token of it). */
export const quotaBucket = {
  token: (tokenId: string): string => `token:${tokenId}`,
  account: (accountId: string): string => `account:${accountId}`,
} as const;

/**
 * The token's own month, which a granted call counts in besides its bucket when that bucket is
 * the account's (null: the bucket is the token's own). A token's month is then its charged calls whatever its limit, so a
 * monthly limit set, changed or turned back on mid-month (its bucket becoming `token:<id>`)
 * finds the month already counted: a limit change moves the ceiling, never the count.
 */
export const ownBucketBesides = (tokenId: string, bucket: string): string | null => {
  const own = quotaBucket.token(tokenId);
  return own === bucket ? null : own;
};

export interface LimitDecision {
  /** How many of the `cost` calls are admitted (0..cost). */
  granted: number;
  /**
   * Why the rest was refused: a limit, or `unavailable` when the limits could not be checked
   * (Redis unreachable with fail-closed): a temporary outage (503), not the caller's excess (429).
   */
  refusedBy: 'rate' | 'monthly' | 'unavailable' | null;
  rate: { limit: number; remaining: number /** Unix seconds */; resetAt: number };
  monthly: { limit: number | null; remaining: number | null /** Unix seconds: next UTC month start */; resetAt: number };
  /** Seconds until a refused call may succeed; null when nothing was refused. */
  retryAfterSeconds: number | null;
}

/**
 * Units a `take` granted for calls the gateway then failed to serve (docs/decisions.md, "A call
 * the gateway failed to serve is not charged"): they go back to the month of `bucket` and, when
 * that is the account's, to the token's own month (`ownBucketBesides`), never below 0. The rate
 * window keeps them: it protects the nodes while they struggle.
 */
export interface RefundRequest {
  tokenId: string;
  /** The monthly bucket the units were granted from (the take's `monthly.key`). */
  bucket: string;
  units: number;
  /** The take's `nowMs`: the month the units were counted in. */
  nowMs: number;
}

export interface Limiter {
  /** At once when the decision needs no I/O (in process, or a lease that covers the call). */
  take(request: LimitRequest): MaybePromise<LimitDecision>;
  /**
   * Gives back units a take granted (see RefundRequest). Not waited for on a call's path: in
   * process done at once; on Redis sent with the event-loop turn's takes, and settled (never
   * rejected) once Redis answered, so what is asked of this limiter afterwards sees it.
   */
  refund(request: RefundRequest): MaybePromise<void>;
  /** Current month's usage of a quota bucket (for the dashboard and the account view). */
  monthlyUsed(key: string, nowMs: number): Promise<number>;
  close(): Promise<void>;
}
