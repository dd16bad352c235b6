import { useState } from 'preact/hooks';
import type { Alert, AlertList, TokenList } from '../../../api/types.js';
import { ApiError } from '../../api.js';
import { ALERT_RULES, CreateButton, PlanCount, planMaxMessage } from '../../components/planMax.js';
import { ConfirmDialog, Panel, SecretOnce } from '../../components/ui.js';
import { CHANNEL_NAMES } from '../../format.js';
import { usePolled, useSession } from '../../hooks.js';
import { AlertForm } from './alertForm.js';
import { AlertTable } from './alertTable.js';
import type { UrlChannel } from './rules.js';

export function AlertsPage() {
  const { api, account } = useSession();
  const alerts = usePolled((signal) => api.get<AlertList>('/api/v1/alerts', signal), []);
  const tokens = usePolled((signal) => api.get<TokenList>('/api/v1/tokens', signal), []);
  const [editing, setEditing] = useState<Alert | 'new' | null>(null);
  const [secrets, setSecrets] = useState<UrlChannel[]>([]);
  const [deleting, setDeleting] = useState<Alert | null>(null);
  const liveTokens = (tokens.data?.tokens ?? []).filter((t) => t.status === 'active' || t.status === 'disabled');
  const list = alerts.data?.alerts ?? [];
  const missing = alerts.error instanceof ApiError && alerts.error.isMissingEndpoint;
  const max = account.plan.max_alerts;
  const atMax = alerts.data ? planMaxMessage(account.plan, max, list.length, ALERT_RULES) : null;

  return (
    <>
      <div class="page-head">
        <h1>Alerts</h1>
        {alerts.data && <PlanCount plan={account.plan} max={max} count={list.length} what={ALERT_RULES} testId="alert-count" />}
      </div>
      <p class="muted">
        Alerts watch your usage and notify you by {account.plan.channels.map((c) => CHANNEL_NAMES[c]?.toLowerCase() ?? c).join(', ')} on the {account.plan.name}{' '}
        plan.
      </p>
      {editing === null && !missing && <CreateButton label="Create alert" atMax={atMax} onClick={() => setEditing('new')} />}
      {secrets.length > 0 && (
        <Panel title="Webhook signing secret">
          {secrets.map((c) => (
            <SecretOnce
              key={c.id ?? c.url}
              title={`Signing secret for ${c.url}`}
              value={c.secret ?? ''}
              onDone={() => setSecrets((s) => s.filter((x) => x !== c))}
            >
              <p class="muted">
                Deliveries carry <code>webhook-id</code>, <code>webhook-timestamp</code> and <code>webhook-signature</code> (Standard Webhooks, HMAC-SHA256 with
                this secret).
              </p>
            </SecretOnce>
          ))}
        </Panel>
      )}
      {editing !== null && (
        <Panel title={editing === 'new' ? 'New alert' : `Edit “${editing.name}”`}>
          <AlertForm
            key={editing === 'new' ? 'new' : editing.id}
            account={account}
            alert={editing === 'new' ? null : editing}
            tokens={liveTokens}
            onCancel={() => setEditing(null)}
            onSaved={(saved) => {
              setEditing(null);
              setSecrets(saved.channels.flatMap((c) => (c.type === 'webhook' && c.secret ? [c] : [])));
              alerts.refresh();
            }}
          />
        </Panel>
      )}
      <Panel title="Your alerts" polled={alerts}>
        <AlertTable alerts={list} loaded={alerts.data !== null} tokens={liveTokens} onEdit={setEditing} onDelete={setDeleting} />
      </Panel>
      {deleting && (
        <ConfirmDialog
          title={`Delete “${deleting.name}”?`}
          confirmLabel="Delete alert"
          danger
          onConfirm={async () => {
            await api.delete(`/api/v1/alerts/${encodeURIComponent(deleting.id)}`);
            alerts.refresh();
          }}
          onClose={() => setDeleting(null)}
        >
          <p>It stops watching and sends no more notifications. Its past notifications are kept in the audit log.</p>
        </ConfirmDialog>
      )}
    </>
  );
}
