import type { AlertHealth } from '../domain/alert.js';
import { type AlertChannel, AlertEvent, type AlertRule, decodeAlertEvent, type NotificationKind } from '../domain/alertEvents.js';
import type { ChannelType } from '../domain/plans.js';
import type { StoredEvent } from '../infra/eventstore/port.js';
import type { ReadModelWrite } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';

export const ALERT_COLLECTIONS = {
  /** `<alertId>`: the rule and its state; the evaluator scans it all. */
  alerts: 'alerts',
  /** `<accountId>/<alertId>`: an owner's alerts. */
  byAccount: 'alerts_by_account',
  /** `<alertId>/<channelId>`: channels switched off after a 410 Gone. */
  disabledChannels: 'alert_channels_disabled',
  /** `<notificationId>/<channelId>`: deliveries not finished yet, the notifier's queue. */
  deliveries: 'alert_deliveries',
  /** `<alertId>/<at>/<notificationId>/<channelId>/<attempt>`: every delivery attempt, newest last. */
  attempts: 'alert_notifications',
} as const;

/** A channel as the read side keeps it: where it delivers, never its secret. */
export type PublicChannel =
  | { id: string; type: 'email' | 'sms'; to: string }
  | { id: string; type: 'webhook' | 'chat'; url: string }
  | { id: string; type: 'incident'; routingKey: string };

export interface AlertDoc {
  [k: string]: unknown;
  id: string;
  accountId: string;
  name: string;
  rule: AlertRule;
  channels: PublicChannel[];
  enabled: boolean;
  state: AlertHealth;
  firedAt: string | null;
  resolvedAt: string | null;
  lastNotifiedAt: string | null;
  /** The measured value of the last transition (fired, re-notified, resolved). */
  lastValue: number | null;
  createdAt: string;
  updatedAt: string;
}

export interface DeliveryDoc {
  [k: string]: unknown;
  notificationId: string;
  alertId: string;
  accountId: string;
  channelId: string;
  channel: ChannelType;
  kind: NotificationKind;
  value: number | null;
  threshold: number;
  summary: string;
  triggeredAt: string;
  /** The notification's revision on the alert's stream: orders an alert's notifications (absent from entries queued before). */
  revision?: number;
  /** Attempts made so far. */
  attempts: number;
  nextAttemptAt: string;
}

export interface AttemptDoc {
  [k: string]: unknown;
  notificationId: string;
  kind: NotificationKind;
  channelId: string;
  channel: ChannelType;
  attempt: number;
  outcome: string;
  status: number | null;
  error: string | null;
  nextAttemptAt: string | null;
  at: string;
}

const C = ALERT_COLLECTIONS;

export function publicChannel(c: AlertChannel): PublicChannel {
  switch (c.type) {
    case 'email':
    case 'sms':
      return { id: c.id, type: c.type, to: c.to };
    case 'webhook':
    case 'chat':
      return { id: c.id, type: c.type, url: c.url };
    case 'incident':
      return { id: c.id, type: c.type, routingKey: c.routingKey };
  }
}

const channelStates = (alertId: string, channels: AlertChannel[], at: string): ReadModelWrite[] =>
  channels.map(
    (c): ReadModelWrite =>
      c.active
        ? { op: 'delete', collection: C.disabledChannels, key: `${alertId}/${c.id}` }
        : { op: 'put', collection: C.disabledChannels, key: `${alertId}/${c.id}`, doc: { channelId: c.id, at } },
  );
const mergeAlert = (alertId: string, fields: Partial<AlertDoc>): ReadModelWrite => ({ op: 'merge', collection: C.alerts, key: alertId, fields });

/** Alert rules and states, the notifier's queue of deliveries, and the log of delivery attempts. */
export const alertsProjection: Projection = {
  name: 'alerts',
  collections: Object.values(C),
  eventTypes: new Set(AlertEvent.options.map((o) => o.shape.type.value)),

  project(stored: StoredEvent): ReadModelWrite[] {
    if (!stored.streamId.startsWith('alert-')) return [];
    const event = decodeAlertEvent(stored);
    if (!event) return [];
    switch (event.type) {
      case 'AlertCreated': {
        const { alertId, accountId, name, rule, channels, enabled, at } = event.data;
        const doc: AlertDoc = {
          id: alertId,
          accountId,
          name,
          rule,
          channels: channels.map(publicChannel),
          enabled,
          state: 'ok',
          firedAt: null,
          resolvedAt: null,
          lastNotifiedAt: null,
          lastValue: null,
          createdAt: at,
          updatedAt: at,
        };
        return [
          { op: 'put', collection: C.alerts, key: alertId, doc },
          { op: 'put', collection: C.byAccount, key: `${accountId}/${alertId}`, doc: { alertId } },
          ...channelStates(alertId, channels, at),
        ];
      }
      case 'AlertUpdated': {
        const { alertId, name, rule, channels, enabled, at } = event.data;
        return [mergeAlert(alertId, { name, rule, channels: channels.map(publicChannel), enabled, updatedAt: at }), ...channelStates(alertId, channels, at)];
      }
      case 'AlertDeleted': {
        const { alertId, accountId } = event.data;
        // Its attempts stay (an audit trail); its pending deliveries finish (a resolve for a firing alert).
        return [
          { op: 'delete', collection: C.alerts, key: alertId },
          { op: 'delete', collection: C.byAccount, key: `${accountId}/${alertId}` },
        ];
      }
      case 'AlertFired':
      case 'AlertRenotified':
      case 'AlertResolved': {
        const { alertId, accountId, notificationId, value, threshold, summary, deliverTo, at } = event.data;
        const kind: NotificationKind = event.type === 'AlertFired' ? 'fired' : event.type === 'AlertRenotified' ? 'renotified' : 'resolved';
        const state =
          event.type === 'AlertFired'
            ? { state: 'firing' as const, firedAt: at, lastNotifiedAt: at }
            : event.type === 'AlertRenotified'
              ? { lastNotifiedAt: at }
              : { state: 'resolved' as const, resolvedAt: at };
        return [
          mergeAlert(alertId, { ...state, lastValue: value }),
          ...deliverTo.map((channel): ReadModelWrite => {
            const doc: DeliveryDoc = {
              notificationId,
              alertId,
              accountId,
              channelId: channel.id,
              channel: channel.type,
              kind,
              value,
              threshold,
              summary,
              triggeredAt: at,
              revision: stored.revision,
              attempts: 0,
              nextAttemptAt: at,
            };
            return { op: 'put', collection: C.deliveries, key: `${notificationId}/${channel.id}`, doc };
          }),
        ];
      }
      case 'AlertReturnedToOk':
        return [mergeAlert(event.data.alertId, { state: 'ok' })];
      case 'NotificationAttempted': {
        const { alertId, notificationId, kind, channelId, channel, attempt, outcome, status, error, nextAttemptAt, at } = event.data;
        const doc: AttemptDoc = { notificationId, kind, channelId, channel, attempt, outcome, status, error, nextAttemptAt, at };
        const deliveryKey = `${notificationId}/${channelId}`;
        return [
          { op: 'put', collection: C.attempts, key: `${alertId}/${at}/${notificationId}/${channelId}/${String(attempt).padStart(3, '0')}`, doc },
          nextAttemptAt === null
            ? { op: 'delete', collection: C.deliveries, key: deliveryKey }
            : { op: 'merge', collection: C.deliveries, key: deliveryKey, fields: { attempts: attempt, nextAttemptAt } },
        ];
      }
      case 'AlertChannelDisabled': {
        const { alertId, channelId, at } = event.data;
        return [{ op: 'put', collection: C.disabledChannels, key: `${alertId}/${channelId}`, doc: { channelId, at } }];
      }
    }
  },
};
