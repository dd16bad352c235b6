import { useEffect, useState } from 'preact/hooks';
import type { Account, CreatedToken, TokenList, TokenRecord } from '../../api/types.js';
import { asApiError } from '../api.js';
import { type Column, DataTable } from '../components/dataTable.js';
import { CreateButton, PlanCount, planMaxMessage, TOKENS } from '../components/planMax.js';
import { TokenActions } from '../components/tokenActions.js';
import { BusyButton, Field, Panel, ProblemMessage, SecretOnce, StatusBadge } from '../components/ui.js';
import { fmtDate, fmtDateTime, fmtExpiry, fmtInt, fmtLocalDate, localIsoDate, ownTimeZone } from '../format.js';
import { usePolled, useSession } from '../hooks.js';
import { hrefOf } from '../router.js';
import { monthlyLimitProblem, parseLimit } from '../tokenLimits.js';

const DAY = 86_400_000;

/**
 * The expiry date picked is the last day the token works, in the owner's own time zone. The API
 * takes whole days from the token's creation (`expires_in_days`): the fewest that keep it valid
 * through the end of that day, so it stops on the next day, at the time of day it was made. NaN
 * for a date that is not one; 0 or less for a day already over.
 */
function daysThrough(date: string, now = Date.now()): number {
  const [y, m, d] = date.split('-').map(Number);
  if (y === undefined || m === undefined || d === undefined) return Number.NaN;
  // Midnight starting the next day, on the owner's clock (its length, 23 to 25 hours, included).
  const endOfDay = new Date(y, m - 1, d + 1).getTime();
  return Math.ceil((endOfDay - now) / DAY);
}
/** What a token made now with `expires_in_days` does, as the list will show it. */
function expiryHint(days: number): string {
  const { through, stops } = fmtExpiry(new Date(Date.now() + days * DAY).toISOString());
  return `Works through ${through} in your time zone; stops ${stops} (in ${days} day${days === 1 ? '' : 's'}: the API counts whole days from now).`;
}

export function TokensPage() {
  const { api, account } = useSession();
  const list = usePolled((signal) => api.get<TokenList>('/api/v1/tokens', signal), []);
  const [creating, setCreating] = useState(false);
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const [actionError, setActionError] = useState<Error | null>(null);
  // A change shows at once; the next load of the list supersedes it.
  const [overrides, setOverrides] = useState<Record<string, TokenRecord>>({});
  useEffect(() => setOverrides({}), [list.data]);

  const tokens = (list.data?.tokens ?? []).map((t) => overrides[t.id] ?? t);
  const live = tokens.filter((t) => t.status === 'active' || t.status === 'disabled').length;
  const max = account.plan.max_tokens;
  const atMax = list.data ? planMaxMessage(account.plan, max, live, TOKENS) : null;

  const onChanged = (t: TokenRecord) => setOverrides((o) => ({ ...o, [t.id]: t }));

  return (
    <>
      <div class="page-head">
        <h1>Tokens</h1>
        <PlanCount plan={account.plan} max={max} count={live} what={TOKENS} testId="token-count" />
      </div>
      {created ? (
        <Panel title="Token created">
          <SecretOnce
            title={`API token “${created.name}”`}
            value={created.token}
            onDone={() => {
              setCreated(null);
              list.refresh();
            }}
          >
            <p class="muted">
              Call a chain with it:{' '}
              <code class="wrap">
                POST {location.origin}/eth/{'<token>'}
              </code>{' '}
              or the header <code>Authorization: Bearer {'<token>'}</code>.
            </p>
          </SecretOnce>
        </Panel>
      ) : creating ? (
        <Panel title="New token">
          <CreateTokenForm
            account={account}
            atMax={atMax}
            onCancel={() => setCreating(false)}
            onCreated={(t) => {
              setCreating(false);
              setCreated(t);
              list.refresh();
            }}
          />
        </Panel>
      ) : (
        <CreateButton label="Create token" atMax={atMax} onClick={() => setCreating(true)} />
      )}
      <Panel title="Your tokens" polled={list}>
        <ProblemMessage error={actionError} />
        <TokenTable tokens={tokens} loaded={list.data !== null} onChanged={onChanged} onError={setActionError} />
      </Panel>
    </>
  );
}

function TokenTable(props: { tokens: TokenRecord[]; loaded: boolean; onChanged(t: TokenRecord): void; onError(e: Error | null): void }) {
  const columns: Column<TokenRecord>[] = [
    {
      header: 'Name',
      rowHeader: true,
      cell: (t) => (
        <span>
          <a href={hrefOf(`/tokens/${t.id}`)}>{t.name}</a>
          {t.description && <span class="sub">{t.description}</span>}
        </span>
      ),
    },
    { header: 'Token', class: 'mono nowrap', cell: (t) => t.masked },
    { header: 'Created', class: 'nowrap', cell: (t) => fmtDate(t.created_at) },
    { header: 'Last used', class: 'nowrap', cell: (t) => (t.last_used_at ? fmtDateTime(t.last_used_at) : 'Never') },
    {
      header: 'This month',
      num: true,
      testId: 'token-usage',
      cell: (t) => (
        <span>
          {fmtInt(t.current_month_usage)}
          {t.monthly_limit !== null && <span class="sub">of {fmtInt(t.monthly_limit)}</span>}
        </span>
      ),
    },
    // The last day it works and the instant it stops, in the viewer's zone: the day the owner picked.
    { header: 'Expires', class: 'nowrap', cell: (t) => (t.expires_at ? <Expiry iso={t.expires_at} /> : '—') },
    { header: 'Status', cell: (t) => <StatusBadge status={t.status} /> },
    { header: 'Actions', cell: (t) => <TokenActions token={t} onChanged={props.onChanged} onError={props.onError} /> },
  ];
  return (
    <DataTable
      stack
      testId="token-table"
      columns={columns}
      rows={props.tokens}
      rowKey={(t) => t.id}
      rowProps={(t) => ({ 'data-token-id': t.id, class: t.status === 'revoked' || t.status === 'expired' ? 'gone' : '' })}
      empty={props.loaded ? 'No tokens yet. Create one to call a chain.' : undefined}
    />
  );
}

interface Draft {
  name: string;
  description: string;
  monthlyLimit: string;
  expiresOn: string;
}

function validate(d: Draft, account: Account): Partial<Record<keyof Draft, string>> {
  const e: Partial<Record<keyof Draft, string>> = {};
  if (!d.name.trim()) e.name = 'Give the token a name.';
  else if (d.name.trim().length > 100) e.name = 'At most 100 characters.';
  if (d.description.length > 500) e.description = 'At most 500 characters.';
  const monthlyLimit = monthlyLimitProblem(d.monthlyLimit, account.plan);
  if (monthlyLimit) e.monthlyLimit = monthlyLimit;
  if (d.expiresOn) {
    const days = daysThrough(d.expiresOn);
    if (!Number.isFinite(days)) e.expiresOn = 'Pick a date.';
    else if (days < 1) e.expiresOn = `Pick today or a later day; today is ${fmtLocalDate(Date.now())} in your time zone.`;
    else if (days > 3650) e.expiresOn = 'At most 10 years ahead.';
  }
  return e;
}

function CreateTokenForm(props: { account: Account; atMax: string | null; onCancel(): void; onCreated(t: CreatedToken): void }) {
  const { api, refreshAccount } = useSession();
  const plan = props.account.plan;
  const [draft, setDraft] = useState<Draft>({ name: '', description: '', monthlyLimit: '', expiresOn: '' });
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<Error | null>(null);
  const errors = touched ? validate(draft, props.account) : {};
  const set = (k: keyof Draft) => (e: Event) => setDraft({ ...draft, [k]: (e.currentTarget as HTMLInputElement).value });
  const planReason = `Needs the Developer plan or above; you are on ${plan.name}.`;
  const days = draft.expiresOn ? daysThrough(draft.expiresOn) : null;

  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (Object.keys(validate(draft, props.account)).length > 0) return;
    setBusy(true);
    setRefusal(null);
    try {
      const body: Record<string, unknown> = { name: draft.name.trim() };
      if (draft.description.trim()) body.description = draft.description.trim();
      const monthlyLimit = parseLimit(draft.monthlyLimit);
      if (plan.custom_limits && monthlyLimit !== null) body.monthly_limit = monthlyLimit;
      if (plan.expiration && days !== null) body.expires_in_days = days;
      const created = await api.post<CreatedToken>('/api/v1/tokens', body);
      await refreshAccount().catch(() => undefined);
      props.onCreated(created);
    } catch (error) {
      setRefusal(asApiError(error));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={submit} noValidate class="form-grid" aria-label="New token">
      <Field label="Name (required)" error={errors.name} hint="What the token is for, e.g. “backend production”.">
        {(c) => <input {...c} value={draft.name} onInput={set('name')} maxLength={120} required />}
      </Field>
      <Field label="Description" error={errors.description}>
        {(c) => <textarea {...c} value={draft.description} onInput={set('description')} rows={2} />}
      </Field>
      <Field
        label="Custom monthly limit"
        error={errors.monthlyLimit}
        hint={plan.custom_limits ? 'Requests per month for this token; empty uses the account limit.' : planReason}
      >
        {(c) => <input {...c} inputMode="numeric" value={draft.monthlyLimit} onInput={set('monthlyLimit')} disabled={!plan.custom_limits} />}
      </Field>
      <Field
        label="Expiration date"
        error={errors.expiresOn}
        hint={
          !plan.expiration
            ? planReason
            : days !== null && days > 0 && days <= 3650
              ? expiryHint(days)
              : `The last day it works, in your time zone (${ownTimeZone()}). Empty: never expires.`
        }
      >
        {(c) => <input {...c} type="date" min={localIsoDate(Date.now())} value={draft.expiresOn} onInput={set('expiresOn')} disabled={!plan.expiration} />}
      </Field>
      {props.atMax && <p class="note">{props.atMax}</p>}
      <ProblemMessage error={refusal} />
      <div class="button-row">
        <button type="button" class="button" onClick={props.onCancel}>
          Cancel
        </button>
        <BusyButton type="submit" class="button primary" busy={busy}>
          {busy ? 'Creating…' : 'Create token'}
        </BusyButton>
      </div>
    </form>
  );
}

/** A token's expiry: the last day it works, in the viewer's zone, and the instant it stops. */
export function Expiry(props: { iso: string; long?: boolean }) {
  const { through, stops } = fmtExpiry(props.iso);
  const verb = Date.parse(props.iso) <= Date.now() ? 'stopped' : 'stops';
  return props.long ? (
    <>
      Through {through} in your time zone ({ownTimeZone()}); {verb} {stops}
    </>
  ) : (
    <span>
      Through {through}
      <span class="sub">
        {verb} {stops}
      </span>
    </span>
  );
}
