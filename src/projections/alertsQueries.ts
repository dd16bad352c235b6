import type { ReadModelStore } from '../infra/readmodels/port.js';
import { ALERT_COLLECTIONS as C, type AlertDoc, type AttemptDoc, type DeliveryDoc, type PublicChannel } from './alerts.js';

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

export type ChannelRecord =
  | { id: string; type: 'email' | 'sms'; to: string; status: 'active' | 'disabled' }
  | { id: string; type: 'webhook' | 'chat'; url: string; status: 'active' | 'disabled' }
  | { id: string; type: 'incident'; routing_key: string; status: 'active' | 'disabled' };

/** An alert as the API shows it (DESIGN §4, snake_case); never a webhook secret. */
export interface AlertRecord {
  id: string;
  name: string;
  type: AlertDoc['rule']['type'];
  condition: string | null;
  threshold: number;
  window_minutes: number | null;
  token_id: string | null;
  min_requests: number | null;
  baseline_hours: number | null;
  channels: ChannelRecord[];
  enabled: boolean;
  state: AlertDoc['state'];
  last_value: number | null;
  fired_at: string | null;
  resolved_at: string | null;
  last_evaluation: { at: string; value: number | null; breached: boolean } | null;
  created_at: string;
  updated_at: string;
}

export interface NotificationRecord {
  notification_id: string;
  kind: AttemptDoc['kind'];
  channel: { id: string; type: AttemptDoc['channel'] };
  attempt: number;
  outcome: string;
  status: number | null;
  error: string | null;
  next_attempt_at: string | null;
  at: string;
}

function channelRecord(c: PublicChannel, disabled: boolean): ChannelRecord {
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

/** Reads over the alert read models for the API, the evaluator and the notifier. */
export class AlertQueries {
  constructor(private readonly rm: ReadModelStore) {}

  alertDoc(alertId: string): Promise<AlertDoc | null> {
    return this.rm.get<AlertDoc>(C.alerts, alertId);
  }

  /** The account's alert, or null when it does not exist or belongs to another account. */
  async alert(accountId: string, alertId: string): Promise<AlertRecord | null> {
    const doc = await this.alertDoc(alertId);
    return doc && doc.accountId === accountId ? this.record(doc) : null;
  }

  async alerts(accountId: string): Promise<AlertRecord[]> {
    const refs = await this.rm.range<{ alertId: string }>(C.byAccount, { prefix: `${accountId}/` });
    const docs = await Promise.all(refs.map((r) => this.alertDoc(r.doc.alertId)));
    const records = await Promise.all(docs.filter((d): d is AlertDoc => d !== null).map((d) => this.record(d)));
    return records.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
  }

  /** Every alert document as stored, unchecked: the evaluator validates each one. */
  async allAlertDocs(): Promise<Array<{ key: string; doc: Record<string, unknown> }>> {
    return this.rm.range(C.alerts);
  }

  async record(doc: AlertDoc): Promise<AlertRecord> {
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
  async notifications(alertId: string, limit = 50): Promise<NotificationRecord[]> {
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

  /** Deliveries whose next attempt is due (the queue stays small: only unfinished ones are in it). */
  async dueDeliveries(nowIso: string): Promise<DeliveryDoc[]> {
    const rows = await this.rm.range<DeliveryDoc>(C.deliveries);
    return rows.map((r) => r.doc).filter((d) => d.nextAttemptAt <= nowIso);
  }

  async pendingDeliveries(): Promise<DeliveryDoc[]> {
    return (await this.rm.range<DeliveryDoc>(C.deliveries)).map((r) => r.doc);
  }

  async recordObservations(observations: Array<{ alertId: string } & ObservationDoc>): Promise<void> {
    if (observations.length === 0) return;
    await this.rm.write(observations.map(({ alertId, ...doc }) => ({ op: 'put' as const, collection: ALERT_OBSERVATIONS, key: alertId, doc })));
  }
}
