import { useMemo } from 'preact/hooks';
import type { PeriodMetrics } from '../../api/types.js';
import { fmtInt, fmtMs } from '../format.js';
import { chartBuckets } from '../series.js';
import { type ChartSeries, TimeChart } from './chart.js';
import { Loading } from './ui.js';

/** Which requests the count chart shows. */
export type Kind = 'total' | 'success' | 'errors';
export const KINDS: { value: Kind; label: string }[] = [
  { value: 'total', label: 'Total' },
  { value: 'success', label: 'Successful' },
  { value: 'errors', label: 'Errors' },
];
const COLORS: Record<Kind, string> = { total: '#2457d6', success: '#1e8e3e', errors: '#c5221f' };

/** Requests and average response time over the period, one point per interval. */
export function UsageCharts({ metrics, kind = 'total', testId = 'usage-chart' }: { metrics: PeriodMetrics | null; kind?: Kind; testId?: string }) {
  const data = useMemo(() => {
    if (!metrics) return null;
    const buckets = chartBuckets(metrics.series, metrics.period, metrics.granularity);
    const times = buckets.map((b) => b.t);
    const values = buckets.map((b) => (kind === 'total' ? b.requests : kind === 'success' ? b.success : b.errors));
    const counts: ChartSeries[] = [{ label: KINDS.find((k) => k.value === kind)?.label ?? 'Requests', values, color: COLORS[kind] }];
    const latency: ChartSeries[] = [{ label: 'Average response', values: buckets.map((b) => b.avgResponseMs), color: '#8a4baf', format: fmtMs, points: true }];
    const sum = values.reduce((s, v) => s + v, 0);
    const peak = Math.max(0, ...values);
    return { times, counts, latency, sum, peak };
  }, [metrics, kind]);

  if (!data) return <Loading />;
  const label = KINDS.find((k) => k.value === kind)?.label.toLowerCase() ?? 'requests';
  return (
    <div class="charts">
      <p class="chart-total">
        <strong data-testid={`${testId}-sum`}>{fmtInt(data.sum)}</strong> {label === 'total' ? 'requests' : `${label} requests`} in the period, at most{' '}
        {fmtInt(data.peak)} per interval.
      </p>
      <TimeChart
        times={data.times}
        series={data.counts}
        summary={`Chart of ${label} requests over time: ${fmtInt(data.sum)} in all, peak ${fmtInt(data.peak)}.`}
        testId={testId}
      />
      <h3>Average response time</h3>
      <TimeChart times={data.times} series={data.latency} height={180} summary="Chart of the average response time over time." />
    </div>
  );
}
