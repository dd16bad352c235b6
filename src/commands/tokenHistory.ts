import type { TokenHistory } from '../api/types.js';
import type { ApiTokenState } from '../domain/apiToken.js';
import type { Decider } from '../domain/decider.js';
import type { AccountEvent } from '../domain/events.js';
import type { PlanId } from '../domain/plans.js';
import type { Position } from '../infra/eventstore/port.js';

export type LiveToken = Exclude<ApiTokenState, { status: 'none' }>;
type PlanChange = { from: PlanId; to: PlanId };

interface Recorded {
  /** Global position: the order of the log across the token's and the account's streams. */
  position: Position;
  at: string;
  recordedAt: string;
}

/** One event of the token's own stream, with the token's state after it. */
export interface TokenEventEntry extends Recorded {
  kind: 'token';
  revision: number;
  type: string;
  state: LiveToken;
}

/**
 * A change of the account's plan while the token lived: it changes the limits the token is held
 * to (rate, quota, retention, custom limits) without an event of the token's. `state` is the
 * token's, unchanged by it. The event records no actor: plans are changed by the operator only
 * (the admin API or the CLI), and neither records who.
 */
export interface PlanChangeEntry extends Recorded {
  kind: 'account';
  type: 'AccountPlanChanged';
  plan: PlanChange;
  state: LiveToken;
}

export type TokenHistoryEntry = TokenEventEntry | PlanChangeEntry;

/** Of the account stream, what a token's history needs: the plan change an event made, if it made one. */
export const planChangeOf: Decider<PlanChange | null, never, AccountEvent> = {
  initialState: () => null,
  decide: () => [],
  evolve: (_, event) => (event.type === 'AccountPlanChanged' ? { from: event.data.from, to: event.data.to } : null),
};

/**
 * The token's events with the plan changes of its life between them, in the log's order. Its life
 * runs from its creation (its first event) to its end: its revocation or expiry, or its date if
 * that came first (a token past its date is expired at once, recorded or not), so a later plan
 * change never concerns it and its history does not change once the expiry is recorded.
 */
export function withPlanChanges(tokenEvents: TokenEventEntry[], accountEvents: Array<Recorded & { change: PlanChange | null }>): TokenHistoryEntry[] {
  const first = tokenEvents[0];
  const last = tokenEvents[tokenEvents.length - 1];
  if (!first || !last) return [];
  const ended = tokenEvents.find((e) => e.state.status === 'revoked' || e.state.status === 'expired');
  const ends = [ended?.at, last.state.expiresAt].filter((t): t is string => typeof t === 'string').sort();
  const end = ends[0] ?? null;
  const changes = accountEvents.filter(
    (e): e is Recorded & { change: PlanChange } => e.change !== null && e.position > first.position && (end === null || e.at < end),
  );
  const byPosition = [...tokenEvents, ...changes].sort((a, b) => (a.position < b.position ? -1 : 1));
  let state = first.state;
  return byPosition.map((e): TokenHistoryEntry => {
    if ('kind' in e) {
      state = e.state;
      return e;
    }
    return { kind: 'account', type: 'AccountPlanChanged', position: e.position, at: e.at, recordedAt: e.recordedAt, plan: e.change, state };
  });
}

/** An entry as GET /api/v1/tokens/{id}/history gives it; the CLI's `history --json` prints the same (with the position). */
export function tokenHistoryJson(entry: TokenHistoryEntry): TokenHistory['events'][number] {
  const s = entry.state;
  const state = {
    name: s.name,
    description: s.description,
    status: s.status,
    masked: s.masked,
    expires_at: s.expiresAt,
    monthly_limit: s.monthlyLimit,
    rate_limit: s.rateLimit,
  };
  const times = { at: entry.at, recorded_at: entry.recordedAt };
  return entry.kind === 'token'
    ? { kind: 'token', revision: entry.revision, type: entry.type, ...times, state }
    : { kind: 'account', type: entry.type, ...times, plan: entry.plan, state };
}
