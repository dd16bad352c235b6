import { performance } from 'node:perf_hooks';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { RawBody } from './body.js';
import { registerRawBodyParser } from './body.js';
import { ChainCalls, type ChainCallsOptions, type ChainRequest, type ChainResponse } from './chainCalls.js';
import type { ChainFront } from './front.js';

/**
 * The chain-facing routes in fastify: `POST /<chain>[/<token>]` (JSON-RPC), `GET|POST
 * /<chain>[/<token>]/<…>` (REST), and their CORS preflights. Register with
 * `app.register(gatewayRoutes, options)`: not wrapped in fastify-plugin, so the raw-body parser
 * and error handler stay inside this scope. With a `front` (the app's serverFactory), the known
 * chains' GET and POST calls are served by it, before fastify, through the same ChainCalls;
 * these routes answer everything else (unknown chains, preflights, `inject`).
 */

export type { GatewayLimits } from './chainCalls.js';
export { DEFAULT_GATEWAY_LIMITS } from './chainCalls.js';

export interface GatewayRoutesOptions extends ChainCallsOptions {
  front?: ChainFront;
}

interface RouteParams {
  chain: string;
}

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

const send = (reply: FastifyReply, response: ChainResponse): FastifyReply =>
  reply
    .code(response.status)
    .headers(response.headers)
    .send(response.body ?? undefined);

export async function gatewayRoutes(fastify: FastifyInstance, options: GatewayRoutesOptions): Promise<void> {
  const calls = new ChainCalls(options, fastify.log);
  registerRawBodyParser(fastify, calls.limits.maxBodyBytes);
  // When each request arrived, before its body was read: the start of its total time. A
  // callback hook, not an async one: no promise per call.
  fastify.decorateRequest('gatewayArrivedAt', 0);
  fastify.addHook('onRequest', (request, _reply, done) => {
    request.gatewayArrivedAt = performance.now();
    done();
  });

  const { front } = options;
  if (front) {
    front.serve(calls);
    // Not fastify's 503 while it closes: that would answer known tokens' calls unmetered.
    fastify.addHook('preClose', (done) => {
      front.drain();
      done();
    });
  }

  fastify.setErrorHandler((error, request, reply) => {
    const status = (error as { statusCode?: unknown }).statusCode;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      // Refused by fastify before our handler (e.g. an unparseable Content-Type): still our shape.
      return send(reply, calls.refused(request, status, (error as Error).message));
    }
    return send(reply, calls.failed(request, error));
  });

  const handler = async (request: FastifyRequest<{ Params: RouteParams }>, reply: FastifyReply): Promise<FastifyReply> => {
    const call: ChainRequest = {
      method: request.method,
      url: request.url,
      headers: request.headers,
      body: request.body as RawBody | undefined,
      ip: request.ip,
      id: request.id,
      arrivedAt: request.gatewayArrivedAt,
      connection: request.raw.socket,
    };
    return send(reply, await new Promise<ChainResponse>((resolve) => calls.serve(call, resolve)));
  };

  const preflight = async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => send(reply, calls.preflight(request));

  // Not a 404 "no route" (with the token in it): the endpoint exists, the method does not.
  const otherMethod = (request: FastifyRequest, reply: FastifyReply): void => {
    const answer = calls.methodNotAllowed(request);
    if (answer) send(reply, answer);
    else reply.callNotFound();
  };

  for (const url of ['/:chain', '/:chain/*']) {
    fastify.route<{ Params: RouteParams }>({ method: ['GET', 'POST'], url, handler, config: CHAIN_ROUTE_CONFIG });
    fastify.route({ method: 'OPTIONS', url, handler: preflight, config: CHAIN_ROUTE_CONFIG });
    fastify.route({ method: ['PUT', 'DELETE', 'PATCH'], url, handler: otherMethod, config: CHAIN_ROUTE_CONFIG });
  }
}
