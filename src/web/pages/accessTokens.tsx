import { useState } from 'preact/hooks';
import type { AccessTokenList, AccessTokenRecord, CreatedAccessToken } from '../../api/types.js';
import { asApiError } from '../api.js';
import { type Column, DataTable } from '../components/dataTable.js';
import { BusyButton, ConfirmDialog, Field, Panel, ProblemMessage, SecretOnce, StatusBadge } from '../components/ui.js';
import { fmtDateTime } from '../format.js';
import { usePolled, useSession } from '../hooks.js';

/** Personal access tokens (`gka_…`) for the management API: create (shown once), list, revoke. */
export function AccessTokensPage() {
  const { api } = useSession();
  const list = usePolled((signal) => api.get<AccessTokenList>('/api/v1/access-tokens', signal), []);
  const [created, setCreated] = useState<CreatedAccessToken | null>(null);
  const [revoking, setRevoking] = useState<AccessTokenRecord | null>(null);
  const tokens = list.data?.access_tokens ?? [];
  const columns: Column<AccessTokenRecord>[] = [
    { header: 'Name', rowHeader: true, cell: (t) => t.name },
    { header: 'Token', class: 'mono', cell: (t) => t.masked },
    { header: 'Created', class: 'nowrap', cell: (t) => fmtDateTime(t.created_at) },
    { header: 'Status', cell: (t) => <StatusBadge status={t.status} /> },
    {
      header: 'Actions',
      cell: (t) =>
        t.status === 'active' ? (
          <button type="button" class="button small danger-outline" onClick={() => setRevoking(t)} aria-label={`Revoke ${t.name}`}>
            Revoke
          </button>
        ) : (
          <span class="muted">—</span>
        ),
    },
  ];

  return (
    <>
      <div class="page-head">
        <h1>Access tokens</h1>
      </div>
      <p class="muted">
        Access tokens (<code>gka_…</code>) let scripts manage your API tokens and read metrics through <code>/api/v1/…</code> with{' '}
        <code>Authorization: Bearer gka_…</code>. They cannot call chains, and only this dashboard can create them.
      </p>
      <Panel title="New access token">
        {created ? (
          <SecretOnce title={`Access token “${created.name}”`} value={created.token} onDone={() => setCreated(null)} />
        ) : (
          <CreateAccessTokenForm
            onCreated={(t) => {
              setCreated(t);
              list.refresh();
            }}
          />
        )}
      </Panel>
      <Panel title="Your access tokens" polled={list}>
        <DataTable
          stack
          testId="access-token-table"
          columns={columns}
          rows={tokens}
          rowKey={(t) => t.id}
          rowProps={(t) => ({ class: t.status === 'revoked' ? 'gone' : '' })}
          empty={list.data ? 'No access tokens.' : undefined}
        />
      </Panel>
      {revoking && (
        <ConfirmDialog
          title={`Revoke “${revoking.name}”?`}
          confirmLabel="Revoke access token"
          danger
          onConfirm={async () => {
            await api.delete(`/api/v1/access-tokens/${encodeURIComponent(revoking.id)}`);
            list.refresh();
          }}
          onClose={() => setRevoking(null)}
        >
          <p>
            Scripts using <code>{revoking.masked}</code> will get 401 from now on. This cannot be undone.
          </p>
        </ConfirmDialog>
      )}
    </>
  );
}

function CreateAccessTokenForm({ onCreated }: { onCreated(t: CreatedAccessToken): void }) {
  const { api } = useSession();
  const [name, setName] = useState('');
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<Error | null>(null);
  const error = !touched ? null : !name.trim() ? 'Give the access token a name.' : name.trim().length > 100 ? 'At most 100 characters.' : null;

  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (!name.trim() || name.trim().length > 100) return;
    setBusy(true);
    setRefusal(null);
    try {
      onCreated(await api.post<CreatedAccessToken>('/api/v1/access-tokens', { name: name.trim() }));
      setName('');
      setTouched(false);
    } catch (err) {
      setRefusal(asApiError(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={submit} noValidate class="inline-form" aria-label="New access token">
      <Field label="Name" error={error} hint="e.g. “CI deploy script”.">
        {(c) => <input {...c} value={name} onInput={(e) => setName(e.currentTarget.value)} />}
      </Field>
      <BusyButton type="submit" class="button primary" busy={busy}>
        {busy ? 'Creating…' : 'Create access token'}
      </BusyButton>
      <ProblemMessage error={refusal} />
    </form>
  );
}
