import type { Decider } from './decider.js';
import { fail } from './errors.js';
import type { AccessTokenEvent } from './events.js';

export type AccessTokenState =
  | { status: 'none' }
  | { status: 'active' | 'revoked'; accessTokenId: string; accountId: string; tokenHash: string; masked: string; name: string; createdAt: string };

export type AccessTokenCommand =
  | { type: 'CreateAccessToken'; accessTokenId: string; accountId: string; tokenHash: string; masked: string; name: string; at: string }
  | { type: 'RevokeAccessToken'; at: string };

export const accessTokenDecider: Decider<AccessTokenState, AccessTokenCommand, AccessTokenEvent> = {
  initialState: () => ({ status: 'none' }),
  decide(command, state) {
    if (command.type === 'CreateAccessToken') {
      if (state.status !== 'none') fail('conflict', 'The access token exists already.');
      const { type: _type, ...data } = command;
      return [{ type: 'AccessTokenCreated', version: 1, data }];
    }
    if (state.status === 'none') return fail('not_found', 'No such access token.');
    if (state.status === 'revoked') return [];
    return [{ type: 'AccessTokenRevoked', version: 1, data: { accessTokenId: state.accessTokenId, at: command.at } }];
  },
  evolve(state, event) {
    if (event.type === 'AccessTokenCreated') {
      const { at, ...rest } = event.data;
      return { ...rest, status: 'active', createdAt: at };
    }
    return state.status === 'none' ? state : { ...state, status: 'revoked' };
  },
};
