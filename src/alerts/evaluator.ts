import { z } from 'zod';
import type { AlertCommands } from '../commands/alertCommands.js';
import { evaluationStep, type TokenEnd } from '../domain/alert.js';
import { AlertRule } from '../domain/alertEvents.js';
import { effectiveStatus } from '../domain/apiToken.js';
import { effectiveTokenLimits, type Plan, type PlanCatalog } from '../domain/plans.js';
import type { Position } from '../infra/eventstore/port.js';
import type { AlertQueries } from '../projections/alertsQueries.js';
import type { Queries } from '../projections/queries.js';
import { floorTo } from '../projections/usageBuckets.js';
import type { AlertMetrics } from './alertMetrics.js';
import { type Figures, measure } from './measure.js';
import { RoundReads } from './roundReads.js';

/** What the evaluator reads of an alert document; anything else in the read model is skipped, not trusted. */
const EvaluatedAlert = z.object({
  id: z.string().min(1),
  accountId: z.string().min(1),
  enabled: z.boolean(),
  state: z.enum(['ok', 'firing', 'resolved']),
  resolvedAt: z.string().nullable(),
  lastNotifiedAt: z.string().nullable(),
  rule: AlertRule,
});
type EvaluatedAlert = z.infer<typeof EvaluatedAlert>;

/** The rule's window at `now`: its last `windowMinutes` (empty for month-based rules). */
const windowOf = (rule: AlertRule, now: Date) => ({ from: new Date(now.getTime() - (rule.windowMinutes ?? 0) * 60_000), to: now });

export interface EvaluationReport {
  evaluated: number;
  /** Unreadable alert documents. */
  skipped: number;
  /** Alerts whose evaluation threw (reported to onError; the others went on). */
  failed: number;
  /** Events appended, e.g. `AlertFired`, by alert. */
  transitions: Array<{ alertId: string; event: string }>;
}

export interface AlertEvaluatorDeps {
  alerts: AlertQueries;
  queries: Queries;
  plans: PlanCatalog;
  metrics: AlertMetrics;
  commands: AlertCommands;
  now: () => Date;
  /** Resolves once the read models include `position`: a pass ends with its transitions queued for the notifier. */
  waitFor?: (position: Position | null) => Promise<void>;
  onError?: (error: unknown, alertId: string | null) => void;
}

/**
 * Looks at every enabled alert, measures its rule on the read models and records what changes
 * (fired, re-notified, resolved, back to ok) on the alert's stream. It only appends events: the
 * notifier delivers them, so a slow endpoint never holds up an evaluation. One bad alert or one
 * bad figure is reported and skipped; the pass goes on.
 */
export class AlertEvaluator {
  constructor(private readonly deps: AlertEvaluatorDeps) {}

  private report(error: unknown, alertId: string | null): void {
    try {
      this.deps.onError?.(error, alertId);
    } catch {
      // a failing error reporter must not stop the pass either
    }
  }

  async runOnce(): Promise<EvaluationReport> {
    const report: EvaluationReport = { evaluated: 0, skipped: 0, failed: 0, transitions: [] };
    const now = this.deps.now();
    const at = now.toISOString();
    let rows: Array<{ key: string; doc: Record<string, unknown> }>;
    try {
      rows = await this.deps.alerts.allAlertDocs();
    } catch (e) {
      this.report(e, null);
      return report;
    }
    const observations: Parameters<AlertQueries['recordObservations']>[0] = [];
    let last: Position | null = null;
    const alerts: EvaluatedAlert[] = [];
    for (const row of rows) {
      const parsed = EvaluatedAlert.safeParse(row.doc);
      if (!parsed.success) {
        report.skipped++;
        this.report(new Error(`alert ${row.key}: unreadable document (${parsed.error.issues[0]?.message ?? 'invalid'})`), row.key);
        continue;
      }
      if (parsed.data.enabled) alerts.push(parsed.data);
    }
    // Each account, token and window is read once this round, however many rules watch it.
    const round = new RoundReads(this.deps.queries, this.deps.metrics, now);
    for (const { accountId, rule } of alerts) {
      if (rule.type !== 'rate_limiting' || rule.condition === 'approaching') continue;
      const { from, to } = windowOf(rule, now);
      round.needRefusals(accountId, rule.tokenId, from, to, rule.threshold);
    }
    for (const alert of alerts) {
      try {
        const ended = await this.tokenEnd(alert, round, at);
        if (ended !== null) {
          // Its token is revoked or expired: resolved once if firing, then no longer evaluated.
          if (alert.state === 'firing') {
            const { events, position } = await this.deps.commands.evaluate(alert.id, { breached: false, value: null, summary: '', ended });
            for (const e of events) report.transitions.push({ alertId: alert.id, event: e.type });
            if (position !== null && (last === null || position > last)) last = position;
          }
          continue;
        }
        const m = measure(alert.rule, await this.figures(alert, round, now));
        observations.push({ alertId: alert.id, value: m.value, breached: m.breached, at });
        // Ask the read model first: an alert with nothing to change costs no stream read.
        if (evaluationStep(alert, m.breached, at) !== null) {
          const { events, position } = await this.deps.commands.evaluate(alert.id, m);
          for (const e of events) report.transitions.push({ alertId: alert.id, event: e.type });
          if (position !== null && (last === null || position > last)) last = position;
        }
        report.evaluated++;
      } catch (e) {
        report.failed++;
        this.report(e, alert.id);
      }
    }
    try {
      await this.deps.alerts.recordObservations(observations);
      await this.deps.waitFor?.(last);
    } catch (e) {
      this.report(e, null);
    }
    return report;
  }

  /** Why the rule's token no longer takes calls (revoked, or past its expiry), or null. */
  private async tokenEnd(alert: EvaluatedAlert, round: RoundReads, at: string): Promise<TokenEnd | null> {
    if (alert.rule.tokenId === null) return null;
    const token = await round.tokenDoc(alert.rule.tokenId);
    if (!token || token.accountId !== alert.accountId) return null;
    const status = effectiveStatus(token, at);
    return status === 'revoked' ? 'token_revoked' : status === 'expired' ? 'token_expired' : null;
  }

  private async figures(alert: EvaluatedAlert, round: RoundReads, now: Date): Promise<Figures> {
    const { rule, accountId } = alert;
    const account = await round.account(accountId);
    const plan: Plan | undefined = account ? this.deps.plans[account.plan] : undefined;
    if (!plan) return { unavailable: `The account ${accountId} is not readable.` };
    const token = rule.tokenId === null ? null : await round.tokenDoc(rule.tokenId);
    if (rule.tokenId !== null && (!token || token.accountId !== accountId)) return { unavailable: `The token ${rule.tokenId} no longer exists.` };
    const { from, to } = windowOf(rule, now);
    const window = () => round.windowStats(accountId, rule.tokenId, from, to);

    switch (rule.type) {
      case 'usage_threshold':
        return { monthUsed: await round.monthUsage({ accountId }), monthlyLimit: plan.monthly_requests };
      case 'error_rate':
      case 'response_time':
        return { window: await window() };
      case 'rate_limiting': {
        if (rule.condition !== 'approaching') return { window: await window() };
        const watched = token
          ? [token]
          : (await round.tokens(accountId))
              .filter((t) => t.status === 'active')
              .map((t) => ({ id: t.id, monthlyLimit: t.monthly_limit, rateLimit: t.rate_limit }));
        let peakRpsPercent: number | null = null;
        for (const t of watched) {
          const stats = await round.windowStats(accountId, t.id, from, to);
          if (stats.requests === 0) continue;
          const share = (stats.peakRps / effectiveTokenLimits(plan, t).rps) * 100;
          peakRpsPercent = Math.max(peakRpsPercent ?? 0, share);
        }
        return { peakRpsPercent };
      }
      case 'token_usage': {
        if (!token) return { unavailable: 'token_usage needs a token.' };
        if (rule.condition === 'percent_of_limit') {
          // A token without a limit of its own is refused at the account's: that is the quota it uses up.
          const limits = effectiveTokenLimits(plan, token);
          const scope = limits.ownMonthly ? { tokenId: token.id } : { accountId };
          return { monthUsed: await round.monthUsage(scope), monthlyLimit: limits.monthly };
        }
        if (rule.condition === 'unusual_traffic' && rule.windowMinutes !== null && rule.baselineHours !== null) {
          // The baseline ends where the window's first minute starts, so no call is in both.
          const windowStart = floorTo(from.getTime(), 'minute');
          const baselineStart = new Date(windowStart - rule.baselineHours * 3_600_000);
          const baseline = await round.windowStats(accountId, token.id, baselineStart, new Date(windowStart - 1));
          return { window: await window(), baselinePerWindow: baseline.requests / ((rule.baselineHours * 60) / rule.windowMinutes) };
        }
        return { window: await window() };
      }
    }
  }
}
