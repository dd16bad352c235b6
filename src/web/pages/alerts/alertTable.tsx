import { useState } from 'preact/hooks';
import type { Alert, TokenRecord } from '../../../api/types.js';
import { type Column, DataTable } from '../../components/dataTable.js';
import { StatusBadge } from '../../components/ui.js';
import { CHANNEL_NAMES, fmtDateTime } from '../../format.js';
import { Notifications } from './notifications.js';
import { describeRule, destination, formatValue } from './rules.js';

/** The account's alerts, each with its rule, channels and state; its notifications open below it. */
export function AlertTable(props: { alerts: Alert[]; loaded: boolean; tokens: TokenRecord[]; onEdit(a: Alert): void; onDelete(a: Alert): void }) {
  const [showing, setShowing] = useState<string | null>(null);
  const columns: Column<Alert>[] = [
    {
      header: 'Name',
      rowHeader: true,
      cell: (a) => (
        <span>
          {a.name}
          {a.token_id && <span class="sub">token {props.tokens.find((t) => t.id === a.token_id)?.name ?? a.token_id}</span>}
        </span>
      ),
    },
    { header: 'Rule', cell: describeRule },
    {
      header: 'Channels',
      cell: (a) => (
        <span>
          {a.channels.map((c) => (
            <span key={c.id ?? destination(c)} class={`chip ${c.status === 'disabled' ? 'off' : ''}`} title={destination(c)}>
              {CHANNEL_NAMES[c.type] ?? c.type}
              {c.status === 'disabled' ? ' (gone: edit to re-enable)' : ''}
            </span>
          ))}
        </span>
      ),
    },
    {
      header: 'State',
      cell: (a) => (
        <span>
          <StatusBadge status={a.enabled === false ? 'disabled' : a.state} />
          {a.last_evaluation && (
            <span class="sub">
              {a.last_evaluation.value === null ? 'no data' : `last ${formatValue(a, a.last_evaluation.value)}`}, {fmtDateTime(a.last_evaluation.at)}
            </span>
          )}
        </span>
      ),
    },
    {
      header: 'Actions',
      cell: (a) => (
        <div class="row-actions">
          <button type="button" class="button small" onClick={() => setShowing(showing === a.id ? null : a.id)} aria-expanded={showing === a.id}>
            Notifications
          </button>
          <button type="button" class="button small" onClick={() => props.onEdit(a)} aria-label={`Edit ${a.name}`}>
            Edit
          </button>
          <button type="button" class="button small danger-outline" onClick={() => props.onDelete(a)} aria-label={`Delete ${a.name}`}>
            Delete
          </button>
        </div>
      ),
    },
  ];
  return (
    <DataTable
      stack
      testId="alert-table"
      columns={columns}
      rows={props.alerts}
      rowKey={(a) => a.id}
      rowProps={(a) => ({ 'data-alert-id': a.id })}
      detail={(a) => showing === a.id && <Notifications alertId={a.id} />}
      empty={props.loaded ? 'No alerts yet.' : undefined}
    />
  );
}
