import { useEffect } from 'preact/hooks';
import type { Account, ChainFigures, PeriodMetrics } from '../../api/types.js';
import { FiltersBar } from '../components/filters.js';
import { Empty, Panel, TableWrap } from '../components/ui.js';
import { CHANNEL_NAMES, fmtCompact, fmtDate, fmtDateTime, fmtInt, fmtPct, rate, TARGETS, type Target } from '../format.js';
import { usePolled, useSession } from '../hooks.js';
import { RetentionNote, useUserMetrics } from '../metrics.js';
import { hrefOf } from '../router.js';

export function OverviewPage() {
  const { account, refreshAccount } = useSession();
  const metrics = useUserMetrics();
  const accountPolled = usePolled(async () => {
    await refreshAccount();
    return true;
  }, []);

  // How fast the overview becomes usable: the browser test reads this mark.
  useEffect(() => {
    if ((metrics.data || metrics.error) && performance.getEntriesByName('overview-interactive').length === 0) {
      performance.mark('overview-interactive');
    }
  }, [metrics.data, metrics.error]);

  const m = metrics.data;
  return (
    <>
      <div class="page-head">
        <h1>Overview</h1>
        <FiltersBar seenChains={m?.byChain.flatMap((r) => (r.chain ? [r.chain] : []))} />
      </div>
      <RetentionNote metrics={m} />
      <Panel title="Performance" polled={metrics} id="performance">
        <MetricCards metrics={m} />
      </Panel>
      <div class="two-col">
        <Panel title="This billing period" polled={accountPolled}>
          <BillingPeriod account={account} />
        </Panel>
        <Panel title="Requests in the selected period">
          <PeriodTotals metrics={m} />
        </Panel>
      </div>
      <div class="two-col">
        <Panel title="By network">
          <Breakdown rows={m?.byChain ?? []} by="chain" loaded={m !== null} />
        </Panel>
        <Panel title="Most used methods">
          <Breakdown rows={(m?.byMethod ?? []).slice(0, 10)} by="method" loaded={m !== null} />
        </Panel>
      </div>
      <Panel title="Plan and limits">
        <PlanLimits account={account} />
      </Panel>
    </>
  );
}

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
  return (
    <article class={`metric metric-${verdict}`} data-testid={`metric-${target.label}`} aria-label={target.label}>
      <h3 title={target.help}>{target.label}</h3>
      <p class="metric-value">{loaded ? target.format(value) : '…'}</p>
      <p class="metric-target">
        {verdict === 'good' && <span class="verdict good">✓ Meets target {target.goal}</span>}
        {verdict === 'bad' && <span class="verdict bad">✗ Misses target {target.goal}</span>}
        {verdict === 'none' && <span class="verdict none">Target {target.goal} · no traffic</span>}
      </p>
    </article>
  );
}

function BillingPeriod({ account }: { account: Account }) {
  const u = account.usage;
  const limit = u.monthly_limit;
  const used = limit ? Math.min(100, (u.requests / limit) * 100) : 0;
  return (
    <div class="billing">
      <dl class="stats">
        <div>
          <dt>Requests this month</dt>
          <dd data-testid="billing-used">{fmtInt(u.requests)}</dd>
        </div>
        <div>
          <dt>Remaining before the limit</dt>
          <dd data-testid="billing-remaining">{u.remaining === null ? 'Unlimited' : fmtInt(u.remaining)}</dd>
        </div>
      </dl>
      {limit !== null && (
        <div class="bar" role="progressbar" aria-label="Share of the monthly limit used" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(used)}>
          <span style={{ width: `${used}%` }} class={used >= 90 ? 'hot' : ''} />
        </div>
      )}
      <p class="muted">
        {limit === null ? 'No monthly limit on your plan.' : `${fmtPct(used)} of ${fmtInt(limit)} requests used.`} The count resets on {fmtDate(u.resets_at)} (UTC).
      </p>
    </div>
  );
}

function PeriodTotals({ metrics }: { metrics: PeriodMetrics | null }) {
  if (!metrics) return <Empty>Loading…</Empty>;
  const t = metrics.totals;
  return (
    <dl class="stats three">
      <div>
        <dt>Total</dt>
        <dd data-testid="period-requests">{fmtInt(t.requests)}</dd>
      </div>
      <div>
        <dt>Successful</dt>
        <dd>
          {fmtInt(t.success)} <small>{fmtPct(rate(t.success, t.requests))}</small>
        </dd>
      </div>
      <div>
        <dt>Errors</dt>
        <dd>
          {fmtInt(t.errors)} <small>{fmtPct(rate(t.errors, t.requests))}</small>
        </dd>
      </div>
      <div>
        <dt>p95 response</dt>
        <dd>{t.p95ResponseMs === null ? '—' : `${fmtInt(t.p95ResponseMs)} ms`}</dd>
      </div>
      <div>
        <dt>From</dt>
        <dd class="small-dd">{fmtDateTime(metrics.period.start)}</dd>
      </div>
      <div>
        <dt>To</dt>
        <dd class="small-dd">{fmtDateTime(metrics.period.end)}</dd>
      </div>
    </dl>
  );
}

/** Requests by network, or by method (a method is named with its network). */
export function Breakdown(props: { rows: Array<ChainFigures & { method?: string }>; by: 'chain' | 'method'; loaded: boolean }) {
  const heading = props.by === 'chain' ? 'Network' : 'Method';
  if (!props.loaded) return <Empty>Loading…</Empty>;
  if (props.rows.length === 0) return <Empty>No requests in this period.</Empty>;
  const total = props.rows.reduce((s, r) => s + r.requests, 0) || 1;
  const max = Math.max(...props.rows.map((r) => r.requests), 1);
  return (
    <TableWrap label={`Requests by ${heading.toLowerCase()}`}>
      <table>
        <thead>
          <tr>
            <th scope="col">{heading}</th>
            <th scope="col" class="num">
              Requests
            </th>
            <th scope="col" class="num">
              Share
            </th>
            <th scope="col" class="num">
              Errors
            </th>
          </tr>
        </thead>
        <tbody>
          {props.rows.map((r) => (
            <tr key={`${r.chain}/${r.method}`}>
              {props.by === 'chain' ? (
                <th scope="row">{r.chain}</th>
              ) : (
                <th scope="row">
                  <span class="mono">{r.method}</span> <span class="sub-inline">{r.chain}</span>
                </th>
              )}
              <td class="num">
                <span class="inline-bar" aria-hidden="true" style={{ width: `${(r.requests / max) * 60}px` }} />
                {fmtCompact(r.requests)}
              </td>
              <td class="num">{fmtPct((r.requests / total) * 100)}</td>
              <td class="num">{`${fmtCompact(r.errors)} (${fmtPct(rate(r.errors, r.requests))})`}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableWrap>
  );
}

function PlanLimits({ account }: { account: Account }) {
  const p = account.plan;
  return (
    <dl class="plan-list">
      <div>
        <dt>Plan</dt>
        <dd>{p.name}</dd>
      </div>
      <div>
        <dt>Rate limit</dt>
        <dd>{fmtInt(p.rps)} requests per second per token</dd>
      </div>
      <div>
        <dt>Monthly requests</dt>
        <dd>{p.monthly_requests === null ? 'Unlimited' : fmtInt(p.monthly_requests)}</dd>
      </div>
      <div>
        <dt>Tokens</dt>
        <dd>
          <a href={hrefOf('/tokens')}>
            {account.tokens.count} of {account.tokens.max === null ? 'unlimited' : account.tokens.max}
          </a>
        </dd>
      </div>
      <div>
        <dt>Custom token limits and expiry</dt>
        <dd>{p.custom_limits ? 'Yes' : 'No (Developer and above)'}</dd>
      </div>
      <div>
        <dt>History kept</dt>
        <dd>{p.retention_days === 365 ? '1 year' : `${p.retention_days} days`}</dd>
      </div>
      <div>
        <dt>Exports</dt>
        <dd>{p.exports.map((f) => f.toUpperCase()).join(', ')}</dd>
      </div>
      <div>
        <dt>Alert channels</dt>
        <dd>{p.channels.map((c) => CHANNEL_NAMES[c] ?? c).join(', ')}</dd>
      </div>
      <div>
        <dt>Networks</dt>
        <dd>{p.chains === null ? 'All' : p.chains.join(', ')}</dd>
      </div>
    </dl>
  );
}
