import type { AlertNotification } from './port.js';

/** How each channel words a notification: one title, one summary, the rule in a line. */
const LABEL = { fired: 'FIRING', renotified: 'STILL FIRING', resolved: 'RESOLVED' } as const;

export const notificationTitle = (n: AlertNotification): string => `[${LABEL[n.kind]}] ${n.alert.name}`;

export function ruleLine(n: AlertNotification): string {
  const a = n.alert;
  const parts = [`${a.type}${a.condition ? `/${a.condition}` : ''}`, `threshold ${a.threshold}`];
  if (a.windowMinutes !== null) parts.push(`window ${a.windowMinutes} min`);
  if (a.tokenId !== null) parts.push(`token ${a.tokenId}`);
  return parts.join(' · ');
}

export function notificationText(n: AlertNotification): string {
  return [
    n.kind === 'resolved' ? `Resolved: ${n.summary}` : n.summary,
    '',
    `Alert: ${n.alert.name} (${n.alert.id})`,
    `Rule: ${ruleLine(n)}`,
    `Value: ${n.value ?? 'n/a'}`,
    `At: ${n.at}`,
  ].join('\n');
}

/** The JSON body of a webhook (Standard Webhooks recommends `{type, timestamp, data}`). */
export function webhookPayload(n: AlertNotification): { type: string; timestamp: string; data: Record<string, unknown> } {
  const a = n.alert;
  return {
    type: `alert.${n.kind}`,
    timestamp: n.at,
    data: {
      notification_id: n.id,
      state: n.kind === 'resolved' ? 'resolved' : 'firing',
      summary: n.summary,
      value: n.value,
      alert: { id: a.id, name: a.name, type: a.type, condition: a.condition, threshold: a.threshold, window_minutes: a.windowMinutes, token_id: a.tokenId },
    },
  };
}
