import type { TokenSlot } from './account.js';
import type { Decider } from './decider.js';
import { fail } from './errors.js';
import type { ApiTokenEvent } from './events.js';

export type TokenStatus = 'active' | 'disabled' | 'revoked' | 'expired';

export type ApiTokenState = { status: 'none' } | ({ status: TokenStatus; accountId: string; createdAt: string } & TokenSlot);

export type ApiTokenCommand =
  | ({ type: 'CreateApiToken'; accountId: string; at: string } & TokenSlot)
  | { type: 'RenameApiToken'; name: string; at: string }
  | { type: 'ChangeApiTokenDescription'; description: string; at: string }
  | { type: 'DisableApiToken'; at: string }
  | { type: 'EnableApiToken'; at: string }
  /** The plan check happens before (checkTokenOptions); the decider guards the lifecycle. */
  | { type: 'ChangeApiTokenLimits'; monthlyLimit: number | null; rateLimit: number | null; at: string }
  | { type: 'RevokeApiToken'; at: string }
  | { type: 'ExpireApiToken'; at: string };

/** Past its date counts as expired even before the scheduler has appended ApiTokenExpired. */
export const isPastExpiry = (state: { expiresAt: string | null }, at: string): boolean => state.expiresAt !== null && state.expiresAt <= at;

/** Status as seen at a moment: an active or disabled token past its date is expired. */
export function effectiveStatus(state: { status: TokenStatus; expiresAt: string | null }, at: string): TokenStatus {
  if ((state.status === 'active' || state.status === 'disabled') && isPastExpiry(state, at)) return 'expired';
  return state.status;
}

function refuseIfFinal(state: Exclude<ApiTokenState, { status: 'none' }>, at: string): void {
  const status = effectiveStatus(state, at);
  if (status === 'revoked') fail('token_revoked', 'The token is revoked; a revoked token cannot change.');
  if (status === 'expired') fail('token_expired', 'The token has expired; an expired token cannot change.');
}

export const apiTokenDecider: Decider<ApiTokenState, ApiTokenCommand, ApiTokenEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state): ApiTokenEvent[] {
    if (command.type === 'CreateApiToken') {
      if (state.status !== 'none') fail('conflict', 'The token exists already.');
      const { type: _type, ...data } = command;
      return [{ type: 'ApiTokenCreated', version: 1, data }];
    }
    if (state.status === 'none') return fail('not_found', 'No such token.');
    const { tokenId } = state;
    const at = command.at;
    switch (command.type) {
      case 'RevokeApiToken':
        if (state.status === 'revoked') return []; // revoking twice changes nothing
        refuseIfFinal(state, at);
        return [{ type: 'ApiTokenRevoked', version: 1, data: { tokenId, at } }];
      case 'ExpireApiToken':
        if (state.status === 'revoked' || state.status === 'expired' || state.expiresAt === null || !isPastExpiry(state, at)) return [];
        // When it expired is its date, whenever the scheduler gets to it (the store records when that was).
        return [{ type: 'ApiTokenExpired', version: 1, data: { tokenId, at: state.expiresAt } }];
    }
    refuseIfFinal(state, at);
    switch (command.type) {
      case 'RenameApiToken':
        return command.name === state.name ? [] : [{ type: 'ApiTokenRenamed', version: 1, data: { tokenId, name: command.name, at } }];
      case 'ChangeApiTokenDescription':
        return command.description === state.description
          ? []
          : [{ type: 'ApiTokenDescriptionChanged', version: 1, data: { tokenId, description: command.description, at } }];
      case 'DisableApiToken':
        return state.status === 'disabled' ? [] : [{ type: 'ApiTokenDisabled', version: 1, data: { tokenId, at } }];
      case 'EnableApiToken':
        return state.status === 'active' ? [] : [{ type: 'ApiTokenEnabled', version: 1, data: { tokenId, at } }];
      case 'ChangeApiTokenLimits': {
        const { monthlyLimit, rateLimit } = command;
        if (monthlyLimit === state.monthlyLimit && rateLimit === state.rateLimit) return [];
        return [{ type: 'ApiTokenLimitsChanged', version: 1, data: { tokenId, monthlyLimit, rateLimit, at } }];
      }
    }
  },

  evolve(state, event): ApiTokenState {
    if (event.type === 'ApiTokenCreated') {
      const { at, ...rest } = event.data;
      return { ...rest, status: 'active', createdAt: at };
    }
    if (state.status === 'none') return state;
    switch (event.type) {
      case 'ApiTokenRenamed':
        return { ...state, name: event.data.name };
      case 'ApiTokenDescriptionChanged':
        return { ...state, description: event.data.description };
      case 'ApiTokenDisabled':
        return { ...state, status: 'disabled' };
      case 'ApiTokenEnabled':
        return { ...state, status: 'active' };
      case 'ApiTokenLimitsChanged':
        return { ...state, monthlyLimit: event.data.monthlyLimit, rateLimit: event.data.rateLimit };
      case 'ApiTokenRevoked':
        return { ...state, status: 'revoked' };
      case 'ApiTokenExpired':
        return { ...state, status: 'expired' };
    }
  },
};
