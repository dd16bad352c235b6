import { isDeepStrictEqual } from 'node:util';
import { accountDecider } from '../domain/account.js';
import {
  type Alert,
  type AlertCommand,
  type AlertDefinition,
  alertDecider,
  type ChannelInput,
  checkChannelsOnPlan,
  isMonthly,
  type LiveAlert,
  type Measurement,
  type RuleInput,
  resolveChannels,
  ruleFromInput,
  thresholdUnit,
} from '../domain/alert.js';
import { ALERT_STREAM, type AlertEvent, type AlertRule, decodeAlertEvent } from '../domain/alertEvents.js';
import { fail } from '../domain/errors.js';
import { STREAM } from '../domain/events.js';
import type { PlanCatalog, PlanId } from '../domain/plans.js';
import { randomBase62 } from '../domain/tokenFormat.js';
import type { EventStore, Position } from '../infra/eventstore/port.js';
import { generateWebhookSecret } from '../infra/notify/signing.js';
import { AggregateStore } from './aggregateStore.js';
import { takePlanSlot } from './planSlots.js';

/** Alert ids carry their kind like the others (`alr_`, channels `chn_`, notifications `ntf_`). */
export const ALERT_ID_PATTERN = /^alr_[0-9A-Za-z]{16}$/;
const newAlertId = () => `alr_${randomBase62(16)}`;
const newChannelId = () => `chn_${randomBase62(16)}`;
const newNotificationId = () => `ntf_${randomBase62(16)}`;
/**
 * A slot whose alert stream is still empty this long after it was taken is a creation that died
 * between its two appends (one takes milliseconds): the repair frees it.
 */
export const ABANDONED_SLOT_MS = 5 * 60_000;
/** Times an edit patches the rule again after concurrent edits changed it under it, before a 409 `concurrency_conflict`. */
const MAX_RULE_ATTEMPTS = 10;

/** What alert commands need to know about the rest of the account (strongly consistent reads). */
export interface AlertLookups {
  planOf(accountId: string): Promise<PlanId>;
  /** The account's token, or null when it does not exist or is another account's. */
  tokenOf(accountId: string, tokenId: string): Promise<{ monthlyLimit: number | null } | null>;
  /** The account's alert ids as the read model has them (each is checked on its stream before it counts). */
  alertIdsOf(accountId: string): Promise<string[]>;
}

export interface AlertInput {
  name: string;
  rule: RuleInput;
  channels: ChannelInput[];
  enabled?: boolean | undefined;
}

export interface AlertPatch {
  name?: string | undefined;
  rule?: Partial<RuleInput> | undefined;
  channels?: ChannelInput[] | undefined;
  enabled?: boolean | undefined;
}

export interface AlertWritten {
  alertId: string;
  position: Position | null;
  /** `whsec_` secrets of webhook channels created by this command, by channel id: shown once. */
  secrets: Record<string, string>;
}

export type DeliveryAttempt = Omit<Extract<AlertCommand, { type: 'RecordNotificationAttempt' }>, 'type' | 'at'>;

const snake = (field: string) => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** The alert aggregate's use cases, through the shared AggregateStore over the alert events' codec. */
export class AlertCommands {
  private readonly aggregates: AggregateStore;
  /** The account streams, where the alert slots are taken (the domain's codec). */
  private readonly accountStreams: AggregateStore;
  private readonly accounts: ReturnType<typeof accountDecider>;

  constructor(
    private readonly store: EventStore,
    private readonly plans: PlanCatalog,
    private readonly lookups: AlertLookups,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.aggregates = new AggregateStore(store, decodeAlertEvent);
    this.accountStreams = new AggregateStore(store);
    this.accounts = accountDecider(plans);
  }

  private at(): string {
    return this.now().toISOString();
  }

  async load(alertId: string): Promise<{ alert: Alert; revision: number }> {
    const { state, revision } = await this.aggregates.load(ALERT_STREAM(alertId), alertDecider);
    return { alert: state, revision };
  }

  private async execute(alertId: string, decideFn: (alert: Alert) => AlertEvent[]): Promise<{ alert: Alert; events: AlertEvent[]; position: Position | null }> {
    const r = await this.aggregates.execute(ALERT_STREAM(alertId), alertDecider, decideFn);
    return { alert: r.state, events: r.events, position: r.position };
  }

  /** The account's live alert; not_found for a deleted one or another account's (never reveal it exists). */
  async owned(accountId: string, alertId: string): Promise<LiveAlert> {
    const { alert } = await this.load(alertId);
    if (alert.status !== 'live' || alert.accountId !== accountId) return fail('not_found', 'No such alert.');
    return alert;
  }

  async create(accountId: string, input: AlertInput): Promise<AlertWritten> {
    const planId = await this.lookups.planOf(accountId);
    const rule = await this.checkedRule(accountId, planId, input.rule);
    checkChannelsOnPlan(this.plans, planId, input.channels);
    const fresh = freshChannels(input.channels.length);
    const channels = resolveChannels([], input.channels, fresh);
    const alertId = newAlertId();
    const definition: AlertDefinition = { name: input.name, rule, channels, enabled: input.enabled ?? true };
    await this.takeSlot(accountId, alertId);
    const r = await this.execute(alertId, (alert) => alertDecider.decide({ type: 'CreateAlert', alertId, accountId, definition, at: this.at() }, alert));
    return { alertId, position: r.position, secrets: secretsOf(channels, fresh) };
  }

  /**
   * Every part of the definition the patch leaves out is the alert's as decided on, so a
   * concurrent edit of another part is kept. A rule patch is checked (asynchronously) against the
   * rule first read: when another edit changed the rule meanwhile, it is patched and checked again.
   */
  async update(accountId: string, alertId: string, patch: AlertPatch): Promise<AlertWritten> {
    for (let attempt = 1; ; attempt++) {
      const current = await this.owned(accountId, alertId);
      const planId = await this.lookups.planOf(accountId);
      const patchedRule = patch.rule ? await this.checkedRule(accountId, planId, patchRule(current.rule, patch.rule)) : null;
      if (patch.channels) checkChannelsOnPlan(this.plans, planId, patch.channels);
      const fresh = freshChannels(patch.channels?.length ?? 0);
      let ruleMoved = false;
      const r = await this.execute(alertId, (alert) => {
        if (alert.status !== 'live' || alert.accountId !== accountId) return fail('not_found', 'No such alert.');
        ruleMoved = patchedRule !== null && !isDeepStrictEqual(alert.rule, current.rule);
        if (ruleMoved) return [];
        const definition: AlertDefinition = {
          name: patch.name ?? alert.name,
          rule: patchedRule ?? alert.rule,
          channels: patch.channels ? resolveChannels(alert.channels, patch.channels, fresh) : alert.channels,
          enabled: patch.enabled ?? alert.enabled,
        };
        return alertDecider.decide({ type: 'UpdateAlert', definition, ...this.notice(planId), at: this.at() }, alert);
      });
      if (ruleMoved) {
        if (attempt >= MAX_RULE_ATTEMPTS) fail('concurrency_conflict', 'Too many concurrent changes; try again.');
        continue;
      }
      const channels = r.alert.status === 'none' ? [] : r.alert.channels;
      // Unchanged (perhaps a concurrent request made the same edit): the answer waits for the read models to show the alert as it is.
      const position = r.position ?? (await this.aggregates.lastPosition(ALERT_STREAM(alertId)));
      return { alertId, position, secrets: secretsOf(channels, fresh) };
    }
  }

  async delete(accountId: string, alertId: string): Promise<Position | null> {
    await this.owned(accountId, alertId);
    const planId = await this.lookups.planOf(accountId);
    const r = await this.execute(alertId, (alert) => {
      if (alert.status !== 'live' || alert.accountId !== accountId) return fail('not_found', 'No such alert.');
      return alertDecider.decide({ type: 'DeleteAlert', ...this.notice(planId), at: this.at() }, alert);
    });
    await this.releaseSlot(accountId, alertId, 'deleted');
    return r.position;
  }

  // ── Alert slots: the plan's maximum of alert rules, race-free on the account stream ──────────

  /**
   * Takes a slot on the account stream (at the revision read, so concurrent creations cannot
   * pass the maximum) before the alert's stream is written. At the maximum, slots left behind by
   * a half-done create or delete are repaired first, so a crash never locks an account out.
   */
  private async takeSlot(accountId: string, alertId: string): Promise<void> {
    const take = async () => {
      const { state } = await this.accountStreams.load(STREAM.account(accountId), this.accounts);
      const alertsBeforeSlots = state.exists && state.alertSlots === null ? await this.liveAlertIds(accountId) : [];
      await this.accountStreams.run(STREAM.account(accountId), this.accounts, { type: 'TakeAlertSlot', alertId, alertsBeforeSlots, at: this.at() });
    };
    await takePlanSlot(take, 'alert_limit_reached', () => this.repairSlots(accountId));
  }

  private async releaseSlot(accountId: string, alertId: string, reason: 'deleted' | 'abandoned'): Promise<void> {
    await this.accountStreams.run(STREAM.account(accountId), this.accounts, { type: 'ReleaseAlertSlot', alertId, reason, at: this.at() });
  }

  /** The account's alerts that are live on their own streams (the read model may lag a delete). */
  private async liveAlertIds(accountId: string): Promise<string[]> {
    const ids = await this.lookups.alertIdsOf(accountId);
    const alerts = await Promise.all(ids.map(async (id) => (await this.load(id)).alert));
    return alerts.flatMap((a) => (a.status === 'live' && a.accountId === accountId ? [a.alertId] : []));
  }

  /** Frees slots of deleted alerts and of creations abandoned before their alert was written. True if any was freed. */
  private async repairSlots(accountId: string): Promise<boolean> {
    const { state } = await this.accountStreams.load(STREAM.account(accountId), this.accounts);
    if (!state.exists || state.alertSlots === null) return false;
    let changed = false;
    for (const [alertId, takenAt] of state.alertSlots) {
      const { alert } = await this.load(alertId);
      const abandoned = alert.status === 'none' && this.now().getTime() - Date.parse(takenAt) > ABANDONED_SLOT_MS;
      if (alert.status === 'deleted' || abandoned) {
        await this.releaseSlot(accountId, alertId, abandoned ? 'abandoned' : 'deleted');
        changed = true;
      }
    }
    return changed;
  }

  /** For the evaluator: records what the measurement changes (fired, resolved…), if anything. */
  async evaluate(alertId: string, measurement: Measurement): Promise<{ events: AlertEvent[]; position: Position | null }> {
    const { alert } = await this.load(alertId);
    if (alert.status !== 'live') return { events: [], position: null };
    const planId = await this.lookups.planOf(alert.accountId);
    const r = await this.execute(alertId, (a) => alertDecider.decide({ type: 'EvaluateAlert', measurement, ...this.notice(planId), at: this.at() }, a));
    return { events: r.events, position: r.position };
  }

  /**
   * For the notifier: the alert now (is the notification superseded, is its channel still
   * there?) and the alert as it was when the notification was decided, in one read. Every attempt
   * of a notification describes the latter, so a retry after an edit says what its first attempt
   * said, under the same `webhook-id`. `notified` is null when the stream has no such notification.
   * `attemptsMade`: the attempts of this notification to this channel the stream records (the
   * queue, a read model, may not show the last ones yet, just after a crash).
   */
  async forDelivery(alertId: string, notificationId: string, channelId: string): Promise<{ alert: Alert; notified: LiveAlert | null; attemptsMade: number }> {
    let alert: Alert = alertDecider.initialState();
    let notified: LiveAlert | null = null;
    let attemptsMade = 0;
    for (const stored of await this.store.readStream(ALERT_STREAM(alertId))) {
      const event = decodeAlertEvent(stored);
      if (!event) continue;
      alert = alertDecider.evolve(alert, event);
      if (event.type === 'NotificationAttempted') {
        if (event.data.notificationId === notificationId && event.data.channelId === channelId) attemptsMade = Math.max(attemptsMade, event.data.attempt);
      } else if (event.type === 'AlertFired' || event.type === 'AlertRenotified' || event.type === 'AlertResolved') {
        if (event.data.notificationId === notificationId && alert.status !== 'none') notified = alert;
      }
    }
    return { alert, notified, attemptsMade };
  }

  /** For the notifier: one delivery attempt (and the channel's disabling on 410). */
  async recordAttempt(alertId: string, attempt: DeliveryAttempt): Promise<Position | null> {
    const r = await this.execute(alertId, (alert) => alertDecider.decide({ type: 'RecordNotificationAttempt', ...attempt, at: this.at() }, alert));
    return r.position;
  }

  private notice(planId: PlanId) {
    return { notificationId: newNotificationId(), allowedChannels: this.plans[planId].channels };
  }

  /** The rule with defaults, or a 400 naming each bad field; the token must be the account's (404); the limit must exist (422). */
  private async checkedRule(accountId: string, planId: PlanId, input: RuleInput): Promise<AlertRule> {
    const { rule, issues } = ruleFromInput(input);
    if (issues.length > 0) {
      const errors = issues.map((i) => ({ path: snake(i.field), message: i.message }));
      fail('validation_failed', errors.map((e) => `${e.path}: ${e.message}`).join('; '), { errors });
    }
    const plan = this.plans[planId];
    const token = rule.tokenId === null ? null : await this.lookups.tokenOf(accountId, rule.tokenId);
    if (rule.tokenId !== null && token === null) fail('not_found', `No such token: ${rule.tokenId}.`);
    if (isMonthly(rule) && plan.monthly_requests === null) {
      const tokenLimit = plan.custom_limits ? (token?.monthlyLimit ?? null) : null;
      if (rule.type === 'usage_threshold' || tokenLimit === null) {
        fail(
          'alert_not_applicable',
          `A percentage of the monthly limit needs a limit; ${rule.type === 'usage_threshold' ? 'the account' : 'this token'} on ${plan.name} has none.`,
          {
            plan: plan.id,
          },
        );
      }
    }
    return rule;
  }
}

/**
 * The rule after an edit. Within the same type and condition the given fields replace the old
 * ones; a new type or condition starts from its defaults (old windows or minimums may not apply
 * to it) and keeps the threshold only when it is in the same unit.
 */
export function patchRule(current: AlertRule, patch: Partial<RuleInput>): RuleInput {
  const given = Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) as Partial<RuleInput>;
  const type = given.type ?? current.type;
  const condition = 'condition' in given ? given.condition : type === current.type ? current.condition : null;
  const reshaped = type !== current.type || (condition ?? null) !== current.condition;
  if (!reshaped) return { ...current, ...given, type };
  const sameUnit = thresholdUnit({ type, condition: condition ?? null }) === thresholdUnit(current);
  const threshold = given.threshold ?? (sameUnit ? current.threshold : undefined);
  if (threshold === undefined) {
    fail('validation_failed', 'threshold: required when the type or condition changes its unit', {
      errors: [{ path: 'threshold', message: 'required when the type or condition changes its unit' }],
    });
  }
  return { type, condition, tokenId: type === current.type ? current.tokenId : null, ...given, threshold: threshold as number };
}

const freshChannels = (n: number) => Array.from({ length: n }, () => ({ id: newChannelId(), secret: generateWebhookSecret() }));

function secretsOf(channels: ReadonlyArray<{ id: string; type: string; secret?: string }>, fresh: ReadonlyArray<{ id: string }>): Record<string, string> {
  const created = new Set(fresh.map((f) => f.id));
  const out: Record<string, string> = {};
  for (const c of channels) if (c.type === 'webhook' && c.secret && created.has(c.id)) out[c.id] = c.secret;
  return out;
}
