import type { AlertChannel } from '../../domain/alertEvents.js';
import { postForDelivery } from './httpDelivery.js';
import { notificationTitle, ruleLine } from './message.js';
import type { AlertNotification, ChannelSender } from './port.js';
import type { HttpPoster } from './safeHttp.js';

/** A Slack-compatible incoming-webhook message: `text` for every client, `blocks` for the rich ones. */
export function chatMessage(n: AlertNotification): { text: string; blocks: unknown[] } {
  const title = notificationTitle(n);
  return {
    text: `${title}: ${n.summary}`,
    blocks: [
      { type: 'header', text: { type: 'plain_text', text: title.slice(0, 150) } },
      { type: 'section', text: { type: 'mrkdwn', text: n.summary.slice(0, 3000) } },
      { type: 'context', elements: [{ type: 'mrkdwn', text: `${ruleLine(n)} · ${n.at}`.slice(0, 3000) }] },
    ],
  };
}

/** Team chat: Slack (and compatible: Mattermost, Rocket.Chat…) incoming webhooks. 410 means the channel is archived. */
export function chatSender(poster: HttpPoster): ChannelSender<Extract<AlertChannel, { type: 'chat' }>> {
  return {
    send: (channel, n) =>
      postForDelivery(poster, channel.url, { headers: { 'content-type': 'application/json' }, body: JSON.stringify(chatMessage(n)) }, { goneDisables: true }),
  };
}
