import { describe, expect, it } from 'vitest';
import {
  type AlertCommand,
  type AlertDefinition,
  alertDecider,
  checkChannelsOnPlan,
  evaluationStep,
  resolveChannels,
  ruleFromInput,
} from '../../src/domain/alert.js';
import type { AlertEvent } from '../../src/domain/alertEvents.js';
import { DomainError } from '../../src/domain/errors.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { deciderSpec } from '../support/deciderSpec.js';

const spec = deciderSpec(alertDecider);
const t0 = '2026-11-21T12:00:00.000Z';
const minutes = (n: number) => new Date(Date.parse(t0) + n * 60_000).toISOString();
const ids = { alertId: 'alr_1', accountId: 'acc_1' };
const rule = ruleFromInput({ type: 'error_rate', threshold: 5, windowMinutes: 5 }).rule;
const definition: AlertDefinition = {
  name: 'errors',
  rule,
  channels: [
    { type: 'email', id: 'chn_mail', active: true, to: 'ops@example.com' },
    { type: 'webhook', id: 'chn_hook', active: true, url: 'https://hooks.example.com/x', secret: 'whsec_c2VjcmV0' },
  ],
  enabled: true,
};
const allChannels = DEFAULT_PLANS.unlimited.channels;
const emailOnly = DEFAULT_PLANS.free.channels;
const deliverAll = [
  { id: 'chn_mail', type: 'email' as const },
  { id: 'chn_hook', type: 'webhook' as const },
];

const created: AlertEvent = { type: 'AlertCreated', version: 1, data: { ...ids, ...definition, at: t0 } };
const breached = { breached: true, value: 12.5, summary: 'Error rate 12.5%' };
const clear = { breached: false, value: 1, summary: 'Error rate 1%' };
const evaluate = (measurement: typeof breached, at: string, allowedChannels = allChannels): AlertCommand => ({
  type: 'EvaluateAlert',
  measurement,
  notificationId: 'ntf_1',
  allowedChannels,
  at,
});
const fired = (at = minutes(1)): AlertEvent => ({
  type: 'AlertFired',
  version: 1,
  data: { ...ids, notificationId: 'ntf_1', value: 12.5, threshold: 5, summary: 'Error rate 12.5%', deliverTo: deliverAll, at },
});
const resolved = (at = minutes(2)): AlertEvent => ({
  type: 'AlertResolved',
  version: 1,
  data: { ...ids, notificationId: 'ntf_1', value: 1, threshold: 5, summary: 'Error rate 1%', deliverTo: deliverAll, reason: 'recovered', at },
});

describe('alert decider: life of a rule', () => {
  it('creates an alert', () =>
    spec
      .given([])
      .when({ type: 'CreateAlert', ...ids, definition, at: t0 })
      .then([created]));
  it('refuses creating twice', () =>
    spec
      .given([created])
      .when({ type: 'CreateAlert', ...ids, definition, at: t0 })
      .thenError('conflict'));
  it('updates with the whole definition after the change', () =>
    spec
      .given([created])
      .when({ type: 'UpdateAlert', definition: { ...definition, name: 'renamed' }, notificationId: 'ntf_u', allowedChannels: allChannels, at: minutes(1) })
      .then([{ type: 'AlertUpdated', version: 1, data: { alertId: 'alr_1', ...definition, name: 'renamed', at: minutes(1) } }]));
  it('an edit that changes nothing appends nothing', () =>
    spec
      .given([created])
      .when({ type: 'UpdateAlert', definition, notificationId: 'ntf_u', allowedChannels: allChannels, at: minutes(1) })
      .thenNothing());
  it('deletes an alert, and a deleted alert is gone for edits and deletes', () => {
    const deleted: AlertEvent = { type: 'AlertDeleted', version: 1, data: { ...ids, at: minutes(1) } };
    spec
      .given([created])
      .when({ type: 'DeleteAlert', notificationId: 'ntf_d', allowedChannels: allChannels, at: minutes(1) })
      .then([deleted]);
    spec
      .given([created, deleted])
      .when({ type: 'DeleteAlert', notificationId: 'ntf_d', allowedChannels: allChannels, at: minutes(2) })
      .thenError('not_found');
    spec
      .given([created, deleted])
      .when({ type: 'UpdateAlert', definition, notificationId: 'ntf_u', allowedChannels: allChannels, at: minutes(2) })
      .thenError('not_found');
    spec
      .given([created, deleted])
      .when(evaluate(breached, minutes(2)))
      .thenNothing();
  });
  it('deleting a firing alert resolves it first, so incidents close', () => {
    const events = alertDecider.decide(
      { type: 'DeleteAlert', notificationId: 'ntf_d', allowedChannels: allChannels, at: minutes(3) },
      [created, fired()].reduce(alertDecider.evolve, alertDecider.initialState()),
    );
    expect(events.map((e) => e.type)).toEqual(['AlertResolved', 'AlertDeleted']);
    expect(events[0]?.data).toMatchObject({ reason: 'deleted', notificationId: 'ntf_d', deliverTo: deliverAll });
  });
  it('disabling a firing alert resolves it; a disabled alert is not evaluated', () => {
    const state = [created, fired()].reduce(alertDecider.evolve, alertDecider.initialState());
    const events = alertDecider.decide(
      { type: 'UpdateAlert', definition: { ...definition, enabled: false }, notificationId: 'ntf_u', allowedChannels: allChannels, at: minutes(3) },
      state,
    );
    expect(events.map((e) => e.type)).toEqual(['AlertResolved', 'AlertUpdated']);
    const disabled = events.reduce(alertDecider.evolve, state);
    expect(alertDecider.decide(evaluate(breached, minutes(4)), disabled)).toEqual([]);
  });
  it('commands on an alert that does not exist are not_found', () => spec.given([]).when(evaluate(breached, t0)).thenError('not_found'));
});

describe('alert decider: evaluation ok → firing → resolved → ok', () => {
  it('ok → firing when breached, to the active channels the plan offers', () =>
    spec
      .given([created])
      .when(evaluate(breached, minutes(1)))
      .then([fired()]));
  it('a plan without webhooks notifies only by email', () => {
    const [event] = alertDecider.decide(evaluate(breached, minutes(1), emailOnly), alertDecider.evolve(alertDecider.initialState(), created));
    expect(event?.data).toMatchObject({ deliverTo: [{ id: 'chn_mail', type: 'email' }] });
  });
  it('ok stays ok when clear', () =>
    spec
      .given([created])
      .when(evaluate(clear, minutes(1)))
      .thenNothing());
  it('firing stays firing, silently, within the re-notification interval', () =>
    spec
      .given([created, fired()])
      .when(evaluate(breached, minutes(30)))
      .thenNothing());
  it('firing is notified again after an hour', () =>
    spec
      .given([created, fired()])
      .when(evaluate(breached, minutes(61)))
      .then([{ type: 'AlertRenotified', version: 1, data: { ...(fired(minutes(61)).data as object), at: minutes(61) } } as AlertEvent]));
  it('firing → resolved when clear', () =>
    spec
      .given([created, fired()])
      .when(evaluate(clear, minutes(2)))
      .then([resolved()]));
  it('resolved → firing again when breached', () =>
    spec
      .given([created, fired(), resolved()])
      .when(evaluate(breached, minutes(3)))
      .then([fired(minutes(3))]));
  it('resolved → ok after a clear window', () => {
    spec
      .given([created, fired(), resolved()])
      .when(evaluate(clear, minutes(4)))
      .thenNothing();
    spec
      .given([created, fired(), resolved()])
      .when(evaluate(clear, minutes(7)))
      .then([{ type: 'AlertReturnedToOk', version: 1, data: { alertId: 'alr_1', at: minutes(7) } }]);
  });
  it('a month-based alert is notified once per crossing, not every hour', () => {
    const monthly = { ...created, data: { ...created.data, rule: ruleFromInput({ type: 'usage_threshold', threshold: 80 }).rule } } as AlertEvent;
    spec
      .given([monthly, fired()])
      .when(evaluate(breached, minutes(600)))
      .thenNothing();
  });
  it('evaluationStep reads the same on a read-model document', () => {
    const doc = { enabled: true, state: 'firing' as const, resolvedAt: null, lastNotifiedAt: t0, rule };
    expect(evaluationStep(doc, false, minutes(1))).toBe('resolve');
    expect(evaluationStep({ ...doc, enabled: false }, false, minutes(1))).toBeNull();
  });
});

describe('alert decider: delivery attempts', () => {
  const attempt = (outcome: 'delivered' | 'retrying' | 'gone', channelId = 'chn_hook'): AlertCommand => ({
    type: 'RecordNotificationAttempt',
    notificationId: 'ntf_1',
    kind: 'fired',
    channelId,
    channel: 'webhook',
    attempt: 1,
    outcome,
    status: outcome === 'gone' ? 410 : outcome === 'retrying' ? 503 : 200,
    error: outcome === 'delivered' ? null : 'HTTP error',
    nextAttemptAt: outcome === 'retrying' ? minutes(2) : null,
    at: minutes(1),
  });
  it('records every attempt as an event', () =>
    spec
      .given([created, fired()])
      .when(attempt('retrying'))
      .then([
        {
          type: 'NotificationAttempted',
          version: 1,
          data: {
            ...ids,
            notificationId: 'ntf_1',
            kind: 'fired',
            channelId: 'chn_hook',
            channel: 'webhook',
            attempt: 1,
            outcome: 'retrying',
            status: 503,
            error: 'HTTP error',
            nextAttemptAt: minutes(2),
            at: minutes(1),
          },
        },
      ]));
  it('410 Gone disables the endpoint, once; deliveries then skip it', () => {
    const events = alertDecider.decide(attempt('gone'), [created, fired()].reduce(alertDecider.evolve, alertDecider.initialState()));
    expect(events.map((e) => e.type)).toEqual(['NotificationAttempted', 'AlertChannelDisabled']);
    const after = events.reduce(alertDecider.evolve, [created, fired()].reduce(alertDecider.evolve, alertDecider.initialState()));
    expect(alertDecider.decide(attempt('gone'), after).map((e) => e.type)).toEqual(['NotificationAttempted']);
    const next = alertDecider.decide(evaluate(clear, minutes(5)), after);
    expect(next[0]?.data).toMatchObject({ deliverTo: [{ id: 'chn_mail', type: 'email' }] });
  });
  it('attempts are still recorded after the alert is deleted (its last resolve goes out)', () => {
    const deleted: AlertEvent = { type: 'AlertDeleted', version: 1, data: { ...ids, at: minutes(1) } };
    expect(alertDecider.decide(attempt('delivered'), [created, deleted].reduce(alertDecider.evolve, alertDecider.initialState()))).toHaveLength(1);
  });
});

describe('rules: validation and defaults', () => {
  const issues = (input: Parameters<typeof ruleFromInput>[0]) => ruleFromInput(input).issues.map((i) => i.field);
  it('fills defaults per type', () => {
    expect(ruleFromInput({ type: 'response_time', threshold: 500 }).rule).toEqual({
      type: 'response_time',
      condition: 'avg',
      threshold: 500,
      windowMinutes: 5,
      tokenId: null,
      minRequests: 10,
      baselineHours: null,
    });
    expect(ruleFromInput({ type: 'usage_threshold', threshold: 80 }).rule).toMatchObject({ condition: null, windowMinutes: null, minRequests: null });
    expect(ruleFromInput({ type: 'token_usage', condition: 'unusual_traffic', threshold: 3, tokenId: 'tok_1' }).rule).toMatchObject({
      baselineHours: 24,
      windowMinutes: 5,
    });
  });
  it('refuses percentages outside (0, 100]', () => {
    expect(issues({ type: 'error_rate', threshold: 0 })).toEqual(['threshold']);
    expect(issues({ type: 'error_rate', threshold: 100.5 })).toEqual(['threshold']);
    expect(issues({ type: 'usage_threshold', threshold: 100 })).toEqual([]);
  });
  it('checks the threshold in the unit of the type and condition', () => {
    expect(issues({ type: 'response_time', threshold: 0.5 })).toEqual(['threshold']);
    expect(issues({ type: 'response_time', threshold: 900_000 })).toEqual(['threshold']);
    expect(issues({ type: 'rate_limiting', condition: 'hitting', threshold: 2.5 })).toEqual(['threshold']);
    expect(issues({ type: 'rate_limiting', condition: 'approaching', threshold: 90 })).toEqual([]);
    expect(issues({ type: 'token_usage', condition: 'unusual_traffic', threshold: 1, tokenId: 'tok_1' })).toEqual(['threshold']);
  });
  it('refuses windows out of bounds, and windows on month-based rules', () => {
    expect(issues({ type: 'error_rate', threshold: 5, windowMinutes: 0 })).toEqual(['windowMinutes']);
    expect(issues({ type: 'error_rate', threshold: 5, windowMinutes: 1441 })).toEqual(['windowMinutes']);
    expect(issues({ type: 'usage_threshold', threshold: 80, windowMinutes: 5 })).toEqual(['windowMinutes']);
  });
  it('refuses unknown conditions, a missing token for token_usage, fields that do not apply', () => {
    expect(issues({ type: 'response_time', condition: 'p99', threshold: 5 })).toEqual(['condition']);
    expect(issues({ type: 'error_rate', condition: 'avg', threshold: 5 })).toEqual(['condition']);
    expect(issues({ type: 'token_usage', threshold: 50 })).toEqual(['tokenId']);
    expect(issues({ type: 'usage_threshold', threshold: 50, tokenId: 'tok_1' })).toEqual(['tokenId']);
    expect(issues({ type: 'rate_limiting', threshold: 5, minRequests: 3 })).toEqual(['minRequests']);
    expect(issues({ type: 'token_usage', condition: 'unusual_traffic', threshold: 3, tokenId: 'tok_1', windowMinutes: 60, baselineHours: 1 })).toEqual([
      'baselineHours',
    ]);
  });
});

describe('channels and plans', () => {
  it('refuses a channel outside the plan, naming the plan that has it', () => {
    const refuse = (plan: 'free' | 'developer' | 'professional', type: 'webhook' | 'chat' | 'incident' | 'sms') => {
      try {
        checkChannelsOnPlan(DEFAULT_PLANS, plan, [{ type: 'email' }, { type }]);
      } catch (e) {
        expect(e).toBeInstanceOf(DomainError);
        return { code: (e as DomainError).code, message: (e as DomainError).message, details: (e as DomainError).details };
      }
      return null;
    };
    expect(refuse('free', 'webhook')).toMatchObject({
      code: 'plan_feature_unavailable',
      message: expect.stringContaining('Developer plan'),
      details: { required_plan: 'developer', plan: 'free' },
    });
    expect(refuse('developer', 'chat')).toMatchObject({ details: { required_plan: 'professional' } });
    expect(refuse('professional', 'sms')).toMatchObject({ message: expect.stringContaining('Unlimited plan'), details: { required_plan: 'unlimited' } });
    expect(refuse('professional', 'incident')).toBeNull();
  });
  it('a channel given again keeps its id and secret and is active again; new ones get fresh ids', () => {
    const existing = [{ type: 'webhook' as const, id: 'chn_old', active: false, url: 'https://a.example/h', secret: 'whsec_old' }];
    const fresh = [
      { id: 'chn_n1', secret: 'whsec_n1' },
      { id: 'chn_n2', secret: 'whsec_n2' },
    ];
    expect(
      resolveChannels(
        existing,
        [
          { type: 'webhook', url: 'https://a.example/h' },
          { type: 'webhook', url: 'https://b.example/h' },
        ],
        fresh,
      ),
    ).toEqual([
      { type: 'webhook', id: 'chn_old', active: true, url: 'https://a.example/h', secret: 'whsec_old' },
      { type: 'webhook', id: 'chn_n2', active: true, url: 'https://b.example/h', secret: 'whsec_n2' },
    ]);
  });
});
