import type { Account } from '../../../api/types.js';
import { Field } from '../../components/ui.js';
import { CHANNEL_NAMES } from '../../format.js';
import type { Draft } from './draft.js';
import { CHANNEL_PLAN, CHANNELS } from './rules.js';

/** Which channels notify, and where: the ones the plan lacks are shown, off, with the plan that has them. */
export function ChannelPicker(props: {
  plan: Account['plan'];
  channels: Draft['channels'];
  errors: Record<string, string>;
  onChange(channels: Draft['channels']): void;
}) {
  return (
    <fieldset class="channels span-all">
      <legend>Notify by</legend>
      {props.errors.channels && <p class="field-error">{props.errors.channels}</p>}
      {CHANNELS.map((c) => {
        const offered = props.plan.channels.includes(c.type);
        const state = props.channels[c.type];
        const set = (next: Partial<{ on: boolean; value: string }>) => props.onChange({ ...props.channels, [c.type]: { ...state, ...next } });
        return (
          <div key={c.type} class={`channel ${offered ? '' : 'unavailable'}`}>
            <label class="check">
              <input type="checkbox" checked={state.on} disabled={!offered && !state.on} onChange={(e) => set({ on: e.currentTarget.checked })} />
              {CHANNEL_NAMES[c.type]}
            </label>
            {offered ? (
              state.on && (
                <Field label={c.label} error={props.errors[`channel-${c.type}`]} class="compact">
                  {(f) => <input {...f} value={state.value} placeholder={c.placeholder} onInput={(e) => set({ value: e.currentTarget.value })} />}
                </Field>
              )
            ) : (
              <p class="hint">
                Comes with the {CHANNEL_PLAN[c.type]} plan{c.type === 'sms' ? '' : ' and above'}; you are on {props.plan.name}.
                {props.errors[`channel-${c.type}`] ? ` ${props.errors[`channel-${c.type}`]}` : ''}
              </p>
            )}
          </div>
        );
      })}
    </fieldset>
  );
}
