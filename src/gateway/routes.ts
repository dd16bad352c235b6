import { performance } from 'node:perf_hooks';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { UsageRecord } from '../domain/usage.js';
import type { Admission, Gatekeeper } from './admission.js';
import { type Answer, type CallScope, INVALID_METHOD, localError, type LocalError } from './answer.js';
import { BodyTooLarge, isJsonRpcMediaType, registerRawBodyParser } from './body.js';
import type { ChainRegistry } from './chains.js';
import { type Credentials, extractCredentials } from './credentials.js';
import { JSON_CONTENT_TYPE, RpcCode, restError, rpcError } from './errors.js';
import { IsoClock } from './isoClock.js';
import { handleRest } from './rest.js';
import { handleJsonRpc } from './rpcHandler.js';
import type { UpstreamPools } from './upstream.js';

/**
 * The chain-facing routes: `POST /<chain>[/<token>]` (JSON-RPC), `GET|POST /<chain>[/<token>]/<…>`
 * (REST). Register with `app.register(gatewayRoutes, options)` — not wrapped in fastify-plugin,
 * so the raw-body parser and error handler stay inside this scope. Every answer carries the
 * admission's limit headers; every call of a known caller yields one usage record. Usage
 * request ids are `request.id` (+ `:<index>` per batch member): the app must generate unique
 * ids (`genReqId`), since they key idempotent usage appends.
 */

export interface GatewayLimits {
  maxBatch: number;
  maxBodyBytes: number;
}

export const DEFAULT_GATEWAY_LIMITS: GatewayLimits = { maxBatch: 100, maxBodyBytes: 1024 * 1024 };

export interface GatewayRoutesOptions {
  chains: ChainRegistry;
  gatekeeper: Gatekeeper;
  recordUsage: (record: UsageRecord) => void;
  pools: UpstreamPools;
  limits?: Partial<GatewayLimits>;
}

interface RouteParams {
  chain: string;
}

class GatekeeperUnavailable extends Error {}

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when a chain call arrived, before its body was read. */
    gatewayArrivedAt: number;
  }
  interface FastifyContextConfig {
    /** Level of the route's "incoming request" / "request completed" lines (src/server.ts). */
    requestLogLevel?: 'debug' | 'info';
  }
}

/** Chain calls are metered one by one: their request lines are debug, not info (src/server.ts). */
const CHAIN_ROUTE_CONFIG = { requestLogLevel: 'debug' } as const;

/** One chain call's scope: the admission is asked at most once, whatever the handlers ask. */
class RequestScope implements CallScope {
  private admission: Promise<Admission> | null = null;

  constructor(
    readonly chain: CallScope['chain'],
    readonly pool: CallScope['pool'],
    private readonly gatekeeper: Gatekeeper,
    private readonly credentials: Credentials,
  ) {}

  admit(cost: number): Promise<Admission> {
    this.admission ??= this.ask(cost);
    return this.admission;
  }

  private async ask(cost: number): Promise<Admission> {
    try {
      return await this.gatekeeper.admit({ chain: this.chain.id, token: this.credentials.token, via: this.credentials.via, cost, nowMs: Date.now() });
    } catch (err) {
      throw new GatekeeperUnavailable('gatekeeper failed', { cause: err });
    }
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

/** Path segments after the chain, and the query, from the raw URL (still percent-encoded). */
function splitUrl(url: string): { segments: string[]; query: string } {
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const segments = path.split('/').slice(2);
  if (segments.length > 0 && segments[segments.length - 1] === '') segments.pop();
  return { segments, query: q < 0 ? '' : url.slice(q + 1) };
}

/** JSON-RPC errors answer a POST without path; everything else is answered in the REST shape. */
const isRpcShaped = (request: FastifyRequest): boolean => request.method === 'POST' && splitUrl(request.url).segments.length <= 1;

interface Incoming {
  /** Path segments after the chain and the token. */
  segments: string[];
  isPost: boolean;
  body: unknown;
  contentType: string | undefined;
  query: string;
  limits: GatewayLimits;
}

const rpcIssue = (status: number, message: string): LocalError => ({
  shape: 'rpc', status, rpcCode: RpcCode.invalidRequest, restCode: 'invalid_request', message, method: INVALID_METHOD,
});

const restIssue = (segments: string[], status: number, restCode: string, message: string): LocalError => ({
  shape: 'rest', status, rpcCode: RpcCode.invalidRequest, restCode, message, method: segments.join('/').slice(0, 200) || INVALID_METHOD,
});

const EMPTY_BODY = Buffer.alloc(0);

/** Which protocol handles the call, or which local error answers it. */
function dispatch(scope: CallScope, req: Incoming): Promise<Answer> {
  const { chain } = scope;
  const { segments, isPost, limits } = req;
  const tooLarge = req.body instanceof BodyTooLarge;
  const raw = Buffer.isBuffer(req.body) ? req.body : EMPTY_BODY;

  if (segments.length === 0 && isPost) {
    if (!chain.acceptsJsonRpc) return localError(scope, rpcIssue(400, `${chain.id} speaks REST, not JSON-RPC: call /${chain.id}/<token>/<method_or_path>`));
    if (tooLarge) return localError(scope, rpcIssue(413, `Request body larger than ${limits.maxBodyBytes} bytes`));
    if (!isJsonRpcMediaType(req.contentType)) return localError(scope, rpcIssue(415, 'Unsupported media type: send application/json'));
    return handleJsonRpc(scope, raw, limits.maxBatch);
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
    return localError(scope, restIssue(segments, 400, 'protocol_mismatch', `${chain.id} speaks JSON-RPC, not REST: POST a JSON-RPC 2.0 body to /${chain.id}/<token>`));
  }
  if (tooLarge) return localError(scope, restIssue(segments, 413, 'payload_too_large', `Request body larger than ${limits.maxBodyBytes} bytes`));
  return handleRest(scope, { httpMethod: isPost ? 'POST' : 'GET', segments, query: req.query, body: isPost ? raw : null, contentType: req.contentType });
}

/**
 * What every chain answer carries: its request id, and for browsers (a request with an Origin
 * header: only those are CORS requests) the CORS headers. Browser dApps call chain endpoints
 * directly, as they do Infura's or Alchemy's.
 */
function commonHeaders(request: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-request-id', request.id);
  if (request.headers.origin !== undefined) {
    reply.header('access-control-allow-origin', '*');
    reply.header('access-control-expose-headers', EXPOSED_HEADERS);
  }
}

export async function gatewayRoutes(fastify: FastifyInstance, options: GatewayRoutesOptions): Promise<void> {
  const limits = { ...DEFAULT_GATEWAY_LIMITS, ...options.limits };
  const { chains, gatekeeper, pools } = options;
  const clock = new IsoClock();
  registerRawBodyParser(fastify, limits.maxBodyBytes);
  // When each request arrived, before its body was read: the start of its total time. A
  // callback hook, not an async one: no promise per call.
  fastify.decorateRequest('gatewayArrivedAt', 0);
  fastify.addHook('onRequest', (request, _reply, done) => {
    request.gatewayArrivedAt = performance.now();
    done();
  });

  fastify.setErrorHandler((error, request, reply) => {
    commonHeaders(request, reply);
    const rpcShaped = isRpcShaped(request);
    const frameworkStatus = (error as { statusCode?: unknown }).statusCode;
    if (typeof frameworkStatus === 'number' && frameworkStatus >= 400 && frameworkStatus < 500) {
      // Refused by fastify before our handler (e.g. an unparseable Content-Type): still our shape.
      const message = frameworkStatus === 415 ? 'Unsupported media type: send application/json' : `Bad request: ${(error as Error).message}`;
      const restCode = frameworkStatus === 415 ? 'unsupported_media_type' : 'bad_request';
      reply
        .code(frameworkStatus)
        .type(JSON_CONTENT_TYPE)
        .send(rpcShaped ? rpcError('null', RpcCode.invalidRequest, message) : restError(restCode, message));
      return;
    }
    const unavailable = error instanceof GatekeeperUnavailable;
    request.log.error({ err: error }, unavailable ? 'gatekeeper failed' : 'chain call failed');
    const status = unavailable ? 503 : 500;
    const message = unavailable ? 'Service temporarily unavailable' : 'Internal error';
    reply
      .code(status)
      .type(JSON_CONTENT_TYPE)
      .send(rpcShaped ? rpcError('null', RpcCode.internalError, message) : restError(unavailable ? 'service_unavailable' : 'internal_error', message));
  });

  const emit = (request: FastifyRequest, answer: Answer, chainId: string): void => {
    const caller = answer.admission?.caller;
    if (!caller) return;
    const elapsed = performance.now() - request.gatewayArrivedAt;
    const totalMs = Math.round(elapsed * 100) / 100;
    const at = clock.format(Date.now() - elapsed);
    for (const d of answer.usage) {
      const record: UsageRecord = {
        requestId: d.memberIndex === null ? request.id : `${request.id}:${d.memberIndex}`,
        at,
        accountId: caller.accountId,
        tokenId: caller.tokenId,
        chain: chainId,
        method: d.method.slice(0, 200),
        status: answer.status,
        rpcErrorCode: d.rpcErrorCode,
        errorMessage: d.errorMessage,
        totalMs,
        upstreamMs: d.upstreamMs,
        clientIp: request.ip,
        upstream: d.upstream,
        retentionDays: caller.retentionDays,
      };
      try {
        options.recordUsage(record);
      } catch (err) {
        request.log.error({ err }, 'usage record dropped');
      }
    }
  };

  const send = (request: FastifyRequest, reply: FastifyReply, answer: Answer): FastifyReply => {
    commonHeaders(request, reply);
    const admission = answer.admission;
    if (admission) reply.headers(admission.headers);
    if (answer.headers) reply.headers(answer.headers);
    if (answer.status === 429 && admission?.retryAfterSeconds != null && !reply.hasHeader('retry-after')) {
      reply.header('retry-after', String(admission.retryAfterSeconds));
    }
    if (answer.status === 413) reply.header('connection', 'close');
    reply.code(answer.status);
    if (answer.body === null) return reply.send();
    return reply.type(answer.contentType).send(answer.body);
  };

  const handler = async (request: FastifyRequest<{ Params: RouteParams }>, reply: FastifyReply): Promise<FastifyReply> => {
    const chainId = request.params.chain;
    const chain = chains.get(chainId);
    const { segments: afterChain, query } = splitUrl(request.url);
    const isPost = request.method === 'POST';
    if (!chain) {
      const message = `Unknown chain "${chainId.slice(0, 64)}"`;
      const body = isPost && afterChain.length <= 1 ? rpcError('null', RpcCode.methodNotFound, message) : restError('unknown_chain', message);
      commonHeaders(request, reply);
      return reply.code(404).type(JSON_CONTENT_TYPE).send(body);
    }
    const pool = pools.get(chain.id);
    if (!pool) throw new Error(`no upstream pool for chain ${chain.id}`);
    const credentials = extractCredentials(afterChain, request.headers.authorization, query);
    const scope = new RequestScope(chain, pool, gatekeeper, credentials);
    const answer = await dispatch(scope, {
      segments: credentials.segments,
      isPost,
      body: request.body,
      contentType: request.headers['content-type'],
      query,
      limits,
    });
    emit(request, answer, chain.id);
    return send(request, reply, answer);
  };

  const preflight = async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    const asked = request.headers['access-control-request-headers'];
    commonHeaders(request, reply);
    return reply
      .code(204)
      .headers({
        'access-control-allow-methods': 'GET, POST, OPTIONS',
        'access-control-allow-headers': typeof asked === 'string' && asked !== '' ? asked : 'authorization, content-type',
        'access-control-max-age': '86400',
      })
      .send();
  };

  for (const url of ['/:chain', '/:chain/*']) {
    fastify.route<{ Params: RouteParams }>({ method: ['GET', 'POST'], url, handler, config: CHAIN_ROUTE_CONFIG });
    fastify.route({ method: 'OPTIONS', url, handler: preflight, config: CHAIN_ROUTE_CONFIG });
  }
}
