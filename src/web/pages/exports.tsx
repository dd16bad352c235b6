import { useState } from 'preact/hooks';
import { coveredPeriod } from '../../api/period.js';
import type { ExportFormat } from '../../api/types.js';
import { query } from '../api.js';
import { FiltersBar } from '../components/filters.js';
import { BusyButton, Panel, ProblemMessage } from '../components/ui.js';
import { fmtDateTime } from '../format.js';
import { type Filters, periodOf, useFilters, useNow, useSession } from '../hooks.js';

const FORMATS: { format: ExportFormat; title: string; what: string; defaultPlans: string }[] = [
  { format: 'csv', title: 'CSV', what: 'Raw data: one row per call, for spreadsheets.', defaultPlans: 'every plan' },
  { format: 'json', title: 'JSON', what: 'The same rows as JSON, for integrations.', defaultPlans: 'Developer, Professional and Unlimited' },
  { format: 'pdf', title: 'PDF', what: 'A snapshot of the dashboard: metrics, breakdowns and errors.', defaultPlans: 'Professional and Unlimited' },
];

/** A period sent to the exports, as `?start&end`. */
interface Period {
  start: string;
  end: string;
}

/**
 * The period a file made now covers: the filters' period as the API resolves it (clamped to the
 * plan's retention, in whole minutes or hours), sent as is so the file holds what the page says.
 */
function exportPeriod(filters: Filters, nowMs: number, retentionDays: number): Period {
  const asked = periodOf(filters, nowMs);
  const covered = coveredPeriod({ start: Date.parse(asked.start), end: Date.parse(asked.end) }, nowMs, retentionDays);
  return { start: new Date(covered.start).toISOString(), end: new Date(covered.end).toISOString() };
}

/** Usage exports for the shared period and network, in the formats the plan offers. */
export function ExportsPage() {
  const { account } = useSession();
  const [filters] = useFilters();
  // A relative range slides: what the page states follows the clock, and a download sends what it states.
  const period = exportPeriod(filters, useNow(10_000), account.plan.retention_days);
  const { start, end } = period;
  return (
    <>
      <div class="page-head">
        <h1>Exports</h1>
        <FiltersBar />
      </div>
      <p class="muted">
        From {fmtDateTime(start)} to {fmtDateTime(end)}, {filters.chain ? `network ${filters.chain}` : 'all networks'}. Your {account.plan.name} plan keeps{' '}
        {account.plan.retention_days} days of history.
      </p>
      <div class="export-grid">
        {FORMATS.map((f) => (
          <ExportCard key={f.format} {...f} period={period} allowed={account.plan.exports.includes(f.format)} planName={account.plan.name} />
        ))}
      </div>
    </>
  );
}

function ExportCard(props: { format: ExportFormat; title: string; what: string; defaultPlans: string; period: Period; allowed: boolean; planName: string }) {
  const { api } = useSession();
  const [filters] = useFilters();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<Error | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const reasonId = `export-${props.format}-reason`;

  const download = async () => {
    setBusy(true);
    setError(null);
    setDone(null);
    try {
      const { start, end } = props.period;
      const file = await api.download(`/api/v1/exports/usage.${props.format}${query({ start, end, chain: filters.chain })}`, `usage.${props.format}`);
      const url = URL.createObjectURL(file.blob);
      const a = document.createElement('a');
      a.href = url;
      a.download = file.filename;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
      setDone(file.filename);
    } catch (e) {
      setError(e instanceof Error ? e : new Error(String(e)));
    } finally {
      setBusy(false);
    }
  };

  return (
    <Panel title={props.title} class={props.allowed ? '' : 'unavailable'}>
      <p>{props.what}</p>
      {!props.allowed && (
        <p class="note" id={reasonId}>
          Not included in your {props.planName} plan. {props.title} exports come with {props.defaultPlans}.
        </p>
      )}
      <ProblemMessage error={error} />
      <p class="muted" aria-live="polite">
        {done ? `Downloaded ${done}.` : ''}
      </p>
      <BusyButton
        type="button"
        class="button primary"
        onClick={download}
        busy={busy}
        disabled={!props.allowed}
        aria-describedby={props.allowed ? undefined : reasonId}
      >
        {busy ? 'Preparing…' : `Download ${props.title}`}
      </BusyButton>
    </Panel>
  );
}
