import type { AlertChannel } from '../../domain/alertEvents.js';
import { postForDelivery } from './httpDelivery.js';
import type { AlertNotification, ChannelSender } from './port.js';
import type { HttpPoster } from './safeHttp.js';

/**
 * A PagerDuty Events API v2 event. The alert id is the dedup key, so a re-notification updates
 * the open incident and a resolution closes it.
 */
export function incidentEvent(routingKey: string, n: AlertNotification): Record<string, unknown> {
  if (n.kind === 'resolved') return { routing_key: routingKey, event_action: 'resolve', dedup_key: n.alert.id };
  const a = n.alert;
  return {
    routing_key: routingKey,
    event_action: 'trigger',
    dedup_key: a.id,
    payload: {
      summary: `${a.name}: ${n.summary}`.slice(0, 1024),
      source: 'chain-gateway',
      severity: a.type === 'usage_threshold' || a.type === 'rate_limiting' ? 'warning' : 'error',
      timestamp: n.at,
      component: a.type,
      custom_details: { alert_id: a.id, condition: a.condition, threshold: a.threshold, value: n.value, window_minutes: a.windowMinutes, token_id: a.tokenId },
    },
    client: 'Chain Gateway',
  };
}

/** Incident management: POSTs to `<eventsUrl>/v2/enqueue` (the operator's INCIDENT_EVENTS_URL). */
export function incidentSender(poster: HttpPoster, eventsUrl: string): ChannelSender<Extract<AlertChannel, { type: 'incident' }>> {
  const url = new URL('/v2/enqueue', eventsUrl).toString();
  return {
    send: (channel, n) =>
      postForDelivery(
        poster,
        url,
        { headers: { 'content-type': 'application/json' }, body: JSON.stringify(incidentEvent(channel.routingKey, n)) },
        { goneDisables: false },
      ),
  };
}
