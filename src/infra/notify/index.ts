import type { AlertChannel } from '../../domain/alertEvents.js';
import { chatSender } from './chat.js';
import type { EmailTransport } from './email.js';
import { incidentSender } from './incident.js';
import type { ChannelSender, Senders } from './port.js';
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

type EmailChannel = Extract<AlertChannel, { type: 'email' }>;

/**
 * The email sender, loaded with its transport on the first email: the mail library (nodemailer,
 * ~15 MB resident) stays out of a process that never sends one, as most never do.
 */
function lazyEmail(config: NotifyConfig, override: EmailTransport | undefined): { sender: ChannelSender<EmailChannel>; close(): Promise<void> } {
  let loaded: Promise<{ sender: ChannelSender<EmailChannel>; transport: EmailTransport }> | null = null;
  const load = () =>
    (loaded ??= import('./email.js').then((email) => {
      const transport =
        override ?? (config.email.smtpUrl ? email.smtpTransport(config.email.smtpUrl, config.timeoutMs) : email.outboxTransport(config.email.outboxPath));
      return { transport, sender: email.emailSender(transport, config.email.from) };
    }));
  return {
    sender: { send: async (channel, notification) => (await load()).sender.send(channel, notification) },
    async close() {
      if (loaded) await (await loaded).transport.close();
      else await override?.close();
    },
  };
}

/**
 * One sender per channel type. Owner-given URLs (webhook, chat) go through the SSRF guard; the
 * operator's own service URLs (incident, SMS) and SMTP are trusted configuration.
 */
export function createSenders(config: NotifyConfig, overrides: { emailTransport?: EmailTransport } = {}): { senders: Senders; close(): Promise<void> } {
  const ownerUrls = createHttpPoster({ guard: true, allowPrivate: config.allowPrivate, timeoutMs: config.timeoutMs });
  const operatorUrls = createHttpPoster({ guard: false, allowPrivate: true, timeoutMs: config.timeoutMs });
  const mail = lazyEmail(config, overrides.emailTransport);
  return {
    senders: {
      email: mail.sender,
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
