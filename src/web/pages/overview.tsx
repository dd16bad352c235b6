import { useEffect } from 'preact/hooks';
import { cutMethods } from '../../api/cutList.js';
import type { Account, PeriodMetrics } from '../../api/types.js';
import { Breakdown } from '../components/breakdown.js';
import { FiltersBar } from '../components/filters.js';
import { MetricCards } from '../components/metricCards.js';
import { LoadFailed, Loading, Panel } from '../components/ui.js';
import { CHANNEL_NAMES, fmtDate, fmtDateTime, fmtInt, fmtPct, rate } from '../format.js';
import { loadFailed, usePolled, useSession } from '../hooks.js';
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
    <LoadFailed.Provider value={loadFailed(metrics)}>
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
          <TopMethods metrics={m} />
        </Panel>
      </div>
      <Panel title="Plan and limits">
        <PlanLimits account={account} />
      </Panel>
    </LoadFailed.Provider>
  );
}

/** The 10 busiest methods, then the rest summed (those the API left out past its cap too), so the rows add up to the period's totals. */
function TopMethods({ metrics }: { metrics: PeriodMetrics | null }) {
  const { rows, others } = cutMethods(metrics?.byMethod ?? [], metrics?.byMethodOther ?? null, 10);
  return <Breakdown rows={rows} others={others} by="method" loaded={metrics !== null} />;
}

function BillingPeriod({ account }: { account: Account }) {
  const u = account.usage;
  const limit = u.monthly_limit;
  // The share the limit counts (limit less remaining), not every request: tokens with their own limit count apart.
  const used = limit && u.remaining !== null ? Math.min(100, ((limit - u.remaining) / limit) * 100) : 0;
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
        {limit === null ? 'No monthly limit on your plan.' : `${fmtPct(used)} of ${fmtInt(limit)} requests used.`} The count resets on {fmtDate(u.resets_at)}{' '}
        (UTC).
      </p>
    </div>
  );
}

function PeriodTotals({ metrics }: { metrics: PeriodMetrics | null }) {
  if (!metrics) return <Loading />;
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
