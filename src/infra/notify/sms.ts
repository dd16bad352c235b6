import type { AlertChannel } from '../../domain/alertEvents.js';
import { postForDelivery } from './httpDelivery.js';
import { notificationTitle } from './message.js';
import type { AlertNotification, ChannelSender } from './port.js';
import type { HttpPoster } from './safeHttp.js';

export interface SmsConfig {
  /** Base URL of a Twilio-compatible API, e.g. https://api.twilio.com. */
  apiUrl: string;
  accountSid: string | null;
  authToken: string | null;
  from: string | null;
}

/** Two SMS segments at most: the title and the summary, cut. */
export const smsBody = (n: AlertNotification): string => `${notificationTitle(n)}: ${n.summary}`.slice(0, 300);

/** SMS through a Twilio-compatible Messages API: form-encoded To, From, Body with basic auth. */
export function smsSender(poster: HttpPoster, config: SmsConfig): ChannelSender<Extract<AlertChannel, { type: 'sms' }>> {
  return {
    async send(channel, n) {
      const { accountSid, authToken, from } = config;
      if (!accountSid || !authToken || !from)
        return { outcome: 'skipped', error: 'SMS is not configured on this server (SMS_ACCOUNT_SID, SMS_AUTH_TOKEN, SMS_FROM).' };
      const url = new URL(`/2010-04-01/Accounts/${encodeURIComponent(accountSid)}/Messages.json`, config.apiUrl).toString();
      const body = new URLSearchParams({ To: channel.to, From: from, Body: smsBody(n) }).toString();
      const headers = {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from(`${accountSid}:${authToken}`).toString('base64')}`,
      };
      return postForDelivery(poster, url, { headers, body }, { goneDisables: false });
    },
  };
}
