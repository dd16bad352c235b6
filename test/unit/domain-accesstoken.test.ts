import { describe, it } from 'vitest';
import { accessTokenDecider } from '../../src/domain/accessToken.js';
import type { AccessTokenEvent } from '../../src/domain/events.js';
import { deciderSpec } from '../support/deciderSpec.js';

const at = '2026-11-21T12:00:00.000Z';
const spec = deciderSpec(accessTokenDecider);
const data = { accessTokenId: 'k1', accountId: 'a1', tokenHash: 'h', masked: 'gka_abcd…wxyz', name: 'ci' };
const created: AccessTokenEvent = { type: 'AccessTokenCreated', version: 1, data: { ...data, at } };
const revoked: AccessTokenEvent = { type: 'AccessTokenRevoked', version: 1, data: { accessTokenId: 'k1', at } };

describe('access token decider', () => {
  it('creates', () =>
    spec
      .given([])
      .when({ type: 'CreateAccessToken', ...data, at })
      .then([created]));
  it('refuses creating twice', () =>
    spec
      .given([created])
      .when({ type: 'CreateAccessToken', ...data, at })
      .thenError('conflict'));
  it('revokes', () => spec.given([created]).when({ type: 'RevokeAccessToken', at }).then([revoked]));
  it('revoking twice changes nothing', () => spec.given([created, revoked]).when({ type: 'RevokeAccessToken', at }).thenNothing());
  it('refuses revoking a token that does not exist', () => spec.given([]).when({ type: 'RevokeAccessToken', at }).thenError('not_found'));
});
