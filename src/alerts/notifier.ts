import type { AlertCommands } from '../commands/alertCommands.js';
import type { LiveAlert } from '../domain/alert.js';
import type { AlertChannel } from '../domain/alertEvents.js';
import type { PlanCatalog } from '../domain/plans.js';
import { cutText, storableText } from '../domain/storableText.js';
import type { Position } from '../infra/eventstore/port.js';
import type { AlertNotification, DeliveryResult, Senders } from '../infra/notify/port.js';
import type { DeliveryDoc } from '../projections/alerts.js';
import type { AlertQueries } from '../projections/alertsQueries.js';
import type { Queries } from '../projections/queries.js';
import { type RetryPolicy, retryDelayMs } from './backoff.js';

export interface NotifierDeps {
  alerts: AlertQueries;
  queries: Queries;
  plans: PlanCatalog;
  commands: AlertCommands;
  senders: Senders;
  /** Resolves once the read models include `position` (so a recorded attempt is off the queue). */
  waitFor(position: Position | null): Promise<void>;
  retry: RetryPolicy;
  now: () => Date;
  random?: () => number;
  onError?: (error: unknown) => void;
}

function sendVia(senders: Senders, channel: AlertChannel, n: AlertNotification): Promise<DeliveryResult> {
  switch (channel.type) {
    case 'email':
      return senders.email.send(channel, n);
    case 'webhook':
      return senders.webhook.send(channel, n);
    case 'chat':
      return senders.chat.send(channel, n);
    case 'incident':
      return senders.incident.send(channel, n);
    case 'sms':
      return senders.sms.send(channel, n);
  }
}

const skipped = (error: string): DeliveryResult => ({ outcome: 'skipped', error });

/**
 * Why a delivery still queued (being retried) is out of date, if it is: a late "fired" must
 * never reach a receiver after its "resolved" (nor after a later "fired"). A "resolved" is never
 * out of date: a receiver that tracks the incident must see it close before it opens again, so a
 * later notification to the same channel waits for it instead (`dispatch`).
 */
function supersededBy(alert: LiveAlert, d: DeliveryDoc): string | null {
  if (d.kind === 'resolved') return null;
  if (alert.status === 'deleted' || alert.state !== 'firing') return 'Superseded: the alert is no longer firing.';
  return (alert.lastNotifiedAt ?? '') > d.triggeredAt ? 'Superseded by a later notification.' : null;
}

/** The order of an alert's notifications: its stream's order (their times, for entries queued before it was kept). */
const before = (a: DeliveryDoc, b: DeliveryDoc): boolean =>
  a.revision !== undefined && b.revision !== undefined ? a.revision < b.revision : a.triggeredAt < b.triggeredAt;

/** Deliveries that failed before an attempt could be recorded (the store unreachable…): retried on the notification backoff. */
interface Stalled {
  failures: number;
  untilMs: number;
}

/**
 * Delivers what the evaluator decided. Its queue is the `alert_deliveries` read model (one entry
 * per notification and channel, written by the alerts projection from AlertFired, -Renotified
 * and -Resolved), so nothing is lost across restarts. Each attempt is recorded on the alert's
 * stream as NotificationAttempted (with the time of the next one when it will be retried);
 * deliveries run concurrently, so one slow endpoint holds up no other.
 */
export class Notifier {
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly stalled = new Map<string, Stalled>();

  constructor(private readonly deps: NotifierDeps) {}

  /**
   * Starts every due delivery not already under way, without waiting for them. A notification
   * waits while a "resolved" of the same alert queued before it is still pending for the same
   * channel (being retried), so a receiver gets "resolved" before the "fired" that follows it.
   */
  async dispatch(): Promise<Array<Promise<void>>> {
    const nowMs = this.deps.now().getTime();
    const nowIso = new Date(nowMs).toISOString();
    const pending = await this.deps.alerts.pendingDeliveries();
    const resolves = pending.filter((r) => r.kind === 'resolved');
    const started: Array<Promise<void>> = [];
    for (const d of pending) {
      if (d.nextAttemptAt > nowIso) continue;
      if (resolves.some((r) => r.alertId === d.alertId && r.channelId === d.channelId && before(r, d))) continue;
      const key = `${d.notificationId}/${d.channelId}`;
      if (this.inFlight.has(key) || (this.stalled.get(key)?.untilMs ?? 0) > nowMs) continue;
      const run = this.deliver(d)
        .then(
          () => void this.stalled.delete(key),
          (e) => this.stall(key, d, e),
        )
        .finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, run);
      started.push(run);
    }
    return started;
  }

  /**
   * A delivery that failed before its attempt was recorded (the stream or the read models
   * unreachable, the record refused) is not due again at the next poll: it waits the notification
   * backoff (NOTIFY_RETRY_BASE_MS × 3ⁿ, at most an hour), one log line per try, and is never
   * given up (the notification is still owed; nothing recorded that it was tried).
   */
  private stall(key: string, d: DeliveryDoc, error: unknown): void {
    const failures = (this.stalled.get(key)?.failures ?? 0) + 1;
    const delayMs = retryDelayMs(this.deps.retry, failures, this.deps.random);
    this.stalled.set(key, { failures, untilMs: this.deps.now().getTime() + delayMs });
    const why = error instanceof Error ? error.message : String(error);
    this.deps.onError?.(
      new Error(`delivery ${key} of alert ${d.alertId} failed before an attempt was recorded (${why}); tried again in ${Math.ceil(delayMs / 1000)} s`),
    );
  }

  /** One pass: starts the due deliveries and waits for them. Returns how many it started. */
  async runOnce(): Promise<number> {
    const started = await this.dispatch();
    // Also those a background poll started: when this resolves, nothing due is under way.
    await Promise.allSettled([...this.inFlight.values()]);
    return started.length;
  }

  /** Waits (bounded) for deliveries under way; what is left is retried after a restart. */
  async stop(timeoutMs = 2000): Promise<void> {
    await Promise.race([Promise.allSettled([...this.inFlight.values()]), new Promise((r) => setTimeout(r, timeoutMs).unref())]);
  }

  private async deliver(d: DeliveryDoc): Promise<void> {
    const attempt = d.attempts + 1;
    const { alert, notified, attemptsMade } = await this.deps.commands.forDelivery(d.alertId, d.notificationId, d.channelId);
    if (alert.status === 'none') {
      // Queued from events this log does not have (or cannot read): no attempt can ever be
      // recorded, so none is made; it leaves the queue with one line instead of being tried for ever.
      await this.deps.alerts.dropDelivery(d.notificationId, d.channelId);
      this.deps.onError?.(new Error(`delivery ${d.notificationId}/${d.channelId} dropped: alert ${d.alertId} has no stream in the event store`));
      return;
    }
    // The queue is behind the stream (a crash before the projection of the last attempt, a
    // restart polling before catch-up): that attempt was made; the projection will move the entry on.
    if (attemptsMade >= attempt) return;
    const result = await this.attempt(alert, notified ?? alert, d);
    const retry = result.outcome === 'failed' && result.retryable && attempt < this.deps.retry.maxAttempts;
    const at = this.deps.now().getTime();
    const position = await this.deps.commands.recordAttempt(d.alertId, {
      notificationId: d.notificationId,
      kind: d.kind,
      channelId: d.channelId,
      channel: d.channel,
      attempt,
      outcome: retry ? 'retrying' : result.outcome,
      status: 'status' in result ? result.status : null,
      // A receiver's answer is in it (`HTTP 400: <body>`): made text every store can hold, as usage text is.
      error: 'error' in result ? storableText(cutText(result.error, 500)) : null,
      nextAttemptAt: retry ? new Date(at + retryDelayMs(this.deps.retry, attempt, this.deps.random)).toISOString() : null,
    });
    await this.deps.waitFor(position);
  }

  /** `alert` as it is now decides whether and where; `notified` (as it was when the notification was decided) is what it says. */
  private async attempt(alert: LiveAlert, notified: LiveAlert, d: DeliveryDoc): Promise<DeliveryResult> {
    const superseded = supersededBy(alert, d);
    if (superseded) return skipped(superseded);
    const channel = alert.channels.find((c) => c.id === d.channelId);
    if (!channel) return skipped('The channel was removed from the alert.');
    if (!channel.active) return skipped('The endpoint was switched off after it answered 410 Gone.');
    const account = await this.deps.queries.account(d.accountId);
    const plan = account ? this.deps.plans[account.plan] : undefined;
    if (!plan?.channels.includes(channel.type)) return skipped(`The ${plan?.name ?? 'account'} plan does not include the ${channel.type} channel.`);
    const notification: AlertNotification = {
      id: d.notificationId,
      kind: d.kind,
      at: d.triggeredAt,
      accountId: d.accountId,
      alert: {
        id: alert.alertId,
        name: notified.name,
        type: notified.rule.type,
        condition: notified.rule.condition,
        threshold: d.threshold,
        windowMinutes: notified.rule.windowMinutes,
        tokenId: notified.rule.tokenId,
      },
      value: d.value,
      summary: d.summary,
    };
    try {
      return await sendVia(this.deps.senders, channel, notification);
    } catch (e) {
      return { outcome: 'failed', retryable: true, status: null, error: String((e as Error).message ?? e) };
    }
  }
}
