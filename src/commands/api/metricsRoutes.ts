import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { coveredPeriod } from '../../api/period.js';
import { TokenMetrics, UserMetrics } from '../../api/schemas.js';
import type { MonthlyLimits, PeriodMetrics, RecentError } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import { effectiveTokenLimits, type Plan } from '../../domain/plans.js';
import type { UsageReport, UsageScope } from '../../projections/metricsQueries.js';
import { DAY_MS, floorTo, nextBucket } from '../../projections/usageBuckets.js';
import { problems } from './contract.js';
import type { ApiDeps } from './deps.js';
import { invalidField, parseInput } from './input.js';
import { ownerOf } from './owner.js';
import { TokenParams } from './schemas.js';

const toMs = (ts: string): number => Date.parse(ts.length === 10 ? `${ts}T00:00:00Z` : ts);
/** The instants an answer's times (ISO 8601, four-digit years) can say: an offset can move 0000-01-01 into year -1. */
const FIRST_MS = Date.parse('0000-01-01T00:00:00Z');
const LAST_MS = Date.parse('9999-12-31T23:59:59.999Z');

/** ISO 8601 UTC per the spec; an offset is accepted and converted, a bare date means its midnight UTC. */
const Timestamp = z
  .union([z.iso.datetime({ offset: true }), z.iso.date()], { error: 'must be an ISO 8601 timestamp, e.g. 2024-05-01T00:00:00Z' })
  .refine((ts) => toMs(ts) >= FIRST_MS && toMs(ts) <= LAST_MS, { error: 'must be between 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z in UTC' });

/** `?start&end&chain&method`, each optional (the metrics call, the token analytics and the exports). */
export const PeriodQuery = z.strictObject({
  start: Timestamp.optional(),
  end: Timestamp.optional(),
  chain: z.string().max(64).optional(),
  method: z.string().min(1).max(200).optional(),
});

const iso = (ms: number): string => new Date(ms).toISOString();

export interface ResolvedPeriod {
  scope: UsageScope;
  /** What the figures cover: minute-aligned, start clamped to the plan's retention. */
  period: PeriodMetrics['period'];
  chain: string | null;
  granularity: UsageScope['granularity'];
  retention: PeriodMetrics['retention'];
}

/** What both metrics answers say of their period, from the resolved period and its figures. */
function periodMetrics(resolved: ResolvedPeriod, report: UsageReport, recentErrors: RecentError[]): PeriodMetrics {
  const { period, chain, granularity, retention } = resolved;
  const { totals, byChain, byMethod, byMethodOther, series } = report;
  return { period, chain, granularity, totals, byChain, byMethod, byMethodOther, series, recentErrors, retention };
}

/**
 * Reads `start`, `end` and `chain`: no `start` is the plan's whole retention window, no `end`
 * is now; a `start` older than the retention is clamped (and said so). What the period covers,
 * in whole minutes or hours, is `coveredPeriod`'s (src/api/period.ts, which the dashboard's
 * exports page uses too), and `period` says it exactly. Whole hours keep a 30-day query to
 * about 75 documents per (token, chain, method) instead of about 200.
 */
export function resolvePeriod(query: unknown, context: { accountId: string; plan: Plan; now: Date; chainIds: readonly string[] }): ResolvedPeriod {
  const q = parseInput('query', PeriodQuery, query ?? {});
  const now = context.now.getTime();
  const end = q.end === undefined ? now : toMs(q.end);
  const requestedStart = q.start === undefined ? null : toMs(q.start);
  if (end > now + DAY_MS) invalidField('query', 'end', 'must not be more than a day in the future.');
  if (requestedStart !== null && end <= requestedStart) {
    // Without an `end` the period ends now: the `start` is the parameter to change.
    if (q.end === undefined) invalidField('query', 'start', 'must be before now when no end is given.');
    invalidField('query', 'end', 'must be after start.');
  }
  if (q.chain !== undefined && !context.chainIds.includes(q.chain)) {
    invalidField('query', 'chain', `unknown chain "${q.chain}"; known chains: ${context.chainIds.join(', ')}.`);
  }
  const covered = coveredPeriod({ start: requestedStart, end }, now, context.plan.retention_days);
  const { granularity, clamped, earliest } = covered;
  const chain = q.chain ?? null;
  return {
    scope: { accountId: context.accountId, start: covered.start, end: covered.end, granularity, chain, method: q.method ?? null },
    period: { start: iso(covered.start), end: iso(covered.end) },
    chain,
    granularity,
    retention: { retentionDays: context.plan.retention_days, clamped, earliest: iso(earliest) },
  };
}

/** The monthly quota as the metrics show it (UTC calendar month). */
export function monthlyLimits(monthlyLimit: number | null, used: number, now: Date): MonthlyLimits {
  return {
    monthlyLimit,
    used,
    remaining: monthlyLimit === null ? null : Math.max(0, monthlyLimit - used),
    resetsAt: iso(nextBucket(floorTo(now.getTime(), 'month'), 'month')),
  };
}

/**
 * The account's monthly quota as the metrics and the PDF export show it: its plan's limit against
 * Queries.accountQuotaUsage, the figure the limiter and the account view's remaining count.
 */
export async function accountLimits(deps: ApiDeps, accountId: string, plan: Plan): Promise<MonthlyLimits> {
  return monthlyLimits(plan.monthly_requests, await deps.queries.accountQuotaUsage(accountId, deps.plans), deps.now());
}

/** The caller's account and plan, and the period the request's query asks for (metrics and exports). */
export async function periodFor(request: FastifyRequest, deps: ApiDeps, accountId: string) {
  const account = await deps.queries.account(accountId);
  if (!account) throw new DomainError('not_found', 'No such account.');
  const plan = deps.plans[account.plan];
  return { account, plan, resolved: resolvePeriod(request.query, { accountId, plan, now: deps.now(), chainIds: deps.chainIds }) };
}

/** The metrics API (DESIGN §4): an account's usage, performance and errors, and one token's analytics. */
export const metricsRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  const tags = ['metrics'];
  const user = {
    summary: "The account's usage, performance and errors over a period",
    description: "No `start` is the plan's whole retention window, no `end` is now; an older `start` is clamped (`retention.clamped`).",
    tags,
    querystring: PeriodQuery,
    response: { 200: UserMetrics, ...problems(404) },
  };
  // The spec has this call carry an API token; an access token or the dashboard's session work too.
  app.get('/api/v1/metrics/user', { config: { auth: 'metrics' }, schema: user }, async (request) => {
    const { accountId } = ownerOf(request);
    const { plan, resolved } = await periodFor(request, deps, accountId);
    const { scope } = resolved;
    const [report, errors, recentErrors, limits] = await Promise.all([
      deps.usage.usage(scope),
      deps.usage.errorGroups(scope),
      deps.usage.recentErrors(scope),
      accountLimits(deps, accountId, plan),
    ]);
    return { ...periodMetrics(resolved, report, recentErrors), byToken: report.byToken, ...errors, limits };
  });

  const token = {
    summary: "One API token's analytics over a period",
    tags,
    params: TokenParams,
    querystring: PeriodQuery,
    response: { 200: TokenMetrics, ...problems(404) },
  };
  app.get('/api/v1/metrics/tokens/:id', { config: { auth: 'owner' }, schema: token }, async (request) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    const { plan, resolved } = await periodFor(request, deps, accountId);
    const token = await deps.queries.token(accountId, id);
    if (!token) throw new DomainError('not_found', 'No such token.');
    const scope = { ...resolved.scope, tokenId: id };
    const ownLimit = plan.custom_limits && token.monthly_limit !== null;
    const [report, recentErrors, clientIps, account] = await Promise.all([
      deps.usage.usage(scope),
      deps.usage.recentErrors(scope),
      deps.usage.clientIps(scope),
      ownLimit ? null : accountLimits(deps, accountId, plan),
    ]);
    return {
      token: { id: token.id, name: token.name, masked: token.masked, status: token.status },
      ...periodMetrics(resolved, report, recentErrors),
      clientIps,
      webSockets: deps.liveWebSockets(id),
      // A token without its own limit draws on the account's (spec: Authentication 6).
      limits: account
        ? { ...account, appliesTo: 'account' as const, tokenUsed: token.current_month_usage }
        : {
            // The limit the gateway holds it to: its own, or its plan's total where a downgrade made that the lower.
            ...monthlyLimits(effectiveTokenLimits(plan, { monthlyLimit: token.monthly_limit, rateLimit: null }).monthly, token.current_month_usage, deps.now()),
            appliesTo: 'token' as const,
          },
    };
  });
};
