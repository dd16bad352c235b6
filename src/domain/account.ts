import type { Decider } from './decider.js';
import { fail } from './errors.js';
import type { AccountEvent } from './events.js';
import type { PlanCatalog, PlanId } from './plans.js';

export interface TokenSlot {
  tokenId: string;
  tokenHash: string;
  masked: string;
  name: string;
  description: string;
  expiresAt: string | null;
  monthlyLimit: number | null;
  rateLimit: number | null;
}

export type AccountState =
  | { exists: false }
  | {
      exists: true;
      accountId: string;
      email: string;
      passwordHash: string;
      plan: PlanId;
      /** Tokens holding a slot (not revoked, not expired), by id. */
      liveTokens: ReadonlyMap<string, TokenSlot>;
      /**
       * Alerts holding a slot (not deleted): when each was taken, by alert id. Null until the
       * first slot is taken: the alerts made before alert slots existed are not counted yet.
       */
      alertSlots: ReadonlyMap<string, string> | null;
    };

export type AccountCommand =
  | { type: 'SignUp'; accountId: string; email: string; passwordHash: string; at: string }
  | { type: 'ChangePlan'; plan: PlanId; at: string }
  | ({ type: 'IssueApiToken'; at: string } & TokenSlot)
  | { type: 'ReleaseApiToken'; tokenId: string; reason: 'revoked' | 'expired'; at: string }
  /** `alertsBeforeSlots`: the account's live alerts, read for an account whose alerts were never counted (ignored once they are). */
  | { type: 'TakeAlertSlot'; alertId: string; alertsBeforeSlots: readonly string[]; at: string }
  | { type: 'ReleaseAlertSlot'; alertId: string; reason: 'deleted' | 'abandoned'; at: string };

/** Limits a token asks for, checked against the account's plan (on creation and on change). */
export function checkTokenOptions(
  plans: PlanCatalog,
  planId: PlanId,
  options: { expiresAt?: string | null; monthlyLimit: number | null; rateLimit: number | null },
  at: string,
): void {
  const plan = plans[planId];
  if ((options.monthlyLimit !== null || options.rateLimit !== null) && !plan.custom_limits) {
    fail('plan_feature_unavailable', `Custom limits are available on Developer plans and above; this account is on ${plan.name}.`, {
      feature: 'custom_limits',
      plan: plan.id,
    });
  }
  if (options.expiresAt && !plan.expiration) {
    fail('plan_feature_unavailable', `Token expiration is available on Developer plans and above; this account is on ${plan.name}.`, {
      feature: 'expiration',
      plan: plan.id,
    });
  }
  if (options.expiresAt && options.expiresAt <= at) fail('validation_failed', 'The expiration must be in the future.');
  if (options.monthlyLimit !== null && plan.monthly_requests !== null && options.monthlyLimit >= plan.monthly_requests) {
    fail('limit_above_account', `A token's monthly limit must be lower than the account's total of ${plan.monthly_requests}.`, {
      accountMonthlyLimit: plan.monthly_requests,
    });
  }
  if (options.rateLimit !== null && options.rateLimit > plan.rps) {
    fail('limit_above_account', `A token's rate limit cannot exceed the plan's ${plan.rps} requests per second.`, { planRps: plan.rps });
  }
}

export const accountDecider = (plans: PlanCatalog): Decider<AccountState, AccountCommand, AccountEvent> => ({
  initialState: () => ({ exists: false }),

  decide(command, state) {
    if (command.type === 'SignUp') {
      if (state.exists) fail('conflict', 'The account exists already.');
      const { accountId, email, passwordHash, at } = command;
      return [{ type: 'AccountSignedUp', version: 1, data: { accountId, email, passwordHash, plan: 'free', at } }];
    }
    if (!state.exists) return fail('not_found', 'No such account.');
    switch (command.type) {
      case 'ChangePlan':
        if (command.plan === state.plan) return [];
        return [{ type: 'AccountPlanChanged', version: 1, data: { accountId: state.accountId, from: state.plan, to: command.plan, at: command.at } }];
      case 'IssueApiToken': {
        const plan = plans[state.plan];
        if (plan.max_tokens !== null && state.liveTokens.size >= plan.max_tokens) {
          fail('token_limit_reached', `The ${plan.name} plan allows ${plan.max_tokens} tokens; revoke one or upgrade the plan.`, {
            maxTokens: plan.max_tokens,
            plan: plan.id,
          });
        }
        checkTokenOptions(plans, state.plan, command, command.at);
        const { type: _type, ...slot } = command;
        return [{ type: 'ApiTokenIssued', version: 1, data: { ...slot, accountId: state.accountId } }];
      }
      case 'ReleaseApiToken':
        if (!state.liveTokens.has(command.tokenId)) return [];
        return [
          { type: 'ApiTokenReleased', version: 1, data: { accountId: state.accountId, tokenId: command.tokenId, reason: command.reason, at: command.at } },
        ];
      case 'TakeAlertSlot': {
        const { alertId, at } = command;
        const adopted = [...new Set(command.alertsBeforeSlots)].filter((id) => id !== alertId);
        const adoption: AccountEvent[] =
          state.alertSlots === null ? [{ type: 'AlertSlotsAdopted', version: 1, data: { accountId: state.accountId, alertIds: adopted, at } }] : [];
        const held = state.alertSlots ?? new Set(adopted);
        if (held.has(alertId)) return adoption;
        const plan = plans[state.plan];
        // Against the plan of now: after a downgrade the alerts over its maximum stay, and none is added until below it.
        if (plan.max_alerts !== null && held.size >= plan.max_alerts) {
          fail('alert_limit_reached', `The ${plan.name} plan allows ${plan.max_alerts} alert rules; delete one or upgrade the plan.`, {
            maxAlerts: plan.max_alerts,
            plan: plan.id,
          });
        }
        return [...adoption, { type: 'AlertSlotTaken', version: 1, data: { accountId: state.accountId, alertId, at } }];
      }
      case 'ReleaseAlertSlot':
        if (!state.alertSlots?.has(command.alertId)) return [];
        return [
          { type: 'AlertSlotReleased', version: 1, data: { accountId: state.accountId, alertId: command.alertId, reason: command.reason, at: command.at } },
        ];
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'AccountSignedUp': {
        const { accountId, email, passwordHash, plan } = event.data;
        return { exists: true, accountId, email, passwordHash, plan, liveTokens: new Map(), alertSlots: null };
      }
      case 'AccountPlanChanged':
        return state.exists ? { ...state, plan: event.data.to } : state;
      case 'ApiTokenIssued': {
        if (!state.exists) return state;
        const { accountId: _a, at: _t, ...slot } = event.data;
        return { ...state, liveTokens: new Map(state.liveTokens).set(slot.tokenId, slot) };
      }
      case 'ApiTokenReleased': {
        if (!state.exists) return state;
        const liveTokens = new Map(state.liveTokens);
        liveTokens.delete(event.data.tokenId);
        return { ...state, liveTokens };
      }
      case 'AlertSlotsAdopted': {
        if (!state.exists) return state;
        const { alertIds, at } = event.data;
        return { ...state, alertSlots: new Map([...(state.alertSlots ?? []), ...alertIds.map((id): [string, string] => [id, at])]) };
      }
      case 'AlertSlotTaken': {
        if (!state.exists) return state;
        return { ...state, alertSlots: new Map(state.alertSlots ?? []).set(event.data.alertId, event.data.at) };
      }
      case 'AlertSlotReleased': {
        if (!state.exists) return state;
        const alertSlots = new Map(state.alertSlots ?? []);
        alertSlots.delete(event.data.alertId);
        return { ...state, alertSlots };
      }
    }
  },
});
