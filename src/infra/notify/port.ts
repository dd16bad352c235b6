import type { AlertChannel, AlertType, NotificationKind } from '../../domain/alertEvents.js';

/** One notification about one alert, as every channel renders it. */
export interface AlertNotification {
  /** Stable across retries: the Standard Webhooks `webhook-id`, the email's Message-ID seed. */
  id: string;
  kind: NotificationKind;
  /** When the alert fired, was re-notified or resolved (ISO 8601 UTC). */
  at: string;
  accountId: string;
  alert: {
    id: string;
    name: string;
    type: AlertType;
    condition: string | null;
    threshold: number;
    windowMinutes: number | null;
    tokenId: string | null;
  };
  value: number | null;
  summary: string;
}

/**
 * What one attempt came to. `retryable` failures are tried again later with backoff; `gone`
 * (410) switches the endpoint off; `refused` is an address the SSRF rule does not allow.
 */
export type DeliveryResult =
  | { outcome: 'delivered'; status: number | null }
  | { outcome: 'failed'; retryable: boolean; status: number | null; error: string }
  | { outcome: 'gone'; status: number; error: string }
  | { outcome: 'refused'; error: string }
  | { outcome: 'skipped'; error: string };

/** A channel sender: delivers one notification to one channel, once (the notifier retries). */
export interface ChannelSender<C extends AlertChannel = AlertChannel> {
  send(channel: C, notification: AlertNotification): Promise<DeliveryResult>;
}

export type Senders = { [T in AlertChannel['type']]: ChannelSender<Extract<AlertChannel, { type: T }>> };
