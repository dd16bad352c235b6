import type { AlertChannel } from '../../domain/alertEvents.js';
import { postForDelivery } from './httpDelivery.js';
import { webhookPayload } from './message.js';
import type { ChannelSender } from './port.js';
import type { HttpPoster } from './safeHttp.js';
import { webhookHeaders } from './signing.js';

/** Standard Webhooks: signed JSON to the owner's endpoint; the same `webhook-id` on every retry. */
export function webhookSender(
  poster: HttpPoster,
  nowSeconds: () => number = () => Math.floor(Date.now() / 1000),
): ChannelSender<Extract<AlertChannel, { type: 'webhook' }>> {
  return {
    send(channel, n) {
      const body = JSON.stringify(webhookPayload(n));
      const headers = {
        'content-type': 'application/json',
        'user-agent': 'chain-gateway-webhooks/1',
        ...webhookHeaders(channel.secret, n.id, nowSeconds(), body),
      };
      return postForDelivery(poster, channel.url, { headers, body }, { goneDisables: true });
    },
  };
}
