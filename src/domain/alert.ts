import type { AlertChannel, AlertEvent, AlertRule, AlertType } from './alertEvents.js';
import type { Decider } from './decider.js';
import { fail } from './errors.js';
import { type ChannelType, PLAN_IDS, type PlanCatalog, type PlanId } from './plans.js';

// ── The rule: what each type measures, its sub-conditions, units and bounds ──────────────────

/** Sub-conditions per type (`condition` in the API); the first is the default. */
export const CONDITIONS: Readonly<Record<AlertType, readonly string[]>> = {
  usage_threshold: [],
  error_rate: [],
  response_time: ['avg', 'p95'],
  rate_limiting: ['hitting', 'approaching'],
  token_usage: ['percent_of_limit', 'unusual_traffic', 'error_rate'],
};

export type ThresholdUnit = 'percent' | 'ms' | 'count' | 'multiplier';

export const THRESHOLD_BOUNDS: Readonly<Record<ThresholdUnit, { min: number; max: number; minExclusive: boolean; integer: boolean }>> = {
  percent: { min: 0, max: 100, minExclusive: true, integer: false },
  ms: { min: 1, max: 600_000, minExclusive: false, integer: false },
  count: { min: 1, max: 1_000_000, minExclusive: false, integer: true },
  multiplier: { min: 1, max: 1000, minExclusive: true, integer: false },
};
export const WINDOW_MINUTES = { min: 1, max: 1440, default: 5 } as const;
export const MIN_REQUESTS = { min: 1, max: 1_000_000, default: 10 } as const;
export const BASELINE_HOURS = { min: 1, max: 168, default: 24 } as const;
/** A firing windowed alert is notified again after this long. */
export const RENOTIFY_MINUTES = 60;
/** A resolved month-based alert returns to ok after this long (windowed ones after their window). */
export const SETTLE_MINUTES_MONTHLY = 60;

type RuleShape = Pick<AlertRule, 'type' | 'condition'>;

export function thresholdUnit(r: RuleShape): ThresholdUnit {
  if (r.type === 'response_time') return 'ms';
  if (r.type === 'rate_limiting' && r.condition === 'hitting') return 'count';
  if (r.type === 'token_usage' && r.condition === 'unusual_traffic') return 'multiplier';
  return 'percent';
}

/** Measured over the calendar month (UTC), not over a window. */
export const isMonthly = (r: RuleShape): boolean => r.type === 'usage_threshold' || (r.type === 'token_usage' && r.condition === 'percent_of_limit');
/** Ratios and averages need a minimum of requests to mean anything. */
export const usesMinRequests = (r: RuleShape): boolean =>
  r.type === 'error_rate' || r.type === 'response_time' || (r.type === 'token_usage' && r.condition !== 'percent_of_limit');
export const usesBaseline = (r: RuleShape): boolean => r.type === 'token_usage' && r.condition === 'unusual_traffic';
export const tokenRequirement = (type: AlertType): 'required' | 'optional' | 'forbidden' =>
  type === 'token_usage' ? 'required' : type === 'usage_threshold' ? 'forbidden' : 'optional';
/** Month-based thresholds only grow until the month ends: one notification per crossing. */
export const renotifies = (r: RuleShape): boolean => !isMonthly(r);

export interface RuleInput {
  type: AlertType;
  condition?: string | null | undefined;
  threshold: number;
  windowMinutes?: number | null | undefined;
  tokenId?: string | null | undefined;
  minRequests?: number | null | undefined;
  baselineHours?: number | null | undefined;
}
export interface RuleIssue {
  field: keyof RuleInput;
  message: string;
}

/** The rule with its defaults filled in, or what is wrong with it (field by field). */
export function ruleFromInput(input: RuleInput): { rule: AlertRule; issues: RuleIssue[] } {
  const issues: RuleIssue[] = [];
  const { type } = input;
  const conditions = CONDITIONS[type];
  const condition = input.condition ?? conditions[0] ?? null;
  if (conditions.length === 0 && input.condition != null) issues.push({ field: 'condition', message: `${type} takes no condition` });
  if (conditions.length > 0 && !conditions.includes(condition ?? '')) {
    issues.push({ field: 'condition', message: `${type} takes one of ${conditions.join(', ')}` });
  }
  const shape = { type, condition };

  const unit = thresholdUnit(shape);
  const b = THRESHOLD_BOUNDS[unit];
  const t = input.threshold;
  const above = b.minExclusive ? t > b.min : t >= b.min;
  if (!Number.isFinite(t) || !above || t > b.max || (b.integer && !Number.isInteger(t))) {
    issues.push({
      field: 'threshold',
      message: `${unit === 'percent' ? 'a percentage' : `a ${unit}`} ${b.minExclusive ? 'above' : 'from'} ${b.min} to ${b.max}${b.integer ? ', whole' : ''}`,
    });
  }

  const windowed = !isMonthly(shape);
  let windowMinutes: number | null = null;
  if (!windowed && input.windowMinutes != null)
    issues.push({ field: 'windowMinutes', message: `does not apply: ${type}${condition ? `/${condition}` : ''} measures the calendar month` });
  if (windowed) {
    windowMinutes = input.windowMinutes ?? WINDOW_MINUTES.default;
    if (!Number.isInteger(windowMinutes) || windowMinutes < WINDOW_MINUTES.min || windowMinutes > WINDOW_MINUTES.max) {
      issues.push({ field: 'windowMinutes', message: `whole minutes from ${WINDOW_MINUTES.min} to ${WINDOW_MINUTES.max}` });
    }
  }

  const requirement = tokenRequirement(type);
  const tokenId = input.tokenId ?? null;
  if (requirement === 'required' && tokenId === null) issues.push({ field: 'tokenId', message: `${type} watches one token: give token_id` });
  if (requirement === 'forbidden' && tokenId !== null) issues.push({ field: 'tokenId', message: `${type} watches the account; use token_usage for one token` });

  let minRequests: number | null = null;
  if (!usesMinRequests(shape) && input.minRequests != null) issues.push({ field: 'minRequests', message: 'does not apply to this type' });
  if (usesMinRequests(shape)) {
    minRequests = input.minRequests ?? MIN_REQUESTS.default;
    if (!Number.isInteger(minRequests) || minRequests < MIN_REQUESTS.min || minRequests > MIN_REQUESTS.max) {
      issues.push({ field: 'minRequests', message: `a whole number from ${MIN_REQUESTS.min} to ${MIN_REQUESTS.max}` });
    }
  }

  let baselineHours: number | null = null;
  if (!usesBaseline(shape) && input.baselineHours != null) issues.push({ field: 'baselineHours', message: 'applies only to token_usage/unusual_traffic' });
  if (usesBaseline(shape)) {
    baselineHours = input.baselineHours ?? BASELINE_HOURS.default;
    if (!Number.isInteger(baselineHours) || baselineHours < BASELINE_HOURS.min || baselineHours > BASELINE_HOURS.max) {
      issues.push({ field: 'baselineHours', message: `whole hours from ${BASELINE_HOURS.min} to ${BASELINE_HOURS.max}` });
    } else if (windowMinutes !== null && baselineHours * 60 < 2 * windowMinutes) {
      issues.push({ field: 'baselineHours', message: 'the baseline must span at least two windows' });
    }
  }

  return { rule: { type, condition, threshold: t, windowMinutes, tokenId, minRequests, baselineHours }, issues };
}

// ── Channels and plans ─────────────────────────────────────────────────────────────────────

/** The cheapest plan that offers a channel, to name it when refusing. */
export function cheapestPlanWith(plans: PlanCatalog, channel: ChannelType): PlanId | null {
  return PLAN_IDS.find((id) => plans[id].channels.includes(channel)) ?? null;
}

/** Refuses channels the account's plan does not include (403), naming a plan that has each. */
export function checkChannelsOnPlan(plans: PlanCatalog, planId: PlanId, channels: ReadonlyArray<{ type: ChannelType }>): void {
  const plan = plans[planId];
  for (const c of channels) {
    if (plan.channels.includes(c.type)) continue;
    const needed = cheapestPlanWith(plans, c.type);
    const neededName = needed ? plans[needed].name : null;
    fail(
      'plan_feature_unavailable',
      `The ${c.type} channel is ${neededName ? `available on the ${neededName} plan${needed === 'unlimited' ? '' : ' and above'}` : 'not offered on any plan'}; this account is on ${plan.name}.`,
      { feature: `channel:${c.type}`, plan: plan.id, ...(needed ? { required_plan: needed } : {}) },
    );
  }
}

/** Where a channel delivers, as one string (to match a channel given again in an edit). */
export function channelDestination(c: { type: ChannelType; to?: string; url?: string; routingKey?: string }): string {
  return `${c.type}:${c.to ?? c.url ?? c.routingKey ?? ''}`;
}

export type ChannelInput =
  | { type: 'email'; to: string }
  | { type: 'webhook'; url: string }
  | { type: 'chat'; url: string }
  | { type: 'incident'; routingKey: string }
  | { type: 'sms'; to: string };

/** An existing channel given a new destination of its type: same id, same secret, active. */
function pointedAt(c: AlertChannel, input: ChannelInput): AlertChannel {
  if (c.type === 'webhook' && input.type === 'webhook') return { ...c, url: input.url, active: true };
  if (c.type === 'chat' && input.type === 'chat') return { ...c, url: input.url, active: true };
  if (c.type === 'incident' && input.type === 'incident') return { ...c, routingKey: input.routingKey, active: true };
  if (c.type === 'email' && input.type === 'email') return { ...c, to: input.to, active: true };
  if (c.type === 'sms' && input.type === 'sms') return { ...c, to: input.to, active: true };
  throw new Error(`a ${c.type} channel cannot deliver to a ${input.type} destination`);
}

/**
 * The channels of an edit: one given again (same type and destination) keeps its id and secret
 * and is active again (giving it is how an owner re-enables an endpoint that answered 410). A
 * destination given in place of one the edit leaves out, of the same type, is that channel
 * edited (a corrected URL or address): it keeps its id, its secret and so its pending
 * deliveries, which go to the new destination; pairs are taken in list order. Other new ones
 * take an id and a secret from `fresh`, one per input, so this stays pure.
 */
export function resolveChannels(
  existing: readonly AlertChannel[],
  inputs: readonly ChannelInput[],
  fresh: ReadonlyArray<{ id: string; secret: string }>,
): AlertChannel[] {
  const sameAs = inputs.map((input) => existing.find((c) => channelDestination(c) === channelDestination(input)));
  const left = existing.filter((c) => !sameAs.includes(c));
  return inputs.map((input, i): AlertChannel => {
    const same = sameAs[i];
    if (same) return { ...same, active: true };
    const edited = left.findIndex((c) => c.type === input.type);
    if (edited >= 0) return pointedAt(left.splice(edited, 1)[0] as AlertChannel, input);
    const f = fresh[i];
    if (!f) throw new Error('resolveChannels needs one fresh id per input');
    return input.type === 'webhook' ? { ...input, id: f.id, active: true, secret: f.secret } : { ...input, id: f.id, active: true };
  });
}

// ── The aggregate ──────────────────────────────────────────────────────────────────────────

export type AlertHealth = 'ok' | 'firing' | 'resolved';

export interface AlertDefinition {
  name: string;
  rule: AlertRule;
  channels: AlertChannel[];
  enabled: boolean;
}

export type LiveAlert = AlertDefinition & {
  status: 'live' | 'deleted';
  alertId: string;
  accountId: string;
  state: AlertHealth;
  firedAt: string | null;
  resolvedAt: string | null;
  lastNotifiedAt: string | null;
  createdAt: string;
  updatedAt: string;
};
export type Alert = { status: 'none' } | LiveAlert;

/** Why a rule on a token stops: its token takes no more calls. */
export type TokenEnd = 'token_revoked' | 'token_expired';

export interface Measurement {
  breached: boolean;
  value: number | null;
  summary: string;
  /** Set instead of a measure when the rule's token is revoked or expired: a firing alert resolves for that reason, nothing else changes. */
  ended?: TokenEnd | undefined;
}

/** Ids and plan facts a command that may notify needs (decided outside: random ids, the plan). */
interface NoticeContext {
  notificationId: string;
  /** Channel types the account's plan offers now. */
  allowedChannels: readonly ChannelType[];
}

export type AlertCommand =
  | { type: 'CreateAlert'; alertId: string; accountId: string; definition: AlertDefinition; at: string }
  | ({ type: 'UpdateAlert'; definition: AlertDefinition; at: string } & NoticeContext)
  | ({ type: 'DeleteAlert'; at: string } & NoticeContext)
  | ({ type: 'EvaluateAlert'; measurement: Measurement; at: string } & NoticeContext)
  | {
      type: 'RecordNotificationAttempt';
      notificationId: string;
      kind: 'fired' | 'renotified' | 'resolved';
      channelId: string;
      channel: ChannelType;
      attempt: number;
      outcome: 'delivered' | 'retrying' | 'failed' | 'gone' | 'refused' | 'skipped';
      status: number | null;
      error: string | null;
      nextAttemptAt: string | null;
      at: string;
    };

export type EvaluationStep = 'fire' | 'renotify' | 'resolve' | 'return_to_ok' | null;

const minutesSince = (from: string | null, at: string): number => (from === null ? Number.POSITIVE_INFINITY : (Date.parse(at) - Date.parse(from)) / 60_000);

/**
 * What an evaluation changes: ok or resolved → firing when breached; firing → resolved when
 * clear; a firing windowed alert is notified again every RENOTIFY_MINUTES; a resolved one returns
 * to ok after a clear window. Shared by the decider and the evaluator (which asks it first, on
 * the read model, so that an unchanged alert costs no stream read).
 */
export function evaluationStep(
  alert: Pick<LiveAlert, 'enabled' | 'state' | 'resolvedAt' | 'lastNotifiedAt'> & { rule: RuleShape & { windowMinutes: number | null } },
  breached: boolean,
  at: string,
): EvaluationStep {
  if (!alert.enabled) return null;
  if (alert.state === 'firing') {
    if (!breached) return 'resolve';
    return renotifies(alert.rule) && minutesSince(alert.lastNotifiedAt, at) >= RENOTIFY_MINUTES ? 'renotify' : null;
  }
  if (breached) return 'fire';
  if (alert.state === 'resolved' && minutesSince(alert.resolvedAt, at) >= (alert.rule.windowMinutes ?? SETTLE_MINUTES_MONTHLY)) return 'return_to_ok';
  return null;
}

/** Active channels whose type the plan offers now (a downgrade silences the others). */
export const deliverableChannels = (alert: LiveAlert, allowed: readonly ChannelType[]): Array<{ id: string; type: ChannelType }> =>
  alert.channels.filter((c) => c.active && allowed.includes(c.type)).map((c) => ({ id: c.id, type: c.type }));

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

export const alertDecider: Decider<Alert, AlertCommand, AlertEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, alert): AlertEvent[] {
    if (command.type === 'CreateAlert') {
      if (alert.status !== 'none') fail('conflict', 'The alert exists already.');
      const { alertId, accountId, definition, at } = command;
      return [{ type: 'AlertCreated', version: 1, data: { alertId, accountId, ...definition, at } }];
    }
    if (alert.status === 'none') return fail('not_found', 'No such alert.');
    const { alertId, accountId } = alert;
    const { at } = command;

    if (command.type === 'RecordNotificationAttempt') {
      const channel = alert.channels.find((c) => c.id === command.channelId);
      const { type: _type, ...attempt } = command;
      const events: AlertEvent[] = [{ type: 'NotificationAttempted', version: 1, data: { ...attempt, alertId, accountId } }];
      if (command.outcome === 'gone' && channel?.active) {
        events.push({
          type: 'AlertChannelDisabled',
          version: 1,
          data: { alertId, channelId: channel.id, channel: channel.type, reason: `${command.status ?? 410} Gone`, at },
        });
      }
      return events;
    }
    if (alert.status === 'deleted') {
      if (command.type === 'EvaluateAlert') return [];
      return fail('not_found', 'No such alert.');
    }
    const resolveNow = (reason: 'disabled' | 'deleted' | TokenEnd, ctx: NoticeContext): AlertEvent => ({
      type: 'AlertResolved',
      version: 1,
      data: {
        alertId,
        accountId,
        notificationId: ctx.notificationId,
        value: null,
        threshold: alert.rule.threshold,
        reason,
        summary:
          reason === 'disabled' || reason === 'deleted'
            ? `The alert "${alert.name}" was ${reason}; it no longer watches this condition.`
            : `The token ${alert.rule.tokenId} ${reason === 'token_revoked' ? 'was revoked' : 'has expired'}; the alert "${alert.name}" no longer watches it.`,
        deliverTo: deliverableChannels(alert, ctx.allowedChannels),
        at,
      },
    });

    switch (command.type) {
      case 'UpdateAlert': {
        const { definition } = command;
        const current: AlertDefinition = { name: alert.name, rule: alert.rule, channels: alert.channels, enabled: alert.enabled };
        if (same(current, definition)) return [];
        const events: AlertEvent[] = [];
        if (alert.state === 'firing' && !definition.enabled) events.push(resolveNow('disabled', command));
        events.push({ type: 'AlertUpdated', version: 1, data: { alertId, ...definition, at } });
        return events;
      }
      case 'DeleteAlert':
        return [...(alert.state === 'firing' ? [resolveNow('deleted', command)] : []), { type: 'AlertDeleted', version: 1, data: { alertId, accountId, at } }];
      case 'EvaluateAlert': {
        const { measurement: m } = command;
        if (m.ended) return alert.state === 'firing' ? [resolveNow(m.ended, command)] : [];
        const step = evaluationStep(alert, m.breached, at);
        if (step === null) return [];
        if (step === 'return_to_ok') return [{ type: 'AlertReturnedToOk', version: 1, data: { alertId, at } }];
        const notice = {
          alertId,
          accountId,
          notificationId: command.notificationId,
          value: m.value,
          threshold: alert.rule.threshold,
          summary: m.summary,
          deliverTo: deliverableChannels(alert, command.allowedChannels),
          at,
        };
        if (step === 'fire') return [{ type: 'AlertFired', version: 1, data: notice }];
        if (step === 'renotify') return [{ type: 'AlertRenotified', version: 1, data: notice }];
        return [{ type: 'AlertResolved', version: 1, data: { ...notice, reason: 'recovered' } }];
      }
    }
  },

  evolve(alert, event): Alert {
    if (event.type === 'AlertCreated') {
      const { at, alertId, accountId, name, rule, channels, enabled } = event.data;
      return {
        status: 'live',
        alertId,
        accountId,
        name,
        rule,
        channels,
        enabled,
        state: 'ok',
        firedAt: null,
        resolvedAt: null,
        lastNotifiedAt: null,
        createdAt: at,
        updatedAt: at,
      };
    }
    if (alert.status === 'none') return alert;
    const { at } = event.data;
    switch (event.type) {
      case 'AlertUpdated': {
        const { name, rule, channels, enabled } = event.data;
        return { ...alert, name, rule, channels, enabled, updatedAt: at };
      }
      case 'AlertDeleted':
        return { ...alert, status: 'deleted', updatedAt: at };
      case 'AlertFired':
        return { ...alert, state: 'firing', firedAt: at, lastNotifiedAt: at };
      case 'AlertRenotified':
        return { ...alert, lastNotifiedAt: at };
      case 'AlertResolved':
        return { ...alert, state: 'resolved', resolvedAt: at };
      case 'AlertReturnedToOk':
        return { ...alert, state: 'ok' };
      case 'AlertChannelDisabled':
        return { ...alert, channels: alert.channels.map((c) => (c.id === event.data.channelId ? { ...c, active: false } : c)) };
      case 'NotificationAttempted':
        return alert;
    }
  },
};
