import { timingSafeEqual } from 'node:crypto';
import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { DomainError } from '../../domain/errors.js';
import { hashToken, isWellFormedToken } from '../../domain/tokenFormat.js';
import type { ApiDeps } from './deps.js';
import { MAX_SESSION_COOKIES, readCookies, SESSION_COOKIE } from './sessions.js';

export type OwnerCredential = 'session' | 'access_token' | 'api_token';

export interface Owner {
  accountId: string;
  via: OwnerCredential;
  /** Set when `via` is `api_token`. */
  tokenId?: string;
}

/**
 * Who may call a route, declared in its options (`config: { auth: 'owner' }`): the scope's
 * hook authenticates before validation and the handler (a 401 comes before a 400), and the
 * OpenAPI document names the same scope's credentials.
 * - `public`: anyone (sign-up, log-in, the API description);
 * - `dashboard`: a session cookie only (managing access tokens);
 * - `owner`: a session cookie or an access token (`gka_…`);
 * - `metrics`: those or an API token (`gk_…`), as the spec has the metrics call carry;
 * - `admin`: the operator's ADMIN_TOKEN.
 */
export type AuthScope = 'public' | 'dashboard' | 'owner' | 'metrics' | 'admin';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: AuthScope;
  }
  interface FastifyRequest {
    /** Set by the hook of an owner scope; read it with `ownerOf`. */
    owner: Owner | null;
  }
}

const CREDENTIALS: Record<'dashboard' | 'owner' | 'metrics', OwnerCredential[]> = {
  dashboard: ['session'],
  owner: ['session', 'access_token'],
  metrics: ['api_token', 'access_token', 'session'],
};

/** The OpenAPI security requirement of each scope: any one of the named schemes. */
export const SECURITY: Record<AuthScope, Array<Record<string, string[]>>> = {
  public: [],
  dashboard: [{ session: [] }],
  owner: [{ session: [] }, { accessToken: [] }],
  metrics: [{ apiToken: [] }, { accessToken: [] }, { session: [] }],
  admin: [{ adminToken: [] }],
};

/** The onRequest hook of each scope but `public`. */
export function scopeHooks(deps: ApiDeps): Record<Exclude<AuthScope, 'public'>, onRequestAsyncHookHandler> {
  const ownerHook =
    (allowed: OwnerCredential[]): onRequestAsyncHookHandler =>
    async (request) => {
      request.owner = await owner(request, deps, allowed);
    };
  return {
    dashboard: ownerHook(CREDENTIALS.dashboard),
    owner: ownerHook(CREDENTIALS.owner),
    metrics: ownerHook(CREDENTIALS.metrics),
    admin: async (request) => requireAdmin(request, deps),
  };
}

/** The caller authenticated by the route's scope hook. */
export function ownerOf(request: FastifyRequest): Owner {
  if (!request.owner) throw new Error(`${request.method} ${request.routeOptions.url} has no owner scope`);
  return request.owner;
}

const unauthorized = (message: string) => new DomainError('unauthorized', message);

/** `expected` names what the Bearer should carry, for the message when it is not one. */
const bearerOf = (request: FastifyRequest, expected: string): string | null => {
  const h = request.headers.authorization;
  if (!h) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  if (!m) throw unauthorized(`Use "Authorization: Bearer <${expected}>".`);
  return m[1] as string;
};

/** The metrics call's credential in the spec is an API token: its refusals ask for one first. */
const takesApiToken = (allowed: OwnerCredential[]): boolean => allowed.includes('api_token');

/**
 * Who is calling the management API: an access token (`gka_…`) as Bearer, or the dashboard's
 * session cookie; an API token (`gk_…`) only where `allowed` says so (the metrics call).
 */
async function owner(request: FastifyRequest, deps: ApiDeps, allowed: OwnerCredential[]): Promise<Owner> {
  const bearer = bearerOf(request, takesApiToken(allowed) ? 'API token or access token' : 'access token');
  if (bearer !== null) {
    if (isWellFormedToken('access', bearer) && allowed.includes('access_token')) {
      const doc = await deps.queries.accessTokenByHash(hashToken(bearer));
      if (doc && doc.status === 'active') return { accountId: doc.accountId, via: 'access_token' };
      throw unauthorized('The access token is not valid.');
    }
    if (isWellFormedToken('api', bearer)) {
      if (!allowed.includes('api_token')) throw unauthorized('API tokens (gk_…) are for chain calls; this call needs an access token (gka_…) or a session.');
      const doc = await deps.queries.tokenDocByHash(hashToken(bearer));
      const status = doc ? (await deps.queries.tokenRecord(doc)).status : null;
      if (doc && status === 'active') return { accountId: doc.accountId, via: 'api_token', tokenId: doc.id };
      // As on chain calls: a disabled token is known and refused (403), not unknown (401).
      if (doc && status === 'disabled') throw new DomainError('token_disabled', 'The API token is disabled; enable it in the dashboard.');
      throw unauthorized('The API token is not valid.');
    }
    if (takesApiToken(allowed) && !bearer.startsWith('gka_')) throw unauthorized('The API token is not valid.');
    throw unauthorized(allowed.includes('access_token') ? 'The access token is not valid.' : 'This call needs a dashboard session.');
  }
  const sessionIds = readCookies(request.headers.cookie, SESSION_COOKIE);
  if (sessionIds.length > 0 && allowed.includes('session')) {
    // Tried in turn, a few at most: a stale or foreign cookie of the same name must not hide ours.
    for (const sessionId of sessionIds.slice(0, MAX_SESSION_COOKIES)) {
      const accountId = await deps.sessions.accountOf(sessionId);
      if (accountId) return { accountId, via: 'session' };
    }
    throw unauthorized('The session has ended; log in again.');
  }
  if (takesApiToken(allowed)) throw unauthorized('Pass an API token as "Authorization: Bearer gk_…" (or an access token gka_…, or log in).');
  throw unauthorized('Log in, or pass an access token as "Authorization: Bearer gka_…".');
}

function requireAdmin(request: FastifyRequest, deps: ApiDeps): void {
  const bearer = bearerOf(request, 'ADMIN_TOKEN');
  const expected = deps.adminToken;
  if (!expected || !bearer) throw unauthorized('Operator calls need "Authorization: Bearer <ADMIN_TOKEN>".');
  const a = Buffer.from(bearer);
  const b = Buffer.from(expected);
  if (a.length !== b.length || !timingSafeEqual(a, b)) throw unauthorized('The operator token is not valid.');
}
