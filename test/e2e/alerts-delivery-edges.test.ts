import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { verifyWebhook } from '../../src/infra/notify/signing.js';
import type { DeliveryDoc } from '../../src/projections/alerts.js';
import { type AlertHarness, type Receiver, startAlertHarness, startReceiver } from '../support/alertHarness.js';

/**
 * Alert delivery at its edges, after test/e2e/alerts-delivery.test.ts (same receivers, same
 * injected clock): a queued delivery that fails before any attempt can be recorded, a "resolved"
 * still being retried when the alert fires again, and a webhook URL corrected while its
 * notification is being retried.
 */

// ── The service, on an injected clock ────────────────────────────────────────────────────────

let t: AlertHarness;
let clock = Date.parse('2026-11-21T12:00:30.000Z');
const now = () => new Date(clock);
let receiver: Receiver;

beforeAll(async () => {
  receiver = await startReceiver();
  t = await startAlertHarness({ now, requestIdPrefix: 'edges', env: { NOTIFY_TIMEOUT_MS: '2000' } });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

/** A Developer owner with a token and a rate_limiting/hitting alert (threshold 1, 5 min) with a webhook on `path`. */
const alertOn = (path: string) => t.webhookAlert(`hook ${path}`, `${receiver.url}${path}`);

/**
 * Notifier passes until the alert has nothing pending, moving the clock to the next retry's time
 * whenever one is ahead (a notification waiting behind one being retried is due, but not sent).
 */
async function drain(alertId: string): Promise<void> {
  for (let pass = 0; pass < 20; pass++) {
    await t.notifier.runOnce();
    const ahead = (await t.pending(alertId)).map((d) => Date.parse(d.nextAttemptAt)).filter((at) => at > clock);
    if ((await t.pending(alertId)).length === 0) return;
    if (ahead.length > 0) clock = Math.min(...ahead);
  }
  throw new Error('deliveries still pending');
}

const bodies = (path: string) =>
  receiver.hits.filter((h) => h.path === path).map((h) => JSON.parse(h.body) as { type: string; data: { notification_id: string } });

/** What the service logs through console.error while `run` runs, lines mentioning `about` only. */
async function logged(about: string, run: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const spy = vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
    const line = args.map(String).join(' ');
    if (line.includes(about)) lines.push(line);
  });
  try {
    await run();
  } finally {
    spy.mockRestore();
  }
  return lines;
}

describe('a delivery that fails before any attempt is recorded', () => {
  it('whose alert has no stream is dropped from the queue with one log line, not tried (and logged) at every poll', async () => {
    const alertId = 'alr_NoStreamAtAll0001';
    const doc: DeliveryDoc = {
      notificationId: 'ntf_NoStreamAtAll0001',
      alertId,
      accountId: 'acc_nobody',
      channelId: 'chn_NoStreamAtAll0001',
      channel: 'webhook',
      kind: 'fired',
      value: 1,
      threshold: 1,
      summary: 'queued from events this log does not have',
      triggeredAt: now().toISOString(),
      attempts: 0,
      nextAttemptAt: now().toISOString(),
    };
    await t.runtime.readModels.write([{ op: 'put', collection: 'alert_deliveries', key: `${doc.notificationId}/${doc.channelId}`, doc }]);
    // The scheduler polls every second: a minute of it.
    const lines = await logged(alertId, async () => {
      for (let s = 0; s < 60; s++) {
        await t.notifier.runOnce();
        clock += 1000;
      }
    });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/dropped.*has no stream/);
    expect(await t.pending(alertId)).toEqual([]);
  });

  it('whose stream cannot be read (the store failing) backs off, one line per try, and goes out once the store is back', async () => {
    const a = await alertOn('/store-down');
    await t.fire(a);
    const stream = `alert-${a.alertId}`;
    const store = t.runtime.store;
    const readStream = store.readStream.bind(store);
    const spy = vi
      .spyOn(store, 'readStream')
      .mockImplementation((id, options) => (id === stream ? Promise.reject(new Error('store unreachable')) : readStream(id, options)));
    let lines: string[];
    try {
      lines = await logged('store unreachable', async () => {
        for (let s = 0; s < 60; s++) {
          await t.notifier.runOnce();
          clock += 1000;
        }
      });
    } finally {
      spy.mockRestore();
    }
    // Backoff from NOTIFY_RETRY_BASE_MS (1 s) × 3ⁿ with jitter: 5 or 6 tries in a minute, not 60.
    expect(lines.length).toBeGreaterThanOrEqual(3);
    expect(lines.length).toBeLessThanOrEqual(7);
    expect(lines[0]).toMatch(/failed before an attempt was recorded \(store unreachable\); tried again in \d+ s/);
    expect(bodies('/store-down')).toEqual([]);
    clock += 3_600_000;
    await drain(a.alertId);
    expect(bodies('/store-down').map((b) => b.type)).toEqual(['alert.fired']);
    expect((await t.attempts(a.alertId)).map((x) => [x.attempt, x.outcome])).toEqual([[1, 'delivered']]);
  });
});

describe('a "resolved" still being retried when the alert fires again', () => {
  it('is delivered, and before the new "fired": the receiver sees the incident close, then open again', async () => {
    const a = await alertOn('/reopen');
    await t.fire(a);
    await drain(a.alertId);
    // Clear for a window: resolved; the receiver fails its first attempt.
    receiver.script.set('/reopen', [503]);
    clock += 6 * 60_000;
    expect((await t.evaluator.runOnce()).transitions).toContainEqual({ alertId: a.alertId, event: 'AlertResolved' });
    await t.notifier.runOnce();
    expect((await t.attempts(a.alertId)).at(-1)).toMatchObject({ kind: 'resolved', outcome: 'retrying' });
    // Breached again before the retry is due.
    await t.fire(a);
    await t.notifier.runOnce();
    expect(bodies('/reopen').map((b) => b.type)).toEqual(['alert.fired', 'alert.resolved']);
    await drain(a.alertId);
    const got = bodies('/reopen');
    expect(got.map((b) => b.type)).toEqual(['alert.fired', 'alert.resolved', 'alert.resolved', 'alert.fired']);
    expect(new Set(got.map((b) => b.data.notification_id)).size).toBe(3);
    expect((await t.attempts(a.alertId)).map((x) => `${x.kind}/${x.outcome}`)).toEqual([
      'fired/delivered',
      'resolved/retrying',
      'resolved/delivered',
      'fired/delivered',
    ]);
  });
});

describe('a webhook URL edited while its notification is being retried', () => {
  it('the retry goes to the new URL: same channel, same webhook-id, signed with the same secret', async () => {
    const a = await alertOn('/typo');
    receiver.script.set('/typo', [503]);
    await t.fire(a);
    await t.notifier.runOnce();
    expect((await t.attempts(a.alertId)).map((x) => x.outcome)).toEqual(['retrying']);
    const patched = await t.inject({
      method: 'PATCH',
      url: `/api/v1/alerts/${a.alertId}`,
      headers: a.o.auth,
      payload: { channels: [{ type: 'webhook', url: `${receiver.url}/fixed` }] },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    // The same channel, pointed elsewhere: its id and secret stay (no new secret to copy).
    expect(patched.json().channels).toEqual([{ id: a.channelId, type: 'webhook', url: `${receiver.url}/fixed`, status: 'active' }]);
    await drain(a.alertId);
    const [wrong] = receiver.hits.filter((h) => h.path === '/typo');
    const fixed = receiver.hits.filter((h) => h.path === '/fixed');
    expect(fixed.map((h) => JSON.parse(h.body).type)).toEqual(['alert.fired']);
    expect(fixed[0]?.headers['webhook-id']).toBe(wrong?.headers['webhook-id']);
    expect(verifyWebhook(a.secret, fixed[0]?.headers ?? {}, fixed[0]?.body ?? '', { nowSeconds: Math.floor(Date.now() / 1000) })).toBe(true);
    expect((await t.attempts(a.alertId)).map((x) => [x.channelId, x.attempt, x.outcome])).toEqual([
      [a.channelId, 1, 'retrying'],
      [a.channelId, 2, 'delivered'],
    ]);
  });
});
