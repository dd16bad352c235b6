import { z } from 'zod';
import { CHANNEL_TYPES, Plan as DomainPlan, PlanId as DomainPlanId, EXPORT_FORMATS } from '../domain/plans.js';

/**
 * The management API's answers (DESIGN §4) as zod schemas, defined once: the routes declare
 * them (the OpenAPI document is generated from them; tests check every answer against them),
 * src/api/types.ts infers the wire types from them, and the dashboard reads those types.
 * Imports only zod and the domain's plan schema (zod only): the dashboard's tsconfig (browser,
 * no Node types) checks this file too. Field names are as on the wire: snake_case for records, camelCase for metrics; times
 * are ISO 8601 UTC. Objects are open (not strict): a client must accept fields added later.
 */

const time = z.iso.datetime({ offset: true }).meta({ examples: ['2024-05-01T12:00:00.000Z'] });
const nullableTime = time.nullable();
const count = z.number().int().nonnegative();

// ── Plans and the account ────────────────────────────────────────────────────────────────

export const PlanId = DomainPlanId;
export const ChannelType = z.enum(CHANNEL_TYPES);
export const ExportFormat = z.enum(EXPORT_FORMATS);
/** The domain's plan as it is: the operator's catalog (PLANS_CONFIG) is validated by the same schema. */
export const Plan = DomainPlan.meta({ id: 'Plan', description: 'A plan as the account shows it; null is unlimited (for `chains`: every chain).' });

export const Account = z
  .object({
    id: z.string(),
    email: z.string(),
    created_at: time,
    plan: Plan,
    usage: z.object({
      month: z.string().describe('YYYY-MM (UTC).'),
      requests: count,
      monthly_limit: z.number().nullable(),
      remaining: z.number().nullable(),
      resets_at: time,
    }),
    tokens: z.object({ count, max: z.number().nullable() }).describe("Tokens neither revoked nor expired, against the plan's maximum."),
  })
  .meta({ id: 'Account', description: 'The account, its plan and its usage this month.' });

export const SignedUp = z
  .object({ id: z.string(), email: z.string(), plan: PlanId })
  .meta({ id: 'SignedUp', examples: [{ id: 'acc_3x7QbV9kLm2PzR4t', email: 'owner@example.com', plan: 'free' }] });

export const LoggedIn = z.object({ id: z.string() }).meta({ id: 'LoggedIn', examples: [{ id: 'acc_3x7QbV9kLm2PzR4t' }] });

// ── API tokens and access tokens ─────────────────────────────────────────────────────────

export const TokenStatus = z.enum(['active', 'disabled', 'revoked', 'expired']);

const tokenRecordExample = {
  id: 'tok_8FhK2mQw9ZtR1cVb',
  name: 'backend',
  description: '',
  status: 'active',
  masked: 'gk_…f3a9',
  created_at: '2024-05-01T12:00:00.000Z',
  last_used_at: null,
  current_month_usage: 0,
  expires_at: null,
  monthly_limit: null,
  rate_limit: null,
};

export const TokenRecord = z
  .object({
    id: z.string(),
    name: z.string(),
    description: z.string(),
    status: TokenStatus,
    masked: z.string(),
    created_at: time,
    last_used_at: nullableTime,
    current_month_usage: count,
    expires_at: nullableTime,
    monthly_limit: z.number().nullable(),
    rate_limit: z.number().nullable(),
  })
  .meta({ id: 'TokenRecord', description: 'An API token; never the token string, except in the creation answer.', examples: [tokenRecordExample] });

export const CreatedToken = TokenRecord.extend({ token: z.string().describe('The token string: shown in this answer only.') }).meta({
  id: 'CreatedToken',
  examples: [{ ...tokenRecordExample, token: 'gk_<64 characters>' }],
});

export const TokenList = z.object({ tokens: z.array(TokenRecord) }).meta({ id: 'TokenList' });

const TokenHistoryState = z
  .object({
    name: z.string(),
    description: z.string(),
    status: TokenStatus,
    masked: z.string(),
    expires_at: nullableTime,
    monthly_limit: z.number().nullable(),
    rate_limit: z.number().nullable(),
  })
  .describe("The token's own fields after the entry (a plan change leaves them as they were).");

export const TokenHistory = z
  .object({
    token_id: z.string(),
    events: z.array(
      z.discriminatedUnion('kind', [
        z.object({
          kind: z.literal('token').describe("An event of the token's own stream."),
          revision: count.describe("The event's revision in the token's stream."),
          type: z.string().describe("The event's type, e.g. `ApiTokenRenamed`."),
          at: time,
          recorded_at: time,
          state: TokenHistoryState,
        }),
        z.object({
          kind: z
            .literal('account')
            .describe(
              "A change of the account's plan while the token lived (after its creation, before its revocation or expiry): it changes the limits, quota and retention the token is held to. The event records no actor: plans are changed by the operator.",
            ),
          type: z.literal('AccountPlanChanged'),
          at: time,
          recorded_at: time,
          plan: z.object({ from: PlanId, to: PlanId }),
          state: TokenHistoryState,
        }),
      ]),
    ),
  })
  .meta({
    id: 'TokenHistory',
    description: "The token's events and its account's plan changes in its life, in the log's order, with the token's state after each.",
  });

const accessTokenExample = { id: 'key_5RtY7uI9oP1aS3dF', name: 'ci', masked: 'gka_…7c21', status: 'active', created_at: '2024-05-01T12:00:00.000Z' };

export const AccessTokenRecord = z
  .object({ id: z.string(), name: z.string(), masked: z.string(), status: z.enum(['active', 'revoked']), created_at: time })
  .meta({ id: 'AccessTokenRecord', description: 'A personal access token (`gka_…`) for the management API.', examples: [accessTokenExample] });

export const CreatedAccessToken = AccessTokenRecord.extend({ token: z.string().describe('The token string: shown in this answer only.') }).meta({
  id: 'CreatedAccessToken',
  examples: [{ ...accessTokenExample, token: 'gka_<64 characters>' }],
});

export const AccessTokenList = z.object({ access_tokens: z.array(AccessTokenRecord) }).meta({ id: 'AccessTokenList' });

// ── Metrics ──────────────────────────────────────────────────────────────────────────────

const rate = z.number().nullable();
export const UsageFigures = z
  .object({
    requests: count,
    success: count,
    errors: count,
    successRate: rate,
    errorRate: rate,
    avgResponseMs: rate,
    p50ResponseMs: rate,
    p95ResponseMs: rate,
    p99ResponseMs: rate,
    avgNodeLatencyMs: rate,
    cacheHits: count.describe("Calls answered from the gateway's response cache: no node was asked."),
    coalesced: count.describe('Calls that shared an identical call in flight: one node call served several.'),
    hedged: count.describe('Calls sent to a second node because the first was slow.'),
  })
  .meta({ id: 'UsageFigures', description: 'Figures of a set of calls; rates are percentages, times ms; null when there were no calls.' });

export const ChainFigures = UsageFigures.extend({ chain: z.string() }).meta({ id: 'ChainFigures' });
export const MethodFigures = UsageFigures.extend({ chain: z.string(), method: z.string().describe('A JSON-RPC method or a normalised REST path.') }).meta({
  id: 'MethodFigures',
});
export const TokenFigures = UsageFigures.extend({ tokenId: z.string() }).meta({ id: 'TokenFigures' });

/** How many entries `byMethod` and `errors` hold at most: past that, `byMethodOther` and `errorsOther` sum the rest. */
export const BY_METHOD_MAX = 100;
export const ERROR_GROUPS_MAX = 50;

export const OtherMethods = UsageFigures.extend({
  methods: count.describe('How many (chain, method) entries are summed here: those past the first 100 of `byMethod`.'),
}).meta({
  id: 'OtherMethods',
  description:
    'The (chain, method) entries left out of `byMethod`, summed over every chain: `byMethod` and this add up to `totals` (counts; its rates, times and percentiles are those of the calls summed).',
});

export const OtherErrors = z
  .object({
    groups: count.describe('How many error groups are summed here: those past the first 50 of `errors`.'),
    count: count.describe('Their errors: the counts of `errors` and this add up to `totals.errors`.'),
    lastSeen: time.describe('The latest of their `lastSeen`.'),
  })
  .meta({ id: 'OtherErrors', description: 'The error groups left out of `errors`, summed.' });

export const SeriesGranularity = z.enum(['minute', 'hour', 'day']);

export const SeriesPoint = z
  .object({ t: time.describe('Start of the bucket.'), requests: count, errors: count, avgResponseMs: z.number().nullable() })
  .meta({ id: 'SeriesPoint' });

export const ErrorGroup = z
  .object({ code: z.number(), message: z.string(), chain: z.string(), method: z.string(), count, lastSeen: time })
  .meta({ id: 'ErrorGroup', description: 'Errors grouped by code, message, chain and method.' });

export const RecentError = z
  .object({
    at: time,
    requestId: z.string(),
    tokenId: z.string(),
    chain: z.string(),
    method: z.string(),
    status: z.number(),
    code: z.number(),
    message: z.string(),
  })
  .meta({ id: 'RecentError', description: 'One failed call.' });

export const ClientIp = z.object({ ip: z.string(), count, lastSeen: time }).meta({ id: 'ClientIp' });

export const MonthlyLimits = z
  .object({ monthlyLimit: z.number().nullable(), used: count, remaining: z.number().nullable(), resetsAt: time })
  .meta({ id: 'MonthlyLimits', description: 'The monthly quota (UTC calendar month).' });

const periodMetricsShape = {
  period: z
    .object({ start: time, end: time })
    .describe(
      "What the figures cover: whole minutes (hours for a daily series), start clamped to the plan's retention. A period wholly before the retention is empty: `start` equals `end` (see `retention`).",
    ),
  chain: z.string().nullable(),
  granularity: SeriesGranularity,
  totals: UsageFigures,
  byChain: z.array(ChainFigures),
  byMethod: z
    .array(MethodFigures)
    .describe(
      `Per chain and method, busiest first, at most ${BY_METHOD_MAX} entries: past that the rest are summed in \`byMethodOther\`, and only \`byMethod\` with \`byMethodOther\` adds up to \`totals\`.`,
    ),
  byMethodOther: OtherMethods.nullable().describe(
    `The entries past the first ${BY_METHOD_MAX} of \`byMethod\`, summed; null when \`byMethod\` holds every (chain, method) of the period.`,
  ),
  series: z.array(SeriesPoint),
  recentErrors: z.array(RecentError).describe('The newest 20 failed calls, newest first.'),
  retention: z
    .object({ retentionDays: z.number(), clamped: z.boolean(), earliest: time })
    .describe(
      '`clamped`: the asked `start` was older than the plan keeps (`earliest`), so the figures start at `earliest` instead (without a `start` they start there anyway, and `clamped` is false). An `end` not after `earliest` puts the whole period before the retention: the answer is an empty period, `period.start` equal to `period.end`, every count 0 and `series` empty, with `clamped` true when a `start` was given.',
    ),
};

/** What both metrics calls answer. */
export const PeriodMetrics = z.object(periodMetricsShape);

export const UserMetrics = z
  .object({
    ...periodMetricsShape,
    byToken: z.array(TokenFigures),
    errors: z
      .array(ErrorGroup)
      .describe(
        `Most frequent first, at most ${ERROR_GROUPS_MAX} groups: past that the rest are summed in \`errorsOther\`, and only the counts of \`errors\` with \`errorsOther.count\` add up to \`totals.errors\`.`,
      ),
    errorsOther: OtherErrors.nullable().describe(
      `The groups past the first ${ERROR_GROUPS_MAX} of \`errors\`, summed; null when \`errors\` holds every group.`,
    ),
    limits: MonthlyLimits,
  })
  .meta({ id: 'UserMetrics', description: "An account's usage, performance and errors over a period." });

export const TokenMetrics = z
  .object({
    token: TokenRecord.pick({ id: true, name: true, masked: true, status: true }),
    ...periodMetricsShape,
    clientIps: z
      .array(ClientIp)
      .describe(
        "The addresses the token was called from, counted per UTC day: over the whole days the period touches, on every chain and method (neither cut to the period's hours nor filtered by `chain` or `method`), busiest first, at most 100.",
      ),
    webSockets: z
      .object({ connections: count, subscriptions: count })
      .nullable()
      .describe(
        "The token's open WebSocket connections and their subscriptions now, on the gateway in this API's process (ROLE=all); null where the API runs apart from the gateways (ROLE=api): the gateways count their sockets each for itself, and nothing adds them up across instances.",
      ),
    limits: z
      .discriminatedUnion('appliesTo', [
        MonthlyLimits.extend({ appliesTo: z.literal('token') }),
        MonthlyLimits.extend({ appliesTo: z.literal('account'), tokenUsed: count }),
      ])
      .describe("A token without its own monthly limit draws on the account's."),
  })
  .meta({ id: 'TokenMetrics', description: "One token's analytics over a period." });

// ── Alerts ───────────────────────────────────────────────────────────────────────────────

export const AlertType = z.enum(['usage_threshold', 'error_rate', 'response_time', 'rate_limiting', 'token_usage']);
export const AlertState = z.enum(['ok', 'firing', 'resolved']);
export const ChannelStatus = z
  .enum(['active', 'disabled'])
  .describe('`disabled` after the endpoint answered 410 Gone; giving the channel again in an edit re-enables it.');

export const AlertChannel = z
  .union([
    z.object({ id: z.string(), type: z.enum(['email', 'sms']), to: z.string(), status: ChannelStatus }),
    z.object({
      id: z.string(),
      type: z.enum(['webhook', 'chat']),
      url: z.string(),
      status: ChannelStatus,
      secret: z.string().optional().describe("A webhook's `whsec_` signing secret, only in the answer that created the channel."),
    }),
    z.object({ id: z.string(), type: z.literal('incident'), routing_key: z.string(), status: ChannelStatus }),
  ])
  .meta({ id: 'AlertChannel' });

export const Alert = z
  .object({
    id: z.string(),
    name: z.string(),
    type: AlertType,
    condition: z.string().nullable(),
    threshold: z.number(),
    window_minutes: z.number().nullable(),
    token_id: z.string().nullable(),
    min_requests: z.number().nullable(),
    baseline_hours: z.number().nullable(),
    channels: z.array(AlertChannel),
    enabled: z.boolean(),
    state: AlertState,
    last_value: z.number().nullable().describe('The measured value of the last transition (fired, re-notified, resolved).'),
    fired_at: nullableTime,
    resolved_at: nullableTime,
    last_evaluation: z
      .object({ at: time, value: z.number().nullable(), breached: z.boolean() })
      .nullable()
      .describe("The evaluator's last look, fired or not."),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'Alert', description: 'An alert rule, its channels and its state.' });

export const AlertList = z.object({ alerts: z.array(Alert) }).meta({ id: 'AlertList' });

export const AlertNotification = z
  .object({
    notification_id: z.string(),
    kind: z.enum(['fired', 'renotified', 'resolved']),
    channel: z.object({ id: z.string(), type: ChannelType }),
    attempt: z.number().int().positive(),
    outcome: z.string().describe('delivered, retrying, failed, gone, refused or skipped.'),
    status: z.number().nullable(),
    error: z.string().nullable(),
    next_attempt_at: nullableTime,
    at: time,
  })
  .meta({ id: 'AlertNotification', description: 'One delivery attempt of a notification to a channel.' });

export const AlertNotifications = z
  .object({ alert_id: z.string(), notifications: z.array(AlertNotification).describe('Newest first.') })
  .meta({ id: 'AlertNotifications' });

// ── Errors ───────────────────────────────────────────────────────────────────────────────

export const Problem = z
  .looseObject({
    type: z.string().describe('`/problems/<code>`.'),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.string(),
    errors: z
      .array(z.object({ in: z.enum(['body', 'query', 'params']).optional(), path: z.string(), message: z.string() }))
      .optional()
      .describe('Each invalid field of a refused request (`validation_failed`).'),
  })
  .meta({
    id: 'Problem',
    description: "RFC 9457 problem details, as every error of the management API answers. Some codes carry more fields, e.g. the plan's maximum.",
    examples: [
      {
        type: '/problems/validation_failed',
        title: 'Bad Request',
        status: 400,
        detail: 'body.name: at most 100 characters',
        code: 'validation_failed',
        errors: [{ in: 'body', path: 'name', message: 'at most 100 characters' }],
      },
    ],
  });
