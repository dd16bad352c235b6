import { z } from 'zod';

export const PLAN_IDS = ['free', 'developer', 'professional', 'unlimited'] as const;
export const PlanId = z.enum(PLAN_IDS);
export type PlanId = z.infer<typeof PlanId>;

export const CHANNEL_TYPES = ['email', 'webhook', 'chat', 'incident', 'sms'] as const;
export type ChannelType = (typeof CHANNEL_TYPES)[number];
export const EXPORT_FORMATS = ['csv', 'json', 'pdf'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];

export const Plan = z.object({
  id: PlanId,
  name: z.string(),
  /** Requests per second per token. */
  rps: z.number().int().positive(),
  /** Requests per calendar month (UTC) per account; null is unlimited. */
  monthly_requests: z.number().int().positive().nullable(),
  /** Maximum tokens not revoked; null is unlimited. */
  max_tokens: z.number().int().positive().nullable(),
  /** Maximum alert rules not deleted (each notifies up to 10 channels); null is unlimited. */
  max_alerts: z.number().int().positive().nullable(),
  custom_limits: z.boolean(),
  expiration: z.boolean(),
  channels: z.array(z.enum(CHANNEL_TYPES)),
  retention_days: z.number().int().positive(),
  exports: z.array(z.enum(EXPORT_FORMATS)),
  /** Chain path ids the plan may call; null is every chain. */
  chains: z.array(z.string()).nullable(),
  /** WebSocket connections open at once per token (on one gateway instance); null is no cap. */
  ws_connections: z.number().int().positive().nullable(),
  /** Subscriptions (eth_subscribe) open at once per WebSocket connection; null is no cap. */
  ws_subscriptions: z.number().int().positive().nullable(),
});
export type Plan = z.infer<typeof Plan>;
export type PlanCatalog = Readonly<Record<PlanId, Plan>>;

export const DEFAULT_PLANS: PlanCatalog = {
  free: {
    id: 'free',
    name: 'Free',
    rps: 5,
    monthly_requests: 100_000,
    max_tokens: 2,
    max_alerts: 5,
    custom_limits: false,
    expiration: false,
    channels: ['email'],
    retention_days: 7,
    exports: ['csv'],
    chains: ['eth', 'bsc', 'matic', 'sol', 'local'],
    ws_connections: 2,
    ws_subscriptions: 10,
  },
  developer: {
    id: 'developer',
    name: 'Developer',
    rps: 25,
    monthly_requests: 5_000_000,
    max_tokens: 5,
    max_alerts: 20,
    custom_limits: true,
    expiration: true,
    channels: ['email', 'webhook'],
    retention_days: 30,
    exports: ['csv', 'json'],
    chains: null,
    ws_connections: 10,
    ws_subscriptions: 50,
  },
  professional: {
    id: 'professional',
    name: 'Professional',
    rps: 100,
    monthly_requests: 50_000_000,
    max_tokens: 20,
    max_alerts: 50,
    custom_limits: true,
    expiration: true,
    channels: ['email', 'webhook', 'chat', 'incident'],
    retention_days: 90,
    exports: ['csv', 'json', 'pdf'],
    chains: null,
    ws_connections: 50,
    ws_subscriptions: 200,
  },
  unlimited: {
    id: 'unlimited',
    name: 'Unlimited',
    rps: 500,
    monthly_requests: null,
    max_tokens: null,
    max_alerts: 200,
    custom_limits: true,
    expiration: true,
    channels: ['email', 'webhook', 'chat', 'incident', 'sms'],
    retention_days: 365,
    exports: ['csv', 'json', 'pdf'],
    chains: null,
    ws_connections: null,
    ws_subscriptions: null,
  },
};

const PlanOverrides = z.partialRecord(PlanId, Plan.omit({ id: true }).partial().strict());

/** Merges an operator's overrides (PLANS_CONFIG) into the default catalog; unknown plan ids or fields are refused. */
export function planCatalog(overrides: unknown = {}): PlanCatalog {
  const parsed = PlanOverrides.parse(overrides);
  const out = { ...DEFAULT_PLANS } as Record<PlanId, Plan>;
  for (const id of PLAN_IDS) {
    const o = parsed[id];
    if (o) out[id] = Plan.parse({ ...out[id], ...o, id });
  }
  return out;
}

export const planAllowsChain = (plan: Plan, chain: string): boolean => plan.chains === null || plan.chains.includes(chain);

/** The stricter of two monthly limits, null being unlimited. */
const atMost = (own: number | null, plan: number | null): number | null => (own === null ? plan : plan === null ? own : Math.min(own, plan));

/**
 * The limits a token runs under: its own rate and monthly limits where the plan allows custom
 * limits, otherwise the plan's; the stricter of its own and the plan's, since a token's limits set
 * on a bigger plan outlive a downgrade. `ownMonthly`: the token counts against its own quota, not
 * the account's (the spec: a token with its own limit does not count against the account's).
 */
export function effectiveTokenLimits(
  plan: Plan,
  token: { monthlyLimit: number | null; rateLimit: number | null },
): { rps: number; monthly: number | null; ownMonthly: boolean } {
  const custom = plan.custom_limits;
  const ownMonthly = custom && token.monthlyLimit !== null;
  return {
    rps: custom && token.rateLimit !== null ? Math.min(token.rateLimit, plan.rps) : plan.rps,
    monthly: ownMonthly ? atMost(token.monthlyLimit, plan.monthly_requests) : plan.monthly_requests,
    ownMonthly,
  };
}
