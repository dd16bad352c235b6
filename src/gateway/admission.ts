import type { PlanId } from '../domain/plans.js';

/**
 * What the protocol layer (JSON-RPC and REST handling) asks before it forwards a call: who is
 * calling, may they call this chain, and how many of the calls pass the limits. Implemented by
 * the gatekeeper (token cache + plan rules + limiter); the protocol layer knows nothing of
 * tokens, plans or Redis.
 */
export interface AdmissionRequest {
  chain: string;
  /** The token as passed (path segment or Bearer), or null when none was given. */
  token: string | null;
  /** How the token was passed; anything but `path` or `bearer` is refused with 401. */
  via: 'path' | 'bearer' | 'query' | 'basic' | 'other' | null;
  /** Calls in this request (a batch's member count, 1 otherwise). */
  cost: number;
  nowMs: number;
  /**
   * The connection the call came on (its socket), when there is one: a client on a keep-alive
   * connection passes the same token call after call, so the token's hash is kept for it.
   */
  connection?: object;
}

/** Shared by the calls of one cached token: read, never changed. */
export interface Caller {
  readonly tokenId: string;
  readonly accountId: string;
  /** Days the account's plan keeps usage: carried in each usage record (read-model expiry). */
  readonly retentionDays?: number;
  /** The account's plan: its WebSocket caps (src/gateway/ws). */
  readonly plan?: PlanId;
}

/** Headers every chain answer carries: X-RateLimit-* and X-MonthlyLimit-* (and Retry-After on 429). */
export type LimitHeaders = Record<string, string>;

export type Admission =
  | {
      ok: true;
      caller: Caller;
      /** The first `granted` calls pass; the rest were refused by a limit (429 / -32005 each). */
      granted: number;
      headers: LimitHeaders;
      retryAfterSeconds: number | null;
      /** The monthly bucket the granted calls were counted in, for `Gatekeeper.refund` (absent: nothing was counted). */
      bucket?: string;
    }
  | {
      ok: false;
      status: 401 | 403 | 429 | 503;
      /** Stable code: `unauthorized`, `token_disabled`, `chain_not_in_plan`, `rate_limited`, `monthly_limit_reached`, `limits_unavailable` (503). */
      code: string;
      message: string;
      /** Known when the token was recognised: refused calls are metered too. */
      caller: Caller | null;
      headers: LimitHeaders;
      retryAfterSeconds: number | null;
    };

export type Granted = Extract<Admission, { ok: true }>;

export interface Gatekeeper {
  /** At once when nothing needs I/O (a cached token, a limit decided in process). */
  admit(request: AdmissionRequest): Admission | Promise<Admission>;
  /**
   * Gives back `units` of an admission's granted calls that the gateway failed to serve (their
   * usage records say `charged: false`): the monthly quota only, not the rate window. `nowMs` is
   * the admission's. Not waited for. Absent: a gatekeeper that counts nothing.
   */
  refund?(admission: Granted, units: number, nowMs: number): void;
}
