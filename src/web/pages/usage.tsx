import { useRef, useState } from 'preact/hooks';
import type { MethodFigures, PeriodMetrics } from '../../api/types.js';
import { othersRowProps } from '../components/breakdown.js';
import { type Column, DataTable } from '../components/dataTable.js';
import { FiltersBar } from '../components/filters.js';
import { Field, LoadFailed, Loading, Panel, Segmented } from '../components/ui.js';
import { KINDS, type Kind, UsageCharts } from '../components/usageCharts.js';
import { fmtInt } from '../format.js';
import { loadFailed } from '../hooks.js';
import { RetentionNote, useUserMetrics } from '../metrics.js';

export function UsagePage() {
  const [method, setMethod] = useState('');
  const [kind, setKind] = useState<Kind>('total');
  const metrics = useUserMetrics(method);
  // The method list comes from unfiltered answers; remember it while one method is picked.
  const knownMethods = useRef(new Set<string>());
  for (const r of metrics.data?.byMethod ?? []) if (r.method) knownMethods.current.add(r.method);
  const methods = [...knownMethods.current].sort();

  return (
    <LoadFailed.Provider value={loadFailed(metrics)}>
      <div class="page-head">
        <h1>Usage</h1>
        <FiltersBar seenChains={metrics.data?.byChain.flatMap((r) => (r.chain ? [r.chain] : []))}>
          <Field label="Method" class="inline">
            {(c) => (
              <select {...c} value={method} onChange={(e) => setMethod(e.currentTarget.value)}>
                <option value="">All methods</option>
                {methods.map((m) => (
                  <option key={m} value={m}>
                    {m}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Segmented<Kind> legend="Requests shown" name="kind" options={KINDS} value={kind} onChange={setKind} />
        </FiltersBar>
      </div>
      <RetentionNote metrics={metrics.data} />
      <Panel title="Requests over time" polled={metrics}>
        <UsageCharts metrics={metrics.data} kind={kind} />
      </Panel>
      <Panel title="Served without a node call" polled={metrics}>
        <GatewayServed metrics={metrics.data} />
      </Panel>
    </LoadFailed.Provider>
  );
}

/** A method, or (with `others`, how many) the methods the API left out past its cap, summed. */
type ServedRow = MethodFigures & { others?: number };

const GATEWAY_SERVED_COLUMNS: Column<ServedRow>[] = [
  { header: 'Network', cell: (r) => r.chain },
  {
    header: 'Method',
    cell: (r) =>
      r.others !== undefined ? (
        <span class="muted">
          {fmtInt(r.others)} other {r.others === 1 ? 'method' : 'methods'}
        </span>
      ) : (
        r.method
      ),
  },
  { header: 'Requests', num: true, cell: (r) => fmtInt(r.requests) },
  { header: 'Cache hits', num: true, cell: (r) => fmtInt(r.cacheHits) },
  { header: 'Coalesced', num: true, cell: (r) => fmtInt(r.coalesced) },
  { header: 'Hedged', num: true, cell: (r) => fmtInt(r.hedged) },
];

const served = (r: { cacheHits: number; coalesced: number; hedged: number }): number => r.cacheHits + r.coalesced + r.hedged;

/**
 * Calls the gateway answered from its response cache, by sharing an identical call in flight,
 * or hedged on a second node: in all and per method, the methods the API left out past its
 * cap summed in a last row when some of theirs were, so the columns add up to the figures above.
 */
function GatewayServed({ metrics }: { metrics: PeriodMetrics | null }) {
  if (!metrics) return <Loading />;
  const { totals, byMethodOther: other } = metrics;
  const rows: ServedRow[] = metrics.byMethod.filter((r) => served(r) > 0);
  if (other && served(other) > 0) rows.push({ ...other, chain: '', method: '', others: other.methods });
  return (
    <div data-testid="gateway-served">
      <p>
        <strong data-testid="cache-hits">{fmtInt(totals.cacheHits)}</strong> of {fmtInt(totals.requests)} requests answered from the cache,{' '}
        <strong data-testid="coalesced">{fmtInt(totals.coalesced)}</strong> shared an identical call in flight,{' '}
        <strong data-testid="hedged">{fmtInt(totals.hedged)}</strong> were hedged on a second node.
      </p>
      {rows.length > 0 && (
        <DataTable
          label="Served without a node call, by method"
          testId="gateway-served-methods"
          columns={GATEWAY_SERVED_COLUMNS}
          rows={rows}
          rowKey={(r) => (r.others !== undefined ? 'others' : `${r.chain}/${r.method}`)}
          rowProps={othersRowProps}
        />
      )}
    </div>
  );
}
