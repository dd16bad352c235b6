import { effectiveStatus } from '../domain/apiToken.js';
import type { MaybePromise } from '../domain/maybePromise.js';
import { effectiveTokenLimits, type PlanCatalog, planAllowsChain } from '../domain/plans.js';
import { hashToken, isWellFormedToken, TOKEN_LENGTH } from '../domain/tokenFormat.js';
import { type LimitDecision, type Limiter, quotaBucket } from '../infra/limits/port.js';
import type { Admission, AdmissionRequest, Caller, Gatekeeper, Granted, LimitHeaders } from './admission.js';
import { IsoClock } from './isoClock.js';
import type { TokenCache } from './tokenCache.js';
import type { CachedToken } from './tokenTable.js';

const INVALID_TOKEN = 'The API token is missing, invalid, revoked or expired.';

function limitHeaders(d: LimitDecision): LimitHeaders {
  const h: LimitHeaders = {
    'x-ratelimit-limit': String(d.rate.limit),
    'x-ratelimit-remaining': String(d.rate.remaining),
    'x-ratelimit-reset': String(d.rate.resetAt),
    'x-monthlylimit-limit': d.monthly.limit === null ? 'unlimited' : String(d.monthly.limit),
    'x-monthlylimit-remaining': d.monthly.remaining === null ? 'unlimited' : String(d.monthly.remaining),
    'x-monthlylimit-reset': String(d.monthly.resetAt),
  };
  if (d.retryAfterSeconds !== null) h['retry-after'] = String(d.retryAfterSeconds);
  return h;
}

/** The last token passed on a connection and its hash (changed in place when another comes). */
class LastToken {
  constructor(
    public token: string,
    public hash: string,
  ) {}
}

const refuse = (status: 401 | 403, code: string, message: string, caller: Caller | null = null): Admission => ({
  ok: false,
  status,
  code,
  message,
  caller,
  headers: {},
  retryAfterSeconds: null,
});

/**
 * The spec's rejection rules in order: 401 for a token that is missing, malformed, unknown,
 * revoked, expired or passed the wrong way; 403 for a disabled token or a chain outside the
 * plan; then the rate limit and monthly quota in one limiter call (429 when nothing passes; 503
 * when the limits cannot be checked and the limiter fails closed).
 */
export class TokenGatekeeper implements Gatekeeper {
  private readonly clock = new IsoClock();
  /**
   * Per connection, its last token's hash: the SHA-256 is ~a microsecond of each call, and a
   * keep-alive client sends the same token again and again. A WeakMap on the socket, so the raw
   * token is held only while its connection is open, one per connection, never in a table of
   * every token (the cache itself is keyed by hash, DESIGN §1).
   */
  private readonly lastTokens = new WeakMap<object, LastToken>();

  constructor(
    private readonly tokens: TokenCache,
    private readonly limiter: Limiter,
    private readonly plans: PlanCatalog,
  ) {}

  /** At once for a cached token whose limits are decided without I/O: the common call builds no promise here. */
  admit(request: AdmissionRequest): MaybePromise<Admission> {
    if (request.token === null) return refuse(401, 'unauthorized', INVALID_TOKEN);
    if (request.via !== 'path' && request.via !== 'bearer') {
      return refuse(401, 'unauthorized', 'Pass the API token in the path (/<chain>/<token>) or as "Authorization: Bearer <token>".');
    }
    // A token in the cache is a real one, so its shape and checksum need no check (a regular
    // expression and a CRC32 per call); the length check keeps long garbage from being hashed.
    if (request.token.length !== TOKEN_LENGTH.api) return refuse(401, 'unauthorized', INVALID_TOKEN);
    const hash = this.hashOf(request.token, request.connection);
    const cached = this.tokens.cached(hash);
    if (cached) return this.admitToken(request, cached);
    if (!isWellFormedToken('api', request.token)) return refuse(401, 'unauthorized', INVALID_TOKEN);
    const token = this.tokens.get(hash);
    return token instanceof Promise ? token.then((t) => this.admitToken(request, t)) : this.admitToken(request, token);
  }

  private hashOf(token: string, connection: object | undefined): string {
    if (connection === undefined) return hashToken(token);
    const last = this.lastTokens.get(connection);
    if (last !== undefined && last.token === token) return last.hash;
    const hash = hashToken(token);
    if (last === undefined) this.lastTokens.set(connection, new LastToken(token, hash));
    else {
      last.token = token;
      last.hash = hash;
    }
    return hash;
  }

  private admitToken(request: AdmissionRequest, token: CachedToken | null): MaybePromise<Admission> {
    if (!token) return refuse(401, 'unauthorized', INVALID_TOKEN);

    // Only a token with an expiry needs the call's time as ISO text.
    const status = token.expiresAt === null ? token.status : effectiveStatus(token, this.clock.format(request.nowMs));
    if (status === 'revoked' || status === 'expired') return refuse(401, 'unauthorized', INVALID_TOKEN);
    const caller: Caller = { tokenId: token.tokenId, accountId: token.accountId, retentionDays: this.plans[token.plan].retention_days, plan: token.plan };
    if (status === 'disabled') return refuse(403, 'token_disabled', 'The API token is disabled; enable it in the dashboard.', caller);
    const plan = this.plans[token.plan];
    if (!planAllowsChain(plan, request.chain)) {
      return refuse(403, 'chain_not_in_plan', `The ${plan.name} plan does not include the ${request.chain} network.`, caller);
    }

    const limits = effectiveTokenLimits(plan, token);
    const bucket = limits.ownMonthly ? quotaBucket.token(token.tokenId) : quotaBucket.account(token.accountId);
    const decision = this.limiter.take({
      tokenId: token.tokenId,
      rps: limits.rps,
      monthly: { key: bucket, limit: limits.monthly },
      cost: request.cost,
      nowMs: request.nowMs,
    });
    return decision instanceof Promise
      ? decision.then((d) => limitedAdmission(request, caller, bucket, d))
      : limitedAdmission(request, caller, bucket, decision);
  }

  /** Granted calls the gateway failed to serve: their units go back to the bucket they were counted in. */
  refund(admission: Granted, units: number, nowMs: number): void {
    const bucket = admission.bucket;
    if (bucket === undefined || units <= 0) return;
    void this.limiter.refund({ tokenId: admission.caller.tokenId, bucket, units, nowMs });
  }
}

/** The admission of a known caller, by what the limiter decided. */
function limitedAdmission(request: AdmissionRequest, caller: Caller, bucket: string, decision: LimitDecision): Admission {
  const headers = limitHeaders(decision);
  // cost 0: every call of the request was invalid; the caller is known (metered) but charged nothing.
  if (decision.granted === 0 && request.cost > 0 && decision.refusedBy === 'unavailable') {
    // The limits could not be checked (fail-closed): an outage of ours, not the caller's excess.
    // No limit headers: their figures would be made up (a month "unlimited", a window spent).
    return {
      ok: false,
      status: 503,
      caller,
      headers: { 'retry-after': String(decision.retryAfterSeconds ?? 1) },
      retryAfterSeconds: decision.retryAfterSeconds ?? 1,
      code: 'limits_unavailable',
      message: 'Service temporarily unavailable: the limits cannot be checked right now; retry shortly.',
    };
  }
  if (decision.granted === 0 && request.cost > 0) {
    const monthly = decision.refusedBy === 'monthly';
    return {
      ok: false,
      status: 429,
      caller,
      headers,
      retryAfterSeconds: decision.retryAfterSeconds,
      code: monthly ? 'monthly_limit_reached' : 'rate_limited',
      message: monthly ? 'The monthly request limit is reached.' : 'Too many requests per second.',
    };
  }
  return { ok: true, caller, granted: decision.granted, headers, retryAfterSeconds: decision.retryAfterSeconds, bucket };
}
