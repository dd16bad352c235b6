import { describe, expect, it } from 'vitest';
import { accountDecider, type TokenSlot } from '../../src/domain/account.js';
import type { AccountEvent } from '../../src/domain/events.js';
import { DEFAULT_PLANS, type PlanId, planCatalog } from '../../src/domain/plans.js';
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

describe('account decider: alert slots', () => {
  const taken = (alertId: string, when = at): AccountEvent => ({ type: 'AlertSlotTaken', version: 1, data: { accountId: 'a1', alertId, at: when } });
  const releasedAlert = (alertId: string, reason: 'deleted' | 'abandoned' = 'deleted'): AccountEvent => ({
    type: 'AlertSlotReleased',
    version: 1,
    data: { accountId: 'a1', alertId, reason, at },
  });
  const adopted = (alertIds: string[]): AccountEvent => ({ type: 'AlertSlotsAdopted', version: 1, data: { accountId: 'a1', alertIds, at } });
  const take = (alertId: string, alertsBeforeSlots: string[] = []) => ({ type: 'TakeAlertSlot' as const, alertId, alertsBeforeSlots, at });
  const release = (alertId: string) => ({ type: 'ReleaseAlertSlot' as const, alertId, reason: 'deleted' as const, at });
  const ids = (n: number, prefix = 'r') => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
  /** An account whose alerts are counted, holding `n` slots. */
  const holding = (n: number, plan: PlanId = 'free'): AccountEvent[] => [...onPlan(plan), adopted([]), ...ids(n).map((id) => taken(id))];

  it("counts the account's alerts on its first slot, then takes it", () =>
    spec
      .given([signedUp])
      .when(take('x', ['old1', 'old2']))
      .then([adopted(['old1', 'old2']), taken('x')]));
  it('counts a new account as holding none', () =>
    spec
      .given([signedUp])
      .when(take('x'))
      .then([adopted([]), taken('x')]));
  it('counts once: later lists are ignored', () =>
    spec
      .given([signedUp, adopted(['old1'])])
      .when(take('x', ['old1', 'old2', 'old3']))
      .then([taken('x')]));
  it('takes a slot while below the maximum', () =>
    spec
      .given(holding(4))
      .when(take('x'))
      .then([taken('x')]));
  const maximums: Array<[PlanId, number]> = [
    ['free', 5],
    ['developer', 20],
    ['professional', 50],
    ['unlimited', 200],
  ];
  for (const [plan, max] of maximums) {
    it(`refuses alert ${max + 1} on ${plan}`, () => spec.given(holding(max, plan)).when(take('x')).thenError('alert_limit_reached'));
  }
  it('names the maximum and the plan when refusing', () => {
    const state = holding(5).reduce(accountDecider(DEFAULT_PLANS).evolve, accountDecider(DEFAULT_PLANS).initialState());
    expect(() => accountDecider(DEFAULT_PLANS).decide(take('x'), state)).toThrow(
      expect.objectContaining({ code: 'alert_limit_reached', details: { maxAlerts: 5, plan: 'free' } }),
    );
  });
  it('refuses an account whose alerts from before slots are over the maximum; they keep their slots', () =>
    spec
      .given([signedUp])
      .when(take('x', ids(7, 'old')))
      .thenError('alert_limit_reached'));
  it('keeps the slots over the maximum after a downgrade, refusing until below it', () =>
    spec
      .given([
        ...holding(7, 'developer'),
        { type: 'AccountPlanChanged', version: 1, data: { accountId: 'a1', from: 'developer', to: 'free', at } },
        releasedAlert('r0'),
        releasedAlert('r1'),
      ])
      .when(take('x'))
      .thenError('alert_limit_reached'));
  it('takes one again once a slot is released', () =>
    spec
      .given([...holding(5), releasedAlert('r3')])
      .when(take('x'))
      .then([taken('x')]));
  it('a slot counted from before slots is released like any other', () =>
    spec
      .given([signedUp, adopted(ids(5, 'old')), releasedAlert('old2')])
      .when(take('x'))
      .then([taken('x')]));
  it('taking a slot it holds already changes nothing', () => spec.given(holding(5)).when(take('r2')).thenNothing());
  it('has no maximum when the catalog says null (PLANS_CONFIG)', () =>
    deciderSpec(accountDecider(planCatalog({ free: { max_alerts: null } })))
      .given(holding(300))
      .when(take('x'))
      .then([taken('x')]));
  it('takes its maximum from the catalog (PLANS_CONFIG)', () =>
    deciderSpec(accountDecider(planCatalog({ free: { max_alerts: 1 } })))
      .given(holding(1))
      .when(take('x'))
      .thenError('alert_limit_reached'));

  it('releases a held slot', () =>
    spec
      .given(holding(2))
      .when(release('r1'))
      .then([releasedAlert('r1')]));
  it('releasing a slot it does not hold changes nothing (twice, or an alert never counted)', () => {
    spec
      .given([...holding(2), releasedAlert('r1')])
      .when(release('r1'))
      .thenNothing();
    spec.given([signedUp]).when(release('r1')).thenNothing();
  });
  it('refuses slots for an account that does not exist', () => spec.given([]).when(take('x')).thenError('not_found'));

  it('replayed from its events, the account holds what it took, minus what it released, whatever came between', () => {
    const history: AccountEvent[] = [
      signedUp,
      adopted(['old0', 'old1']),
      taken('a'),
      issued('t1'),
      taken('b'),
      releasedAlert('old0'),
      { type: 'AccountPlanChanged', version: 1, data: { accountId: 'a1', from: 'free', to: 'developer', at } },
      taken('c'),
      releasedAlert('a', 'abandoned'),
      released('t1'),
    ];
    const decider = accountDecider(DEFAULT_PLANS);
    const once = history.reduce(decider.evolve, decider.initialState());
    const twice = history.reduce(decider.evolve, decider.initialState());
    expect(once).toEqual(twice);
    expect(once.exists && [...(once.alertSlots?.keys() ?? [])].sort()).toEqual(['b', 'c', 'old1']);
    // 3 held on Free's 5 after a move back: two more, then refused.
    const back: AccountEvent = { type: 'AccountPlanChanged', version: 1, data: { accountId: 'a1', from: 'developer', to: 'free', at } };
    spec
      .given([...history, back])
      .when(take('d'))
      .then([taken('d')]);
    spec
      .given([...history, back, taken('d'), taken('e')])
      .when(take('f'))
      .thenError('alert_limit_reached');
  });
});
