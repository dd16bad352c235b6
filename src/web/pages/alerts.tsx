import { useState } from 'preact/hooks';
import type { Account, Alert, AlertChannel, AlertList, AlertNotifications, AlertType, ChannelType, TokenList, TokenRecord } from '../../api/types.js';
import { ApiError } from '../api.js';
import { ConfirmDialog, Empty, Field, Panel, ProblemMessage, SecretOnce, StatusBadge, TableWrap } from '../components/ui.js';
import { CHANNEL_NAMES, fmtDateTime } from '../format.js';
import { usePolled, useSession } from '../hooks.js';

type Unit = 'percent' | 'ms' | 'count' | 'multiplier';

/** How the form presents each alert type; the server decides what is valid and says why not. */
const TYPES: Record<AlertType, { label: string; help: string; conditions: { value: string; label: string }[] }> = {
  usage_threshold: { label: 'Usage threshold', help: 'The account has used a share of its monthly request limit.', conditions: [] },
  error_rate: { label: 'Error rate', help: 'The share of failed calls over a time window.', conditions: [] },
  response_time: {
    label: 'Response time',
    help: 'Response time over a time window.',
    conditions: [
      { value: 'avg', label: 'Average' },
      { value: 'p95', label: '95th percentile' },
    ],
  },
  rate_limiting: {
    label: 'Rate limiting',
    help: 'Calls refused by the rate limit, or traffic getting close to it.',
    conditions: [
      { value: 'hitting', label: 'Hitting the limit' },
      { value: 'approaching', label: 'Approaching the limit' },
    ],
  },
  token_usage: {
    label: 'Token usage',
    help: 'One token reaches a share of its monthly limit, has unusual traffic, or a high error rate.',
    conditions: [
      { value: 'percent_of_limit', label: 'Share of its monthly limit' },
      { value: 'unusual_traffic', label: 'Unusual traffic' },
      { value: 'error_rate', label: 'High error rate' },
    ],
  },
};
const TYPE_IDS = Object.keys(TYPES) as AlertType[];

const unitOf = (type: AlertType, condition: string): Unit =>
  type === 'response_time' ? 'ms' : type === 'rate_limiting' && condition === 'hitting' ? 'count' : type === 'token_usage' && condition === 'unusual_traffic' ? 'multiplier' : 'percent';
const isMonthly = (type: AlertType, condition: string): boolean => type === 'usage_threshold' || (type === 'token_usage' && condition === 'percent_of_limit');
/** Ratios and averages mean something only over enough calls. */
const usesMinRequests = (type: AlertType, condition: string): boolean =>
  type === 'error_rate' || type === 'response_time' || (type === 'token_usage' && condition !== 'percent_of_limit');
const usesBaseline = (type: AlertType, condition: string): boolean => type === 'token_usage' && condition === 'unusual_traffic';
const tokenRule = (type: AlertType): 'required' | 'optional' | 'none' => (type === 'token_usage' ? 'required' : type === 'usage_threshold' ? 'none' : 'optional');

const UNIT_LABEL: Record<Unit, string> = {
  percent: 'Threshold (%)',
  ms: 'Threshold (ms)',
  count: 'Refused calls in the window',
  multiplier: 'Times the usual traffic',
};
const UNIT_SUFFIX: Record<Unit, string> = { percent: ' %', ms: ' ms', count: ' refused calls', multiplier: '× usual' };

/** The smallest default plan with each channel, to explain the ones this plan lacks (DESIGN §5). */
const CHANNEL_PLAN: Record<ChannelType, string> = { email: 'Free', webhook: 'Developer', chat: 'Professional', incident: 'Professional', sms: 'Unlimited' };
const CHANNELS: { type: ChannelType; field: 'to' | 'url' | 'routing_key'; label: string; placeholder: string }[] = [
  { type: 'email', field: 'to', label: 'Email address', placeholder: 'you@example.com' },
  { type: 'webhook', field: 'url', label: 'Webhook URL', placeholder: 'https://example.com/hooks/gateway' },
  { type: 'chat', field: 'url', label: 'Team chat webhook URL', placeholder: 'https://hooks.slack.com/services/…' },
  { type: 'incident', field: 'routing_key', label: 'Incident routing key', placeholder: 'routing key' },
  { type: 'sms', field: 'to', label: 'Phone number', placeholder: '+14155550123' },
];

const formatValue = (a: Pick<Alert, 'type' | 'condition'>, v: number): string => {
  const unit = unitOf(a.type, a.condition ?? '');
  const rounded = Math.round(v * 100) / 100;
  return unit === 'multiplier' ? `${rounded}× usual` : `${rounded}${UNIT_SUFFIX[unit]}`;
};

export function describeRule(a: Pick<Alert, 'type' | 'condition' | 'threshold' | 'window_minutes'>): string {
  const t = TYPES[a.type];
  const condition = t?.conditions.find((c) => c.value === a.condition)?.label;
  const unit = unitOf(a.type, a.condition ?? '');
  const threshold = unit === 'multiplier' ? `${a.threshold}× usual` : `${a.threshold}${UNIT_SUFFIX[unit]}`;
  const span = a.window_minutes ? `over ${a.window_minutes} min` : 'this month';
  return `${t?.label ?? a.type}${condition ? ` (${condition.toLowerCase()})` : ''} ≥ ${threshold}, ${span}`;
}

const destination = (c: AlertChannel): string => ('to' in c ? c.to : 'url' in c ? c.url : c.routing_key);

/** A webhook or chat channel: the ones with a URL (a webhook's secret shows once). */
type UrlChannel = Extract<AlertChannel, { url: string }>;

export function AlertsPage() {
  const { api, account } = useSession();
  const alerts = usePolled((signal) => api.get<AlertList>('/api/v1/alerts', signal), []);
  const tokens = usePolled((signal) => api.get<TokenList>('/api/v1/tokens', signal), []);
  const [editing, setEditing] = useState<Alert | 'new' | null>(null);
  const [secrets, setSecrets] = useState<UrlChannel[]>([]);
  const [deleting, setDeleting] = useState<Alert | null>(null);
  const [showing, setShowing] = useState<string | null>(null);
  const liveTokens = (tokens.data?.tokens ?? []).filter((t) => t.status === 'active' || t.status === 'disabled');
  const list = alerts.data?.alerts ?? [];
  const missing = alerts.error instanceof ApiError && alerts.error.isMissingEndpoint;

  return (
    <>
      <div class="page-head">
        <h1>Alerts</h1>
        {editing === null && !missing && (
          <button type="button" class="button primary" onClick={() => setEditing('new')}>
            Create alert
          </button>
        )}
      </div>
      <p class="muted">
        Alerts watch your usage and notify you by {account.plan.channels.map((c) => CHANNEL_NAMES[c]?.toLowerCase() ?? c).join(', ')} on the {account.plan.name}{' '}
        plan.
      </p>
      {secrets.length > 0 && (
        <Panel title="Webhook signing secret">
          {secrets.map((c) => (
            <SecretOnce key={c.id ?? c.url} title={`Signing secret for ${c.url}`} value={c.secret ?? ''} onDone={() => setSecrets((s) => s.filter((x) => x !== c))}>
              <p class="muted">
                Deliveries carry <code>webhook-id</code>, <code>webhook-timestamp</code> and <code>webhook-signature</code> (Standard Webhooks, HMAC-SHA256
                with this secret).
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
        {alerts.data && list.length === 0 ? (
          <Empty>No alerts yet.</Empty>
        ) : (
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
              {list.map((a) => (
                <AlertRow
                  key={a.id}
                  alert={a}
                  tokenName={liveTokens.find((t) => t.id === a.token_id)?.name}
                  expanded={showing === a.id}
                  onToggle={() => setShowing(showing === a.id ? null : a.id)}
                  onEdit={() => setEditing(a)}
                  onDelete={() => setDeleting(a)}
                />
              ))}
            </tbody>
          </table>
        )}
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

function Notifications({ alertId }: { alertId: string }) {
  const { api } = useSession();
  const polled = usePolled((signal) => api.get<AlertNotifications>(`/api/v1/alerts/${encodeURIComponent(alertId)}/notifications`, signal), [alertId]);
  const rows = polled.data?.notifications ?? [];
  return (
    <div class="notifications">
      <ProblemMessage error={polled.error} />
      {polled.data && rows.length === 0 ? (
        <Empty>No notifications yet.</Empty>
      ) : (
        <TableWrap label="Recent notifications">
          <table>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Event</th>
                <th scope="col">Channel</th>
                <th scope="col">Outcome</th>
                <th scope="col">Detail</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((n) => (
                <tr key={`${n.notification_id}-${n.channel.id}-${n.attempt}`}>
                  <td class="nowrap">{fmtDateTime(n.at)}</td>
                  <td>{n.kind}</td>
                  <td>{CHANNEL_NAMES[n.channel.type] ?? n.channel.type}</td>
                  <td>
                    {n.outcome}
                    {n.attempt > 1 ? ` (attempt ${n.attempt})` : ''}
                  </td>
                  <td class="wrap">{n.error ?? (n.status ? `HTTP ${n.status}` : '')}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
    </div>
  );
}

interface Draft {
  name: string;
  type: AlertType;
  condition: string;
  threshold: string;
  windowMinutes: string;
  tokenId: string;
  minRequests: string;
  baselineHours: string;
  enabled: boolean;
  channels: Record<ChannelType, { on: boolean; value: string }>;
}

function draftOf(alert: Alert | null, account: Account): Draft {
  const channels = Object.fromEntries(CHANNELS.map((c) => [c.type, { on: false, value: '' }])) as Draft['channels'];
  if (!alert) {
    channels.email = { on: true, value: account.email };
    return { name: '', type: 'usage_threshold', condition: '', threshold: '80', windowMinutes: '5', tokenId: '', minRequests: '10', baselineHours: '24', enabled: true, channels };
  }
  for (const c of alert.channels) channels[c.type] = { on: true, value: destination(c) };
  return {
    name: alert.name,
    type: alert.type,
    condition: alert.condition ?? '',
    threshold: String(alert.threshold),
    windowMinutes: String(alert.window_minutes ?? 5),
    tokenId: alert.token_id ?? '',
    minRequests: String(alert.min_requests ?? 10),
    baselineHours: String(alert.baseline_hours ?? 24),
    enabled: alert.enabled !== false,
    channels,
  };
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const PHONE = /^\+[1-9]\d{6,14}$/;
const ROUTING_KEY = /^[A-Za-z0-9_-]{8,64}$/;
const HTTPS = /^https?:\/\/[^\s]+$/i;

function validate(d: Draft, account: Account): Record<string, string> {
  const e: Record<string, string> = {};
  if (!d.name.trim()) e.name = 'Give the alert a name.';
  else if (d.name.trim().length > 100) e.name = 'At most 100 characters.';
  const unit = unitOf(d.type, d.condition);
  const t = Number(d.threshold);
  if (d.threshold.trim() === '' || !Number.isFinite(t)) e.threshold = 'Enter a number.';
  else if (unit === 'percent' && (t <= 0 || t > 100)) e.threshold = 'A percentage above 0, at most 100.';
  else if (unit === 'ms' && (t < 1 || t > 600_000)) e.threshold = 'From 1 to 600,000 ms.';
  else if (unit === 'count' && (!Number.isInteger(t) || t < 1)) e.threshold = 'A whole number, 1 or more.';
  else if (unit === 'multiplier' && (t <= 1 || t > 1000)) e.threshold = 'More than 1 (times the usual traffic), at most 1000.';
  if (!isMonthly(d.type, d.condition)) {
    const w = Number(d.windowMinutes);
    if (!Number.isInteger(w) || w < 1 || w > 1440) e.windowMinutes = 'Whole minutes from 1 to 1440.';
  }
  if (tokenRule(d.type) === 'required' && !d.tokenId) e.tokenId = 'Pick the token to watch.';
  if (usesMinRequests(d.type, d.condition)) {
    const n = Number(d.minRequests);
    if (!Number.isInteger(n) || n < 1 || n > 1_000_000) e.minRequests = 'A whole number from 1 to 1,000,000.';
  }
  if (usesBaseline(d.type, d.condition)) {
    const h = Number(d.baselineHours);
    if (!Number.isInteger(h) || h < 1 || h > 168) e.baselineHours = 'Whole hours from 1 to 168.';
    else if (!isMonthly(d.type, d.condition) && h * 60 < 2 * Number(d.windowMinutes)) e.baselineHours = 'The baseline must span at least two windows.';
  }
  const chosen = CHANNELS.filter((c) => d.channels[c.type].on);
  if (chosen.length === 0) e.channels = 'Choose at least one way to be notified.';
  for (const c of chosen) {
    const v = d.channels[c.type].value.trim();
    if (!account.plan.channels.includes(c.type)) e[`channel-${c.type}`] = `Not on your ${account.plan.name} plan.`;
    else if (!v) e[`channel-${c.type}`] = `Enter the ${c.label.toLowerCase()}.`;
    else if (c.type === 'email' && !EMAIL.test(v)) e[`channel-${c.type}`] = 'This is not an email address.';
    else if ((c.type === 'webhook' || c.type === 'chat') && !HTTPS.test(v)) e[`channel-${c.type}`] = 'Enter a URL starting with https://.';
    else if (c.type === 'sms' && !PHONE.test(v)) e[`channel-${c.type}`] = 'International format, e.g. +14155550123.';
    else if (c.type === 'incident' && !ROUTING_KEY.test(v)) e[`channel-${c.type}`] = '8 to 64 letters, digits, - or _.';
  }
  return e;
}

/** The whole definition; fields that do not apply are null, so an edit that changes the type drops them. */
function bodyOf(d: Draft): Record<string, unknown> {
  const body: Record<string, unknown> = { name: d.name.trim(), type: d.type, threshold: Number(d.threshold), enabled: d.enabled };
  body.condition = TYPES[d.type].conditions.length > 0 ? d.condition || TYPES[d.type].conditions[0]?.value : null;
  body.window_minutes = isMonthly(d.type, d.condition) ? null : Number(d.windowMinutes);
  body.token_id = tokenRule(d.type) !== 'none' && d.tokenId ? d.tokenId : null;
  body.min_requests = usesMinRequests(d.type, d.condition) ? Number(d.minRequests) : null;
  body.baseline_hours = usesBaseline(d.type, d.condition) ? Number(d.baselineHours) : null;
  body.channels = CHANNELS.filter((c) => d.channels[c.type].on).map((c) => ({ type: c.type, [c.field]: d.channels[c.type].value.trim() }));
  return body;
}

function AlertForm(props: { account: Account; alert: Alert | null; tokens: TokenRecord[]; onCancel(): void; onSaved(a: Alert): void }) {
  const { api } = useSession();
  const plan = props.account.plan;
  const [draft, setDraft] = useState<Draft>(() => draftOf(props.alert, props.account));
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<Error | null>(null);
  const errors = touched ? validate(draft, props.account) : {};
  const type = TYPES[draft.type];
  const condition = draft.condition || type.conditions[0]?.value || '';
  const unit = unitOf(draft.type, condition);
  const monthly = isMonthly(draft.type, condition);
  const tokens = tokenRule(draft.type);

  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    const d = { ...draft, condition };
    if (Object.keys(validate(d, props.account)).length > 0) return;
    setBusy(true);
    setRefusal(null);
    try {
      const saved = props.alert
        ? await api.patch<Alert>(`/api/v1/alerts/${encodeURIComponent(props.alert.id)}`, bodyOf(d))
        : await api.post<Alert>('/api/v1/alerts', bodyOf(d));
      props.onSaved(saved);
    } catch (error) {
      setRefusal(error instanceof ApiError ? error : new Error(String(error)));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={submit} noValidate class="form-grid" aria-label={props.alert ? 'Edit alert' : 'New alert'}>
      <Field label="Name (required)" error={errors.name}>
        {(c) => <input {...c} value={draft.name} onInput={(e) => setDraft({ ...draft, name: e.currentTarget.value })} />}
      </Field>
      <Field label="Type" hint={type.help}>
        {(c) => (
          <select {...c} value={draft.type} onChange={(e) => setDraft({ ...draft, type: e.currentTarget.value as AlertType, condition: '' })}>
            {TYPE_IDS.map((id) => (
              <option key={id} value={id}>
                {TYPES[id].label}
              </option>
            ))}
          </select>
        )}
      </Field>
      {type.conditions.length > 0 && (
        <Field label="Condition">
          {(c) => (
            <select {...c} value={condition} onChange={(e) => setDraft({ ...draft, condition: e.currentTarget.value })}>
              {type.conditions.map((o) => (
                <option key={o.value} value={o.value}>
                  {o.label}
                </option>
              ))}
            </select>
          )}
        </Field>
      )}
      <Field label={UNIT_LABEL[unit]} error={errors.threshold} hint="Notify when the measured value reaches this.">
        {(c) => <input {...c} type="number" inputMode="decimal" step="any" value={draft.threshold} onInput={(e) => setDraft({ ...draft, threshold: e.currentTarget.value })} />}
      </Field>
      {monthly ? (
        <p class="hint field">Measured over the calendar month (UTC).</p>
      ) : (
        <Field label="Window (minutes)" error={errors.windowMinutes}>
          {(c) => <input {...c} type="number" inputMode="numeric" min={1} max={1440} value={draft.windowMinutes} onInput={(e) => setDraft({ ...draft, windowMinutes: e.currentTarget.value })} />}
        </Field>
      )}
      {usesMinRequests(draft.type, condition) && (
        <Field label="Minimum requests" error={errors.minRequests} hint="Windows with fewer calls are not judged.">
          {(c) => <input {...c} type="number" inputMode="numeric" min={1} value={draft.minRequests} onInput={(e) => setDraft({ ...draft, minRequests: e.currentTarget.value })} />}
        </Field>
      )}
      {usesBaseline(draft.type, condition) && (
        <Field label="Baseline (hours)" error={errors.baselineHours} hint="The usual traffic is measured over this many hours.">
          {(c) => <input {...c} type="number" inputMode="numeric" min={1} max={168} value={draft.baselineHours} onInput={(e) => setDraft({ ...draft, baselineHours: e.currentTarget.value })} />}
        </Field>
      )}
      {tokens !== 'none' && (
        <Field label={tokens === 'required' ? 'Token (required)' : 'Token'} error={errors.tokenId} hint={tokens === 'optional' ? 'Empty: the whole account.' : undefined}>
          {(c) => (
            <select {...c} value={draft.tokenId} onChange={(e) => setDraft({ ...draft, tokenId: e.currentTarget.value })}>
              <option value="">{tokens === 'required' ? 'Pick a token…' : 'All tokens'}</option>
              {props.tokens.map((t) => (
                <option key={t.id} value={t.id}>
                  {t.name} ({t.masked})
                </option>
              ))}
            </select>
          )}
        </Field>
      )}
      <fieldset class="channels span-all">
        <legend>Notify by</legend>
        {errors.channels && <p class="field-error">{errors.channels}</p>}
        {CHANNELS.map((c) => {
          const offered = plan.channels.includes(c.type);
          const state = draft.channels[c.type];
          const set = (next: Partial<{ on: boolean; value: string }>) => setDraft({ ...draft, channels: { ...draft.channels, [c.type]: { ...state, ...next } } });
          return (
            <div key={c.type} class={`channel ${offered ? '' : 'unavailable'}`}>
              <label class="check">
                <input type="checkbox" checked={state.on} disabled={!offered && !state.on} onChange={(e) => set({ on: e.currentTarget.checked })} />
                {CHANNEL_NAMES[c.type]}
              </label>
              {offered ? (
                state.on && (
                  <Field label={c.label} error={errors[`channel-${c.type}`]} class="compact">
                    {(f) => <input {...f} value={state.value} placeholder={c.placeholder} onInput={(e) => set({ value: e.currentTarget.value })} />}
                  </Field>
                )
              ) : (
                <p class="hint">
                  Comes with the {CHANNEL_PLAN[c.type]} plan{c.type === 'sms' ? '' : ' and above'}; you are on {plan.name}.
                  {errors[`channel-${c.type}`] ? ` ${errors[`channel-${c.type}`]}` : ''}
                </p>
              )}
            </div>
          );
        })}
      </fieldset>
      <label class="check span-all">
        <input type="checkbox" checked={draft.enabled} onChange={(e) => setDraft({ ...draft, enabled: e.currentTarget.checked })} /> Enabled
      </label>
      <ProblemMessage error={refusal} />
      <div class="button-row span-all">
        <button type="button" class="button" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="submit" class="button primary" disabled={busy}>
          {busy ? 'Saving…' : props.alert ? 'Save alert' : 'Create alert'}
        </button>
      </div>
    </form>
  );
}
