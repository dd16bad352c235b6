import type { LimitDecision, LimitRequest } from './port.js';

/**
 * Pure time and admission math shared by every limiter adapter, so Redis (Lua) and the
 * in-process limiter decide identically. All times are UTC; the clock is the request's
 * `nowMs`, never the server's, so tests can cross a month boundary.
 */

/** The one-second rate window a moment falls in (Unix seconds). */
export const rateWindow = (nowMs: number): number => Math.floor(nowMs / 1000);

interface Month {
  /** First instant of the month and of the next one, in ms. */
  start: number;
  next: number;
  /** `YYYYMM`. */
  id: string;
}

/** The last UTC month asked for: every call asks (its monthly key and headers). */
let lastMonth: Month = { start: 0, next: 0, id: '' };

function monthOf(nowMs: number): Month {
  if (nowMs >= lastMonth.start && nowMs < lastMonth.next) return lastMonth;
  const d = new Date(nowMs);
  const year = d.getUTCFullYear();
  const month = d.getUTCMonth();
  lastMonth = { start: Date.UTC(year, month, 1), next: Date.UTC(year, month + 1, 1), id: `${year}${String(month + 1).padStart(2, '0')}` };
  return lastMonth;
}

/** `YYYYMM` of the UTC month a moment falls in: the monthly counter's suffix. */
export const monthId = (nowMs: number): string => monthOf(nowMs).id;

/** First instant of the next UTC month, in Unix seconds. */
export const nextMonthStart = (nowMs: number): number => monthOf(nowMs).next / 1000;

/** A monthly counter is kept this long after its month ends (late reads for the dashboard). */
export const MONTHLY_RETENTION_SECONDS = 35 * 24 * 3600;

/**
 * Seconds a month's counter must still live, counted from `nowMs`: relative, so neither a
 * skewed Redis clock nor an injected test clock makes it expire early.
 */
export const monthlyTtlSeconds = (nowMs: number): number => Math.max(Math.ceil(nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS - nowMs / 1000), 1);

/** How many of `cost` calls pass, given what the window and the month already used. */
export function grantable(request: LimitRequest, rateUsed: number, monthlyUsed: number): number {
  const rateLeft = Math.max(request.rps - rateUsed, 0);
  const monthLeft = request.monthly.limit === null ? Number.POSITIVE_INFINITY : Math.max(request.monthly.limit - monthlyUsed, 0);
  return Math.max(Math.min(request.cost, rateLeft, monthLeft), 0);
}

/**
 * The full decision from the counts as they were BEFORE this call (the caller adds `granted`
 * to both counters). When both limits bind, the monthly one is named: waiting a second
 * would not help.
 */
export function decide(request: LimitRequest, rateUsed: number, monthlyUsed: number): LimitDecision {
  const granted = grantable(request, rateUsed, monthlyUsed);
  const rateLeft = Math.max(request.rps - rateUsed, 0);
  const limit = request.monthly.limit;
  const monthLeft = limit === null ? Number.POSITIVE_INFINITY : Math.max(limit - monthlyUsed, 0);
  const monthResetAt = nextMonthStart(request.nowMs);

  let refusedBy: LimitDecision['refusedBy'] = null;
  let retryAfterSeconds: number | null = null;
  if (granted < request.cost) {
    if (monthLeft <= rateLeft) {
      refusedBy = 'monthly';
      retryAfterSeconds = Math.max(Math.ceil((monthResetAt * 1000 - request.nowMs) / 1000), 1);
    } else {
      refusedBy = 'rate';
      retryAfterSeconds = 1;
    }
  }

  return {
    granted,
    refusedBy,
    rate: { limit: request.rps, remaining: Math.max(rateLeft - granted, 0), resetAt: rateWindow(request.nowMs) + 1 },
    monthly: {
      limit,
      remaining: limit === null ? null : Math.max(limit - monthlyUsed - granted, 0),
      resetAt: monthResetAt,
    },
    retryAfterSeconds,
  };
}
