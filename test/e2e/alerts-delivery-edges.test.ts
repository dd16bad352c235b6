import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { AlertEvaluator } from '../../src/alerts/evaluator.js';
import type { Notifier } from '../../src/alerts/notifier.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { verifyWebhook } from '../../src/infra/notify/signing.js';
import type { DeliveryDoc } from '../../src/projections/alerts.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * Alert delivery at its edges, after test/e2e/alerts-delivery.test.ts (same receivers, same
 * injected clock): a queued delivery that fails before any attempt can be recorded, a "resolved"
 * still being retried when the alert fires again, and a webhook URL corrected while its
 * notification is being retried.
 */

// ── A webhook receiver: what it got, and what it answers, per path ──────────────────────────

interface Hit {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

interface Receiver {
  url: string;
  hits: Hit[];
  /** Statuses per path, in order; 200 once they run out. */
  script: Map<string, number[]>;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const hits: Hit[] = [];
  const script = new Map<string, number[]>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '/';
      hits.push({ path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      const status = script.get(path)?.shift() ?? 200;
      res.writeHead(status, { 'content-type': 'text/plain' }).end(status >= 400 ? `status ${status}` : 'ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits,
    script,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// ── The service, on an injected clock ────────────────────────────────────────────────────────

const BASE_MS = 1000;

let t: TestApp;
let clock = Date.parse('2026-11-21T12:00:30.000Z');
const now = () => new Date(clock);
let receiver: Receiver;
let evaluator: AlertEvaluator;
let notifier: Notifier;

beforeAll(async () => {
  receiver = await startReceiver();
  t = await startTestApp({
    now,
    env: {
      ALERT_EVALUATION_INTERVAL_SECONDS: '0',
      NOTIFY_ALLOW_PRIVATE: 'true',
      NOTIFY_TIMEOUT_MS: '2000',
      NOTIFY_RETRY_BASE_MS: String(BASE_MS),
      NOTIFY_MAX_ATTEMPTS: '4',
    },
  });
  evaluator = t.runtime.alerts.evaluator as AlertEvaluator;
  notifier = t.runtime.alerts.notifier as Notifier;
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
});

const inject = (options: InjectOptions) => t.app.inject(options);
let seq = 0;
async function settle(): Promise<void> {
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}
async function recordUsage(accountId: string, tokenId: string, statuses: number[]): Promise<void> {
  const records: UsageRecord[] = statuses.map((status) => ({
    requestId: `edges-${++seq}`,
    at: now().toISOString(),
    accountId,
    tokenId,
    chain: 'eth',
    method: 'eth_blockNumber',
    status,
    rpcErrorCode: null,
    errorMessage: null,
    totalMs: 20,
    upstreamMs: 10,
    clientIp: '127.0.0.1',
    upstream: 'u1',
  }));
  await t.runtime.store.append(
    usageStream(accountId),
    records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: r })),
    'any',
  );
  await settle();
}

interface Attempt {
  notificationId: string;
  kind: string;
  channelId: string;
  attempt: number;
  outcome: string;
}
const attempts = async (alertId: string): Promise<Attempt[]> =>
  (await t.runtime.store.readStream(`alert-${alertId}`)).filter((e) => e.type === 'NotificationAttempted').map((e) => e.data as unknown as Attempt);
const pending = async (alertId: string) => (await t.runtime.alerts.queries.pendingDeliveries()).filter((d) => d.alertId === alertId);

/** A Developer owner with a token and a rate_limiting/hitting alert (threshold 1, 5 min) with a webhook on `path`. */
async function alertOn(path: string) {
  const o = await owner(t.app);
  await inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${o.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan: 'developer' },
  });
  const token = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'backend' } })).json();
  const res = await inject({
    method: 'POST',
    url: '/api/v1/alerts',
    headers: o.auth,
    payload: {
      name: `hook ${path}`,
      type: 'rate_limiting',
      condition: 'hitting',
      threshold: 1,
      window_minutes: 5,
      channels: [{ type: 'webhook', url: `${receiver.url}${path}` }],
    },
  });
  expect(res.statusCode, res.body).toBe(201);
  const alert = res.json();
  return { o, tokenId: token.id as string, alertId: alert.id as string, channelId: alert.channels[0].id as string, secret: alert.channels[0].secret as string };
}

/** Fires the alert: one refused call, one evaluation. */
async function fire(a: { o: { accountId: string }; tokenId: string; alertId: string }): Promise<void> {
  await recordUsage(a.o.accountId, a.tokenId, [429]);
  expect((await evaluator.runOnce()).transitions).toContainEqual({ alertId: a.alertId, event: 'AlertFired' });
}

/**
 * Notifier passes until the alert has nothing pending, moving the clock to the next retry's time
 * whenever one is ahead (a notification waiting behind one being retried is due, but not sent).
 */
async function drain(alertId: string): Promise<void> {
  for (let pass = 0; pass < 20; pass++) {
    await notifier.runOnce();
    const ahead = (await pending(alertId)).map((d) => Date.parse(d.nextAttemptAt)).filter((at) => at > clock);
    if ((await pending(alertId)).length === 0) return;
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
        await notifier.runOnce();
        clock += 1000;
      }
    });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/dropped.*has no stream/);
    expect(await pending(alertId)).toEqual([]);
  });

  it('whose stream cannot be read (the store failing) backs off, one line per try, and goes out once the store is back', async () => {
    const a = await alertOn('/store-down');
    await fire(a);
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
          await notifier.runOnce();
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
    expect((await attempts(a.alertId)).map((x) => [x.attempt, x.outcome])).toEqual([[1, 'delivered']]);
  });
});

describe('a "resolved" still being retried when the alert fires again', () => {
  it('is delivered, and before the new "fired": the receiver sees the incident close, then open again', async () => {
    const a = await alertOn('/reopen');
    await fire(a);
    await drain(a.alertId);
    // Clear for a window: resolved; the receiver fails its first attempt.
    receiver.script.set('/reopen', [503]);
    clock += 6 * 60_000;
    expect((await evaluator.runOnce()).transitions).toContainEqual({ alertId: a.alertId, event: 'AlertResolved' });
    await notifier.runOnce();
    expect((await attempts(a.alertId)).at(-1)).toMatchObject({ kind: 'resolved', outcome: 'retrying' });
    // Breached again before the retry is due.
    await fire(a);
    await notifier.runOnce();
    expect(bodies('/reopen').map((b) => b.type)).toEqual(['alert.fired', 'alert.resolved']);
    await drain(a.alertId);
    const got = bodies('/reopen');
    expect(got.map((b) => b.type)).toEqual(['alert.fired', 'alert.resolved', 'alert.resolved', 'alert.fired']);
    expect(new Set(got.map((b) => b.data.notification_id)).size).toBe(3);
    expect((await attempts(a.alertId)).map((x) => `${x.kind}/${x.outcome}`)).toEqual([
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
    await fire(a);
    await notifier.runOnce();
    expect((await attempts(a.alertId)).map((x) => x.outcome)).toEqual(['retrying']);
    const patched = await inject({
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
    expect((await attempts(a.alertId)).map((x) => [x.channelId, x.attempt, x.outcome])).toEqual([
      [a.channelId, 1, 'retrying'],
      [a.channelId, 2, 'delivered'],
    ]);
  });
});
