import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AlertEvaluator } from '../../src/alerts/evaluator.js';
import { RollupAlertMetrics } from '../../src/alerts/rollupMetrics.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { AlertQueries } from '../../src/projections/alertsQueries.js';
import { UsageQueries } from '../../src/projections/metricsQueries.js';
import { Queries } from '../../src/projections/queries.js';
import { type AlertHarness, callsWith, EMAIL_CHANNEL, startAlertHarness } from '../support/alertHarness.js';
import { ADMIN_TOKEN, owner } from '../support/testApp.js';

/**
 * When an alert rule fires and resolves, as an owner relying on it sees it: thresholds met
 * exactly, windows at their edges, empty windows, scope, the month's rollover, edits while
 * firing, and what one evaluation round reads. Evaluation runs by hand on the test's clock.
 */
let t: AlertHarness;
let clock = Date.parse('2026-11-10T12:00:30.000Z');
const now = () => new Date(clock);
const at = (iso: string) => {
  clock = Date.parse(iso);
};
const advanceSeconds = (s: number) => {
  clock += s * 1000;
};

beforeAll(async () => {
  t = await startAlertHarness({ now, requestIdPrefix: 'audit' });
});
afterAll(async () => {
  await t?.close();
});

const email = EMAIL_CHANNEL;
const calls = callsWith;
const evaluate = (alertId: string) => t.evaluate(alertId);
const view = async (auth: Record<string, string>, alertId: string) => (await t.alertView(auth, alertId)).json();
const newToken = async (auth: Record<string, string>, payload: Record<string, unknown>) => {
  const res = await t.inject({ method: 'POST', url: '/api/v1/tokens', headers: auth, payload });
  expect(res.statusCode, res.body).toBe(201);
  return res.json().id as string;
};

describe('a threshold met exactly fires (breached means value ≥ threshold)', () => {
  it('error rate: 29 errors in 100 calls against 29%', async () => {
    at('2026-11-10T12:00:30.000Z');
    const { o, tokenId, alert } = await t.developerWithAlert({ name: 'e', type: 'error_rate', threshold: 29, window_minutes: 5, channels: email });
    await t.recordUsage(o.accountId, tokenId, [...calls(29, 502), ...calls(71, 200)]);
    expect(await evaluate(alert.id)).toEqual(['AlertFired']);
    expect((await view(o.auth, alert.id)).last_value).toBe(29);
  });

  it("a token's quota share: 29 of its own 100 against 29%", async () => {
    at('2026-11-10T12:00:30.000Z');
    const { o } = await t.developerWithAlert({ name: 'placeholder', type: 'error_rate', threshold: 50, channels: email });
    const tokenId = await newToken(o.auth, { name: 'capped', monthly_limit: 100 });
    const res = await t.inject({
      method: 'POST',
      url: '/api/v1/alerts',
      headers: o.auth,
      payload: { name: 'q', type: 'token_usage', condition: 'percent_of_limit', token_id: tokenId, threshold: 29, channels: email },
    });
    expect(res.statusCode, res.body).toBe(201);
    const alertId = res.json().id as string;
    await t.recordUsage(o.accountId, tokenId, calls(28, 200));
    expect(await evaluate(alertId)).toEqual([]);
    await t.recordUsage(o.accountId, tokenId, calls(1, 200));
    expect(await evaluate(alertId)).toEqual(['AlertFired']);
    expect((await view(o.auth, alertId)).last_value).toBe(29);
  });
});

describe('windows at their edges', () => {
  it('a 1-minute window keeps the calls of the last minute: no resolve just after the minute turns', async () => {
    at('2026-11-10T13:00:30.000Z');
    const { o, tokenId, alert } = await t.developerWithAlert({
      name: 'w',
      type: 'error_rate',
      threshold: 50,
      window_minutes: 1,
      min_requests: 10,
      channels: email,
    });
    await t.recordUsage(o.accountId, tokenId, calls(10, 503));
    expect(await evaluate(alert.id)).toEqual(['AlertFired']);
    // 35 s later the errors are still within the last minute: the alert stays firing.
    advanceSeconds(35);
    expect(await evaluate(alert.id)).toEqual([]);
    // Exactly one window after the calls they are at its edge, and still count.
    at('2026-11-10T13:01:30.000Z');
    expect(await evaluate(alert.id)).toEqual([]);
    // Once the roll-ups' minute holding them has left the window, it resolves.
    at('2026-11-10T13:02:00.000Z');
    expect(await evaluate(alert.id)).toEqual(['AlertResolved']);
    const v = await view(o.auth, alert.id);
    expect(v).toMatchObject({ state: 'resolved', last_value: null });
  });

  it('a window with no calls: an error rate of 0/0 neither fires nor reports NaN', async () => {
    at('2026-11-10T14:00:30.000Z');
    const { o, alert } = await t.developerWithAlert({ name: 'z', type: 'error_rate', threshold: 1, window_minutes: 5, min_requests: 1, channels: email });
    expect(await evaluate(alert.id)).toEqual([]);
    const res = await t.inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}`, headers: o.auth });
    expect(res.body).not.toMatch(/NaN|Infinity/);
    expect(res.json()).toMatchObject({ state: 'ok', last_value: null, last_evaluation: { value: null, breached: false } });
  });
});

describe('scope', () => {
  it("a token's rule sees only its calls; an account rule all the account's; another account's never", async () => {
    at('2026-11-10T15:00:30.000Z');
    const { o, tokenId } = await t.developerWithAlert({ name: 'placeholder', type: 'error_rate', threshold: 99, channels: email });
    const other = await newToken(o.auth, { name: 'other' });
    const create = async (payload: Record<string, unknown>) =>
      (await t.inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: { name: 's', channels: email, ...payload } })).json().id as string;
    const onToken = await create({ type: 'rate_limiting', condition: 'hitting', threshold: 3, token_id: tokenId });
    const onAccount = await create({ type: 'rate_limiting', condition: 'hitting', threshold: 3 });
    // Another account's refusals, at the same time.
    const stranger = await t.developerWithAlert({ name: 'x', type: 'error_rate', threshold: 99, channels: email });
    await t.recordUsage(stranger.o.accountId, stranger.tokenId, calls(10, 429));
    await t.recordUsage(o.accountId, tokenId, calls(2, 429));
    await t.recordUsage(o.accountId, other, calls(1, 429));
    const report = await t.evaluator.runOnce();
    const fired = report.transitions.filter((x) => x.event === 'AlertFired').map((x) => x.alertId);
    expect(fired).toContain(onAccount);
    expect(fired).not.toContain(onToken);
    expect((await view(o.auth, onToken)).last_evaluation).toMatchObject({ value: 2, breached: false });
    expect((await view(o.auth, onAccount)).last_evaluation).toMatchObject({ value: 3, breached: true });
  });
});

describe('the month and the plan', () => {
  it('a quota-share alert resolves at 00:00 UTC on the 1st, when the new month starts empty', async () => {
    at('2026-11-30T23:59:59.000Z');
    const o = await owner(t.app);
    const tokenId = await newToken(o.auth, { name: 'free' });
    // Free: the account's 100,000 a month; 10 calls are 0.01% of it.
    const res = await t.inject({
      method: 'POST',
      url: '/api/v1/alerts',
      headers: o.auth,
      payload: { name: 'm', type: 'usage_threshold', threshold: 0.01, channels: email },
    });
    expect(res.statusCode, res.body).toBe(201);
    const alertId = res.json().id as string;
    await t.recordUsage(o.accountId, tokenId, calls(10, 200));
    expect(await evaluate(alertId)).toEqual(['AlertFired']);
    at('2026-12-01T00:00:00.000Z');
    expect(await evaluate(alertId)).toEqual(['AlertResolved']);
  });

  it("a token's own limit after a downgrade to a plan without custom limits: the share is of the account's limit, where the gateway refuses it", async () => {
    at('2026-11-10T16:00:30.000Z');
    const { o } = await t.developerWithAlert({ name: 'placeholder', type: 'error_rate', threshold: 99, channels: email });
    const tokenId = await newToken(o.auth, { name: 'capped', monthly_limit: 1000 });
    const res = await t.inject({
      method: 'POST',
      url: '/api/v1/alerts',
      headers: o.auth,
      payload: { name: 'q', type: 'token_usage', condition: 'percent_of_limit', token_id: tokenId, threshold: 50, channels: email },
    });
    const alertId = res.json().id as string;
    await t.recordUsage(o.accountId, tokenId, calls(20, 200));
    expect(await evaluate(alertId)).toEqual([]);
    expect((await view(o.auth, alertId)).last_evaluation.value).toBe(2);
    // Free has no custom limits: the token now spends the account's 100,000.
    const plan = await t.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'free' },
    });
    expect(plan.statusCode).toBe(200);
    expect(await evaluate(alertId)).toEqual([]);
    expect((await view(o.auth, alertId)).last_evaluation.value).toBe(0.02);
  });
});

describe('rate_limiting/hitting above 10,000 refusals', () => {
  it('fires at a threshold past the refusals counted by default', async () => {
    at('2026-11-10T19:00:30.000Z');
    const { o, tokenId, alert } = await t.developerWithAlert({
      name: 'h',
      type: 'rate_limiting',
      condition: 'hitting',
      threshold: 10_050,
      window_minutes: 60,
      channels: email,
    });
    for (let i = 0; i < 10; i++) await t.recordUsage(o.accountId, tokenId, calls(1005, 429)); // one append holds at most 1 MB
    expect(await evaluate(alert.id)).toEqual(['AlertFired']);
  });
});

describe('edits while firing', () => {
  it('deleted while firing: one "resolved" (reason deleted), and never a fire again', async () => {
    at('2026-11-10T17:00:30.000Z');
    const { o, tokenId, alert } = await t.developerWithAlert({ name: 'd', type: 'rate_limiting', condition: 'hitting', threshold: 1, channels: email });
    await t.fire({ o, tokenId, alertId: alert.id });
    expect((await t.inject({ method: 'DELETE', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).statusCode).toBe(204);
    await t.recordUsage(o.accountId, tokenId, calls(3, 429));
    expect(await evaluate(alert.id)).toEqual([]);
    // The notifier's deliveries (its poll runs on its own) aside:
    const decided = (await t.alertEvents(alert.id)).filter((e) => e.type !== 'NotificationAttempted');
    expect(decided.map((e) => e.type)).toEqual(['AlertCreated', 'AlertFired', 'AlertResolved', 'AlertDeleted']);
    expect(decided[2]?.data).toMatchObject({ reason: 'deleted' });
  });
});

describe('what one evaluation round reads', () => {
  /** The read models, counting each document read (a get, or each document a range returns). */
  const counting = (rm: ReadModelStore) => {
    const counter = { docs: 0 };
    const store = new Proxy(rm, {
      get(target, prop, receiver) {
        if (prop === 'get')
          return async (collection: string, key: string) => {
            counter.docs++;
            return target.get(collection, key);
          };
        if (prop === 'range')
          return async (...args: Parameters<ReadModelStore['range']>) => {
            const rows = await target.range(...args);
            counter.docs += 1 + rows.length;
            return rows;
          };
        return Reflect.get(target, prop, receiver);
      },
    });
    return { store, counter };
  };

  it('does not grow with the calls in the windows of rules that do not count refusals', async () => {
    at('2026-11-10T18:00:30.000Z');
    const { o, tokenId } = await t.developerWithAlert({ name: 'r', type: 'error_rate', threshold: 99, window_minutes: 60, channels: email });
    for (let i = 0; i < 9; i++) {
      await t.inject({
        method: 'POST',
        url: '/api/v1/alerts',
        headers: o.auth,
        payload: { name: `r${i}`, type: 'response_time', threshold: 500, window_minutes: 60, channels: email },
      });
    }
    const { store, counter } = counting(t.runtime.readModels);
    const queries = new Queries(store, now);
    const evaluator = new AlertEvaluator({
      alerts: new AlertQueries(store),
      queries,
      plans: t.runtime.config.plans,
      metrics: new RollupAlertMetrics(new UsageQueries(store), queries, t.runtime.config.plans),
      commands: t.runtime.alerts.commands,
      now,
    });
    const round = async () => {
      counter.docs = 0;
      await evaluator.runOnce();
      return counter.docs;
    };
    await t.recordUsage(o.accountId, tokenId, calls(50, 502));
    const few = await round();
    await t.recordUsage(o.accountId, tokenId, calls(2000, 502));
    const many = await round();
    expect(many).toBe(few);
  });
});
