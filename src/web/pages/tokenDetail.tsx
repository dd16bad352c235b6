import { useEffect, useState } from 'preact/hooks';
import type { ClientIp, TokenHistory, TokenMetrics, TokenRecord } from '../../api/types.js';
import { asApiError } from '../api.js';
import { Breakdown } from '../components/breakdown.js';
import { type Column, DataTable } from '../components/dataTable.js';
import { RecentErrors } from '../components/errorTable.js';
import { FiltersBar } from '../components/filters.js';
import { MetricCards } from '../components/metricCards.js';
import { TokenActions } from '../components/tokenActions.js';
import { BusyButton, Empty, Field, LoadFailed, Panel, ProblemMessage, StatusBadge } from '../components/ui.js';
import { UsageCharts } from '../components/usageCharts.js';
import { fmtDateTime, fmtInt } from '../format.js';
import { loadFailed, usePolled, useSession } from '../hooks.js';
import { RetentionNote, useTokenMetrics } from '../metrics.js';
import { hrefOf } from '../router.js';
import { monthlyLimitProblem, parseLimit, rateLimitProblem } from '../tokenLimits.js';
import { Expiry } from './tokens.js';

export function TokenDetailPage({ id }: { id: string }) {
  const { api } = useSession();
  const record = usePolled((signal) => api.get<TokenRecord>(`/api/v1/tokens/${encodeURIComponent(id)}`, signal), [id]);
  const metrics = useTokenMetrics(id);
  const [changed, setChanged] = useState<TokenRecord | null>(null);
  useEffect(() => setChanged(null), [record.data]);
  const [actionError, setActionError] = useState<Error | null>(null);
  const token = changed && changed.id === id ? changed : record.data;

  if (!token) {
    // An id the API refuses (malformed: 400) or does not know (404) is a token this account does not have.
    const missing = record.error?.status === 400 || (record.error?.status === 404 && !record.error.isMissingEndpoint);
    return (
      <>
        <p>
          <a href={hrefOf('/tokens')}>← Tokens</a>
        </p>
        <h1>{missing ? 'Token not found' : 'Token'}</h1>
        {missing ? (
          <p>There is no token with this address in your account.</p>
        ) : record.error ? (
          <>
            <ProblemMessage error={record.error} />
            <BusyButton type="button" class="button" onClick={record.refresh} busy={record.loading}>
              Try again
            </BusyButton>
          </>
        ) : (
          <Empty>Loading…</Empty>
        )}
      </>
    );
  }
  const m = metrics.data;
  return (
    <>
      <p class="crumbs">
        <a href={hrefOf('/tokens')}>← Tokens</a>
      </p>
      <div class="page-head">
        <h1>
          {token.name} <StatusBadge status={token.status} />
        </h1>
        {(token.status === 'active' || token.status === 'disabled') && <TokenActions token={token} onChanged={setChanged} onError={setActionError} />}
      </div>
      <ProblemMessage error={actionError} />
      <div class="two-col">
        <Panel title="Details" polled={record}>
          <TokenFacts token={token} webSockets={m?.webSockets ?? null} />
        </Panel>
        <Panel title="Edit">
          {token.status === 'active' || token.status === 'disabled' ? (
            <EditTokenForm key={token.id} token={token} onSaved={setChanged} />
          ) : (
            <p class="muted">A {token.status} token cannot change any more.</p>
          )}
        </Panel>
      </div>
      <LoadFailed.Provider value={loadFailed(metrics)}>
        <div class="page-head">
          <h2 class="section-title">Analytics</h2>
          <FiltersBar seenChains={m?.byChain.flatMap((r) => (r.chain ? [r.chain] : []))} />
        </div>
        <RetentionNote metrics={m} />
        <Panel title="Performance" polled={metrics}>
          <MetricCards metrics={m} />
        </Panel>
        <Panel title="Usage over time">
          <UsageCharts metrics={m} testId="token-chart" />
        </Panel>
        <div class="two-col">
          <Panel title="By network">
            <Breakdown rows={m?.byChain ?? []} by="chain" loaded={m !== null} />
          </Panel>
          <Panel title="Client IP addresses">
            <ClientIps rows={m?.clientIps ?? []} loaded={m !== null} />
          </Panel>
        </div>
        <Panel title="Recent errors">
          <RecentErrors rows={m?.recentErrors ?? []} loaded={m !== null} />
        </Panel>
      </LoadFailed.Provider>
      <History id={id} />
    </>
  );
}

function TokenFacts({ token, webSockets }: { token: TokenRecord; webSockets: TokenMetrics['webSockets'] | null }) {
  return (
    <dl class="plan-list">
      <div>
        <dt>Token</dt>
        <dd class="mono">{token.masked}</dd>
      </div>
      <div>
        <dt>Description</dt>
        <dd>{token.description || '—'}</dd>
      </div>
      <div>
        <dt>Created</dt>
        <dd>{fmtDateTime(token.created_at)}</dd>
      </div>
      <div>
        <dt>Last used</dt>
        <dd>{token.last_used_at ? fmtDateTime(token.last_used_at) : 'Never'}</dd>
      </div>
      <div>
        <dt>This month</dt>
        <dd data-testid="detail-usage">
          {fmtInt(token.current_month_usage)} requests{token.monthly_limit !== null ? ` of ${fmtInt(token.monthly_limit)}` : ''}
        </dd>
      </div>
      {token.expires_at && (
        <div>
          <dt>Expires</dt>
          <dd>
            <Expiry iso={token.expires_at} long />
          </dd>
        </div>
      )}
      <div>
        <dt>Rate limit</dt>
        <dd>{token.rate_limit === null ? "The plan's" : `${fmtInt(token.rate_limit)} requests per second`}</dd>
      </div>
      {webSockets && (
        // Live sockets as this gateway counts them: shown where the API runs with the gateway (ROLE=all).
        <div>
          <dt>WebSockets now</dt>
          <dd data-testid="detail-websockets">
            {fmtInt(webSockets.connections)} {webSockets.connections === 1 ? 'connection' : 'connections'}, {fmtInt(webSockets.subscriptions)}{' '}
            {webSockets.subscriptions === 1 ? 'subscription' : 'subscriptions'}
          </dd>
        </div>
      )}
    </dl>
  );
}

const limitText = (limit: number | null): string => (limit === null ? '' : String(limit));

function EditTokenForm({ token, onSaved }: { token: TokenRecord; onSaved(t: TokenRecord): void }) {
  const { api, account } = useSession();
  const plan = account.plan;
  const [name, setName] = useState(token.name);
  const [description, setDescription] = useState(token.description);
  const [monthlyLimit, setMonthlyLimit] = useState(limitText(token.monthly_limit));
  const [rateLimit, setRateLimit] = useState(limitText(token.rate_limit));
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<Error | null>(null);
  const [saved, setSaved] = useState(false);
  const nameProblem = !name.trim() ? 'A token needs a name.' : name.trim().length > 100 ? 'At most 100 characters.' : null;
  const descriptionError = description.length > 500 ? 'At most 500 characters.' : null;
  const monthlyProblem = plan.custom_limits ? monthlyLimitProblem(monthlyLimit, plan) : null;
  const rateProblem = plan.custom_limits ? rateLimitProblem(rateLimit, plan) : null;
  const planReason = `Needs the Developer plan or above; you are on ${plan.name}.`;

  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    setSaved(false);
    if (nameProblem || descriptionError || monthlyProblem || rateProblem) return;
    setBusy(true);
    setRefusal(null);
    try {
      const patch: Record<string, unknown> = { name: name.trim(), description: description.trim() };
      // Only limits that changed: an unchanged one is not the owner's decision to (re)state.
      if (plan.custom_limits && parseLimit(monthlyLimit) !== token.monthly_limit) patch.monthly_limit = parseLimit(monthlyLimit);
      if (plan.custom_limits && parseLimit(rateLimit) !== token.rate_limit) patch.rate_limit = parseLimit(rateLimit);
      onSaved(await api.patch<TokenRecord>(`/api/v1/tokens/${encodeURIComponent(token.id)}`, patch));
      setSaved(true);
    } catch (error) {
      setRefusal(asApiError(error));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={submit} noValidate aria-label="Edit token">
      <Field label="Name" error={touched ? nameProblem : null}>
        {(c) => <input {...c} value={name} onInput={(e) => setName(e.currentTarget.value)} />}
      </Field>
      <Field label="Description" error={descriptionError}>
        {(c) => <textarea {...c} rows={2} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />}
      </Field>
      <Field
        label="Monthly limit"
        error={touched ? monthlyProblem : null}
        hint={plan.custom_limits ? 'Requests per month for this token; empty uses the account limit.' : planReason}
      >
        {(c) => (
          <input {...c} inputMode="numeric" value={monthlyLimit} onInput={(e) => setMonthlyLimit(e.currentTarget.value)} disabled={!plan.custom_limits} />
        )}
      </Field>
      <Field
        label="Rate limit (requests per second)"
        error={touched ? rateProblem : null}
        hint={plan.custom_limits ? `Empty: the plan's ${fmtInt(plan.rps)} per second.` : planReason}
      >
        {(c) => <input {...c} inputMode="numeric" value={rateLimit} onInput={(e) => setRateLimit(e.currentTarget.value)} disabled={!plan.custom_limits} />}
      </Field>
      <ProblemMessage error={refusal} />
      <div class="button-row">
        <span class="muted" aria-live="polite">
          {saved ? 'Saved.' : ''}
        </span>
        <BusyButton type="submit" class="button primary" busy={busy}>
          {busy ? 'Saving…' : 'Save'}
        </BusyButton>
      </div>
    </form>
  );
}

const CLIENT_IP_COLUMNS: Column<ClientIp>[] = [
  { header: 'IP address', class: 'mono', cell: (r) => r.ip },
  { header: 'Requests', num: true, cell: (r) => fmtInt(r.count) },
  { header: 'Last seen', num: true, class: 'nowrap', cell: (r) => (r.lastSeen ? fmtDateTime(r.lastSeen) : '—') },
];

function ClientIps({ rows, loaded }: { rows: ClientIp[]; loaded: boolean }) {
  return (
    <DataTable
      label="Client IP addresses"
      testId="client-ips"
      columns={CLIENT_IP_COLUMNS}
      rows={rows}
      rowKey={(r) => r.ip}
      loading={!loaded}
      empty="No requests in this period."
    />
  );
}

const EVENT_NAMES: Record<string, string> = {
  ApiTokenCreated: 'Created',
  ApiTokenRenamed: 'Renamed',
  ApiTokenDescriptionChanged: 'Description changed',
  ApiTokenDisabled: 'Disabled',
  ApiTokenEnabled: 'Enabled',
  ApiTokenRevoked: 'Revoked',
  ApiTokenExpired: 'Expired',
  ApiTokenLimitsChanged: 'Limits changed',
};

/** The token's audit trail, from its event stream, with its account's plan changes in its life. */
function History({ id }: { id: string }) {
  const { api } = useSession();
  const history = usePolled((signal) => api.get<TokenHistory>(`/api/v1/tokens/${encodeURIComponent(id)}/history`, signal), [id]);
  const events = history.data?.events ?? [];
  return (
    <Panel title="History" polled={history}>
      {events.length === 0 ? (
        <Empty>{history.data ? 'No events.' : 'Loading…'}</Empty>
      ) : (
        <ul class="timeline">
          {events
            .map((e, i) => (
              // Keyed by place in the list: the entries are append-only, and a plan change has no revision of the token's.
              <li key={i}>
                <span class="nowrap">{fmtDateTime(e.at)}</span> —{' '}
                {e.kind === 'token' ? (EVENT_NAMES[e.type] ?? e.type) : `Plan changed: ${e.plan.from} → ${e.plan.to}`}
              </li>
            ))
            .reverse()}
        </ul>
      )}
    </Panel>
  );
}
