import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { verifyWebhook } from '../../src/infra/notify/signing.js';
import {
  ALERT_MAX_ATTEMPTS,
  ALERT_RETRY_BASE_MS,
  type AlertHarness,
  type Attempt,
  appendUsage,
  type Receiver,
  startAlertHarness,
  startReceiver,
} from '../support/alertHarness.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';
import { ADMIN_TOKEN, owner, startTestApp } from '../support/testApp.js';

/**
 * Alert delivery as an owner relies on it, against real loopback webhook receivers that misbehave
 * the ways real ones do: too slow for the notifier's deadline, 5xx, redirects (to another
 * receiver, to a link-local or loopback address), 410, a dropped connection. The service runs in
 * process on an injected clock (retries are due when the clock says so); alerts-flow covers the
 * happy path, 500 retries, giving up, 410 and plan gating.
 */

// ── The service, on an injected clock ────────────────────────────────────────────────────────

const TIMEOUT_MS = 400;
const BASE_MS = ALERT_RETRY_BASE_MS;
const MAX_ATTEMPTS = ALERT_MAX_ATTEMPTS;

let t: AlertHarness;
let clock = Date.parse('2026-11-21T12:00:30.000Z');
const now = () => new Date(clock);
const advanceMs = (ms: number) => {
  clock += ms;
};
let receiver: Receiver;
let other: Receiver;

beforeAll(async () => {
  receiver = await startReceiver();
  other = await startReceiver();
  t = await startAlertHarness({ now, requestIdPrefix: 'delivery', env: { NOTIFY_TIMEOUT_MS: String(TIMEOUT_MS) } });
});
afterAll(async () => {
  await t?.close();
  await receiver?.close();
  await other?.close();
});

/** A Developer owner with a token and a rate_limiting/hitting alert (threshold 1) on `path` of the receiver. */
const alertOn = (path: string) => t.webhookAlert(`hook ${path}`, `${receiver.url}${path}`);

/** Notifier passes, moving the clock to each retry's time, until the alert has nothing pending. */
async function deliverAll(alertId: string): Promise<void> {
  for (let pass = 0; pass < 20; pass++) {
    await t.notifier.runOnce();
    const left = await t.pending(alertId);
    if (left.length === 0) return;
    const next = Math.min(...left.map((d) => Date.parse(d.nextAttemptAt)));
    if (next > clock) clock = next;
  }
  throw new Error('deliveries still pending');
}

/** The "fired" webhooks a receiver got on a path (an earlier test's alert may resolve meanwhile). */
const firedHits = (path: string, r: Receiver = receiver) => r.hits.filter((h) => h.path === path && h.body.includes('"type":"alert.fired"'));
const nowSeconds = () => Math.floor(Date.now() / 1000);

describe('a webhook receiver that misbehaves', () => {
  it('slower than NOTIFY_TIMEOUT_MS: the attempt is cut at the deadline and retried; the retry is delivered, same webhook-id', async () => {
    const a = await alertOn('/slow');
    receiver.script.set('/slow', [{ stallMs: 5_000 }]);
    await t.fire(a);
    const started = Date.now();
    await t.notifier.runOnce();
    expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + 2_000);
    const [first] = await t.attempts(a.alertId);
    expect(first).toMatchObject({ attempt: 1, outcome: 'retrying', status: null });
    expect(first?.error).toMatch(/timeout|aborted/i);
    await deliverAll(a.alertId);
    const hits = firedHits('/slow');
    expect(hits).toHaveLength(2);
    expect(new Set(hits.map((h) => h.headers['webhook-id'])).size).toBe(1);
    for (const h of hits) expect(verifyWebhook(a.secret ?? '', h.headers, h.body, { nowSeconds: nowSeconds() })).toBe(true);
    expect((await t.attempts(a.alertId)).map((x) => x.outcome)).toEqual(['retrying', 'delivered']);
  });

  it('drops the connection: retried, then delivered', async () => {
    const a = await alertOn('/hangup');
    receiver.script.set('/hangup', ['hangup', 'hangup']);
    await t.fire(a);
    await deliverAll(a.alertId);
    const list = await t.attempts(a.alertId);
    expect(list.map((x) => [x.attempt, x.outcome, x.status])).toEqual([
      [1, 'retrying', null],
      [2, 'retrying', null],
      [3, 'delivered', 200],
    ]);
    expect(list[0]?.error).toMatch(/socket|closed|ECONNRESET/i);
    expect(firedHits('/hangup')).toHaveLength(3);
  });

  it('500 every time: retried on the documented backoff (base × 3ⁿ, equal jitter), never early, then given up; the owner sees every attempt', async () => {
    const a = await alertOn('/down');
    receiver.script.set('/down', [500, 502, 503, 500, 500]);
    await t.fire(a);
    await t.notifier.runOnce();
    for (let attempt = 1; attempt < MAX_ATTEMPTS; attempt++) {
      const last = (await t.attempts(a.alertId)).at(-1) as Attempt;
      expect(last).toMatchObject({ attempt, outcome: 'retrying' });
      const raw = BASE_MS * 3 ** (attempt - 1);
      const delay = Date.parse(last.nextAttemptAt as string) - Date.parse(last.at);
      expect(delay).toBeGreaterThanOrEqual(raw / 2);
      expect(delay).toBeLessThanOrEqual(raw);
      // Not before its time, however often the notifier looks.
      clock = Date.parse(last.nextAttemptAt as string) - 1;
      await t.notifier.runOnce();
      await t.notifier.runOnce();
      expect(firedHits('/down')).toHaveLength(attempt);
      clock += 1;
      await t.notifier.runOnce();
    }
    const list = await t.attempts(a.alertId);
    expect(list.map((x) => [x.attempt, x.outcome, x.status])).toEqual([
      [1, 'retrying', 500],
      [2, 'retrying', 502],
      [3, 'retrying', 503],
      [4, 'failed', 500],
    ]);
    expect(await t.pending(a.alertId)).toEqual([]);
    advanceMs(3_600_000 * 3);
    await t.notifier.runOnce();
    expect(firedHits('/down')).toHaveLength(MAX_ATTEMPTS);
    // The owner's view: newest first, with the status, the error and when the next try is.
    const seen = (await t.inject({ method: 'GET', url: `/api/v1/alerts/${a.alertId}/notifications`, headers: a.o.auth })).json().notifications;
    expect(seen.map((n: { attempt: number; outcome: string; status: number }) => [n.attempt, n.outcome, n.status])).toEqual([
      [4, 'failed', 500],
      [3, 'retrying', 503],
      [2, 'retrying', 502],
      [1, 'retrying', 500],
    ]);
    expect(seen[1].next_attempt_at).toEqual(list[2]?.nextAttemptAt);
    expect(seen[0].error).toBe('HTTP 500: status 500');
    // A failed notification does not switch the endpoint off (only 410 does): the next one is tried.
    const view = (await t.inject({ method: 'GET', url: `/api/v1/alerts/${a.alertId}`, headers: a.o.auth })).json();
    expect(view.channels[0].status).toBe('active');
  });

  it('redirects are not followed: not to another receiver, not to a loopback or link-local address; final, not retried', async () => {
    const targets = [`${other.url}/elsewhere`, 'http://169.254.169.254/latest/meta-data/', `${other.url.replace('127.0.0.1', 'localhost')}/internal`];
    for (const [i, target] of targets.entries()) {
      const path = `/redirect-${i}`;
      const a = await alertOn(path);
      receiver.script.set(path, [{ redirect: target, status: i === 0 ? 302 : i === 1 ? 307 : 308 }]);
      await t.fire(a);
      await deliverAll(a.alertId);
      const list = await t.attempts(a.alertId);
      expect(list).toHaveLength(1);
      expect(list[0]).toMatchObject({ attempt: 1, outcome: 'failed', nextAttemptAt: null });
      expect(list[0]?.status).toBe(i === 0 ? 302 : i === 1 ? 307 : 308);
      expect(firedHits(path)).toHaveLength(1);
    }
    expect(other.hits).toEqual([]);
  });

  it('410 on the retry of a 503: the channel is switched off and the notification ends there', async () => {
    const a = await alertOn('/gone-later');
    receiver.script.set('/gone-later', [503, 410]);
    await t.fire(a);
    await deliverAll(a.alertId);
    expect((await t.attempts(a.alertId)).map((x) => [x.outcome, x.status])).toEqual([
      ['retrying', 503],
      ['gone', 410],
    ]);
    expect((await t.alertEvents(a.alertId)).filter((e) => e.type === 'AlertChannelDisabled')).toHaveLength(1);
    advanceMs(3_600_000);
    await t.notifier.runOnce();
    expect(firedHits('/gone-later')).toHaveLength(2);
  });

  it('after a success nothing is sent again, however many passes and however long', async () => {
    const a = await alertOn('/once');
    await t.fire(a);
    await deliverAll(a.alertId);
    for (let i = 0; i < 5; i++) {
      advanceMs(10 * 60_000);
      await t.notifier.runOnce();
    }
    expect(firedHits('/once')).toHaveLength(1);
    expect((await t.attempts(a.alertId)).map((x) => x.outcome)).toEqual(['delivered']);
  });
});

describe('one delivery, however often the queue is looked at', () => {
  it('is sent once while polls overlap it (the queue read before its attempt was recorded is stale)', async () => {
    const a = await alertOn('/overlap');
    receiver.script.set('/overlap', [{ stallMs: 100 }]);
    await t.fire(a);
    // The scheduler's poll and its evaluation pass both dispatch; here they overlap as much as they can.
    const started: Array<Promise<unknown>> = [];
    const until = Date.now() + 1_000;
    while (Date.now() < until) {
      started.push(t.notifier.dispatch());
      await new Promise((r) => setTimeout(r, 1));
    }
    await Promise.all(started);
    await t.notifier.runOnce();
    expect(firedHits('/overlap')).toHaveLength(1);
    expect((await t.attempts(a.alertId)).map((x) => x.outcome)).toEqual(['delivered']);
  });
});

describe('a queue behind the stream (a crash between an attempt and its projection)', () => {
  it('an attempt the stream records is not made again, whatever the queue still says', async () => {
    const a = await alertOn('/behind');
    await t.fire(a);
    const [queued] = await t.pending(a.alertId);
    await deliverAll(a.alertId);
    expect(firedHits('/behind')).toHaveLength(1);
    // The queue as a restart finds it when the process died after the append, before the commit.
    const key = `${queued?.notificationId}/${queued?.channelId}`;
    await t.runtime.readModels.write([{ op: 'put', collection: 'alert_deliveries', key, doc: queued as Record<string, unknown> }]);
    try {
      await t.notifier.runOnce();
      await t.notifier.runOnce();
      expect(firedHits('/behind')).toHaveLength(1);
      expect((await t.attempts(a.alertId)).map((x) => x.outcome)).toEqual(['delivered']);
    } finally {
      await t.runtime.readModels.write([{ op: 'delete', collection: 'alert_deliveries', key }]);
    }
  });
});

describe('the webhook payload', () => {
  it('is signed JSON as documented, and carries no secret: no token, no webhook secret, no password hash, no account id', async () => {
    const a = await alertOn('/payload');
    await t.fire(a);
    await deliverAll(a.alertId);
    const [hit] = firedHits('/payload');
    expect(hit?.headers['content-type']).toBe('application/json');
    expect(hit?.headers['user-agent']).toBe('chain-gateway-webhooks/1');
    // The signature's time is the wall clock's (what a receiver's tolerance checks), not the notification's.
    expect(Math.abs(Number(hit?.headers['webhook-timestamp']) - nowSeconds())).toBeLessThan(30);
    expect(verifyWebhook(a.secret ?? '', hit?.headers ?? {}, hit?.body ?? '', { nowSeconds: nowSeconds() })).toBe(true);
    expect(verifyWebhook(`whsec_${Buffer.alloc(32).toString('base64')}`, hit?.headers ?? {}, hit?.body ?? '', { nowSeconds: nowSeconds() })).toBe(false);
    const body = JSON.parse(hit?.body ?? '{}');
    expect(Object.keys(body).sort()).toEqual(['data', 'timestamp', 'type']);
    expect(Object.keys(body.data).sort()).toEqual(['alert', 'notification_id', 'state', 'summary', 'value']);
    expect(body.data.notification_id).toBe(hit?.headers['webhook-id']);
    const everything = JSON.stringify({ headers: hit?.headers, body: hit?.body });
    for (const secret of [a.token, a.secret, a.o.accessToken, a.o.accountId, a.o.email, 'scrypt', 'password']) {
      expect(everything).not.toContain(String(secret));
    }
  });
});

describe('an alert edited or deleted while its notification is pending', () => {
  it('deleted while the "fired" is being retried: the "fired" is not sent again, the "resolved" (deleted) goes out', async () => {
    const a = await alertOn('/deleted');
    receiver.script.set('/deleted', [503]);
    await t.fire(a);
    await t.notifier.runOnce();
    expect(await t.inject({ method: 'DELETE', url: `/api/v1/alerts/${a.alertId}`, headers: a.o.auth })).toMatchObject({ statusCode: 204 });
    await deliverAll(a.alertId);
    const got = receiver.hits.filter((h) => h.path === '/deleted').map((h) => JSON.parse(h.body).type);
    expect(got).toEqual(['alert.fired', 'alert.resolved']);
    const list = await t.attempts(a.alertId);
    expect(list.map((x) => `${x.kind}/${x.outcome}`).sort()).toEqual(['fired/retrying', 'fired/skipped', 'resolved/delivered']);
  });

  it('its rule changed while the "fired" is being retried: the retry describes the rule that fired, not the new one', async () => {
    const a = await alertOn('/edited');
    receiver.script.set('/edited', [503]);
    await t.fire(a);
    await t.notifier.runOnce();
    const patched = await t.inject({
      method: 'PATCH',
      url: `/api/v1/alerts/${a.alertId}`,
      headers: a.o.auth,
      payload: { name: 'renamed', type: 'response_time', condition: 'p95', threshold: 900, window_minutes: 15 },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    await deliverAll(a.alertId);
    const bodies = receiver.hits.filter((h) => h.path === '/edited').map((h) => JSON.parse(h.body));
    expect(bodies.map((b) => b.type)).toEqual(['alert.fired', 'alert.fired']);
    // Both attempts are the same notification: the same words, the same rule.
    expect(bodies[1].data).toEqual(bodies[0].data);
  });

  it('disabled while firing: the pending "fired" is dropped, the "resolved" (disabled) goes out, and nothing more while disabled', async () => {
    const a = await alertOn('/disabled');
    receiver.script.set('/disabled', [503]);
    await t.fire(a);
    await t.notifier.runOnce();
    expect((await t.inject({ method: 'PATCH', url: `/api/v1/alerts/${a.alertId}`, headers: a.o.auth, payload: { enabled: false } })).statusCode).toBe(200);
    await deliverAll(a.alertId);
    await t.recordUsage(a.o.accountId, a.tokenId, [429, 429]);
    await t.evaluator.runOnce();
    await deliverAll(a.alertId);
    const got = receiver.hits.filter((h) => h.path === '/disabled').map((h) => JSON.parse(h.body));
    expect(got.map((b) => b.type)).toEqual(['alert.fired', 'alert.resolved']);
    expect(got[1].data.summary).toMatch(/was disabled/);
  });
});

describe('a metric flapping around its threshold', () => {
  it('notifies each crossing (documented: no hysteresis), and a firing alert only once per hour', async () => {
    const a = await alertOn('/flap');
    await t.fire(a);
    await deliverAll(a.alertId);
    // Still breached for 50 minutes, evaluated every 5 (within the rule's window): no re-notification before the hour.
    for (let m = 0; m < 50; m += 5) {
      advanceMs(5 * 60_000);
      await t.recordUsage(a.o.accountId, a.tokenId, [429]);
      await t.evaluator.runOnce();
    }
    await deliverAll(a.alertId);
    expect(receiver.hits.filter((h) => h.path === '/flap')).toHaveLength(1);
    advanceMs(10 * 60_000);
    await t.recordUsage(a.o.accountId, a.tokenId, [429]);
    await t.evaluator.runOnce();
    await deliverAll(a.alertId);
    expect(receiver.hits.filter((h) => h.path === '/flap').map((h) => JSON.parse(h.body).type)).toEqual(['alert.fired', 'alert.renotified']);
    // Clear for a window, then breached again: resolved, then fired again at once (each crossing is told).
    advanceMs(6 * 60_000);
    await t.evaluator.runOnce();
    // (Delivered before the next breach here; one still queued would hold the next "fired" back until it is delivered: alerts-delivery-edges.test.ts.)
    await deliverAll(a.alertId);
    await t.recordUsage(a.o.accountId, a.tokenId, [429]);
    await t.evaluator.runOnce();
    await deliverAll(a.alertId);
    expect(receiver.hits.filter((h) => h.path === '/flap').map((h) => JSON.parse(h.body).type)).toEqual([
      'alert.fired',
      'alert.renotified',
      'alert.resolved',
      'alert.fired',
    ]);
  });
});

describe('the SSRF guard (NOTIFY_ALLOW_PRIVATE off, as in production)', () => {
  it('refuses loopback and link-local receivers by address and by name, before connecting; final, naming the host only', async () => {
    const guarded = await startTestApp({ now, env: { ALERT_EVALUATION_INTERVAL_SECONDS: '0', NOTIFY_TIMEOUT_MS: String(TIMEOUT_MS) } });
    try {
      const o = await owner(guarded.app);
      await guarded.app.inject({
        method: 'PUT',
        url: `/api/v1/admin/accounts/${o.accountId}/plan`,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        payload: { plan: 'professional' },
      });
      const port = new URL(other.url).port;
      const created = await guarded.app.inject({
        method: 'POST',
        url: '/api/v1/alerts',
        headers: o.auth,
        payload: {
          name: 'ssrf',
          type: 'rate_limiting',
          condition: 'hitting',
          threshold: 1,
          window_minutes: 5,
          channels: [
            { type: 'webhook', url: `http://127.0.0.1:${port}/ssrf` },
            { type: 'webhook', url: `http://localhost:${port}/ssrf-name` },
            { type: 'chat', url: 'http://169.254.169.254/latest/meta-data/' },
            { type: 'webhook', url: `http://[::ffff:127.0.0.1]:${port}/ssrf-mapped` },
          ],
        },
      });
      expect(created.statusCode, created.body).toBe(201);
      const alertId = created.json().id as string;
      const token = (await guarded.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x' } })).json();
      const record: UsageRecord = {
        requestId: 'ssrf-1',
        at: now().toISOString(),
        accountId: o.accountId,
        tokenId: token.id,
        chain: 'eth',
        method: 'eth_blockNumber',
        status: 429,
        rpcErrorCode: null,
        errorMessage: null,
        totalMs: 1,
        upstreamMs: 0,
        clientIp: '127.0.0.1',
        upstream: 'u1',
      };
      await appendUsage(guarded, o.accountId, [record]);
      await guarded.runtime.alerts.evaluator?.runOnce();
      await guarded.runtime.alerts.notifier?.runOnce();
      const tried = (await guarded.runtime.store.readStream(`alert-${alertId}`)).filter((e) => e.type === 'NotificationAttempted').map((e) => e.data);
      expect(tried.map((x) => [x['outcome'], x['nextAttemptAt']])).toEqual(Array(4).fill(['refused', null]));
      const byName = tried.find((x) => String(x['error']).startsWith('localhost '));
      expect(String(byName?.['error'])).not.toMatch(/127\.0\.0\.1|::1/);
      expect(tried.map((x) => String(x['error']).split(' ')[0]).sort()).toEqual(['127.0.0.1', '169.254.169.254', '::ffff:7f00:1', 'localhost']);
      expect(await guarded.runtime.alerts.queries.pendingDeliveries()).toEqual([]);
      expect(other.hits).toEqual([]);
    } finally {
      await guarded.close();
    }
  });
});

// ── The service as its own process: killed or stopped between a firing and its delivery ─────

describe('a restart between an alert firing and its delivery', () => {
  const ADMIN = 'admin-token-for-the-alert-restarts';
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  type Listed = { notification_id: string; kind: string; channel: { type: string }; outcome: string };
  const api = (base: string, auth: Record<string, string>) => async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { ...auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  };

  async function waitFor<T>(probe: () => T | Promise<T>, ok: (v: T) => boolean, ms: number, what: string): Promise<T> {
    const deadline = Date.now() + ms;
    for (;;) {
      const v = await probe();
      if (ok(v)) return v;
      if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${JSON.stringify(v)})`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /**
   * A Developer owner whose account's error-rate alert (webhook on `path`, and email) fires as
   * soon as its token, disabled, is called: the 403s are the account's errors.
   */
  async function firingAlert(base: string, path: string) {
    const signup = await fetch(`${base}/api/v1/auth/signup`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: `restart-${Math.random().toString(36).slice(2)}@example.com`, password: 'a long password here' }),
    });
    const cookie = String(signup.headers.get('set-cookie')).split(';')[0] as string;
    const accountId = (await signup.json()).id as string;
    await api(base, { authorization: `Bearer ${ADMIN}` })('PUT', `/api/v1/admin/accounts/${accountId}/plan`, { plan: 'developer' });
    const call = api(base, { cookie });
    const token = (await call('POST', '/api/v1/tokens', { name: 'backend' })).json;
    const created = await call('POST', '/api/v1/alerts', {
      name: `restart ${path}`,
      type: 'error_rate',
      threshold: 50,
      window_minutes: 5,
      min_requests: 1,
      channels: [
        { type: 'webhook', url: `${receiver.url}${path}` },
        { type: 'email', to: 'ops@example.com' },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    expect((await call('PATCH', `/api/v1/tokens/${token.id}`, { status: 'disabled' })).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${base}/local/${token.token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}',
      });
      expect(res.status).toBe(403);
    }
    return { cookie, alertId: created.json.id as string, secret: created.json.channels[0].secret as string };
  }

  function boot(dataDir: string): ServiceProcess {
    return startService({
      DATA_DIR: dataDir,
      ADMIN_TOKEN: ADMIN,
      LOCAL_DEVNET: 'off',
      LOG_LEVEL: 'warn',
      ALERT_EVALUATION_INTERVAL_SECONDS: '1',
      NOTIFY_ALLOW_PRIVATE: 'true',
      NOTIFY_TIMEOUT_MS: '3000',
      NOTIFY_RETRY_BASE_MS: '500',
    });
  }

  const outboxLines = (dataDir: string, alertId: string): Array<{ messageId: string; subject: string }> => {
    try {
      return readFileSync(join(dataDir, 'outbox.ndjson'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l))
        .filter((m) => String(m.text).includes(alertId));
    } catch {
      return [];
    }
  };

  for (const signal of ['SIGKILL', 'SIGTERM'] as const) {
    it(`${signal} while the webhook is in flight: delivered after the restart, once more at most (same webhook-id), no duplicate firing or email`, async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'gw-alert-restart-'));
      dirs.push(dataDir);
      const path = `/restart-${signal}`;
      receiver.script.set(path, [{ stallMs: 60_000 }]);
      const first = boot(dataDir);
      let second: ServiceProcess | null = null;
      try {
        const base = await first.ready;
        const a = await firingAlert(base, path);
        await waitFor(
          () => firedHits(path).length,
          (n) => n === 1,
          15_000,
          'the webhook reaching the receiver',
        );
        await waitFor(
          () => outboxLines(dataDir, a.alertId).length,
          (n) => n >= 1,
          5_000,
          'the email in the outbox',
        );
        const stoppedAt = Date.now();
        first.child.kill(signal);
        const code = await Promise.race([first.exited, new Promise((r) => setTimeout(() => r('timeout'), 20_000))]);
        if (signal === 'SIGTERM') {
          expect(code, first.output().slice(-2000)).toBe(0);
          expect(Date.now() - stoppedAt).toBeLessThan(10_000);
        }

        second = boot(dataDir);
        const base2 = await second.ready;
        const owner2 = api(base2, { cookie: a.cookie });
        await waitFor(
          () => firedHits(path).length,
          (n) => n >= 2,
          15_000,
          'the webhook delivered after the restart',
        );
        await waitFor(
          async () => (await owner2('GET', `/api/v1/alerts/${a.alertId}/notifications`)).json.notifications as Listed[],
          (list) => list.some((n) => n.channel.type === 'webhook' && n.outcome === 'delivered'),
          10_000,
          'the delivery recorded',
        );
        // A few more evaluation and poll cycles: nothing more goes out.
        await new Promise((r) => setTimeout(r, 3_000));
        const hits = firedHits(path);
        expect(hits).toHaveLength(2);
        expect(new Set(hits.map((h) => h.headers['webhook-id'])).size).toBe(1);
        for (const h of hits) expect(verifyWebhook(a.secret, h.headers, h.body, { nowSeconds: nowSeconds() })).toBe(true);
        const list = (await owner2('GET', `/api/v1/alerts/${a.alertId}/notifications`)).json.notifications as Listed[];
        expect(new Set(list.map((n) => n.notification_id)).size, JSON.stringify(list)).toBe(1);
        expect(list.filter((n) => n.channel.type === 'webhook' && n.outcome === 'delivered')).toHaveLength(1);
        expect(list.filter((n) => n.channel.type === 'email' && n.outcome === 'delivered')).toHaveLength(1);
        // At least once: an email written just before the kill, its attempt not yet recorded, is
        // written again (same Message-ID); one whose attempt was recorded is not.
        const emails = outboxLines(dataDir, a.alertId);
        expect(emails.length).toBeGreaterThanOrEqual(1);
        expect(emails.length).toBeLessThanOrEqual(2);
        expect(new Set(emails.map((m) => m.messageId)).size).toBe(1);
        expect((await owner2('GET', `/api/v1/alerts/${a.alertId}`)).json.state).toBe('firing');
      } finally {
        first.child.kill('SIGKILL');
        second?.child.kill('SIGTERM');
        await second?.exited;
      }
    }, 90_000);
  }
});
