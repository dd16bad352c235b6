import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AlertEvaluator } from '../../src/alerts/evaluator.js';
import { RollupAlertMetrics } from '../../src/alerts/rollupMetrics.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { AlertQueries } from '../../src/projections/alertsQueries.js';
import { UsageQueries } from '../../src/projections/metricsQueries.js';
import { Queries } from '../../src/projections/queries.js';
import { type AlertHarness, callsWith, EMAIL_CHANNEL, startAlertHarness } from '../support/alertHarness.js';
import { ADMIN_TOKEN } from '../support/testApp.js';

/**
 * Alerts on a token that stops taking calls (revoked, expired) end once, as a deleted rule's do;
 * and what one evaluation round reads when many rules watch the same tokens and windows.
 * Evaluation runs by hand on the test's clock.
 */
let t: AlertHarness;
let clock = Date.parse('2026-11-10T12:00:30.000Z');
const now = () => new Date(clock);
const at = (iso: string) => {
  clock = Date.parse(iso);
};

beforeAll(async () => {
  t = await startAlertHarness({ now, requestIdPrefix: 'scale' });
});
afterAll(async () => {
  await t?.close();
});

const email = EMAIL_CHANNEL;
const calls = callsWith;
const evaluate = (alertId: string) => t.evaluate(alertId);
const view = (auth: Record<string, string>, alertId: string) => t.alertView(auth, alertId);
const post = async (auth: Record<string, string>, url: string, payload: Record<string, unknown>) => {
  const res = await t.inject({ method: 'POST', url, headers: auth, payload });
  expect(res.statusCode, res.body).toBe(201);
  return res.json().id as string;
};
/** The alert's decided events (its delivery attempts aside: the notifier polls on its own). */
const decided = async (alertId: string) => (await t.alertEvents(alertId)).filter((e) => e.type !== 'NotificationAttempted');

describe('a rule on a token that stops taking calls', () => {
  it('revoked while its quota-share rule fires: one "resolved" (reason token_revoked), the rule kept, not evaluated again', async () => {
    at('2026-11-10T12:00:30.000Z');
    const { o } = await t.developerWithAlert({ name: 'placeholder', type: 'error_rate', threshold: 99, channels: email });
    const tokenId = await post(o.auth, '/api/v1/tokens', { name: 'capped', monthly_limit: 100 });
    const alertId = await post(o.auth, '/api/v1/alerts', {
      name: 'quota',
      type: 'token_usage',
      condition: 'percent_of_limit',
      token_id: tokenId,
      threshold: 50,
      channels: email,
    });
    await t.recordUsage(o.accountId, tokenId, calls(60, 200));
    expect(await evaluate(alertId)).toEqual(['AlertFired']);
    const firing = (await view(o.auth, alertId)).json();

    expect((await t.inject({ method: 'DELETE', url: `/api/v1/tokens/${tokenId}`, headers: o.auth })).statusCode).toBe(200);
    clock += 30_000;
    expect(await evaluate(alertId)).toEqual(['AlertResolved']);
    const events = await decided(alertId);
    expect(events.map((e) => e.type)).toEqual(['AlertCreated', 'AlertFired', 'AlertResolved']);
    expect(events[2]?.data).toMatchObject({ reason: 'token_revoked', value: null, deliverTo: [{ type: 'email' }] });
    expect(String(events[2]?.data['summary'])).toContain(`The token ${tokenId} was revoked`);

    // Later rounds leave it alone: the month's share stays over the threshold, yet nothing fires.
    clock += 30_000;
    expect(await evaluate(alertId)).toEqual([]);
    clock += 2 * 3_600_000;
    expect(await evaluate(alertId)).toEqual([]);
    const kept = await view(o.auth, alertId);
    expect(kept.statusCode).toBe(200);
    expect(kept.json()).toMatchObject({ state: 'resolved', enabled: true, token_id: tokenId, last_evaluation: firing.last_evaluation });
  });

  it('expired while its window rule fires: one "resolved" (reason token_expired), and its calls fire it no more', async () => {
    at('2026-11-11T12:00:30.000Z');
    const { o } = await t.developerWithAlert({ name: 'placeholder', type: 'error_rate', threshold: 99, channels: email });
    const tokenId = await post(o.auth, '/api/v1/tokens', { name: 'short-lived', expires_in_days: 1 });
    const alertId = await post(o.auth, '/api/v1/alerts', {
      name: 'refused',
      type: 'rate_limiting',
      condition: 'hitting',
      token_id: tokenId,
      threshold: 1,
      window_minutes: 5,
      channels: email,
    });
    at('2026-11-12T11:59:00.000Z');
    await t.recordUsage(o.accountId, tokenId, calls(3, 429));
    expect(await evaluate(alertId)).toEqual(['AlertFired']);
    // Past its expiry (the expiry job need not have run: the date alone ends it), refusals still in the window.
    at('2026-11-12T12:00:31.000Z');
    expect(await evaluate(alertId)).toEqual(['AlertResolved']);
    expect((await decided(alertId))[2]?.data).toMatchObject({ reason: 'token_expired' });
    await t.recordUsage(o.accountId, tokenId, calls(5, 429));
    expect(await evaluate(alertId)).toEqual([]);
    at('2026-11-12T14:00:00.000Z');
    await t.recordUsage(o.accountId, tokenId, calls(5, 429));
    expect(await evaluate(alertId)).toEqual([]);
    expect((await decided(alertId)).map((e) => e.type)).toEqual(['AlertCreated', 'AlertFired', 'AlertResolved']);
  });

  it('revoked while its rule is ok: nothing to resolve, and it never fires', async () => {
    at('2026-11-13T12:00:30.000Z');
    const { o, tokenId, alert } = await t.developerWithAlert({
      name: 'e',
      type: 'error_rate',
      threshold: 50,
      window_minutes: 5,
      min_requests: 1,
      channels: email,
    });
    // developerWithAlert's rule watches the account; this one watches the token.
    const onToken = await post(o.auth, '/api/v1/alerts', {
      name: 'tok',
      type: 'error_rate',
      threshold: 50,
      window_minutes: 5,
      min_requests: 1,
      token_id: tokenId,
      channels: email,
    });
    expect(await evaluate(onToken)).toEqual([]);
    expect((await t.inject({ method: 'DELETE', url: `/api/v1/tokens/${tokenId}`, headers: o.auth })).statusCode).toBe(200);
    await t.recordUsage(o.accountId, tokenId, calls(10, 502));
    const report = await t.evaluator.runOnce();
    expect(report.transitions.filter((x) => x.alertId === onToken)).toEqual([]);
    // The account-wide rule still sees the calls the token made before it was revoked.
    expect(report.transitions.filter((x) => x.alertId === alert.id).map((x) => x.event)).toEqual(['AlertFired']);
    expect((await decided(onToken)).map((e) => e.type)).toEqual(['AlertCreated']);
  });
});

describe('what one evaluation round reads', () => {
  /** The read models, counting each read: a get or a range scan. */
  const counting = (rm: ReadModelStore) => {
    const counter = { reads: 0 };
    const store = new Proxy(rm, {
      get(target, prop, receiver) {
        if (prop === 'get' || prop === 'range') {
          const read = Reflect.get(target, prop, receiver) as (...args: unknown[]) => Promise<unknown>;
          return (...args: unknown[]) => {
            counter.reads++;
            return read.apply(target, args);
          };
        }
        return Reflect.get(target, prop, receiver);
      },
    });
    return { store, counter };
  };
  /** The alert rules of one account only: other tests' rules live in the same read models. */
  class OneAccountsAlerts extends AlertQueries {
    constructor(
      rm: ReadModelStore,
      private readonly accountId: string,
    ) {
      super(rm);
    }
    override async allAlertDocs() {
      return (await super.allAlertDocs()).filter((row) => row.doc['accountId'] === this.accountId);
    }
  }

  it('is bounded by the distinct accounts, tokens and windows, not by the rules', async () => {
    at('2026-11-14T12:00:30.000Z');
    const { o, tokenId: first } = await t.developerWithAlert({ name: 'placeholder', type: 'error_rate', threshold: 99, window_minutes: 5, channels: email });
    const plan = await t.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'unlimited' },
    });
    expect(plan.statusCode, plan.body).toBe(200);
    const tokens = [first, await post(o.auth, '/api/v1/tokens', { name: 't2' }), await post(o.auth, '/api/v1/tokens', { name: 't3' })];
    for (const [i, tokenId] of tokens.entries()) await t.recordUsage(o.accountId, tokenId, [...calls(5 + i, 200), ...calls(i, 429), ...calls(1, 502)]);

    // Rules on (account, 5 min) and (each token, 5 min): 4 windows, 3 tokens, 1 account.
    const rulesOnTheSameWindows = async (n: number) => {
      for (let i = 0; i < n; i++) {
        await post(o.auth, '/api/v1/alerts', {
          name: `a${i}`,
          type: 'rate_limiting',
          condition: 'approaching',
          threshold: 90 + i,
          window_minutes: 5,
          channels: email,
        });
        await post(o.auth, '/api/v1/alerts', {
          name: `h${i}`,
          type: 'rate_limiting',
          condition: 'hitting',
          threshold: 100 + i,
          window_minutes: 5,
          channels: email,
        });
        await post(o.auth, '/api/v1/alerts', { name: `r${i}`, type: 'response_time', threshold: 5000 + i, window_minutes: 5, channels: email });
        for (const tokenId of tokens) {
          await post(o.auth, '/api/v1/alerts', { name: `e${i}`, type: 'error_rate', threshold: 90 + i, window_minutes: 5, token_id: tokenId, channels: email });
          await post(o.auth, '/api/v1/alerts', {
            name: `p${i}`,
            type: 'response_time',
            condition: 'p95',
            threshold: 5000 + i,
            window_minutes: 5,
            token_id: tokenId,
            channels: email,
          });
          await post(o.auth, '/api/v1/alerts', {
            name: `t${i}`,
            type: 'rate_limiting',
            condition: 'hitting',
            threshold: 50 + i,
            window_minutes: 5,
            token_id: tokenId,
            channels: email,
          });
        }
      }
      await t.settle();
    };

    const { store, counter } = counting(t.runtime.readModels);
    const queries = new Queries(store, now);
    const evaluator = new AlertEvaluator({
      alerts: new OneAccountsAlerts(t.runtime.readModels, o.accountId),
      queries,
      plans: t.runtime.config.plans,
      metrics: new RollupAlertMetrics(new UsageQueries(store), queries, t.runtime.config.plans),
      commands: t.runtime.alerts.commands,
      now,
    });
    const round = async (rules: number) => {
      counter.reads = 0;
      const report = await evaluator.runOnce();
      expect(report).toMatchObject({ evaluated: rules, failed: 0, transitions: [] });
      return counter.reads;
    };

    await rulesOnTheSameWindows(1);
    const few = await round(1 + 12);
    await rulesOnTheSameWindows(4);
    const many = await round(1 + 5 * 12);
    expect(many).toBe(few);
    // Per account: its document and its token list (a range, then each token's document and
    // month's totals); per token its document; per window one roll-up scan of at most 2 spans
    // (5 minutes not on an hour's edge) and, where a rule counts refusals, one scan of them.
    const accounts = 1;
    const windows = 1 + tokens.length;
    expect(many).toBeLessThanOrEqual(accounts * 2 + tokens.length * 3 + windows * 3);
  });
});
