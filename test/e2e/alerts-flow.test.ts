import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, usageStream } from '../../src/domain/usage.js';
import { verifyWebhook } from '../../src/infra/notify/signing.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import { alertsProjection } from '../../src/projections/alerts.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { type AlertHarness, startAlertHarness } from '../support/alertHarness.js';
import { type FakeUpstream, type ReceivedCall, startFake } from '../support/fakeUpstreams.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { ADMIN_TOKEN } from '../support/testApp.js';

/**
 * The whole path on the real service: usage events → usage read models → evaluator (run by hand
 * on an injected clock) → AlertFired on the alert's stream → notifier → a signed webhook to a
 * loopback receiver and an email in the outbox; every attempt an event; then recovery.
 */
let t: AlertHarness;
let clock = Date.parse('2026-11-21T12:00:30.000Z');
const now = () => new Date(clock);
const advance = (minutes: number) => {
  clock += minutes * 60_000;
};
let receiver: FakeUpstream;
/** Statuses the receiver answers for an alert's webhooks, in order; 200 once they run out. */
const scripts = new Map<string, number[]>();
const alertIdOf = (body: string): string => {
  try {
    return (JSON.parse(body) as { data: { alert: { id: string } } }).data.alert.id;
  } catch {
    return '';
  }
};
const outDir = mkdtempSync(join(tmpdir(), 'gw-alerts-'));
const outbox = join(outDir, 'outbox.ndjson');

beforeAll(async () => {
  receiver = await startFake((call) => ({ status: scripts.get(alertIdOf(call.body))?.shift() ?? 200, body: { received: true } }));
  t = await startAlertHarness({ now, requestIdPrefix: 'req', env: { NOTIFY_OUTBOX: outbox } });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
  rmSync(outDir, { recursive: true, force: true });
});

/** Calls as the gateway meters them: a 5xx one carries the upstream's error. */
const recordUsage = (accountId: string, tokenId: string, calls: Array<{ status: number; totalMs?: number }>) =>
  t.recordUsage(
    accountId,
    tokenId,
    calls.map((c) => ({ ...c, rpcErrorCode: c.status >= 500 ? -32010 : null, errorMessage: c.status >= 500 ? 'upstream unavailable' : null })),
  );
/** Runs notifier passes, moving the clock past each retry's time, until nothing is pending. */
async function deliverAll(): Promise<void> {
  for (let pass = 0; pass < 10; pass++) {
    await t.notifier.runOnce();
    if ((await t.runtime.alerts.queries.pendingDeliveries()).length === 0) return;
    advance(1);
  }
  throw new Error('deliveries still pending');
}
/** Webhooks the receiver got for one alert (earlier tests' alerts keep being evaluated as the clock moves). */
const hooks = (alertId: string): ReceivedCall[] => receiver.calls.filter((c) => c.url === '/hooks/alerts' && alertIdOf(c.body) === alertId);

async function developerWithAlert(payload: Record<string, unknown>) {
  const { o, tokenId, alert } = await t.developerWithAlert({
    name: 'eth errors',
    channels: [
      { type: 'webhook', url: `${receiver.url}/hooks/alerts` },
      { type: 'email', to: 'ops@example.com' },
    ],
    ...payload,
  });
  return { o, tokenId, alert, secret: alert.channels[0]?.secret as string };
}

describe('an error-rate alert, end to end', () => {
  it('fires, notifies every channel with a signed webhook, resolves, and returns to ok', async () => {
    receiver.reset();
    const { o, tokenId, alert, secret } = await developerWithAlert({ type: 'error_rate', threshold: 50, window_minutes: 5, min_requests: 4 });
    await recordUsage(o.accountId, tokenId, [{ status: 200 }, { status: 502 }, { status: 502 }, { status: 503 }, { status: 200 }, { status: 502 }]);

    const report = await t.evaluator.runOnce();
    expect(report.transitions).toContainEqual({ alertId: alert.id, event: 'AlertFired' });
    expect(hooks(alert.id)).toHaveLength(0); // evaluation only appends; delivery is the notifier's
    await deliverAll();

    const [fired] = hooks(alert.id);
    expect(verifyWebhook(secret, fired?.headers ?? {}, fired?.body ?? '', { nowSeconds: Math.floor(Date.now() / 1000) })).toBe(true);
    const body = JSON.parse(fired?.body ?? '{}');
    expect(body).toMatchObject({ type: 'alert.fired', data: { state: 'firing', value: 66.67, alert: { id: alert.id, type: 'error_rate', threshold: 50 } } });
    expect(body.data.summary).toMatch(/66\.7% over the last 5 min \(4 of 6 requests; threshold 50%\)/);
    const email = readFileSync(outbox, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .find((m) => m.messageId === `<${body.data.notification_id}@chain-gateway>`);
    expect(email).toMatchObject({ to: 'ops@example.com', subject: '[FIRING] eth errors' });

    const view = (await t.inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).json();
    expect(view).toMatchObject({ state: 'firing', last_value: 66.67, fired_at: now().toISOString(), last_evaluation: { value: 66.67, breached: true } });
    const attempts = (await t.inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}/notifications`, headers: o.auth })).json().notifications;
    expect(attempts.map((a: { channel: { type: string }; outcome: string; kind: string }) => [a.channel.type, a.kind, a.outcome]).sort()).toEqual([
      ['email', 'fired', 'delivered'],
      ['webhook', 'fired', 'delivered'],
    ]);

    // Still breached a minute later: no second notification within the hour.
    advance(1);
    expect((await t.evaluator.runOnce()).transitions.filter((x) => x.alertId === alert.id)).toEqual([]);

    // The window moves past the errors: resolved, and the resolution is delivered too.
    advance(6);
    expect((await t.evaluator.runOnce()).transitions).toContainEqual({ alertId: alert.id, event: 'AlertResolved' });
    await deliverAll();
    expect(JSON.parse(hooks(alert.id).at(-1)?.body ?? '{}')).toMatchObject({ type: 'alert.resolved', data: { state: 'resolved' } });
    await t.settle();
    expect((await t.inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).json().state).toBe('resolved');

    advance(6);
    expect((await t.evaluator.runOnce()).transitions).toContainEqual({ alertId: alert.id, event: 'AlertReturnedToOk' });
    await t.settle();
    expect((await t.inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).json().state).toBe('ok');

    const types = (await t.alertEvents(alert.id)).map((e) => e.type);
    expect(types).toEqual([
      'AlertCreated',
      'AlertFired',
      'NotificationAttempted',
      'NotificationAttempted',
      'AlertResolved',
      'NotificationAttempted',
      'NotificationAttempted',
      'AlertReturnedToOk',
    ]);
  });
});

describe('delivery: retries, 410, plan gating', () => {
  it('retries a failing endpoint with backoff (same webhook-id), recording every attempt', async () => {
    receiver.reset();
    const { o, tokenId, alert, secret } = await developerWithAlert({ type: 'rate_limiting', condition: 'hitting', threshold: 2, window_minutes: 5 });
    scripts.set(alert.id, [500, 503]);
    await recordUsage(o.accountId, tokenId, [{ status: 429 }, { status: 429 }, { status: 200 }]);
    expect((await t.evaluator.runOnce()).transitions).toContainEqual({ alertId: alert.id, event: 'AlertFired' });
    await deliverAll();

    const calls = hooks(alert.id);
    expect(calls).toHaveLength(3);
    expect(new Set(calls.map((c) => c.headers['webhook-id'])).size).toBe(1);
    for (const c of calls) expect(verifyWebhook(secret, c.headers, c.body, { nowSeconds: Math.floor(Date.now() / 1000) })).toBe(true);

    const attempts = await t.attempts(alert.id);
    expect(attempts.map((a) => [a['attempt'], a['outcome'], a['status']])).toEqual([
      [1, 'retrying', 500],
      [2, 'retrying', 503],
      [3, 'delivered', 200],
    ]);
    expect(Date.parse(String(attempts[0]?.['nextAttemptAt'])) - Date.parse(String(attempts[0]?.['at']))).toBeGreaterThanOrEqual(500);
    const listed = (await t.inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}/notifications`, headers: o.auth })).json().notifications;
    expect(listed.filter((n: { channel: { type: string } }) => n.channel.type === 'webhook').map((n: { attempt: number }) => n.attempt)).toEqual([3, 2, 1]);
  });

  it('gives up after the last attempt', async () => {
    receiver.reset();
    const { o, tokenId, alert } = await developerWithAlert({ type: 'rate_limiting', condition: 'hitting', threshold: 1, window_minutes: 5 });
    scripts.set(alert.id, [500, 500, 500, 500, 500]);
    await recordUsage(o.accountId, tokenId, [{ status: 429 }]);
    await t.evaluator.runOnce();
    await deliverAll();
    const outcomes = (await t.attempts(alert.id)).map((a) => a.outcome);
    expect(outcomes).toEqual(['retrying', 'retrying', 'retrying', 'failed']);
  });

  it('a "fired" still being retried is not sent after the alert resolved; the "resolved" is', async () => {
    receiver.reset();
    const { o, tokenId, alert } = await developerWithAlert({ type: 'rate_limiting', condition: 'hitting', threshold: 1, window_minutes: 5 });
    scripts.set(alert.id, [503]);
    await recordUsage(o.accountId, tokenId, [{ status: 429 }]);
    await t.evaluator.runOnce();
    await t.notifier.runOnce(); // the first attempt fails; a retry is queued
    advance(6);
    expect((await t.evaluator.runOnce()).transitions).toContainEqual({ alertId: alert.id, event: 'AlertResolved' });
    await deliverAll();
    expect(hooks(alert.id).map((c) => JSON.parse(c.body).type)).toEqual(['alert.fired', 'alert.resolved']);
    const outcomes = (await t.attempts(alert.id)).map((a) => `${a.kind}/${a.outcome}`);
    // The retry and the resolution are due in the same pass: either may be recorded first.
    expect(outcomes[0]).toBe('fired/retrying');
    expect(outcomes.slice(1).sort()).toEqual(['fired/skipped', 'resolved/delivered']);
  });

  it('410 Gone disables the endpoint; later notifications skip it until the owner gives it again', async () => {
    receiver.reset();
    const { o, tokenId, alert } = await developerWithAlert({ type: 'rate_limiting', condition: 'hitting', threshold: 1, window_minutes: 5 });
    scripts.set(alert.id, [410]);
    await recordUsage(o.accountId, tokenId, [{ status: 429 }]);
    await t.evaluator.runOnce();
    await deliverAll();
    const events = await t.alertEvents(alert.id);
    expect(events.map((e) => e.type)).toContain('AlertChannelDisabled');
    expect(events.find((e) => e.type === 'NotificationAttempted' && e.data['channel'] === 'webhook')?.data).toMatchObject({
      outcome: 'gone',
      status: 410,
      attempt: 1,
      nextAttemptAt: null,
    });
    const view = (await t.inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).json();
    expect(view.channels.map((c: { type: string; status: string }) => [c.type, c.status])).toEqual([
      ['webhook', 'disabled'],
      ['email', 'active'],
    ]);

    // The resolution goes by email only.
    advance(6);
    await t.evaluator.runOnce();
    const resolved = (await t.alertEvents(alert.id)).find((e) => e.type === 'AlertResolved');
    expect(resolved?.data['deliverTo']).toEqual([{ id: view.channels[1].id, type: 'email' }]);
    await deliverAll();
    expect(hooks(alert.id)).toHaveLength(1);

    const again = await t.inject({
      method: 'PATCH',
      url: `/api/v1/alerts/${alert.id}`,
      headers: o.auth,
      payload: {
        channels: [
          { type: 'webhook', url: `${receiver.url}/hooks/alerts` },
          { type: 'email', to: 'ops@example.com' },
        ],
      },
    });
    expect(again.json().channels[0]).toEqual({ id: view.channels[0].id, type: 'webhook', url: `${receiver.url}/hooks/alerts`, status: 'active' });
  });

  it('after a downgrade, channels outside the plan are not notified', async () => {
    receiver.reset();
    const { o, tokenId, alert } = await developerWithAlert({ type: 'rate_limiting', condition: 'hitting', threshold: 1, window_minutes: 5 });
    await t.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'free' },
    });
    await recordUsage(o.accountId, tokenId, [{ status: 429 }]);
    await t.evaluator.runOnce();
    await deliverAll();
    const fired = (await t.alertEvents(alert.id)).find((e) => e.type === 'AlertFired');
    expect(((fired?.data['deliverTo'] ?? []) as Array<{ type: string }>).map((c) => c.type)).toEqual(['email']);
    expect(hooks(alert.id)).toHaveLength(0);
  });
});

describe('other rule types on the read models', () => {
  it('response_time p95 and token_usage (share of the token limit, unusual traffic) fire on their figures', async () => {
    const {
      o,
      tokenId,
      alert: latency,
    } = await developerWithAlert({ type: 'response_time', condition: 'p95', threshold: 400, window_minutes: 5, min_requests: 5 });
    const auth = o.auth;
    const limited = (await t.inject({ method: 'PATCH', url: `/api/v1/tokens/${tokenId}`, headers: auth, payload: { monthly_limit: 20 } })).json();
    expect(limited.monthly_limit).toBe(20);
    const tokenAlert = (
      await t.inject({
        method: 'POST',
        url: '/api/v1/alerts',
        headers: auth,
        payload: { name: 'token', type: 'token_usage', threshold: 50, token_id: tokenId, channels: [{ type: 'email', to: 'a@example.com' }] },
      })
    ).json();
    const unusual = (
      await t.inject({
        method: 'POST',
        url: '/api/v1/alerts',
        headers: auth,
        payload: {
          name: 'spike',
          type: 'token_usage',
          condition: 'unusual_traffic',
          threshold: 3,
          token_id: tokenId,
          window_minutes: 5,
          min_requests: 5,
          channels: [{ type: 'email', to: 'a@example.com' }],
        },
      })
    ).json();
    await recordUsage(
      o.accountId,
      tokenId,
      Array.from({ length: 12 }, (_, i) => ({ status: 200, totalMs: i < 10 ? 50 : 2000 })),
    );
    const fired = (await t.evaluator.runOnce()).transitions.filter((x) => x.event === 'AlertFired').map((x) => x.alertId);
    expect(fired).toEqual(expect.arrayContaining([latency.id, tokenAlert.id, unusual.id]));
    await t.settle();
    const views = (await t.inject({ method: 'GET', url: '/api/v1/alerts', headers: auth })).json().alerts;
    expect(views.find((a: { id: string }) => a.id === tokenAlert.id)).toMatchObject({ state: 'firing', last_value: 60 });
    expect(views.find((a: { id: string }) => a.id === unusual.id)).toMatchObject({ state: 'firing', last_value: 12 });
    expect(views.find((a: { id: string }) => a.id === latency.id).last_value).toBeGreaterThan(400);
    await deliverAll();
  });
});

describe('the evaluator never crashes on bad data', () => {
  it('skips unreadable alert documents and malformed usage, and evaluates the rest', async () => {
    receiver.reset();
    const { o, tokenId, alert } = await developerWithAlert({ type: 'rate_limiting', condition: 'hitting', threshold: 1, window_minutes: 5 });
    await t.runtime.readModels.write([
      { op: 'put', collection: 'alerts', key: 'alr_garbage0000000', doc: { id: 'alr_garbage0000000', rule: 'not a rule', enabled: 'yes' } },
      {
        op: 'put',
        collection: 'alerts',
        key: 'alr_garbage0000001',
        doc: {
          id: 'alr_garbage0000001',
          accountId: 'acc_none',
          enabled: true,
          state: 'ok',
          resolvedAt: null,
          lastNotifiedAt: null,
          rule: { type: 'error_rate', condition: null, threshold: 5, windowMinutes: 5, tokenId: 'tok_gone', minRequests: 1, baselineHours: null },
        },
      },
    ]);
    await t.runtime.store.append(
      usageStream(o.accountId),
      [{ id: usageEventId({ requestId: 'bad-1', at: 'yesterday' }), type: USAGE_EVENT_TYPE, data: { at: 'yesterday', status: 'teapot' } }],
      'any',
    );
    await recordUsage(o.accountId, tokenId, [{ status: 429 }]);
    const report = await t.evaluator.runOnce();
    expect(report.skipped).toBeGreaterThanOrEqual(1);
    expect(report.failed).toBe(0);
    expect(report.transitions).toContainEqual({ alertId: alert.id, event: 'AlertFired' });
    await t.runtime.readModels.write([
      { op: 'delete', collection: 'alerts', key: 'alr_garbage0000000' },
      { op: 'delete', collection: 'alerts', key: 'alr_garbage0000001' },
    ]);
    await deliverAll();
  });
});

describe('the alert read models', () => {
  it('are rebuilt from the log exactly', async () => {
    await t.settle();
    const dump = async (rm: { range: LevelReadModelStore['range'] }) =>
      Object.fromEntries(await Promise.all(alertsProjection.collections.map(async (c) => [c, await rm.range(c)] as const)));
    const live = await dump(t.runtime.readModels);
    expect(live['alert_notifications']?.length).toBeGreaterThan(10);
    const dir = mkdtempSync(join(outDir, 'rebuild-'));
    const rm = await LevelReadModelStore.open(dir);
    try {
      const runner = new ProjectionRunner(t.runtime.store, rm, [alertsProjection]);
      await runner.start();
      await runner.caughtUp;
      await runner.stop();
      expect(await dump(rm)).toEqual(live);
    } finally {
      await rm.close();
    }
  });
});
