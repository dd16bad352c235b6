import { ErrorTable, RecentErrors } from '../components/errorTable.js';
import { FiltersBar } from '../components/filters.js';
import { LoadFailed, Panel } from '../components/ui.js';
import { fmtInt, fmtPct, rate } from '../format.js';
import { loadFailed } from '../hooks.js';
import { RetentionNote, useUserMetrics } from '../metrics.js';

export function ErrorsPage() {
  const metrics = useUserMetrics();
  const m = metrics.data;
  return (
    <LoadFailed.Provider value={loadFailed(metrics)}>
      <div class="page-head">
        <h1>Errors</h1>
        <FiltersBar seenChains={m?.byChain.flatMap((r) => (r.chain ? [r.chain] : []))} />
      </div>
      <RetentionNote metrics={m} />
      <Panel title="Error analysis" polled={metrics}>
        {m && (
          <p class="chart-total">
            <strong>{fmtInt(m.totals.errors)}</strong> {m.totals.errors === 1 ? 'error' : 'errors'} in {fmtInt(m.totals.requests)}{' '}
            {m.totals.requests === 1 ? 'request' : 'requests'} ({fmtPct(rate(m.totals.errors, m.totals.requests))}). HTTP errors and JSON-RPC error answers both
            count.
          </p>
        )}
        <ErrorTable rows={m?.errors ?? []} other={m?.errorsOther ?? null} loaded={m !== null} />
      </Panel>
      <Panel title="Latest failed calls">
        <RecentErrors rows={m?.recentErrors ?? []} loaded={m !== null} />
      </Panel>
    </LoadFailed.Provider>
  );
}
