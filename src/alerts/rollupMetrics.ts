import type { PlanCatalog } from '../domain/plans.js';
import type { UsageQueries } from '../projections/metricsQueries.js';
import type { Queries } from '../projections/queries.js';
import { ceilTo, floorTo, MINUTE_MS, seriesGranularity } from '../projections/usageBuckets.js';
import { monthOf } from '../projections/usageTotals.js';
import { type AlertMetrics, LIMIT_EXCEEDED_RPC_CODE, type UsageScope, type WindowStats } from './alertMetrics.js';

/** Failed calls read to count limit refusals in one window (or the rule's threshold, when higher); past it the count is a floor. */
const REFUSALS_SCANNED_MAX = 10_000;

/**
 * AlertMetrics over the usage read models: window figures from the roll-ups (UsageQueries, the
 * metrics API's own queries), limit refusals from the recent-errors log, the month's quota used
 * from Queries (the figure the limiter, the account view and the metrics count too).
 */
export class RollupAlertMetrics implements AlertMetrics {
  constructor(
    private readonly usage: UsageQueries,
    private readonly queries: Queries,
    private readonly plans: PlanCatalog,
  ) {}

  monthUsage(scope: UsageScope, at: Date): Promise<number> {
    const month = monthOf(at.toISOString());
    return 'tokenId' in scope ? this.queries.tokenMonthUsage(scope.tokenId, month) : this.queries.accountQuotaUsage(scope.accountId, this.plans, month);
  }

  /**
   * The roll-ups are per minute: the window is every minute from the one that holds `from` to the
   * one that holds `to`, so every call of the last N minutes counts (and the calls of the last
   * seconds at once). Ending N whole minutes with `to`'s minute left a 1-minute window a second
   * long just after the minute turned: a steady breach resolved and fired again every minute.
   * Limit refusals are read from the recent-errors log, one row per failed call, so only when
   * asked (`refusalsNeeded`, at least that many are counted when there are).
   */
  async windowStats(accountId: string, tokenId: string | null, from: Date, to: Date, refusalsNeeded = 0): Promise<WindowStats> {
    const start = floorTo(from.getTime(), 'minute');
    const end = Math.max(ceilTo(to.getTime() + 1, 'minute'), start + MINUTE_MS);
    const granularity = seriesGranularity(end - start);
    const scope = { accountId, start, end, granularity, chain: null, tokenId };
    const [report, failures] = await Promise.all([
      this.usage.usage(scope),
      refusalsNeeded > 0 ? this.usage.recentErrors(scope, Math.max(refusalsNeeded, REFUSALS_SCANNED_MAX)) : [],
    ]);
    const { totals } = report;
    const bucketSeconds = (granularity === 'minute' ? MINUTE_MS : granularity === 'hour' ? 60 * MINUTE_MS : 1440 * MINUTE_MS) / 1000;
    const busiest = report.series.reduce((max, p) => Math.max(max, p.requests), 0);
    return {
      requests: totals.requests,
      errors: totals.errors,
      avgMs: totals.avgResponseMs,
      p95Ms: totals.p95ResponseMs,
      rateLimited: failures.filter((f) => f.status === 429 || f.code === LIMIT_EXCEEDED_RPC_CODE).length,
      peakRps: busiest / bucketSeconds,
    };
  }
}
