import { useId } from 'preact/hooks';
import type { Plan } from '../../api/types.js';

/** Something a plan caps the number of (`max_tokens`, `max_alerts`), as the dashboard names it. */
export interface Capped {
  one: string;
  many: string;
  /** What frees a place: "Revoke one", "Delete one". */
  remedy: string;
}

export const TOKENS: Capped = { one: 'token', many: 'tokens', remedy: 'Revoke one' };
export const ALERT_RULES: Capped = { one: 'alert rule', many: 'alert rules', remedy: 'Delete one' };

/** Why the plan can't have another, or null when it can (`max` null: unlimited). */
export function planMaxMessage(plan: Plan, max: number | null, count: number, what: Capped): string | null {
  if (max === null || count < max) return null;
  return `Your ${plan.name} plan allows ${max} ${max === 1 ? what.one : what.many} and you have ${count}. ${what.remedy} to create another, or move to a bigger plan.`;
}

/** "3 of 5 tokens on the Free plan". */
export function PlanCount(props: { plan: Plan; max: number | null; count: number; what: Capped; testId: string }) {
  return (
    <p class="muted" data-testid={props.testId}>
      {props.count} of {props.max === null ? 'unlimited' : props.max} {props.what.many} on the {props.plan.name} plan
    </p>
  );
}

/** The Create button: at the plan's maximum disabled (nothing to wait for), with the reason beside it. */
export function CreateButton(props: { label: string; atMax: string | null; onClick(): void }) {
  const noteId = useId();
  return (
    <div class="create-row">
      <button type="button" class="button primary" onClick={props.onClick} disabled={props.atMax !== null} aria-describedby={props.atMax ? noteId : undefined}>
        {props.label}
      </button>
      {props.atMax && (
        <p class="note" id={noteId} role="status">
          {props.atMax}
        </p>
      )}
    </div>
  );
}
