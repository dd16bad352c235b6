import { z } from 'zod';
import { CHANNEL_TYPES } from './plans.js';

/**
 * Events of the alert stream `alert-<id>`: the rule's life (created, updated, deleted), its
 * evaluation (fired, re-notified, resolved, back to ok) and every delivery attempt of its
 * notifications. Same shape as src/domain/events.ts: a type name, a schema version, data.
 */
const Iso = z.string().datetime();
const Id = z.string().min(1).max(64);

const event = <T extends string, S extends z.ZodRawShape>(type: T, shape: S) =>
  z.object({ type: z.literal(type), version: z.literal(1), data: z.object({ ...shape, at: Iso }) });

export const ALERT_TYPES = ['usage_threshold', 'error_rate', 'response_time', 'rate_limiting', 'token_usage'] as const;
export type AlertType = (typeof ALERT_TYPES)[number];

/** The rule, flat: fields that do not apply to a type are null (see src/domain/alert.ts). */
export const AlertRule = z.object({
  type: z.enum(ALERT_TYPES),
  condition: z.string().nullable(),
  threshold: z.number(),
  windowMinutes: z.number().int().nullable(),
  tokenId: Id.nullable(),
  minRequests: z.number().int().nullable(),
  baselineHours: z.number().int().nullable(),
});
export type AlertRule = z.infer<typeof AlertRule>;

/** A notification channel as stored: `active` turns false when the endpoint answered 410 Gone. */
const channel = <T extends (typeof CHANNEL_TYPES)[number], S extends z.ZodRawShape>(type: T, shape: S) =>
  z.object({ type: z.literal(type), id: Id, active: z.boolean(), ...shape });
export const AlertChannel = z.discriminatedUnion('type', [
  channel('email', { to: z.string() }),
  /** The `whsec_` secret signs every delivery; it lives only in the alert's events. */
  channel('webhook', { url: z.string(), secret: z.string() }),
  channel('chat', { url: z.string() }),
  channel('incident', { routingKey: z.string() }),
  channel('sms', { to: z.string() }),
]);
export type AlertChannel = z.infer<typeof AlertChannel>;

export const NOTIFICATION_KINDS = ['fired', 'renotified', 'resolved'] as const;
export type NotificationKind = (typeof NOTIFICATION_KINDS)[number];
export const DELIVERY_OUTCOMES = ['delivered', 'retrying', 'failed', 'gone', 'refused', 'skipped'] as const;
export type DeliveryOutcome = (typeof DELIVERY_OUTCOMES)[number];

const Definition = { name: z.string(), rule: AlertRule, channels: z.array(AlertChannel), enabled: z.boolean() };
/** What a notification says and where it goes: the channels that were active and on the plan. */
const Notice = {
  alertId: Id,
  accountId: Id,
  notificationId: Id,
  value: z.number().nullable(),
  threshold: z.number(),
  summary: z.string(),
  deliverTo: z.array(z.object({ id: Id, type: z.enum(CHANNEL_TYPES) })),
};

export const AlertCreated = event('AlertCreated', { alertId: Id, accountId: Id, ...Definition });
/** The whole definition after the change (rules are small; one event per edit keeps replay simple). */
export const AlertUpdated = event('AlertUpdated', { alertId: Id, ...Definition });
export const AlertDeleted = event('AlertDeleted', { alertId: Id, accountId: Id });
export const AlertFired = event('AlertFired', Notice);
/** Still firing after the re-notification interval: notified again. */
export const AlertRenotified = event('AlertRenotified', Notice);
export const AlertResolved = event('AlertResolved', { ...Notice, reason: z.enum(['recovered', 'disabled', 'deleted', 'token_revoked', 'token_expired']) });
/** A resolved alert stayed clear for a while: its state is ok again. */
export const AlertReturnedToOk = event('AlertReturnedToOk', { alertId: Id });
/** One delivery attempt of one notification to one channel. `nextAttemptAt` is set when it will be retried. */
export const NotificationAttempted = event('NotificationAttempted', {
  alertId: Id,
  accountId: Id,
  notificationId: Id,
  kind: z.enum(NOTIFICATION_KINDS),
  channelId: Id,
  channel: z.enum(CHANNEL_TYPES),
  attempt: z.number().int().positive(),
  outcome: z.enum(DELIVERY_OUTCOMES),
  status: z.number().int().nullable(),
  error: z.string().nullable(),
  nextAttemptAt: Iso.nullable(),
});
/** The endpoint answered 410 Gone: no more deliveries until the owner gives it again. */
export const AlertChannelDisabled = event('AlertChannelDisabled', { alertId: Id, channelId: Id, channel: z.enum(CHANNEL_TYPES), reason: z.string() });

export const AlertEvent = z.discriminatedUnion('type', [
  AlertCreated,
  AlertUpdated,
  AlertDeleted,
  AlertFired,
  AlertRenotified,
  AlertResolved,
  AlertReturnedToOk,
  NotificationAttempted,
  AlertChannelDisabled,
]);
export type AlertEvent = z.infer<typeof AlertEvent>;
export type AlertNoticeEvent = Extract<AlertEvent, { type: 'AlertFired' | 'AlertRenotified' | 'AlertResolved' }>;

export const ALERT_STREAM = (alertId: string): string => `alert-${alertId}`;

/** Null for anything that is not an alert event (or an alert event this version cannot read). */
export function decodeAlertEvent(stored: { type: string; data: Record<string, unknown>; metadata: Record<string, unknown> }): AlertEvent | null {
  const parsed = AlertEvent.safeParse({ type: stored.type, version: stored.metadata['version'] ?? 1, data: stored.data });
  return parsed.success ? parsed.data : null;
}
