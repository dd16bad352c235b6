import { useContext } from 'preact/hooks';
import type { PeriodMetrics } from '../../api/types.js';
import { rate, TARGETS, type Target } from '../format.js';
import { LoadFailed } from './ui.js';

/** The four performance figures, each judged against its target. */
export function MetricCards({ metrics }: { metrics: PeriodMetrics | null }) {
  const t = metrics?.totals;
  const values: [Target, number | null][] = [
    [TARGETS.responseTime, t?.avgResponseMs ?? null],
    [TARGETS.successRate, t ? rate(t.success, t.requests) : null],
    [TARGETS.errorRate, t ? rate(t.errors, t.requests) : null],
    [TARGETS.nodeLatency, t?.avgNodeLatencyMs ?? null],
  ];
  return (
    <div class="metric-grid">
      {values.map(([target, value]) => (
        <MetricCard key={target.label} target={target} value={t && t.requests > 0 ? value : null} loaded={metrics !== null} />
      ))}
    </div>
  );
}

function MetricCard({ target, value, loaded }: { target: Target; value: number | null; loaded: boolean }) {
  const verdict = value === null ? 'none' : target.meets(value) ? 'good' : 'bad';
  const failed = useContext(LoadFailed);
  return (
    <article class={`metric metric-${verdict}`} data-testid={`metric-${target.label}`} aria-label={target.label}>
      <h3 title={target.help}>{target.label}</h3>
      <p class="metric-value">{loaded ? target.format(value) : failed ? '—' : '…'}</p>
      <p class="metric-target">
        {verdict === 'good' && <span class="verdict good">✓ Meets target {target.goal}</span>}
        {verdict === 'bad' && <span class="verdict bad">✗ Misses target {target.goal}</span>}
        {verdict === 'none' && (
          <span class="verdict none">
            Target {target.goal}
            {loaded ? ' · no traffic' : ''}
          </span>
        )}
      </p>
    </article>
  );
}
