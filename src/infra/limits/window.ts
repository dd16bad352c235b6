import type { LimitDecision, LimitRequest } from './port.js';

/**
 * Pure time and admission math shared by every limiter adapter, so Redis (Lua) and the
 * in-process limiter decide identically. All times are UTC; the clock is the request's
 * `nowMs`, never the server's, so tests can cross a month boundary.
 */

/** The one-second rate window a moment falls in (Unix seconds). */
export const rateWindow = (nowMs: number): number => Math.floor(nowMs / 1000);

/** The last month asked for by monthId: its first instant and the next month's (ms), and its id. */
let lastMonthId: { start: number; next: number; id: string } = { start: 0, next: 0, id: '' };

/** `YYYYMM` of the UTC month a moment falls in: the monthly counter's suffix (asked on every call: the last one is kept). */
export function monthId(nowMs: number): string {
  if (nowMs >= lastMonthId.start && nowMs < lastMonthId.next) return lastMonthId.id;
  const d = new Date(nowMs);
  const year = d.getUTCFullYear();
  const month = d.getUTCMonth();
  const id = `${year}${String(month + 1).padStart(2, '0')}`;
  lastMonthId = { start: Date.UTC(year, month, 1), next: Date.UTC(year, month + 1, 1), id };
  return id;
}

/** The last month asked for, as [its first instant in ms, the next month's]: every call asks (headers). */
let lastMonth: [number, number] = [0, 0];

/** First instant of the next UTC month, in Unix seconds. */
export function nextMonthStart(nowMs: number): number {
  const [start, next] = lastMonth;
  if (nowMs >= start && nowMs < next) return next / 1000;
  const d = new Date(nowMs);
  lastMonth = [Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1), Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)];
  return lastMonth[1] / 1000;
}

/** A monthly counter is kept this long after its month ends (late reads for the dashboard). */
export const MONTHLY_RETENTION_SECONDS = 35 * 24 * 3600;

/**
 * Seconds a month's counter must still live, counted from `nowMs`: relative, so neither a
 * skewed Redis clock nor an injected test clock makes it expire early.
 */
export const monthlyTtlSeconds = (nowMs: number): number =>
  Math.max(Math.ceil(nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS - nowMs / 1000), 1);

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
