import type { IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { MaybePromise } from '../domain/maybePromise.js';
import { cutText, storableText } from '../domain/storableText.js';
import type { UsageRecord } from '../domain/usage.js';
import { STORE_RETRY_AFTER_SECONDS, storeUnreachableReason } from '../infra/storeErrors.js';
import type { Admission, Gatekeeper, Granted } from './admission.js';
import { type Answer, type CallScope, INVALID_METHOD, type LocalError, localError } from './answer.js';
import { BodyTooLarge, isJsonRpcMediaType, type RawBody } from './body.js';
import type { ChainRegistry } from './chains.js';
import { type Credentials, extractCredentials } from './credentials.js';
import { JSON_CONTENT_TYPE, type RequestIds, RpcCode, restError, rpcErrorFor } from './errors.js';
import { IsoClock } from './isoClock.js';
import { requestIdsOf } from './jsonrpc.js';
import { handleRest } from './rest.js';
import { handleJsonRpc } from './rpcHandler.js';
import type { UpstreamPools } from './upstream.js';

/**
 * A chain call from request to answer, whatever HTTP server carries it: the node:http front
 * (src/gateway/front.ts) for the known chains' calls, the fastify routes (src/gateway/routes.ts)
 * for the rest. Every answer carries the admission's limit headers; every call of a known
 * caller yields one usage record. Usage request ids are the request's id (+ `:<index>` per
 * batch member): the server must make them unique, since they key idempotent usage appends.
 */

export interface GatewayLimits {
  maxBatch: number;
  maxBodyBytes: number;
}

export const DEFAULT_GATEWAY_LIMITS: GatewayLimits = { maxBatch: 100, maxBodyBytes: 1024 * 1024 };

export interface ChainCallsOptions {
  chains: ChainRegistry;
  gatekeeper: Gatekeeper;
  recordUsage: (record: UsageRecord) => void;
  /**
   * Calls `done` once every record given to `recordUsage` so far is durably handed over (at once
   * when none is waiting): a metered call is answered only then. Absent: at once.
   */
  whenRecorded?: (done: () => void) => void;
  pools: UpstreamPools;
  limits?: Partial<GatewayLimits>;
}

/** Where chain calls are logged (fastify's logger fits): failures, and at debug each call. */
export interface ChainCallLog {
  /** The logger's level, when it has one: request lines are written only at debug and trace. */
  level?: string;
  error(details: object, message: string): void;
  debug(details: object, message: string): void;
}

/** One chain call as the HTTP layer hands it over. */
export interface ChainRequest {
  method: string;
  /** The raw URL, still percent-encoded, with its query. */
  url: string;
  headers: IncomingHttpHeaders;
  /** Read raw for a POST (src/gateway/body.ts); undefined for a GET. */
  body: RawBody | undefined;
  ip: string;
  id: string;
  /** performance.now() when the call arrived, before its body was read: the start of its total time. */
  arrivedAt: number;
  /** The connection it came on (the socket), for what the gatekeeper keeps per connection. */
  connection: object | undefined;
}

export interface ChainResponse {
  status: number;
  headers: Record<string, string>;
  /** null: no body. */
  body: string | Buffer | null;
}

/** What an error answered before any protocol handler needs of its call (its body, when read, for the caller's ids). */
export type OwnErrorRequest = Pick<ChainRequest, 'method' | 'url' | 'headers' | 'id'> & { body?: unknown };

class GatekeeperUnavailable extends Error {}

/** One chain call's scope: the admission is asked at most once, whatever the handlers ask. */
class RequestScope implements CallScope {
  private admission: MaybePromise<Admission> | null = null;

  constructor(
    readonly chain: CallScope['chain'],
    readonly pool: CallScope['pool'],
    private readonly gatekeeper: Gatekeeper,
    private readonly credentials: Credentials,
    private readonly connection: object | undefined,
    /** Wall-clock ms the call arrived: the limiter's month and window, as its usage record's `at`. */
    private readonly arrivedAtMs: number,
  ) {}

  admit(cost: number): MaybePromise<Admission> {
    this.admission ??= this.ask(cost);
    return this.admission;
  }

  /** The admission asked for, if any (a call that failed after it gives its granted calls back). */
  asked(): MaybePromise<Admission> | null {
    return this.admission;
  }

  private ask(cost: number): MaybePromise<Admission> {
    const unavailable = (err: unknown): GatekeeperUnavailable => new GatekeeperUnavailable('gatekeeper failed', { cause: err });
    let admission: MaybePromise<Admission>;
    try {
      admission = this.gatekeeper.admit({
        chain: this.chain.id,
        token: this.credentials.token,
        via: this.credentials.via,
        cost,
        nowMs: this.arrivedAtMs,
        connection: this.connection,
      });
    } catch (err) {
      throw unavailable(err);
    }
    if (!(admission instanceof Promise)) return admission;
    return admission.catch((err: unknown) => {
      throw unavailable(err);
    });
  }
}

const EXPOSED_HEADERS = [
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
  'x-monthlylimit-limit',
  'x-monthlylimit-remaining',
  'x-monthlylimit-reset',
  'retry-after',
  'x-request-id',
].join(', ');

/**
 * A REST node's answer that is not JSON (an HTML error or maintenance page) is passed on as the
 * node wrote it, from the origin the dashboard is served on: sandboxed, no script of it runs there.
 */
const SANDBOXED = { 'content-security-policy': "sandbox; default-src 'none'", 'x-content-type-options': 'nosniff' };
const isJsonMediaType = (contentType: string): boolean => contentType === JSON_CONTENT_TYPE || /^application\/(?:[\w.-]+\+)?json\s*(?:;|$)/i.test(contentType);

/**
 * The unknown chain's name is repeated only when it looks like one: a path such as `/eth%2F<token>`
 * or `/<token>` would otherwise echo the caller's token into the answer (and a log or proxy
 * cache that keeps it).
 */
function unknownChainMessage(chainId: string): string {
  return /^[A-Za-z0-9._-]{1,64}$/.test(chainId) && !/gka?_/i.test(chainId) ? `Unknown chain "${chainId}"` : 'Unknown chain';
}

/** The chain id: the URL's first path segment (still percent-encoded). */
export function chainIdOf(url: string): string {
  let end = url.length;
  for (let i = 1; i < url.length; i++) {
    const c = url.charCodeAt(i);
    if (c === 47 /* / */ || c === 63 /* ? */) {
      end = i;
      break;
    }
  }
  return url.slice(1, end);
}

/** Path segments after the chain, and the query, from the raw URL (still percent-encoded). */
function splitUrl(url: string): { segments: string[]; query: string } {
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const segments = path.split('/').slice(2);
  if (segments.length > 0 && segments[segments.length - 1] === '') segments.pop();
  return { segments, query: q < 0 ? '' : url.slice(q + 1) };
}

/**
 * JSON-RPC errors answer a POST without path (after the chain, at most the token) or to the
 * chain's JSON-RPC path; everything else the REST shape.
 */
function isRpcShaped(method: string, url: string, rpcPath: string | null): boolean {
  if (method !== 'POST') return false;
  const { segments } = splitUrl(url);
  return segments.length <= 1 || (rpcPath !== null && segments.length <= 2 && segments[segments.length - 1] === rpcPath);
}

interface Incoming {
  /** Path segments after the chain and the token. */
  segments: string[];
  isPost: boolean;
  body: RawBody | undefined;
  contentType: string | undefined;
  /** The body's Content-Encoding header, when sent. */
  contentEncoding: string | undefined;
  query: string;
  /** A Cosmos LCD's `x-cosmos-block-height` (a query at an older height), when sent. */
  blockHeight: string | undefined;
  limits: GatewayLimits;
}

const rpcIssue = (status: number, message: string, ids: RequestIds): LocalError => ({
  shape: 'rpc',
  status,
  rpcCode: RpcCode.invalidRequest,
  restCode: 'invalid_request',
  message,
  method: INVALID_METHOD,
  ids,
});

/** The ids in a body that may be JSON-RPC, for an error about the whole request (none when too large to read). */
const idsOfBody = (body: unknown, maxBatch: number): RequestIds => (Buffer.isBuffer(body) ? requestIdsOf(body, maxBatch) : null);

const restIssue = (segments: string[], status: number, restCode: string, message: string): LocalError => ({
  shape: 'rest',
  status,
  rpcCode: RpcCode.invalidRequest,
  restCode,
  message,
  method: segments.join('/').slice(0, 200) || INVALID_METHOD,
});

const EMPTY_BODY = Buffer.alloc(0);

/**
 * A body sent compressed (`Content-Encoding: gzip`, `deflate`, `br`…) is refused, not read as if
 * it were plain: RFC 9110 §15.5.16's 415, naming the one coding taken (docs/decisions.md, "Odd but
 * legal HTTP on chain calls"). Undefined when the body is plain (no header, or `identity`).
 */
function unsupportedEncoding(contentEncoding: string | undefined): string | undefined {
  if (contentEncoding === undefined) return undefined;
  const codings = contentEncoding.trim().toLowerCase();
  if (codings === '' || codings === 'identity') return undefined;
  return `Unsupported Content-Encoding "${contentEncoding.trim().slice(0, 64)}": send the body uncompressed`;
}

const IDENTITY_ONLY = { 'accept-encoding': 'identity' };

/** A JSON-RPC POST's body checks, then the JSON-RPC handler. */
function jsonRpcBody(scope: CallScope, req: Incoming, raw: Buffer, tooLarge: boolean): MaybePromise<Answer> {
  const { limits } = req;
  if (tooLarge) return localError(scope, rpcIssue(413, `Request body larger than ${limits.maxBodyBytes} bytes`, null));
  const encoding = unsupportedEncoding(req.contentEncoding);
  if (encoding !== undefined) return localError(scope, { ...rpcIssue(415, encoding, idsOfBody(req.body, limits.maxBatch)), headers: IDENTITY_ONLY });
  if (!isJsonRpcMediaType(req.contentType))
    return localError(scope, rpcIssue(415, 'Unsupported media type: send application/json', idsOfBody(req.body, limits.maxBatch)));
  return handleJsonRpc(scope, raw, limits.maxBatch);
}

/** The call's scope, its JSON-RPC sent to `rpcPath` on the node (a passthrough chain's `jsonRpcPath`). */
const atRpcPath = (scope: CallScope, rpcPath: string): CallScope => ({ chain: scope.chain, pool: scope.pool, admit: (cost) => scope.admit(cost), rpcPath });

/** Which protocol handles the call, or which local error answers it. */
function dispatch(scope: CallScope, req: Incoming): MaybePromise<Answer> {
  const { chain } = scope;
  const { segments, isPost, limits } = req;
  const tooLarge = req.body instanceof BodyTooLarge;
  const raw = Buffer.isBuffer(req.body) ? req.body : EMPTY_BODY;

  const rpcPath = chain.jsonRpcPath;
  if (rpcPath !== null && segments.length === 1 && segments[0] === rpcPath) {
    if (!isPost) {
      return localError(scope, restIssue(segments, 400, 'protocol_mismatch', `/${chain.id}/<token>/${rpcPath} takes JSON-RPC: POST a JSON-RPC 2.0 body to it`));
    }
    // Its own JSON-RPC handling, not a path passed through: each batch member admitted and metered, the methods checked.
    return jsonRpcBody(atRpcPath(scope, rpcPath), req, raw, tooLarge);
  }
  if (segments.length === 0 && isPost) {
    if (!chain.acceptsJsonRpc) {
      const elsewhere = rpcPath === null ? '' : `, or POST JSON-RPC to /${chain.id}/<token>/${rpcPath}`;
      return localError(
        scope,
        rpcIssue(400, `${chain.id} speaks REST, not JSON-RPC: call /${chain.id}/<token>/<method_or_path>${elsewhere}`, idsOfBody(req.body, limits.maxBatch)),
      );
    }
    return jsonRpcBody(scope, req, raw, tooLarge);
  }
  if (segments.length === 0) {
    return localError(
      scope,
      chain.protocol === 'jsonrpc'
        ? restIssue(segments, 400, 'protocol_mismatch', `${chain.id} speaks JSON-RPC: POST a JSON-RPC 2.0 body to /${chain.id}/<token>`)
        : restIssue(segments, 400, 'missing_path', `${chain.id} speaks REST: call /${chain.id}/<token>/<method_or_path>`),
    );
  }
  if (chain.protocol === 'jsonrpc') {
    return localError(
      scope,
      restIssue(segments, 400, 'protocol_mismatch', `${chain.id} speaks JSON-RPC, not REST: POST a JSON-RPC 2.0 body to /${chain.id}/<token>`),
    );
  }
  if (tooLarge) return localError(scope, restIssue(segments, 413, 'payload_too_large', `Request body larger than ${limits.maxBodyBytes} bytes`));
  const encoding = isPost ? unsupportedEncoding(req.contentEncoding) : undefined;
  if (encoding !== undefined) return localError(scope, { ...restIssue(segments, 415, 'unsupported_content_encoding', encoding), headers: IDENTITY_ONLY });
  return handleRest(scope, {
    httpMethod: isPost ? 'POST' : 'GET',
    segments,
    query: req.query,
    body: isPost ? raw : null,
    contentType: req.contentType,
    blockHeight: req.blockHeight,
  });
}

/** X-MonthlyLimit-Remaining with `units` given back (never above the limit); an unlimited month says so as it did. */
function refundedRemaining(headers: Record<string, string>, units: number): void {
  const remaining = Number(headers['x-monthlylimit-remaining']);
  const limit = Number(headers['x-monthlylimit-limit']);
  if (!Number.isFinite(remaining) || !Number.isFinite(limit)) return;
  headers['x-monthlylimit-remaining'] = String(Math.min(remaining + units, limit));
}

/** While the read models are unreachable, failed token lookups are logged at most this often. */
const STORE_OUTAGE_LOG_MS = 10_000;

export class ChainCalls {
  readonly limits: GatewayLimits;
  private readonly clock = new IsoClock();

  constructor(
    private readonly options: ChainCallsOptions,
    readonly log: ChainCallLog,
  ) {
    this.limits = { ...DEFAULT_GATEWAY_LIMITS, ...options.limits };
  }

  /** Whether `chainId` names a configured chain: only those calls are worth a fast path. */
  isKnownChain(chainId: string): boolean {
    return this.options.chains.get(chainId) !== undefined;
  }

  /**
   * A chain call (GET or POST) to its answer, handed to `reply` exactly once; never throws: a
   * failure is a 500 or 503 in the call's shape. A callback, not a promise: the common call's
   * only wait is its upstream, and each promise of ours on the way cost a microtask and garbage.
   * `reply` must not throw either (the front's write catches its own failures): called from a
   * promise's callback, an exception would be an unhandled rejection.
   */
  serve(req: ChainRequest, reply: (response: ChainResponse) => void): void {
    this.serveWith(req, (scope, credentials, query) => this.dispatch(req, scope, credentials, query), reply);
  }

  /**
   * As `serve`, with `handler` in place of the protocol dispatch: what a WebSocket answers
   * itself (eth_subscribe, a delivered notification, the upgrade's admission) is admitted,
   * metered and handed over exactly as a call over HTTP. `req.url` carries the chain and token
   * (or `req.headers.authorization` the token).
   */
  serveWith(
    req: ChainRequest,
    handler: (scope: CallScope, credentials: Credentials, query: string) => MaybePromise<Answer>,
    reply: (response: ChainResponse) => void,
  ): void {
    const chainId = chainIdOf(req.url);
    const chain = this.options.chains.get(chainId);
    if (!chain) {
      reply(this.ownError(req, 404, RpcCode.methodNotFound, 'unknown_chain', unknownChainMessage(chainId)));
      return;
    }
    // One time for the call: a call arriving before midnight and admitted after it is the old month's in the limiter and in its record alike.
    const arrivedAtMs = Date.now() - (performance.now() - req.arrivedAt);
    let pending: MaybePromise<Answer>;
    let scope: RequestScope | null = null;
    try {
      const pool = this.options.pools.get(chain.id);
      if (!pool) throw new Error(`no upstream pool for chain ${chain.id}`);
      const { segments, query } = splitUrl(req.url);
      const credentials = extractCredentials(segments, req.headers.authorization, query);
      scope = new RequestScope(chain, pool, this.options.gatekeeper, credentials, req.connection, arrivedAtMs);
      pending = handler(scope, credentials, query);
    } catch (err) {
      this.refundUnserved(scope, arrivedAtMs);
      reply(this.failed(req, err));
      return;
    }
    if (pending instanceof Promise) {
      pending.then(
        (answer) => this.answered(req, answer, chain.id, arrivedAtMs, reply),
        (err: unknown) => {
          this.refundUnserved(scope, arrivedAtMs);
          reply(this.failed(req, err));
        },
      );
    } else {
      this.answered(req, pending, chain.id, arrivedAtMs, reply);
    }
  }

  /**
   * The answer metered and made a response (a 500 if that fails: never an exception), handed to
   * `reply` once its usage is handed over: nothing served goes unrecorded if the process dies.
   */
  private answered(req: ChainRequest, answer: Answer, chainId: string, arrivedAtMs: number, reply: (response: ChainResponse) => void): void {
    let response: ChainResponse;
    let metered = false;
    try {
      metered = this.emit(req, answer, chainId, arrivedAtMs);
      response = this.respond(req, answer, this.refundUncharged(answer, arrivedAtMs));
    } catch (err) {
      response = this.failed(req, err);
    }
    const whenRecorded = this.options.whenRecorded;
    if (metered && whenRecorded) whenRecorded(() => reply(response));
    else reply(response);
  }

  /**
   * The granted calls whose usage records say uncharged (the gateway failed to serve them) give
   * their units back to the limiter's month: it then counts exactly the charged records, as the
   * account view does (docs/decisions.md, "A call the gateway failed to serve is not charged").
   * How many went back.
   */
  private refundUncharged(answer: Answer, arrivedAtMs: number): number {
    const admission = answer.admission;
    if (admission === null || !admission.ok || admission.granted === 0) return 0;
    let charged = 0;
    for (const d of answer.usage) if (d.charged) charged++;
    const units = admission.granted - charged;
    if (units <= 0) return 0;
    this.giveBack(admission, units, arrivedAtMs);
    return units;
  }

  /** A call that failed on our side after its admission (a 500, and no usage record): all its granted calls go back. */
  private refundUnserved(scope: RequestScope | null, arrivedAtMs: number): void {
    const admission = scope?.asked() ?? null;
    if (admission === null) return;
    const giveBack = (a: Admission): void => {
      if (a.ok && a.granted > 0) this.giveBack(a, a.granted, arrivedAtMs);
    };
    if (admission instanceof Promise) admission.then(giveBack, () => undefined);
    else giveBack(admission);
  }

  private giveBack(admission: Granted, units: number, arrivedAtMs: number): void {
    try {
      this.options.gatekeeper.refund?.(admission, units, arrivedAtMs);
    } catch (err) {
      this.log.error({ err }, 'quota refund failed');
    }
  }

  /** A call that failed on our side: logged, and a 500 (503 while the gatekeeper is unavailable) in the call's shape. */
  failed(req: OwnErrorRequest, err: unknown): ChainResponse {
    const unavailable = err instanceof GatekeeperUnavailable;
    const unreachable = unavailable ? storeUnreachableReason(err) : null;
    if (unreachable !== null) {
      this.storeOutageLog(unreachable);
      const answer = this.ownError(req, 503, RpcCode.internalError, 'service_unavailable', 'Service temporarily unavailable');
      answer.headers['retry-after'] = String(STORE_RETRY_AFTER_SECONDS);
      return answer;
    }
    this.log.error({ err }, unavailable ? 'gatekeeper failed' : 'chain call failed');
    if (unavailable) return this.ownError(req, 503, RpcCode.internalError, 'service_unavailable', 'Service temporarily unavailable');
    return this.ownError(req, 500, RpcCode.internalError, 'internal_error', 'Internal error');
  }

  private storeOutageLoggedAtMs = Number.NEGATIVE_INFINITY;
  private storeOutageUnlogged = 0;

  /**
   * While the read models are unreachable every uncached token's call fails alike: one warning
   * every STORE_OUTAGE_LOG_MS with the count of the others, not a line (and a stack) a call.
   */
  private storeOutageLog(reason: string): void {
    const now = performance.now();
    if (now - this.storeOutageLoggedAtMs < STORE_OUTAGE_LOG_MS) {
      this.storeOutageUnlogged++;
      return;
    }
    const others = this.storeOutageUnlogged;
    this.storeOutageLoggedAtMs = now;
    this.storeOutageUnlogged = 0;
    this.log.error(
      { reason, others },
      `token lookup failed, the read models are unreachable: answering 503 to tokens not cached${others > 0 ? `; ${others} more such calls since the last line` : ''}`,
    );
  }

  /** A call the HTTP server refused before it reached `serve` (an unreadable Content-Type...). */
  refused(req: OwnErrorRequest, status: number, reason: string): ChainResponse {
    if (status === 415) return this.ownError(req, status, RpcCode.invalidRequest, 'unsupported_media_type', 'Unsupported media type: send application/json');
    return this.ownError(req, status, RpcCode.invalidRequest, 'bad_request', `Bad request: ${reason}`);
  }

  /**
   * Another HTTP method (PUT, DELETE, PATCH) on a chain endpoint: 405 naming the methods the chain
   * takes, as HTTP has it; not a chain call, so neither admitted nor metered. Null for an unknown
   * chain, which stays the server's 404.
   */
  methodNotAllowed(req: OwnErrorRequest): ChainResponse | null {
    const chain = this.options.chains.get(chainIdOf(req.url));
    if (!chain) return null;
    const takes = chain.protocol === 'jsonrpc' ? 'POST (JSON-RPC 2.0)' : 'GET and POST (REST)';
    const headers = this.commonHeaders(req);
    headers.allow = 'GET, HEAD, POST, OPTIONS';
    headers['content-type'] = JSON_CONTENT_TYPE;
    return { status: 405, headers, body: restError('method_not_allowed', `${req.method} is not a chain call: ${chain.id} takes ${takes}.`) };
  }

  /** The CORS preflight of a browser dApp calling a chain endpoint directly. */
  preflight(req: Pick<ChainRequest, 'headers' | 'id'>): ChainResponse {
    const asked = req.headers['access-control-request-headers'];
    const headers = this.commonHeaders(req);
    headers['access-control-allow-methods'] = 'GET, POST, OPTIONS';
    headers['access-control-allow-headers'] = typeof asked === 'string' && asked !== '' ? asked : 'authorization, content-type';
    headers['access-control-max-age'] = '86400';
    return { status: 204, headers, body: null };
  }

  /** The call to its protocol handler. */
  private dispatch(req: ChainRequest, scope: CallScope, credentials: Credentials, query: string): MaybePromise<Answer> {
    const { 'content-type': contentType, 'content-encoding': contentEncoding, 'x-cosmos-block-height': blockHeight } = req.headers;
    return dispatch(scope, {
      segments: credentials.segments,
      isPost: req.method === 'POST',
      body: req.body,
      contentType,
      contentEncoding,
      query,
      blockHeight: typeof blockHeight === 'string' ? blockHeight : undefined,
      limits: this.limits,
    });
  }

  /** Whether the answer yielded usage records. */
  private emit(req: ChainRequest, answer: Answer, chainId: string, arrivedAtMs: number): boolean {
    const caller = answer.admission?.caller;
    if (!caller) return false;
    const totalMs = Math.round((performance.now() - req.arrivedAt) * 100) / 100;
    const at = this.clock.format(arrivedAtMs);
    for (const d of answer.usage) {
      const record: UsageRecord = {
        requestId: d.memberIndex === null ? req.id : `${req.id}:${d.memberIndex}`,
        at,
        accountId: caller.accountId,
        tokenId: caller.tokenId,
        chain: chainId,
        // Callers and nodes write these: made storable here, so no store or projection meets text it cannot hold.
        method: storableText(cutText(d.method, 200)),
        status: answer.status,
        rpcErrorCode: d.rpcErrorCode,
        errorMessage: d.errorMessage === null ? null : storableText(d.errorMessage),
        totalMs,
        upstreamMs: d.upstreamMs,
        clientIp: req.ip,
        upstream: d.upstream,
        retentionDays: caller.retentionDays,
        charged: d.charged,
      };
      if (d.cache !== null) record.cache = d.cache;
      try {
        this.options.recordUsage(record);
      } catch (err) {
        this.log.error({ err }, 'usage record dropped');
      }
    }
    return answer.usage.length > 0;
  }

  /** `refunded`: the answer's granted calls given back, which its monthly remaining then counts as left. */
  private respond(req: ChainRequest, answer: Answer, refunded = 0): ChainResponse {
    const headers = this.commonHeaders(req);
    const admission = answer.admission;
    if (admission) Object.assign(headers, admission.headers);
    if (refunded > 0) refundedRemaining(headers, refunded);
    if (answer.headers) Object.assign(headers, answer.headers);
    if (answer.status === 429 && admission?.retryAfterSeconds != null && headers['retry-after'] === undefined) {
      headers['retry-after'] = String(admission.retryAfterSeconds);
    }
    if (answer.status === 413) headers.connection = 'close';
    if (answer.body !== null) {
      headers['content-type'] = answer.contentType;
      if (!isJsonMediaType(answer.contentType)) Object.assign(headers, SANDBOXED);
    }
    return { status: answer.status, headers, body: answer.body };
  }

  /**
   * An error the gateway answers before any protocol handler: a JSON-RPC error to a POST
   * without a path (`/<chain>` or `/<chain>/<token>`), a REST error to anything else.
   */
  private ownError(req: OwnErrorRequest, status: number, rpcCode: number, restCode: string, message: string): ChainResponse {
    const headers = this.commonHeaders(req);
    headers['content-type'] = JSON_CONTENT_TYPE;
    const rpcPath = this.options.chains.get(chainIdOf(req.url))?.jsonRpcPath ?? null;
    const body = isRpcShaped(req.method, req.url, rpcPath)
      ? rpcErrorFor(idsOfBody(req.body, this.limits.maxBatch), rpcCode, message)
      : restError(restCode, message);
    return { status, headers, body };
  }

  /**
   * What every chain answer carries: its request id, and for browsers (a request with an Origin
   * header: only those are CORS requests) the CORS headers. Browser dApps call chain endpoints
   * directly, as they do Infura's or Alchemy's.
   */
  private commonHeaders(req: Pick<ChainRequest, 'headers' | 'id'>): Record<string, string> {
    const headers: Record<string, string> = { 'x-request-id': req.id };
    if (req.headers.origin !== undefined) {
      headers['access-control-allow-origin'] = '*';
      headers['access-control-expose-headers'] = EXPOSED_HEADERS;
    }
    return headers;
  }
}
