import { describe, expect, it } from 'vitest';
import { apiTokenDecider, effectiveStatus } from '../../src/domain/apiToken.js';
import type { ApiTokenEvent } from '../../src/domain/events.js';
import { deciderSpec } from '../support/deciderSpec.js';

const at = '2026-11-21T12:00:00.000Z';
const expiry = '2026-12-01T00:00:00.000Z';
const afterExpiry = '2026-12-02T00:00:00.000Z';
const spec = deciderSpec(apiTokenDecider);
const data = {
  tokenId: 't1',
  accountId: 'a1',
  tokenHash: 'h',
  masked: 'gk_abcd…wxyz',
  name: 'backend',
  description: '',
  expiresAt: null as string | null,
  monthlyLimit: null,
  rateLimit: null,
};
const created: ApiTokenEvent = { type: 'ApiTokenCreated', version: 1, data: { ...data, at } };
const createdExpiring: ApiTokenEvent = { type: 'ApiTokenCreated', version: 1, data: { ...data, expiresAt: expiry, at } };
const ev = <T extends ApiTokenEvent['type']>(type: T, extra: Record<string, unknown> = {}, when = at) =>
  ({ type, version: 1, data: { tokenId: 't1', ...extra, at: when } }) as ApiTokenEvent;
const disabled = ev('ApiTokenDisabled');
const revoked = ev('ApiTokenRevoked');
/** Expired at its date, whenever the command came. */
const expired = ev('ApiTokenExpired', {}, expiry);

describe('API token decider: the transition table', () => {
  it('(none) → active on create', () =>
    spec
      .given([])
      .when({ type: 'CreateApiToken', ...data, at })
      .then([created]));
  it('refuses creating twice', () =>
    spec
      .given([created])
      .when({ type: 'CreateApiToken', ...data, at })
      .thenError('conflict'));
  it('active → revoked', () => spec.given([created]).when({ type: 'RevokeApiToken', at }).then([revoked]));
  it('disabled → revoked', () => spec.given([created, disabled]).when({ type: 'RevokeApiToken', at }).then([revoked]));
  it('active → disabled on toggle', () => spec.given([created]).when({ type: 'DisableApiToken', at }).then([disabled]));
  it('disabled → active on toggle', () =>
    spec
      .given([created, disabled])
      .when({ type: 'EnableApiToken', at })
      .then([ev('ApiTokenEnabled')]));
  it('active → expired when the date passes', () => spec.given([createdExpiring]).when({ type: 'ExpireApiToken', at: afterExpiry }).then([expired]));
  it('disabled → expired when the date passes', () =>
    spec.given([createdExpiring, disabled]).when({ type: 'ExpireApiToken', at: afterExpiry }).then([expired]));
  it('does not expire before the date', () => spec.given([createdExpiring]).when({ type: 'ExpireApiToken', at }).thenNothing());
  it('does not expire a token without an expiration', () => spec.given([created]).when({ type: 'ExpireApiToken', at: afterExpiry }).thenNothing());
});

describe('API token decider: revoked and expired are final', () => {
  const edits = [
    { type: 'RenameApiToken', name: 'x', at },
    { type: 'ChangeApiTokenDescription', description: 'x', at },
    { type: 'DisableApiToken', at },
    { type: 'EnableApiToken', at },
    { type: 'ChangeApiTokenLimits', monthlyLimit: 5, rateLimit: null, at },
  ] as const;
  for (const command of edits) {
    it(`refuses ${command.type} on a revoked token`, () => spec.given([created, revoked]).when(command).thenError('token_revoked'));
    it(`refuses ${command.type} on an expired token`, () =>
      spec
        .given([createdExpiring, expired])
        .when({ ...command, at: afterExpiry })
        .thenError('token_expired'));
    it(`refuses ${command.type} on a token past its date before the expiry event`, () =>
      spec
        .given([createdExpiring])
        .when({ ...command, at: afterExpiry })
        .thenError('token_expired'));
  }
  it('revoking a revoked token changes nothing', () => spec.given([created, revoked]).when({ type: 'RevokeApiToken', at }).thenNothing());
  it('refuses revoking an expired token (expired is final)', () =>
    spec.given([createdExpiring, expired]).when({ type: 'RevokeApiToken', at: afterExpiry }).thenError('token_expired'));
  it('a revoked token never expires', () => spec.given([createdExpiring, revoked]).when({ type: 'ExpireApiToken', at: afterExpiry }).thenNothing());
  it('expiring twice changes nothing', () => spec.given([createdExpiring, expired]).when({ type: 'ExpireApiToken', at: afterExpiry }).thenNothing());
});

describe('API token decider: edits', () => {
  it('renames', () =>
    spec
      .given([created])
      .when({ type: 'RenameApiToken', name: 'indexer', at })
      .then([ev('ApiTokenRenamed', { name: 'indexer' })]));
  it('renaming to the same name changes nothing', () => spec.given([created]).when({ type: 'RenameApiToken', name: 'backend', at }).thenNothing());
  it('changes the description', () =>
    spec
      .given([created])
      .when({ type: 'ChangeApiTokenDescription', description: 'prod', at })
      .then([ev('ApiTokenDescriptionChanged', { description: 'prod' })]));
  it('disabling a disabled token changes nothing', () => spec.given([created, disabled]).when({ type: 'DisableApiToken', at }).thenNothing());
  it('enabling an active token changes nothing', () => spec.given([created]).when({ type: 'EnableApiToken', at }).thenNothing());
  it('changes limits', () =>
    spec
      .given([created])
      .when({ type: 'ChangeApiTokenLimits', monthlyLimit: 10, rateLimit: 2, at })
      .then([ev('ApiTokenLimitsChanged', { monthlyLimit: 10, rateLimit: 2 })]));
  it('refuses commands for a token that does not exist', () => spec.given([]).when({ type: 'RevokeApiToken', at }).thenError('not_found'));
  it('sees a token past its date as expired', () => {
    expect(effectiveStatus({ status: 'active', expiresAt: expiry }, afterExpiry)).toBe('expired');
    expect(effectiveStatus({ status: 'disabled', expiresAt: expiry }, at)).toBe('disabled');
    expect(effectiveStatus({ status: 'revoked', expiresAt: expiry }, afterExpiry)).toBe('revoked');
  });
});
