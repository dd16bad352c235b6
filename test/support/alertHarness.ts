import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import type { AlertEvaluator } from '../../src/alerts/evaluator.js';
import type { Notifier } from '../../src/alerts/notifier.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import type { AttemptDoc, DeliveryDoc } from '../../src/projections/alerts.js';
import { usageEventId } from './oneCallUsage.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from './testApp.js';

/**
 * The service in process for the alert tests (alerts-flow, alerts-delivery, alerts-delivery-edges):
 * evaluation by hand (no interval) on the test's clock, private webhook receivers allowed, retries
 * from a 1 s base, 4 attempts; usage written as events and projected before the test reads on;
 * alerts made the way an owner makes them. Each test keeps its own clock and its own way of
 * draining the delivery queue.
 */

export const ALERT_RETRY_BASE_MS = 1000;
export const ALERT_MAX_ATTEMPTS = 4;

/** rate_limiting/hitting, threshold 1 over 5 minutes: one refused call fires it. */
export const HITTING_ONCE = { type: 'rate_limiting', condition: 'hitting', threshold: 1, window_minutes: 5 } as const;

/** One `NotificationAttempted`, as the alert's stream records it. */
export type Attempt = AttemptDoc;

export type Owner = Awaited<ReturnType<typeof owner>>;

/** The API's answer to creating an alert, as far as the tests read it. */
export interface CreatedAlert {
  id: string;
  channels: Array<{ id: string; secret?: string }>;
}

/** A call as the gateway meters it: its status, or its status and what differs from a 20 ms eth_blockNumber without error. */
export type MeteredCall = number | (Partial<UsageRecord> & { status: number });

/** One email channel, for rules whose notifications the test does not read. */
export const EMAIL_CHANNEL = [{ type: 'email', to: 'ops@example.com' }];
/** `n` calls answered with `status`. */
export const callsWith = (n: number, status: number): MeteredCall[] => Array.from({ length: n }, () => status);

/** Waits until the projections have caught up with everything appended so far. */
export async function settle(t: TestApp): Promise<void> {
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}

/** Appends `records` as one-call usage events on their account's stream, then settles. */
export async function appendUsage(t: TestApp, accountId: string, records: UsageRecord[]): Promise<void> {
  await t.runtime.store.append(
    usageStream(accountId),
    records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: r })),
    'any',
  );
  await settle(t);
}

export interface AlertHarness extends TestApp {
  evaluator: AlertEvaluator;
  notifier: Notifier;
  inject(options: InjectOptions): Promise<LightMyRequestResponse>;
  settle(): Promise<void>;
  /** Meters `calls` for the token now (the injected clock), then settles. */
  recordUsage(accountId: string, tokenId: string, calls: MeteredCall[]): Promise<void>;
  /** The alert's stream, type and data of each event. */
  alertEvents(alertId: string): Promise<Array<{ type: string; data: Record<string, unknown> }>>;
  /** The alert's attempts on one kind of channel, oldest first. */
  attempts(alertId: string, channel?: string): Promise<Attempt[]>;
  /** The alert's deliveries still queued. */
  pending(alertId: string): Promise<DeliveryDoc[]>;
  /** A Developer owner with a token ("backend") and an alert made of `payload`; fails the test unless it is created. */
  developerWithAlert(payload: Record<string, unknown>): Promise<{ o: Owner; tokenId: string; token: string; alert: CreatedAlert }>;
  /** developerWithAlert with a HITTING_ONCE rule named `name` and one webhook to `url`. */
  webhookAlert(name: string, url: string): Promise<{ o: Owner; tokenId: string; token: string; alertId: string; channelId: string; secret: string }>;
  /** Fires the alert: one refused call, one evaluation that must fire it. */
  fire(a: { o: { accountId: string }; tokenId: string; alertId: string }): Promise<void>;
  /** One evaluation round: the events it recorded for `alertId`. */
  evaluate(alertId: string): Promise<string[]>;
  /** `GET /api/v1/alerts/:id` as `auth` sees it, once the projections have settled. */
  alertView(auth: Record<string, string>, alertId: string): Promise<LightMyRequestResponse>;
}

/**
 * Starts the service on `now` with the alert settings above (`env` adds to them or overrides them);
 * usage request ids are `<requestIdPrefix>-<n>`.
 */
export async function startAlertHarness(options: { now: () => Date; env?: Record<string, string>; requestIdPrefix: string }): Promise<AlertHarness> {
  const t = await startTestApp({
    now: options.now,
    env: {
      ALERT_EVALUATION_INTERVAL_SECONDS: '0',
      NOTIFY_ALLOW_PRIVATE: 'true',
      NOTIFY_RETRY_BASE_MS: String(ALERT_RETRY_BASE_MS),
      NOTIFY_MAX_ATTEMPTS: String(ALERT_MAX_ATTEMPTS),
      ...options.env,
    },
  });
  const evaluator = t.runtime.alerts.evaluator as AlertEvaluator;
  const notifier = t.runtime.alerts.notifier as Notifier;
  const inject = (injectOptions: InjectOptions) => t.app.inject(injectOptions);
  let seq = 0;

  const recordUsage = (accountId: string, tokenId: string, calls: MeteredCall[]) =>
    appendUsage(
      t,
      accountId,
      calls.map((call) => {
        const { status, ...rest } = typeof call === 'number' ? { status: call } : call;
        return {
          requestId: `${options.requestIdPrefix}-${++seq}`,
          at: options.now().toISOString(),
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
          ...rest,
        };
      }),
    );

  const alertEvents = async (alertId: string) => (await t.runtime.store.readStream(`alert-${alertId}`)).map((e) => ({ type: e.type, data: e.data }));

  const developerWithAlert = async (payload: Record<string, unknown>) => {
    const o = await owner(t.app);
    await inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'developer' },
    });
    const token = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'backend' } })).json();
    const res = await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload });
    expect(res.statusCode, res.body).toBe(201);
    return { o, tokenId: token.id as string, token: token.token as string, alert: res.json() as CreatedAlert };
  };

  return {
    ...t,
    evaluator,
    notifier,
    inject,
    settle: () => settle(t),
    recordUsage,
    alertEvents,
    async attempts(alertId, channel = 'webhook') {
      return (await alertEvents(alertId))
        .filter((e) => e.type === 'NotificationAttempted' && e.data['channel'] === channel)
        .map((e) => e.data as unknown as Attempt);
    },
    async pending(alertId) {
      return (await t.runtime.alerts.queries.pendingDeliveries()).filter((d) => d.alertId === alertId);
    },
    developerWithAlert,
    async webhookAlert(name, url) {
      const { o, tokenId, token, alert } = await developerWithAlert({ name, ...HITTING_ONCE, channels: [{ type: 'webhook', url }] });
      const [channel] = alert.channels;
      return { o, tokenId, token, alertId: alert.id, channelId: channel?.id as string, secret: channel?.secret as string };
    },
    async fire(a) {
      await recordUsage(a.o.accountId, a.tokenId, [429]);
      expect((await evaluator.runOnce()).transitions).toContainEqual({ alertId: a.alertId, event: 'AlertFired' });
    },
    async evaluate(alertId) {
      return (await evaluator.runOnce()).transitions.filter((x) => x.alertId === alertId).map((x) => x.event);
    },
    async alertView(auth, alertId) {
      await settle(t);
      return inject({ method: 'GET', url: `/api/v1/alerts/${alertId}`, headers: auth });
    },
  };
}

// ── A webhook receiver: what it got, and what it answers, per path ──────────────────────────

export interface Hit {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/** One answer: a status, a redirect, a stall longer than the notifier waits, or a dropped connection. */
export type Act = number | { redirect: string; status?: number } | { stallMs: number } | 'hangup';

export interface Receiver {
  url: string;
  hits: Hit[];
  /** Answers per path, in order; 200 once they run out. */
  script: Map<string, Act[]>;
  close(): Promise<void>;
}

/** A webhook receiver on a loopback port that answers each path as its script says. */
export async function startReceiver(): Promise<Receiver> {
  const hits: Hit[] = [];
  const script = new Map<string, Act[]>();
  const open = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    open.add(res);
    res.on('close', () => open.delete(res));
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '/';
      hits.push({ path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      const act = script.get(path)?.shift() ?? 200;
      if (act === 'hangup') {
        req.socket.destroy();
        return;
      }
      if (typeof act === 'number') {
        res.writeHead(act, { 'content-type': 'text/plain' }).end(act >= 400 ? `status ${act}` : 'ok');
        return;
      }
      if ('redirect' in act) {
        res.writeHead(act.status ?? 302, { location: act.redirect }).end();
        return;
      }
      const timer = setTimeout(() => res.writeHead(200).end('late'), act.stallMs);
      res.once('close', () => clearTimeout(timer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits,
    script,
    async close() {
      for (const res of open) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
