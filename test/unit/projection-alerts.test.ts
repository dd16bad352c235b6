import { describe, it } from 'vitest';
import { alertsProjection } from '../../src/projections/alerts.js';
import { projectionSpec, type SpecEvent } from '../support/projectionSpec.js';

/** The alerts projection: rules and their state, the notifier's queue of deliveries, the log of attempts. */

const spec = projectionSpec(alertsProjection);
const alert = 'alr_0000000000000001';
const account = 'acc_0000000000000001';
const email = 'chn_0000000000000001';
const hook = 'chn_0000000000000002';
const notice = 'ntf_0000000000000001';
const T0 = '2026-11-03T10:00:00.000Z';
const T1 = '2026-11-03T10:05:00.000Z';
const T2 = '2026-11-03T10:05:30.000Z';
const rule = { type: 'error_rate', condition: null, threshold: 5, windowMinutes: 15, tokenId: null, minRequests: 100, baselineHours: null };
const channels = [
  { type: 'email', id: email, active: true, to: 'ops@example.com' },
  { type: 'webhook', id: hook, active: true, url: 'https://hooks.example.com/x', secret: 'whsec_secret' },
];
const on = (type: string, data: Record<string, unknown>): SpecEvent => ({ streamId: `alert-${alert}`, type, version: 1, data: { alertId: alert, ...data } });
const created = on('AlertCreated', { accountId: account, name: 'errors', rule, channels, enabled: true, at: T0 });
const fired = on('AlertFired', {
  accountId: account,
  notificationId: notice,
  value: 7.5,
  threshold: 5,
  summary: 'error rate 7.5 % ≥ 5 %',
  deliverTo: [
    { id: email, type: 'email' },
    { id: hook, type: 'webhook' },
  ],
  at: T1,
});
const publicChannels = [
  { id: email, type: 'email', to: 'ops@example.com' },
  { id: hook, type: 'webhook', url: 'https://hooks.example.com/x' },
];
const delivery = (channelId: string, channel: string) => ({
  notificationId: notice,
  alertId: alert,
  accountId: account,
  channelId,
  channel,
  kind: 'fired',
  value: 7.5,
  threshold: 5,
  summary: 'error rate 7.5 % ≥ 5 %',
  triggeredAt: T1,
  revision: 1,
  attempts: 0,
  nextAttemptAt: T1,
});

/** Two delivery attempts, as the event carries them (with the account) and as the log keeps them. */
const emailDelivered = {
  notificationId: notice,
  kind: 'fired',
  channelId: email,
  channel: 'email',
  attempt: 1,
  outcome: 'delivered',
  status: null,
  error: null,
  nextAttemptAt: null,
  at: T2,
};
const hookRetrying = {
  ...emailDelivered,
  channelId: hook,
  channel: 'webhook',
  outcome: 'retrying',
  status: 503,
  error: 'HTTP 503',
  nextAttemptAt: '2026-11-03T10:06:00.000Z',
};

describe('alerts projection', () => {
  it('keeps a rule with its channels, never a webhook secret, listed under its account', () => {
    spec.given([created]).thenDocuments({
      alerts: {
        [alert]: {
          id: alert,
          accountId: account,
          name: 'errors',
          rule,
          channels: publicChannels,
          enabled: true,
          state: 'ok',
          firedAt: null,
          resolvedAt: null,
          lastNotifiedAt: null,
          lastValue: null,
          createdAt: T0,
          updatedAt: T0,
        },
      },
      alerts_by_account: { [`${account}/${alert}`]: { alertId: alert } },
      alert_channels_disabled: {},
    });
  });

  it('queues one delivery per channel when it fires, and follows each attempt to the end of its delivery', () => {
    spec
      .given([
        created,
        fired,
        on('NotificationAttempted', { accountId: account, ...emailDelivered }),
        on('NotificationAttempted', { accountId: account, ...hookRetrying }),
      ])
      .thenDocuments({
        alerts: {
          [alert]: {
            id: alert,
            accountId: account,
            name: 'errors',
            rule,
            channels: publicChannels,
            enabled: true,
            state: 'firing',
            firedAt: T1,
            resolvedAt: null,
            lastNotifiedAt: T1,
            lastValue: 7.5,
            createdAt: T0,
            updatedAt: T0,
          },
        },
        alerts_by_account: { [`${account}/${alert}`]: { alertId: alert } },
        alert_channels_disabled: {},
        alert_deliveries: { [`${notice}/${hook}`]: { ...delivery(hook, 'webhook'), attempts: 1, nextAttemptAt: '2026-11-03T10:06:00.000Z' } },
        alert_notifications: {
          [`${alert}/${T2}/${notice}/${email}/001`]: emailDelivered,
          [`${alert}/${T2}/${notice}/${hook}/001`]: hookRetrying,
        },
      });
  });

  it('drops a deleted rule and its listing, and keeps its pending deliveries', () => {
    spec.given([created, fired, on('AlertDeleted', { accountId: account, at: T2 })]).thenDocuments({
      alerts: {},
      alerts_by_account: {},
      alert_channels_disabled: {},
      alert_deliveries: { [`${notice}/${email}`]: delivery(email, 'email'), [`${notice}/${hook}`]: delivery(hook, 'webhook') },
    });
  });
});
