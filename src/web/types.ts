/** Shapes of the management API (DESIGN §4) as the dashboard reads them. */

export type ChannelType = 'email' | 'webhook' | 'chat' | 'incident' | 'sms';
export type ExportFormat = 'csv' | 'json' | 'pdf';
export type PlanId = 'free' | 'developer' | 'professional' | 'unlimited';

export interface Plan {
  id: PlanId;
  name: string;
  rps: number;
  monthly_requests: number | null;
  max_tokens: number | null;
  custom_limits: boolean;
  expiration: boolean;
  channels: ChannelType[];
  retention_days: number;
  exports: ExportFormat[];
  chains: string[] | null;
}

export interface Account {
  id: string;
  email: string;
  created_at: string;
  plan: Plan;
  usage: { month: string; requests: number; monthly_limit: number | null; remaining: number | null; resets_at: string };
  tokens: { count: number; max: number | null };
}

export type TokenStatus = 'active' | 'disabled' | 'revoked' | 'expired';

export interface TokenRecord {
  id: string;
  name: string;
  description: string;
  status: TokenStatus;
  masked: string;
  created_at: string;
  last_used_at: string | null;
  current_month_usage: number;
  expires_at: string | null;
  monthly_limit: number | null;
  rate_limit: number | null;
}

/** Only the creation answer carries the token string. */
export interface CreatedToken extends TokenRecord {
  token: string;
}

export interface AccessTokenRecord {
  id: string;
  name: string;
  masked: string;
  status: 'active' | 'revoked';
  created_at: string;
}

export interface CreatedAccessToken extends AccessTokenRecord {
  token: string;
}

/** Rates are percentages; times ms; null where there were no calls. */
export interface MetricsTotals {
  requests: number;
  success: number;
  errors: number;
  successRate: number | null;
  errorRate: number | null;
  avgResponseMs: number | null;
  p95ResponseMs: number | null;
  avgNodeLatencyMs: number | null;
}

/** One row of a breakdown (by chain or by method); the API may add fields. */
export interface BreakdownRow {
  chain?: string;
  method?: string;
  requests: number;
  errors?: number;
  success?: number;
  avgResponseMs?: number | null;
}

export interface SeriesPoint {
  t: string | number;
  requests: number;
  errors: number;
  success?: number;
  avgResponseMs: number | null;
}

/** Errors grouped by code, message, chain and method. */
export interface ErrorRow {
  code: number | string | null;
  message: string | null;
  chain: string;
  method: string;
  count: number;
  lastSeen: string;
}

/** One failed call. */
export interface RecentError {
  at: string;
  requestId: string;
  tokenId: string;
  chain: string;
  method: string;
  status: number;
  code: number | null;
  message: string;
}

export interface ClientIpRow {
  ip: string;
  count: number;
  lastSeen: string;
}

/** `GET /api/v1/metrics/user` and `GET /api/v1/metrics/tokens/{id}`. */
export interface Metrics {
  period: { start: string; end: string };
  chain: string | null;
  granularity?: 'minute' | 'hour' | 'day';
  totals: MetricsTotals;
  byChain: BreakdownRow[];
  byMethod: BreakdownRow[];
  series: SeriesPoint[];
  /** Account metrics only. */
  errors?: ErrorRow[];
  recentErrors?: RecentError[];
  limits?: { monthlyLimit: number | null; used: number; remaining: number | null; resetsAt: string };
  /** Token analytics only. */
  clientIps?: ClientIpRow[];
  retention?: { retentionDays: number; clamped: boolean; earliest: string };
}

export type AlertType = 'usage_threshold' | 'error_rate' | 'response_time' | 'rate_limiting' | 'token_usage';

/** A channel as the API shows it; `secret` (webhooks) only in the answer that created it. */
export interface AlertChannel {
  type: ChannelType;
  id?: string;
  /** `disabled` after the endpoint answered 410 Gone; giving it again in an edit re-enables it. */
  status?: 'active' | 'disabled';
  to?: string;
  url?: string;
  routing_key?: string;
  secret?: string;
}

export interface Alert {
  id: string;
  name: string;
  type: AlertType;
  condition: string | null;
  threshold: number;
  window_minutes: number | null;
  token_id: string | null;
  min_requests?: number | null;
  baseline_hours?: number | null;
  channels: AlertChannel[];
  enabled: boolean;
  /** ok, firing or resolved. */
  state: string;
  last_value?: number | null;
  last_evaluation?: { at: string; value: number | null; breached: boolean } | null;
  created_at?: string;
  updated_at?: string;
  fired_at?: string | null;
  resolved_at?: string | null;
}

/** One delivery attempt of a notification to a channel. */
export interface AlertNotification {
  notification_id: string;
  at: string;
  /** fired, renotified or resolved. */
  kind: string;
  channel: { id: string; type: ChannelType };
  attempt: number;
  /** delivered, retrying, failed, gone, refused or skipped. */
  outcome: string;
  status: number | null;
  error: string | null;
  next_attempt_at?: string | null;
}

/** RFC 9457 problem details, as every management API error answers. */
export interface Problem {
  type?: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  errors?: { path: string; message: string }[];
}
