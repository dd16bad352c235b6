import type { PlanCatalog } from '../domain/plans.js';
import type { UsageQueries } from '../projections/metricsQueries.js';
import type { Queries } from '../projections/queries.js';
import { ceilTo, MINUTE_MS, seriesGranularity } from '../projections/usageBuckets.js';
import { monthOf } from '../projections/usageTotals.js';
import { type AlertMetrics, LIMIT_EXCEEDED_RPC_CODE, type UsageScope, type WindowStats } from './alertMetrics.js';

/** Failed calls read to count limit refusals in one window; past it the count is a floor (and far above any sane threshold). */
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
   * The roll-ups are per minute: the window is the same number of whole minutes ending with the
   * minute that holds `to` (so the calls of the last seconds count at once).
   */
  async windowStats(accountId: string, tokenId: string | null, from: Date, to: Date): Promise<WindowStats> {
    const end = ceilTo(to.getTime() + 1, 'minute');
    const start = end - Math.max(1, Math.round((to.getTime() - from.getTime()) / MINUTE_MS)) * MINUTE_MS;
    const granularity = seriesGranularity(end - start);
    const scope = { accountId, start, end, granularity, chain: null, tokenId };
    const [report, failures] = await Promise.all([this.usage.usage(scope), this.usage.recentErrors(scope, REFUSALS_SCANNED_MAX)]);
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
