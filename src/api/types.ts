/**
 * The management API's JSON shapes (DESIGN §4), inferred from the zod schemas the routes declare
 * (src/api/schemas.ts): the server, the OpenAPI document and the dashboard share one
 * definition, so a change that breaks the contract fails `tsc`. Type-only imports: the
 * dashboard bundles none of zod.
 */
import type { z } from 'zod';
import type * as S from './schemas.js';

/** The largest monthly or rate limit a token may be given, in requests: the request schema's bound, and the dashboard's (a plain value: no zod in the bundle). */
export const MAX_TOKEN_LIMIT = 1e12;

// ── Plans and the account ────────────────────────────────────────────────────────────────

export type PlanId = z.infer<typeof S.PlanId>;
export type ChannelType = z.infer<typeof S.ChannelType>;
export type ExportFormat = z.infer<typeof S.ExportFormat>;
/** A plan as the account shows it; null is unlimited (for `chains`: every chain). */
export type Plan = z.infer<typeof S.Plan>;
/** `GET /api/v1/account` and the operator's `PUT /api/v1/admin/accounts/{id}/plan`. */
export type Account = z.infer<typeof S.Account>;
/** `POST /api/v1/auth/signup` (201). */
export type SignedUp = z.infer<typeof S.SignedUp>;
/** `POST /api/v1/auth/login`. */
export type LoggedIn = z.infer<typeof S.LoggedIn>;

// ── API tokens and access tokens ─────────────────────────────────────────────────────────

export type TokenStatus = z.infer<typeof S.TokenStatus>;
/** An API token; never the token string, except in the creation answer. */
export type TokenRecord = z.infer<typeof S.TokenRecord>;
/** `POST /api/v1/tokens` (201): the only answer that carries the token string. */
export type CreatedToken = z.infer<typeof S.CreatedToken>;
/** `GET /api/v1/tokens`. */
export type TokenList = z.infer<typeof S.TokenList>;
/** `GET /api/v1/tokens/{id}/history`: the token's events and its account's plan changes in its life, in order, with its state after each. */
export type TokenHistory = z.infer<typeof S.TokenHistory>;
/** A personal access token (`gka_…`) for the management API. */
export type AccessTokenRecord = z.infer<typeof S.AccessTokenRecord>;
/** `POST /api/v1/access-tokens` (201): the only answer that carries the token string. */
export type CreatedAccessToken = z.infer<typeof S.CreatedAccessToken>;
/** `GET /api/v1/access-tokens`. */
export type AccessTokenList = z.infer<typeof S.AccessTokenList>;

// ── Metrics ──────────────────────────────────────────────────────────────────────────────

/** Figures of a set of calls; rates are percentages, times ms; null when there were no calls. */
export type UsageFigures = z.infer<typeof S.UsageFigures>;
export type ChainFigures = z.infer<typeof S.ChainFigures>;
/** `method`: a JSON-RPC method or a normalised REST path, named with its chain. */
export type MethodFigures = z.infer<typeof S.MethodFigures>;
export type TokenFigures = z.infer<typeof S.TokenFigures>;
/** The (chain, method) entries past the first 100 of `byMethod`, summed. */
export type OtherMethods = z.infer<typeof S.OtherMethods>;
/** The error groups past the first 50 of `errors`, summed. */
export type OtherErrors = z.infer<typeof S.OtherErrors>;
export type SeriesGranularity = z.infer<typeof S.SeriesGranularity>;
export type SeriesPoint = z.infer<typeof S.SeriesPoint>;
/** Errors grouped by code, message, chain and method. */
export type ErrorGroup = z.infer<typeof S.ErrorGroup>;
/** One failed call. */
export type RecentError = z.infer<typeof S.RecentError>;
export type ClientIp = z.infer<typeof S.ClientIp>;
/** The monthly quota (UTC calendar month). */
export type MonthlyLimits = z.infer<typeof S.MonthlyLimits>;
/** What both metrics calls answer. */
export type PeriodMetrics = z.infer<typeof S.PeriodMetrics>;
/** `GET /api/v1/metrics/user`. */
export type UserMetrics = z.infer<typeof S.UserMetrics>;
/** `GET /api/v1/metrics/tokens/{id}`: one token's analytics. */
export type TokenMetrics = z.infer<typeof S.TokenMetrics>;

// ── Alerts ───────────────────────────────────────────────────────────────────────────────

export type AlertType = z.infer<typeof S.AlertType>;
export type AlertState = z.infer<typeof S.AlertState>;
/** `disabled` after the endpoint answered 410 Gone; giving the channel again in an edit re-enables it. */
export type ChannelStatus = z.infer<typeof S.ChannelStatus>;
export type AlertChannel = z.infer<typeof S.AlertChannel>;
export type Alert = z.infer<typeof S.Alert>;
/** `GET /api/v1/alerts`. */
export type AlertList = z.infer<typeof S.AlertList>;
/** One delivery attempt of a notification to a channel. */
export type AlertNotification = z.infer<typeof S.AlertNotification>;
/** `GET /api/v1/alerts/{id}/notifications`: newest first. */
export type AlertNotifications = z.infer<typeof S.AlertNotifications>;

// ── Errors ───────────────────────────────────────────────────────────────────────────────

/** RFC 9457 problem details (`application/problem+json`), as every management API error answers. */
export type Problem = z.infer<typeof S.Problem>;
