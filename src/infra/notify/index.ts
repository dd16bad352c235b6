import { chatSender } from './chat.js';
import { type EmailTransport, emailSender, outboxTransport, smtpTransport } from './email.js';
import { incidentSender } from './incident.js';
import type { Senders } from './port.js';
import { createHttpPoster } from './safeHttp.js';
import { type SmsConfig, smsSender } from './sms.js';
import { webhookSender } from './webhook.js';

export interface NotifyConfig {
  /** NOTIFY_ALLOW_PRIVATE: owner URLs may reach private and loopback addresses (tests, closed networks). */
  allowPrivate: boolean;
  timeoutMs: number;
  email: { smtpUrl: string | null; from: string; outboxPath: string };
  /** Base URL of a PagerDuty Events API v2 compatible service. */
  incident: { eventsUrl: string };
  sms: SmsConfig;
  /** Delivery attempts per notification and channel, and the first retry's delay (it grows ×3). */
  maxAttempts: number;
  retryBaseMs: number;
}

/**
 * One sender per channel type. Owner-given URLs (webhook, chat) go through the SSRF guard; the
 * operator's own service URLs (incident, SMS) and SMTP are trusted configuration.
 */
export function createSenders(config: NotifyConfig, overrides: { emailTransport?: EmailTransport } = {}): { senders: Senders; close(): Promise<void> } {
  const ownerUrls = createHttpPoster({ guard: true, allowPrivate: config.allowPrivate, timeoutMs: config.timeoutMs });
  const operatorUrls = createHttpPoster({ guard: false, allowPrivate: true, timeoutMs: config.timeoutMs });
  const mail = overrides.emailTransport ?? (config.email.smtpUrl ? smtpTransport(config.email.smtpUrl, config.timeoutMs) : outboxTransport(config.email.outboxPath));
  return {
    senders: {
      email: emailSender(mail, config.email.from),
      webhook: webhookSender(ownerUrls),
      chat: chatSender(ownerUrls),
      incident: incidentSender(operatorUrls, config.incident.eventsUrl),
      sms: smsSender(operatorUrls, config.sms),
    },
    async close() {
      await Promise.all([ownerUrls.close(), operatorUrls.close(), mail.close()]);
    },
  };
}
