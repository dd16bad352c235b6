import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { INVALIDATION_TOPIC } from '../../src/projections/runner.js';
import { eventually, until } from './eventually.js';
import { ownerOn } from './planOwner.js';
import { quotaCalls } from './quotaCalls.js';
import { ADMIN_TOKEN, type TestApp } from './testApp.js';

/**
 * An account moved between a plan with custom limits (Developer) and one without (Free), and the
 * scenarios every limiter backend must pass (limits-plan-change-embedded, limits-plan-change-redis):
 * its monthly count follows the account view (`Queries.accountQuotaUsage`).
 */

/** Small quotas, a rate no test reaches. Free has no custom limits. */
export const FREE = 10;
export const DEVELOPER = 20;
/** A token's own monthly limit on Developer. */
export const OWN = 15;

/** Writes the plans above into `dir`; the file's path, for PLANS_CONFIG. */
export function writePlanChangePlans(dir: string): string {
  const file = join(dir, 'plans.json');
  writeFileSync(file, JSON.stringify({ free: { rps: 100, monthly_requests: FREE }, developer: { rps: 100, monthly_requests: DEVELOPER } }));
  return file;
}

/** Runs `change` and waits until the gateway heard `topic` invalidated; the change's answer body. */
export async function heard(t: TestApp, topic: (body: unknown) => string, change: () => Promise<{ statusCode: number; body: string }>): Promise<unknown> {
  const topics: string[] = [];
  const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
  try {
    const res = await change();
    expect(res.statusCode, res.body).toBeLessThan(300);
    const awaited = topic(JSON.parse(res.body));
    await until(() => topics.includes(awaited));
    return JSON.parse(res.body) as unknown;
  } finally {
    await unsubscribe();
  }
}

/** A new token of the owner's (`payload` its fields), known to the gateway. */
export const newToken = async (t: TestApp, auth: Record<string, string>, payload: { name: string } & Record<string, unknown>) =>
  (await heard(
    t,
    (body) => `token:${(body as { id: string }).id}`,
    () => t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: auth, payload }),
  )) as { id: string; token: string };

/** An owner on Developer with a token of its own limit (`own`) and one counted on the account (`shared`). */
export async function planChangeAccount(t: TestApp) {
  const o = await ownerOn(t, 'developer');
  const own = await newToken(t, o.auth, { name: 'own', monthly_limit: OWN });
  const shared = await newToken(t, o.auth, { name: 'shared' });
  return { o, own, shared, ...accountOnApp(t, o.accountId, o.auth) };
}

export type PlanChangeAccount = Awaited<ReturnType<typeof planChangeAccount>>;

/** The account's plan changes and its view, on `t` (an app on the account's data). */
export function accountOnApp(t: TestApp, accountId: string, auth: Record<string, string>) {
  /** Moves the account to `plan`; resolves once the gateway heard of it. */
  const setPlan = (plan: string) =>
    heard(
      t,
      () => `account:${accountId}`,
      () =>
        t.app.inject({
          method: 'PUT',
          url: `/api/v1/admin/accounts/${accountId}/plan`,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
          payload: { plan },
        }),
    );
  /** Sets or removes (null) a token's own monthly limit (with `others`, more of its fields); resolves once the gateway heard of it. */
  const setLimit = (token: { id: string }, monthlyLimit: number | null, others: Record<string, unknown> = {}) =>
    heard(
      t,
      () => `token:${token.id}`,
      () => t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${token.id}`, headers: auth, payload: { ...others, monthly_limit: monthlyLimit } }),
    );
  /** The account view's `usage.remaining` once the usage totals hold `requests` calls. */
  const viewRemaining = async (requests: number): Promise<number> => {
    const usage = await eventually(
      async () => (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: auth })).json().usage as { requests: number; remaining: number },
      (u) => u.requests === requests,
    );
    expect(usage.requests).toBe(requests);
    return usage.remaining;
  };
  return { setPlan, setLimit, viewRemaining };
}

/**
 * Waits until the limiter's own counts are `ownCalls` (the month of `token`, by default the
 * own-limit token) and `accountCalls` (the account's): a backend with leases gives their unused
 * calls back first.
 */
export type Settle = (a: PlanChangeAccount, ownCalls: number, accountCalls: number, token?: { id: string }) => Promise<void>;
const settledAtOnce: Settle = async () => undefined;

/** Down to Free, the own-limit token's calls count against the account; back up, they leave it again. */
export async function downToFreeAndBack(t: TestApp, settle: Settle = settledAtOnce): Promise<void> {
  const a = await planChangeAccount(t);
  expect((await quotaCalls(t, a.own.token, 8)).map(([, left]) => left)).toEqual(['14', '13', '12', '11', '10', '9', '8', '7']);
  // The account's bucket read here, before the change.
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '19']]);
  await settle(a, 8, 1);
  expect(await a.viewRemaining(9)).toBe(DEVELOPER - 1);

  // Free: no custom limits; the account's 10 count all 9 calls of the month.
  await a.setPlan('free');
  expect(await a.viewRemaining(9)).toBe(FREE - 9);
  expect(await quotaCalls(t, a.shared.token, 2)).toEqual([
    [200, '0'],
    [429, '0'],
  ]);
  expect(await quotaCalls(t, a.own.token, 1)).toEqual([[429, '0']]);
  expect(await a.viewRemaining(10)).toBe(0);

  // Developer again: the token counts apart for its whole month (8), the account its other 2.
  await a.setPlan('developer');
  expect(await a.viewRemaining(10)).toBe(DEVELOPER - 2);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 3)]]);
  expect(await quotaCalls(t, a.own.token, 1)).toEqual([[200, String(OWN - 9)]]);
  expect(await a.viewRemaining(12)).toBe(DEVELOPER - 3);
}

/** Up from Free, the calls a token with its own limit made there leave the account's count. */
export async function upFromFree(t: TestApp, settle: Settle = settledAtOnce): Promise<void> {
  const a = await planChangeAccount(t);
  await a.setPlan('free');
  expect((await quotaCalls(t, a.own.token, 6)).map(([, left]) => left)).toEqual(['9', '8', '7', '6', '5', '4']);
  // A lease's unused calls back first: within their second they are the account's too.
  await settle(a, 6, 6);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '3']]);
  await settle(a, 6, 7);
  expect(await a.viewRemaining(7)).toBe(FREE - 7);

  await a.setPlan('developer');
  expect(await a.viewRemaining(7)).toBe(DEVELOPER - 1);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 2)]]);
  expect(await quotaCalls(t, a.own.token, 1)).toEqual([[200, String(OWN - 7)]]);
}

/**
 * A token given its own limit mid-month: its calls until then, counted on the account's bucket,
 * leave the account's count with the rest of its month (the view counts the whole month apart);
 * down to Free the account counts each call of the month once, back up the token's month leaves it.
 */
export async function ownLimitSetMidMonth(t: TestApp, settle: Settle = settledAtOnce): Promise<void> {
  const a = await planChangeAccount(t);
  const later = await newToken(t, a.o.auth, { name: 'later' });
  expect((await quotaCalls(t, later.token, 4)).map(([, left]) => left)).toEqual(['19', '18', '17', '16']);
  await settle(a, 4, 4, later);
  expect(await a.viewRemaining(4)).toBe(DEVELOPER - 4);

  await a.setLimit(later, OWN);
  expect(await a.viewRemaining(4)).toBe(DEVELOPER);
  expect(await quotaCalls(t, later.token, 1)).toEqual([[200, String(OWN - 5)]]);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 1)]]);
  await settle(a, 5, 1, later);
  expect(await a.viewRemaining(6)).toBe(DEVELOPER - 1);

  // Free: the account's 10 count the 6 calls of the month once.
  await a.setPlan('free');
  expect(await a.viewRemaining(6)).toBe(FREE - 6);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(FREE - 7)]]);
  await settle(a, 5, 7, later);

  // Developer again: the token's month (5) apart, the account its other 2.
  await a.setPlan('developer');
  expect(await a.viewRemaining(7)).toBe(DEVELOPER - 2);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 3)]]);
  expect(await quotaCalls(t, later.token, 1)).toEqual([[200, String(OWN - 6)]]);
  expect(await a.viewRemaining(9)).toBe(DEVELOPER - 3);
}

/**
 * A token's own limit removed mid-month: its calls until then, counted on its own bucket, join
 * the account's count (the view counts its whole month there); a move to Free has nothing more
 * to add, nor the way back anything to take out.
 */
export async function ownLimitRemovedMidMonth(t: TestApp, settle: Settle = settledAtOnce): Promise<void> {
  const a = await planChangeAccount(t);
  expect((await quotaCalls(t, a.own.token, 5)).map(([, left]) => left)).toEqual(['14', '13', '12', '11', '10']);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '19']]);
  await settle(a, 5, 1);
  expect(await a.viewRemaining(6)).toBe(DEVELOPER - 1);

  await a.setLimit(a.own, null);
  expect(await a.viewRemaining(6)).toBe(DEVELOPER - 6);
  expect(await quotaCalls(t, a.own.token, 1)).toEqual([[200, String(DEVELOPER - 7)]]);
  await settle(a, 6, 7);

  await a.setPlan('free');
  expect(await a.viewRemaining(7)).toBe(FREE - 7);
  expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(FREE - 8)]]);
  await settle(a, 6, 8);

  await a.setPlan('developer');
  expect(await a.viewRemaining(8)).toBe(DEVELOPER - 8);
  expect(await quotaCalls(t, a.own.token, 1)).toEqual([[200, String(DEVELOPER - 9)]]);
  expect(await a.viewRemaining(9)).toBe(DEVELOPER - 9);
}
