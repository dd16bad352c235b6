import { useState } from 'preact/hooks';
import type { Alert, TokenRecord } from '../../../api/types.js';
import { StatusBadge } from '../../components/ui.js';
import { CHANNEL_NAMES, fmtDateTime } from '../../format.js';
import { Notifications } from './notifications.js';
import { describeRule, destination, formatValue } from './rules.js';

/** The account's alerts, each with its rule, channels and state; its notifications open below it. */
export function AlertTable(props: { alerts: Alert[]; tokens: TokenRecord[]; onEdit(a: Alert): void; onDelete(a: Alert): void }) {
  const [showing, setShowing] = useState<string | null>(null);
  return (
    <table class="stack" data-testid="alert-table">
      <thead>
        <tr>
          <th scope="col">Name</th>
          <th scope="col">Rule</th>
          <th scope="col">Channels</th>
          <th scope="col">State</th>
          <th scope="col">Actions</th>
        </tr>
      </thead>
      <tbody>
        {props.alerts.map((a) => (
          <AlertRow
            key={a.id}
            alert={a}
            tokenName={props.tokens.find((t) => t.id === a.token_id)?.name}
            expanded={showing === a.id}
            onToggle={() => setShowing(showing === a.id ? null : a.id)}
            onEdit={() => props.onEdit(a)}
            onDelete={() => props.onDelete(a)}
          />
        ))}
      </tbody>
    </table>
  );
}

function AlertRow(props: { alert: Alert; tokenName?: string; expanded: boolean; onToggle(): void; onEdit(): void; onDelete(): void }) {
  const a = props.alert;
  return (
    <>
      <tr data-alert-id={a.id}>
        <th scope="row" data-label="Name">
          <span>
            {a.name}
            {a.token_id && <span class="sub">token {props.tokenName ?? a.token_id}</span>}
          </span>
        </th>
        <td data-label="Rule">{describeRule(a)}</td>
        <td data-label="Channels">
          <span>
            {a.channels.map((c) => (
            <span key={c.id ?? destination(c)} class={`chip ${c.status === 'disabled' ? 'off' : ''}`} title={destination(c)}>
              {CHANNEL_NAMES[c.type] ?? c.type}
              {c.status === 'disabled' ? ' (gone: edit to re-enable)' : ''}
            </span>
            ))}
          </span>
        </td>
        <td data-label="State">
          <span>
            <StatusBadge status={a.enabled === false ? 'disabled' : a.state} />
            {a.last_evaluation && (
              <span class="sub">
                {a.last_evaluation.value === null ? 'no data' : `last ${formatValue(a, a.last_evaluation.value)}`}, {fmtDateTime(a.last_evaluation.at)}
              </span>
            )}
          </span>
        </td>
        <td data-label="Actions">
          <div class="row-actions">
            <button type="button" class="button small" onClick={props.onToggle} aria-expanded={props.expanded}>
              Notifications
            </button>
            <button type="button" class="button small" onClick={props.onEdit} aria-label={`Edit ${a.name}`}>
              Edit
            </button>
            <button type="button" class="button small danger-outline" onClick={props.onDelete} aria-label={`Delete ${a.name}`}>
              Delete
            </button>
          </div>
        </td>
      </tr>
      {props.expanded && (
        <tr class="detail-row">
          <td colSpan={5}>
            <Notifications alertId={a.id} />
          </td>
        </tr>
      )}
    </>
  );
}
