import { describe, it } from 'vitest';
import { coreProjection } from '../../src/projections/core.js';
import { projectionSpec, type SpecEvent } from '../support/projectionSpec.js';

/** The core projection: accounts, API tokens and access tokens with the lookups the gateway and the API read. */

const spec = projectionSpec(coreProjection);
const AT = '2026-11-02T10:00:00.000Z';
const LATER = '2026-11-03T10:00:00.000Z';
const account = 'acc_0000000000000001';
const token = 'tok_0000000000000001';
const key = 'key_0000000000000001';

const signedUp: SpecEvent = {
  streamId: `account-${account}`,
  type: 'AccountSignedUp',
  version: 1,
  data: { accountId: account, email: 'me@example.com', passwordHash: 'scrypt$16384$8$1$c2FsdA==$aGFzaA==', plan: 'free', at: AT },
};
const created = (expiresAt: string | null): SpecEvent => ({
  streamId: `token-${token}`,
  type: 'ApiTokenCreated',
  version: 1,
  data: {
    tokenId: token,
    accountId: account,
    tokenHash: 'h1',
    masked: 'gk_ab…yz',
    name: 'backend',
    description: '',
    expiresAt,
    monthlyLimit: null,
    rateLimit: null,
    at: AT,
  },
});
const onToken = (type: string, data: Record<string, unknown> = {}): SpecEvent => ({
  streamId: `token-${token}`,
  type,
  version: 1,
  data: { tokenId: token, ...data, at: LATER },
});

const tokenDoc = {
  id: token,
  accountId: account,
  tokenHash: 'h1',
  masked: 'gk_ab…yz',
  name: 'backend',
  description: '',
  status: 'active',
  createdAt: AT,
  expiresAt: null,
  monthlyLimit: null,
  rateLimit: null,
};

describe('core projection', () => {
  it('keeps an account with its plan, and a plan change', () => {
    spec
      .given([
        signedUp,
        { streamId: `account-${account}`, type: 'AccountPlanChanged', version: 1, data: { accountId: account, from: 'free', to: 'developer', at: LATER } },
      ])
      .thenDocuments({
        accounts: { [account]: { id: account, email: 'me@example.com', plan: 'developer', createdAt: AT } },
      });
  });

  it('keeps a token by id, by hash (the gateway) and by account (the API), and by expiry when it has one', () => {
    spec.given([created('2026-12-01T00:00:00.000Z')]).thenDocuments({
      tokens: { [token]: { ...tokenDoc, expiresAt: '2026-12-01T00:00:00.000Z' } },
      tokens_by_hash: { h1: { tokenId: token } },
      tokens_by_account: { [`${account}/${token}`]: { tokenId: token } },
      tokens_by_expiry: { [`2026-12-01T00:00:00.000Z/${token}`]: { tokenId: token } },
    });
  });

  it('follows a token through its edits, disable, enable and revoke', () => {
    spec
      .given([
        created(null),
        onToken('ApiTokenRenamed', { name: 'api' }),
        onToken('ApiTokenDescriptionChanged', { description: 'server side' }),
        onToken('ApiTokenLimitsChanged', { monthlyLimit: 1000, rateLimit: 5 }),
        onToken('ApiTokenDisabled'),
        onToken('ApiTokenEnabled'),
        onToken('ApiTokenRevoked'),
      ])
      .thenDocuments({
        tokens: { [token]: { ...tokenDoc, name: 'api', description: 'server side', monthlyLimit: 1000, rateLimit: 5, status: 'revoked', revokedAt: LATER } },
        tokens_by_hash: { h1: { tokenId: token } },
        tokens_by_account: { [`${account}/${token}`]: { tokenId: token } },
      });
  });

  it('marks an expired token', () => {
    spec.given([created(null), onToken('ApiTokenExpired')]).then([
      { op: 'put', collection: 'tokens', key: token, doc: tokenDoc },
      { op: 'put', collection: 'tokens_by_hash', key: 'h1', doc: { tokenId: token } },
      { op: 'put', collection: 'tokens_by_account', key: `${account}/${token}`, doc: { tokenId: token } },
      { op: 'merge', collection: 'tokens', key: token, fields: { status: 'expired' } },
    ]);
  });

  it('keeps access tokens by id, hash and account, and their revocation', () => {
    spec
      .given([
        {
          streamId: `accesstoken-${key}`,
          type: 'AccessTokenCreated',
          version: 1,
          data: { accessTokenId: key, accountId: account, tokenHash: 'k1', masked: 'gka_ab…yz', name: 'cli', at: AT },
        },
        { streamId: `accesstoken-${key}`, type: 'AccessTokenRevoked', version: 1, data: { accessTokenId: key, at: LATER } },
      ])
      .thenDocuments({
        access_tokens: { [key]: { id: key, accountId: account, masked: 'gka_ab…yz', name: 'cli', status: 'revoked', createdAt: AT } },
        access_tokens_by_hash: { k1: { accessTokenId: key } },
        access_tokens_by_account: { [`${account}/${key}`]: { accessTokenId: key } },
      });
  });

  it("writes nothing for the account stream's slot events and the email claim", () => {
    spec
      .given([
        {
          streamId: `account-${account}`,
          type: 'ApiTokenIssued',
          version: 1,
          data: {
            accountId: account,
            tokenId: token,
            tokenHash: 'h1',
            masked: 'gk_ab…yz',
            name: 'backend',
            description: '',
            expiresAt: null,
            monthlyLimit: null,
            rateLimit: null,
            at: AT,
          },
        },
        { streamId: `account-${account}`, type: 'ApiTokenReleased', version: 1, data: { accountId: account, tokenId: token, reason: 'revoked', at: AT } },
        { streamId: 'accountemail-abc', type: 'EmailClaimed', version: 1, data: { accountId: account, email: 'me@example.com', at: AT } },
        { streamId: 'usage-acc', type: 'UsageRecorded', version: 1, data: { requestId: 'r' } },
      ])
      .then([]);
  });

  it('leaves the account as it is through its alert slots, replayed twice over', () => {
    const onAccount = (type: string, data: Record<string, unknown>): SpecEvent => ({
      streamId: `account-${account}`,
      type,
      version: 1,
      data: { accountId: account, ...data, at: LATER },
    });
    const history = [
      signedUp,
      onAccount('AlertSlotsAdopted', { alertIds: ['alr_0000000000000001'] }),
      onAccount('AlertSlotTaken', { alertId: 'alr_0000000000000002' }),
      onAccount('AlertSlotReleased', { alertId: 'alr_0000000000000001', reason: 'deleted' }),
    ];
    const documents = { accounts: { [account]: { id: account, email: 'me@example.com', plan: 'free', createdAt: AT } } };
    spec.given(history).thenDocuments(documents);
    spec.given([...history, ...history]).thenDocuments(documents);
    spec.given(history.slice(1)).then([]);
  });

  it('tells the gateways of every token change and of a plan change', () => {
    spec
      .given([
        signedUp,
        created(null),
        onToken('ApiTokenDisabled'),
        { streamId: `account-${account}`, type: 'AccountPlanChanged', version: 1, data: { accountId: account, from: 'free', to: 'developer', at: LATER } },
      ])
      .thenNotifications([`token:${token}`, `token:${token}`, `account:${account}`]);
  });
});
