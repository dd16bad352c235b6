/**
 * The management API's JSON shapes (DESIGN §4), defined once: the server types the answers it
 * builds with them, so a change that breaks the contract fails `tsc`, and the dashboard reads
 * them. Types only, importing nothing: the dashboard's tsconfig (browser, no Node types)
 * checks this file too. Field names are as on the wire: snake_case for records, camelCase for
 * metrics; times are ISO 8601 UTC.
 */

// ── Plans and the account ────────────────────────────────────────────────────────────────

export type PlanId = 'free' | 'developer' | 'professional' | 'unlimited';
export type ChannelType = 'email' | 'webhook' | 'chat' | 'incident' | 'sms';
export type ExportFormat = 'csv' | 'json' | 'pdf';

/** A plan as the account shows it; null is unlimited (for `chains`: every chain). */
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

/** `GET /api/v1/account` and the operator's `PUT /api/v1/admin/accounts/{id}/plan`. */
export interface Account {
  id: string;
  email: string;
  created_at: string;
  plan: Plan;
  usage: { month: string; requests: number; monthly_limit: number | null; remaining: number | null; resets_at: string };
  /** Tokens neither revoked nor expired, against the plan's maximum. */
  tokens: { count: number; max: number | null };
}

/** `POST /api/v1/auth/signup` (201). */
export interface SignedUp {
  id: string;
  email: string;
  plan: PlanId;
}

/** `POST /api/v1/auth/login`. */
export interface LoggedIn {
  id: string;
}

// ── API tokens and access tokens ─────────────────────────────────────────────────────────

export type TokenStatus = 'active' | 'disabled' | 'revoked' | 'expired';

/** An API token; never the token string, except in the creation answer. */
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

/** `POST /api/v1/tokens` (201): the only answer that carries the token string. */
export interface CreatedToken extends TokenRecord {
  token: string;
}

/** `GET /api/v1/tokens`. */
export interface TokenList {
  tokens: TokenRecord[];
}

/** `GET /api/v1/tokens/{id}/history`: the token's events in order, with its state after each. */
export interface TokenHistory {
  token_id: string;
  events: Array<{
    revision: number;
    /** The event's type, e.g. `ApiTokenRenamed`. */
    type: string;
    at: string;
    recorded_at: string;
    state: {
      name: string;
      description: string;
      status: TokenStatus;
      masked: string;
      expires_at: string | null;
      monthly_limit: number | null;
      rate_limit: number | null;
    };
  }>;
}

/** A personal access token (`gka_…`) for the management API. */
export interface AccessTokenRecord {
  id: string;
  name: string;
  masked: string;
  status: 'active' | 'revoked';
  created_at: string;
}

/** `POST /api/v1/access-tokens` (201): the only answer that carries the token string. */
export interface CreatedAccessToken extends AccessTokenRecord {
  token: string;
}

/** `GET /api/v1/access-tokens`. */
export interface AccessTokenList {
  access_tokens: AccessTokenRecord[];
}

// ── Metrics ──────────────────────────────────────────────────────────────────────────────

/** Figures of a set of calls; rates are percentages, times ms; null when there were no calls. */
export interface UsageFigures {
  requests: number;
  success: number;
  errors: number;
  successRate: number | null;
  errorRate: number | null;
  avgResponseMs: number | null;
  p50ResponseMs: number | null;
  p95ResponseMs: number | null;
  p99ResponseMs: number | null;
  avgNodeLatencyMs: number | null;
}

export type ChainFigures = { chain: string } & UsageFigures;
/** `method`: a JSON-RPC method or a normalised REST path, named with its chain. */
export type MethodFigures = { chain: string; method: string } & UsageFigures;
export type TokenFigures = { tokenId: string } & UsageFigures;

export type SeriesGranularity = 'minute' | 'hour' | 'day';

export interface SeriesPoint {
  /** Start of the bucket. */
  t: string;
  requests: number;
  errors: number;
  avgResponseMs: number | null;
}

/** Errors grouped by code, message, chain and method. */
export interface ErrorGroup {
  code: number;
  message: string;
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
  code: number;
  message: string;
}

export interface ClientIp {
  ip: string;
  count: number;
  lastSeen: string;
}

/** The monthly quota (UTC calendar month). */
export interface MonthlyLimits {
  monthlyLimit: number | null;
  used: number;
  remaining: number | null;
  resetsAt: string;
}

/** What both metrics calls answer. */
export interface PeriodMetrics {
  /** What the figures cover: whole minutes (hours for a daily series), start clamped to the plan's retention. */
  period: { start: string; end: string };
  chain: string | null;
  granularity: SeriesGranularity;
  totals: UsageFigures;
  byChain: ChainFigures[];
  byMethod: MethodFigures[];
  series: SeriesPoint[];
  recentErrors: RecentError[];
  /** `clamped`: the asked start was older than the plan keeps. */
  retention: { retentionDays: number; clamped: boolean; earliest: string };
}

/** `GET /api/v1/metrics/user`. */
export interface UserMetrics extends PeriodMetrics {
  byToken: TokenFigures[];
  errors: ErrorGroup[];
  limits: MonthlyLimits;
}

/** `GET /api/v1/metrics/tokens/{id}`: one token's analytics. */
export interface TokenMetrics extends PeriodMetrics {
  token: Pick<TokenRecord, 'id' | 'name' | 'masked' | 'status'>;
  clientIps: ClientIp[];
  /** A token without its own monthly limit draws on the account's. */
  limits: (MonthlyLimits & { appliesTo: 'token' }) | (MonthlyLimits & { appliesTo: 'account'; tokenUsed: number });
}

// ── Alerts ───────────────────────────────────────────────────────────────────────────────

export type AlertType = 'usage_threshold' | 'error_rate' | 'response_time' | 'rate_limiting' | 'token_usage';
export type AlertState = 'ok' | 'firing' | 'resolved';
/** `disabled` after the endpoint answered 410 Gone; giving the channel again in an edit re-enables it. */
export type ChannelStatus = 'active' | 'disabled';

export type AlertChannel =
  | { id: string; type: 'email' | 'sms'; to: string; status: ChannelStatus }
  /** `secret`: a webhook's `whsec_` signing secret, only in the answer that created the channel. */
  | { id: string; type: 'webhook' | 'chat'; url: string; status: ChannelStatus; secret?: string }
  | { id: string; type: 'incident'; routing_key: string; status: ChannelStatus };

export interface Alert {
  id: string;
  name: string;
  type: AlertType;
  condition: string | null;
  threshold: number;
  window_minutes: number | null;
  token_id: string | null;
  min_requests: number | null;
  baseline_hours: number | null;
  channels: AlertChannel[];
  enabled: boolean;
  state: AlertState;
  /** The measured value of the last transition (fired, re-notified, resolved). */
  last_value: number | null;
  fired_at: string | null;
  resolved_at: string | null;
  /** The evaluator's last look, fired or not. */
  last_evaluation: { at: string; value: number | null; breached: boolean } | null;
  created_at: string;
  updated_at: string;
}

/** `GET /api/v1/alerts`. */
export interface AlertList {
  alerts: Alert[];
}

/** One delivery attempt of a notification to a channel. */
export interface AlertNotification {
  notification_id: string;
  kind: 'fired' | 'renotified' | 'resolved';
  channel: { id: string; type: ChannelType };
  attempt: number;
  /** delivered, retrying, failed, gone, refused or skipped. */
  outcome: string;
  status: number | null;
  error: string | null;
  next_attempt_at: string | null;
  at: string;
}

/** `GET /api/v1/alerts/{id}/notifications`: newest first. */
export interface AlertNotifications {
  alert_id: string;
  notifications: AlertNotification[];
}

// ── Errors ───────────────────────────────────────────────────────────────────────────────

/** RFC 9457 problem details (`application/problem+json`), as every management API error answers. */
export interface Problem {
  /** `/problems/<code>`. */
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  /** Each invalid field of a refused request (`validation_failed`). */
  errors?: Array<{ in?: 'body' | 'query' | 'params'; path: string; message: string }>;
  /** Some codes carry more, e.g. the plan's maximum. */
  [extension: string]: unknown;
}
