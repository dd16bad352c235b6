import { describe, it } from 'vitest';
import { accountDecider, type TokenSlot } from '../../src/domain/account.js';
import type { AccountEvent } from '../../src/domain/events.js';
import { DEFAULT_PLANS, type PlanId } from '../../src/domain/plans.js';
import { deciderSpec } from '../support/deciderSpec.js';

const at = '2026-11-21T12:00:00.000Z';
const later = '2026-12-21T12:00:00.000Z';
const spec = deciderSpec(accountDecider(DEFAULT_PLANS));
const signedUp: AccountEvent = { type: 'AccountSignedUp', version: 1, data: { accountId: 'a1', email: 'o@example.com', passwordHash: 'h', plan: 'free', at } };
const onPlan = (plan: PlanId): AccountEvent[] =>
  plan === 'free' ? [signedUp] : [signedUp, { type: 'AccountPlanChanged', version: 1, data: { accountId: 'a1', from: 'free', to: plan, at } }];
const slot = (tokenId: string): TokenSlot => ({
  tokenId,
  tokenHash: `hash-${tokenId}`,
  masked: 'gk_abcd…wxyz',
  name: `t ${tokenId}`,
  description: '',
  expiresAt: null,
  monthlyLimit: null,
  rateLimit: null,
});
const issued = (tokenId: string): AccountEvent => ({ type: 'ApiTokenIssued', version: 1, data: { ...slot(tokenId), accountId: 'a1', at } });
const released = (tokenId: string): AccountEvent => ({ type: 'ApiTokenReleased', version: 1, data: { accountId: 'a1', tokenId, reason: 'revoked', at } });
const issue = (tokenId: string, options: Partial<TokenSlot> = {}) => ({ type: 'IssueApiToken' as const, at, ...slot(tokenId), ...options });

describe('account decider', () => {
  it('signs up on the Free plan', () =>
    spec.given([]).when({ type: 'SignUp', accountId: 'a1', email: 'o@example.com', passwordHash: 'h', at }).then([signedUp]));
  it('refuses a second sign-up of the same account', () =>
    spec.given([signedUp]).when({ type: 'SignUp', accountId: 'a1', email: 'o@example.com', passwordHash: 'h', at }).thenError('conflict'));
  it('refuses commands for an account that does not exist', () => spec.given([]).when(issue('t1')).thenError('not_found'));
  it('changes the plan', () =>
    spec
      .given([signedUp])
      .when({ type: 'ChangePlan', plan: 'developer', at })
      .then([{ type: 'AccountPlanChanged', version: 1, data: { accountId: 'a1', from: 'free', to: 'developer', at } }]));
  it('changing to the same plan changes nothing', () => spec.given([signedUp]).when({ type: 'ChangePlan', plan: 'free', at }).thenNothing());

  it('issues a token while below the plan maximum', () =>
    spec
      .given([signedUp, issued('t1')])
      .when(issue('t2'))
      .then([issued('t2')]));
  const maximums: Array<[PlanId, number]> = [
    ['free', 2],
    ['developer', 5],
    ['professional', 20],
  ];
  for (const [plan, max] of maximums) {
    it(`refuses token ${max + 1} on ${plan}`, () =>
      spec
        .given([...onPlan(plan), ...Array.from({ length: max }, (_, i) => issued(`t${i}`))])
        .when(issue('tx'))
        .thenError('token_limit_reached'));
  }
  it('has no token maximum on Unlimited', () =>
    spec
      .given([...onPlan('unlimited'), ...Array.from({ length: 100 }, (_, i) => issued(`t${i}`))])
      .when(issue('tx'))
      .then([issued('tx')]));
  it('counts only tokens not revoked or expired', () =>
    spec
      .given([signedUp, issued('t1'), issued('t2'), released('t1')])
      .when(issue('t3'))
      .then([issued('t3')]));

  it('refuses a custom monthly limit on Free', () =>
    spec
      .given([signedUp])
      .when(issue('t1', { monthlyLimit: 10 }))
      .thenError('plan_feature_unavailable'));
  it('refuses a custom rate limit on Free', () =>
    spec
      .given([signedUp])
      .when(issue('t1', { rateLimit: 1 }))
      .thenError('plan_feature_unavailable'));
  it('refuses an expiration on Free', () =>
    spec
      .given([signedUp])
      .when(issue('t1', { expiresAt: later }))
      .thenError('plan_feature_unavailable'));
  it('accepts custom limits and expiration on Developer', () =>
    spec
      .given(onPlan('developer'))
      .when(issue('t1', { monthlyLimit: 1000, rateLimit: 10, expiresAt: later }))
      .then([{ type: 'ApiTokenIssued', version: 1, data: { ...slot('t1'), monthlyLimit: 1000, rateLimit: 10, expiresAt: later, accountId: 'a1', at } }]));
  it('refuses a custom monthly limit equal to the account total', () =>
    spec
      .given(onPlan('developer'))
      .when(issue('t1', { monthlyLimit: 5_000_000 }))
      .thenError('limit_above_account'));
  it('accepts any custom monthly limit on Unlimited (no account total)', () =>
    spec
      .given(onPlan('unlimited'))
      .when(issue('t1', { monthlyLimit: 10_000_000_000 }))
      .then([{ type: 'ApiTokenIssued', version: 1, data: { ...slot('t1'), monthlyLimit: 10_000_000_000, accountId: 'a1', at } }]));
  it('refuses a custom rate limit above the plan', () =>
    spec
      .given(onPlan('developer'))
      .when(issue('t1', { rateLimit: 26 }))
      .thenError('limit_above_account'));
  it('refuses an expiration in the past', () =>
    spec
      .given(onPlan('developer'))
      .when(issue('t1', { expiresAt: '2020-01-01T00:00:00.000Z' }))
      .thenError('validation_failed'));

  it('releases a live token slot', () =>
    spec
      .given([signedUp, issued('t1')])
      .when({ type: 'ReleaseApiToken', tokenId: 't1', reason: 'revoked', at })
      .then([released('t1')]));
  it('releasing a slot twice changes nothing', () =>
    spec
      .given([signedUp, issued('t1'), released('t1')])
      .when({ type: 'ReleaseApiToken', tokenId: 't1', reason: 'revoked', at })
      .thenNothing());
});
