import { appendFile, mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import nodemailer from 'nodemailer';
import type { AlertChannel } from '../../domain/alertEvents.js';
import { notificationText, notificationTitle } from './message.js';
import type { ChannelSender } from './port.js';

export interface EmailMessage {
  messageId: string;
  from: string;
  to: string;
  subject: string;
  text: string;
}

/** Where emails go: SMTP, or the outbox file when no SMTP server is configured. */
export interface EmailTransport {
  deliver(message: EmailMessage): Promise<void>;
  close(): Promise<void>;
}

export function smtpTransport(smtpUrl: string, timeoutMs = 10_000): EmailTransport {
  const transporter = nodemailer.createTransport({ url: smtpUrl, connectionTimeout: timeoutMs, greetingTimeout: timeoutMs, socketTimeout: timeoutMs });
  return {
    async deliver(m) {
      await transporter.sendMail({ messageId: m.messageId, from: m.from, to: m.to, subject: m.subject, text: m.text });
    },
    close: async () => transporter.close(),
  };
}

/** One JSON line per email, appended: an operator without SMTP still sees what would have gone out. */
export function outboxTransport(path: string): EmailTransport {
  return {
    async deliver(m) {
      await mkdir(dirname(path), { recursive: true });
      await appendFile(path, `${JSON.stringify({ ...m, at: new Date().toISOString() })}\n`);
    },
    close: async () => {},
  };
}

export function emailSender(transport: EmailTransport, from: string): ChannelSender<Extract<AlertChannel, { type: 'email' }>> {
  return {
    async send(channel, n) {
      try {
        // The same Message-ID on every retry, so a receiving server can drop a duplicate.
        await transport.deliver({ messageId: `<${n.id}@chain-gateway>`, from, to: channel.to, subject: notificationTitle(n), text: notificationText(n) });
        return { outcome: 'delivered', status: null };
      } catch (e) {
        const responseCode = (e as { responseCode?: unknown }).responseCode;
        // SMTP 5xx is permanent (bad mailbox, refused); 4xx and connection failures are worth retrying.
        const permanent = typeof responseCode === 'number' && responseCode >= 500;
        return {
          outcome: 'failed',
          retryable: !permanent,
          status: typeof responseCode === 'number' ? responseCode : null,
          error: String((e as Error).message ?? e).slice(0, 300),
        };
      }
    },
  };
}
