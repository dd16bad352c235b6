import { useState } from 'preact/hooks';
import type { Account, Alert, AlertType, TokenRecord } from '../../../api/types.js';
import { asApiError } from '../../api.js';
import { BusyButton, Field, ProblemMessage } from '../../components/ui.js';
import { useFocusReturn } from '../../focus.js';
import { useSession } from '../../hooks.js';
import { ChannelPicker } from './channelPicker.js';
import { bodyOf, type Draft, draftOf, validate } from './draft.js';
import { isMonthly, TYPE_IDS, TYPES, tokenRule, UNIT_LABEL, unitOf, usesBaseline, usesMinRequests } from './rules.js';

/** The draft's fields a text box or a list fills in as typed (the type select also clears the condition). */
type TextField = Exclude<keyof Draft, 'type' | 'enabled' | 'channels'>;

/** Creates an alert, or edits one: checked here for quick answers, judged by the server. */
export function AlertForm(props: { account: Account; alert: Alert | null; tokens: TokenRecord[]; onCancel(): void; onSaved(a: Alert): void }) {
  const { api } = useSession();
  // Closed, it gives the focus back to the Edit button that opened it (a new alert's button went with the form: the page's content).
  useFocusReturn();
  const [draft, setDraft] = useState<Draft>(() => draftOf(props.alert, props.account));
  const [touched, setTouched] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<Error | null>(null);
  const type = TYPES[draft.type];
  const condition = draft.condition || type.conditions[0]?.value || '';
  // The rule as the form shows it (the first condition until one is picked): what is checked on screen and what is sent.
  const shown = { ...draft, condition };
  const errors = touched ? validate(shown, props.account) : {};
  const unit = unitOf(draft.type, condition);
  const monthly = isMonthly(draft.type, condition);
  const tokens = tokenRule(draft.type);
  /** The handler that copies a control's text into one field of the draft. */
  const set = (key: TextField) => (e: { currentTarget: { value: string } }) => setDraft({ ...draft, [key]: e.currentTarget.value });

  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (Object.keys(validate(shown, props.account)).length > 0) return;
    setBusy(true);
    setRefusal(null);
    try {
      const saved = props.alert
        ? await api.patch<Alert>(`/api/v1/alerts/${encodeURIComponent(props.alert.id)}`, bodyOf(shown))
        : await api.post<Alert>('/api/v1/alerts', bodyOf(shown));
      props.onSaved(saved);
    } catch (error) {
      setRefusal(asApiError(error));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={submit} noValidate class="form-grid" aria-label={props.alert ? 'Edit alert' : 'New alert'}>
      <Field label="Name (required)" error={errors.name}>
        {(c) => <input {...c} value={draft.name} onInput={set('name')} />}
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
            <select {...c} value={condition} onChange={set('condition')}>
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
        {(c) => <input {...c} inputMode="decimal" autoComplete="off" value={draft.threshold} onInput={set('threshold')} />}
      </Field>
      {monthly ? (
        <p class="hint field">Measured over the calendar month (UTC).</p>
      ) : (
        <Field label="Window (minutes)" error={errors.windowMinutes}>
          {(c) => <input {...c} inputMode="numeric" autoComplete="off" value={draft.windowMinutes} onInput={set('windowMinutes')} />}
        </Field>
      )}
      {usesMinRequests(draft.type, condition) && (
        <Field label="Minimum requests" error={errors.minRequests} hint="Windows with fewer calls are not judged.">
          {(c) => <input {...c} inputMode="numeric" autoComplete="off" value={draft.minRequests} onInput={set('minRequests')} />}
        </Field>
      )}
      {usesBaseline(draft.type, condition) && (
        <Field label="Baseline (hours)" error={errors.baselineHours} hint="The usual traffic is measured over this many hours.">
          {(c) => <input {...c} inputMode="numeric" autoComplete="off" value={draft.baselineHours} onInput={set('baselineHours')} />}
        </Field>
      )}
      {tokens !== 'none' && (
        <Field
          label={tokens === 'required' ? 'Token (required)' : 'Token'}
          error={errors.tokenId}
          hint={tokens === 'optional' ? 'Empty: the whole account.' : undefined}
        >
          {(c) => (
            <select {...c} value={draft.tokenId} onChange={set('tokenId')}>
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
      <ChannelPicker plan={props.account.plan} channels={draft.channels} errors={errors} onChange={(channels) => setDraft({ ...draft, channels })} />
      <label class="check span-all">
        <input type="checkbox" checked={draft.enabled} onChange={(e) => setDraft({ ...draft, enabled: e.currentTarget.checked })} /> Enabled
      </label>
      <ProblemMessage error={refusal} />
      <div class="button-row span-all">
        <button type="button" class="button" onClick={props.onCancel}>
          Cancel
        </button>
        <BusyButton type="submit" class="button primary" busy={busy}>
          {busy ? 'Saving…' : props.alert ? 'Save alert' : 'Create alert'}
        </BusyButton>
      </div>
    </form>
  );
}
