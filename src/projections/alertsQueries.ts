import type { Alert, AlertChannel, AlertNotification } from '../api/types.js';
import type { ReadModelStore } from '../infra/readmodels/port.js';
import { type AlertDoc, type AttemptDoc, ALERT_COLLECTIONS as C, type DeliveryDoc, type PublicChannel } from './alerts.js';

/**
 * The evaluator's last look at each alert (`<alertId>` → value, breached, time). Written outside
 * the projections because it changes every cycle without being a fact worth an event; a rebuild
 * leaves it, and the next cycle rewrites it anyway.
 */
export const ALERT_OBSERVATIONS = 'alert_observations';
export interface ObservationDoc {
  [k: string]: unknown;
  value: number | null;
  breached: boolean;
  at: string;
}

function channelRecord(c: PublicChannel, disabled: boolean): AlertChannel {
  const status = disabled ? 'disabled' : 'active';
  switch (c.type) {
    case 'incident':
      return { id: c.id, type: c.type, routing_key: c.routingKey, status };
    case 'webhook':
    case 'chat':
      return { id: c.id, type: c.type, url: c.url, status };
    default:
      return { id: c.id, type: c.type, to: c.to, status };
  }
}

/**
 * Reads over the alert read models for the API, the evaluator and the notifier. Alert and
 * attempt documents become the API's records (src/api/types.ts) here; never a webhook secret.
 */
export class AlertQueries {
  constructor(private readonly rm: ReadModelStore) {}

  alertDoc(alertId: string): Promise<AlertDoc | null> {
    return this.rm.get<AlertDoc>(C.alerts, alertId);
  }

  /** The account's alert, or null when it does not exist or belongs to another account. */
  async alert(accountId: string, alertId: string): Promise<Alert | null> {
    const doc = await this.alertDoc(alertId);
    return doc && doc.accountId === accountId ? this.record(doc) : null;
  }

  /** The ids of the account's alerts, as the read model has them. */
  async alertIds(accountId: string): Promise<string[]> {
    return (await this.rm.range<{ alertId: string }>(C.byAccount, { prefix: `${accountId}/` })).map((r) => r.doc.alertId);
  }

  async alerts(accountId: string): Promise<Alert[]> {
    const refs = await this.rm.range<{ alertId: string }>(C.byAccount, { prefix: `${accountId}/` });
    const docs = await Promise.all(refs.map((r) => this.alertDoc(r.doc.alertId)));
    const records = await Promise.all(docs.filter((d): d is AlertDoc => d !== null).map((d) => this.record(d)));
    return records.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
  }

  /** Every alert document as stored, unchecked: the evaluator validates each one. */
  async allAlertDocs(): Promise<Array<{ key: string; doc: Record<string, unknown> }>> {
    return this.rm.range(C.alerts);
  }

  async record(doc: AlertDoc): Promise<Alert> {
    const [disabled, observation] = await Promise.all([
      this.rm.range<{ channelId: string }>(C.disabledChannels, { prefix: `${doc.id}/` }),
      this.rm.get<ObservationDoc>(ALERT_OBSERVATIONS, doc.id),
    ]);
    const off = new Set(disabled.map((d) => d.doc.channelId));
    const { rule } = doc;
    return {
      id: doc.id,
      name: doc.name,
      type: rule.type,
      condition: rule.condition,
      threshold: rule.threshold,
      window_minutes: rule.windowMinutes,
      token_id: rule.tokenId,
      min_requests: rule.minRequests,
      baseline_hours: rule.baselineHours,
      channels: doc.channels.map((c) => channelRecord(c, off.has(c.id))),
      enabled: doc.enabled,
      state: doc.state,
      last_value: doc.lastValue,
      fired_at: doc.firedAt,
      resolved_at: doc.resolvedAt,
      last_evaluation: observation ? { at: observation.at, value: observation.value, breached: observation.breached } : null,
      created_at: doc.createdAt,
      updated_at: doc.updatedAt,
    };
  }

  /** The alert's delivery attempts, newest first. */
  async notifications(alertId: string, limit = 50): Promise<AlertNotification[]> {
    const rows = await this.rm.range<AttemptDoc>(C.attempts, { prefix: `${alertId}/`, reverse: true, limit });
    return rows.map(({ doc: d }) => ({
      notification_id: d.notificationId,
      kind: d.kind,
      channel: { id: d.channelId, type: d.channel },
      attempt: d.attempt,
      outcome: d.outcome,
      status: d.status,
      error: d.error,
      next_attempt_at: d.nextAttemptAt,
      at: d.at,
    }));
  }

  /** Deliveries not finished, due or not (the queue stays small: only unfinished ones are in it). */
  async pendingDeliveries(): Promise<DeliveryDoc[]> {
    return (await this.rm.range<DeliveryDoc>(C.deliveries)).map((r) => r.doc);
  }

  /**
   * Takes a delivery whose alert has no stream off the queue. Written outside the projection:
   * a rebuild cannot bring it back, since the events it came from are not in the log.
   */
  async dropDelivery(notificationId: string, channelId: string): Promise<void> {
    await this.rm.write([{ op: 'delete', collection: C.deliveries, key: `${notificationId}/${channelId}` }]);
  }

  async recordObservations(observations: Array<{ alertId: string } & ObservationDoc>): Promise<void> {
    if (observations.length === 0) return;
    await this.rm.write(observations.map(({ alertId, ...doc }) => ({ op: 'put' as const, collection: ALERT_OBSERVATIONS, key: alertId, doc })));
  }
}
