import { randomBytes } from 'node:crypto';
import type { ServerOptions } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import { managementApi } from './commands/api/plugin.js';
import { problemErrorHandler } from './commands/api/problem.js';
import { webRoutes } from './commands/api/webRoutes.js';
import type { Config } from './config.js';
import { redactTokens } from './domain/tokenFormat.js';
import { ChainFront, clientErrorHandler, fastifyTrustProxy } from './gateway/front.js';
import { gatewayRoutes } from './gateway/routes.js';
import { withinDeadline } from './infra/deadline.js';
import type { RedisState } from './infra/redisHealth.js';
import { storeUnreachableReason } from './infra/storeErrors.js';
import { coreProjection } from './projections/core.js';
import type { Runtime } from './runtime.js';

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

/**
 * Fastify's "incoming request" and "request completed" lines at the level each route asks for in
 * `config.requestLogLevel` (default info). Chain calls ask for debug: thousands a second, two
 * lines each, would cost more than serving them and drown every other line, and each is
 * already metered (usage events, metrics). Errors stay at error whatever the route.
 */
class RequestLogLevels extends LogController {
  private readonly silent: boolean;

  constructor(level: string) {
    super();
    // Above info, no request line is ever written: skip even looking at the route.
    this.silent = LEVELS.indexOf(level) > LEVELS.indexOf('info');
  }

  override incomingRequest(request: FastifyRequest, reply: FastifyReply): void {
    if (this.silent) return;
    if (requestLogLevel(request) === 'debug') request.log.debug({ req: request }, 'incoming request');
    else super.incomingRequest(request, reply);
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (this.silent && !error) return;
    if (!error && requestLogLevel(request) === 'debug') reply.log.debug({ res: reply, responseTime: reply.elapsedTime }, 'request completed');
    else super.requestCompleted(error, request, reply);
  }
}

const requestLogLevel = (request: FastifyRequest): string => request.routeOptions.config.requestLogLevel ?? 'info';

/** The HTTP server of a process: the management API and/or the gateway, by role, and health checks. */
/**
 * Request ids: a random prefix per server (96 bits) and a counter. Usage event ids derive from
 * them, so they must be unique across restarts and instances; a counter makes each one far
 * cheaper than a random UUID per call.
 */
function requestIds(): () => string {
  const prefix = randomBytes(12).toString('base64url');
  let next = 0;
  return () => `${prefix}-${(next++).toString(36)}`;
}

/**
 * node:http's timeouts for slow clients, one set for both shapes of the server: fastify's own
 * (ROLE=api) and the chain front's (src/gateway/front.ts), both given these as fastify's `http` option.
 * Node checks the headers and request timeouts only every `connectionsCheckingInterval` (30 s
 * by default, set at creation only), so a timeout could run late by that much: a quarter of the
 * shorter timeout keeps it within 25% at the cost of a walk over the open requests each time.
 * A client cut off is answered 408 (fastify's clientError handler) and its connection closed.
 */
function httpServerTimeouts(http: Config['http']) {
  return {
    headersTimeout: http.headersTimeoutMs,
    requestTimeout: http.requestTimeoutMs,
    keepAliveTimeout: http.keepAliveTimeoutMs,
    connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(Math.min(http.headersTimeoutMs, http.requestTimeoutMs) / 4))),
  } satisfies ServerOptions;
}

export async function buildServer(runtime: Runtime, options: { logger?: boolean } = {}): Promise<FastifyInstance> {
  const { role } = runtime.config;
  const nextId = requestIds();
  // Chain calls are served on node:http before fastify (src/gateway/front.ts).
  const front = runtime.gateway
    ? new ChainFront({
        trustProxy: runtime.config.trustProxy,
        nextId,
        webSockets: { feed: runtime.feed, plans: runtime.config.plans, connections: runtime.wsConnections, ...runtime.config.webSockets },
      })
    : null;
  const timeouts = httpServerTimeouts(runtime.config.http);
  const app = Fastify({
    logger: options.logger
      ? {
          level: runtime.config.logLevel,
          // Tokens travel in paths: logs show them masked, never whole.
          serializers: {
            req: (req: { method: string; url: string; ip?: string }) => ({ method: req.method, url: redactTokens(req.url), ip: req.ip }),
          },
        }
      : false,
    logController: new RequestLogLevels(runtime.config.logLevel),
    trustProxy: fastifyTrustProxy(runtime.config.trustProxy),
    genReqId: nextId,
    ...(front ? { serverFactory: front.serverFactory } : {}),
    clientErrorHandler,
    // fastify gives `http` to node:http's createServer, then sets these two on the server itself.
    http: timeouts,
    requestTimeout: timeouts.requestTimeout,
    keepAliveTimeout: timeouts.keepAliveTimeout,
    bodyLimit: 1024 * 1024,
    // Malformed URLs (bad percent-encoding) fail before any route: answer them as problems too.
    frameworkErrors: (error, request, reply) => {
      problemErrorHandler(error, request, reply);
    },
  });

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const { ready, body } = await readiness(runtime);
    return reply.code(ready ? 200 : 503).send(body);
  });
  // Operators only: the compose file's proxy does not route it from outside.
  app.get('/metrics', async (_request, reply) => reply.type(runtime.telemetry.registry.contentType).send(await runtime.telemetry.metrics()));

  if (role === 'all' || role === 'api') await app.register(managementApi, runtime.api);
  if (role === 'all' || role === 'api') await app.register(webRoutes);
  const gateway = runtime.gateway;
  if (gateway) {
    await app.register(gatewayRoutes, {
      chains: gateway.chains,
      gatekeeper: gateway.gatekeeper,
      recordUsage: (record) => {
        runtime.usageQueue.enqueue(record);
        runtime.telemetry.observeCall(record);
      },
      whenRecorded: (done) => runtime.usageQueue.whenHandedOver(done),
      pools: gateway.pools,
      limits: runtime.config.gatewayLimits,
      front: front ?? undefined,
    });
    if (front) runtime.telemetry.webSockets = () => front.sockets?.stats() ?? null;
  }
  return app;
}

interface Readiness {
  ready: boolean;
  body: {
    /** `degraded`: serving without Redis; `unavailable`: refusing every chain call until Redis is back. */
    status: 'ready' | 'catching_up' | 'degraded' | 'unavailable';
    /** Present when the process uses Redis. */
    redis?: { state: RedisState; since: string; reason?: string };
    /** Present while the event store or the read models cannot be read. */
    database?: { state: 'down'; reason: string };
  };
}

/** /readyz gives up on the stores after this long, inside the manifests' probe timeout (3 s). */
const DATABASE_PROBE_MS = 2000;

/**
 * Ready once the token read model has caught up with the log: the projector's own state where
 * this process projects, otherwise the presence of its checkpoint (or an empty log). Without
 * Redis a process still serves (limits counted in process, usage buffered in memory): it says so
 * and stays ready, for a load balancer that took every gateway out at once for a Redis blip
 * would turn it into an outage. Only a gateway that refuses every call meanwhile
 * (LIMITS_FAIL_CLOSED) is unready, so traffic goes to gateways that still reach Redis.
 */
async function readiness(runtime: Runtime): Promise<Readiness> {
  const health = runtime.redis?.snapshot();
  const redis = health && { state: health.state, since: new Date(health.sinceMs).toISOString(), ...(health.reason === null ? {} : { reason: health.reason }) };
  let caught: boolean;
  try {
    caught = await withinDeadline(caughtUp(runtime), DATABASE_PROBE_MS, () => new Error(`no answer within ${DATABASE_PROBE_MS} ms`));
  } catch (error) {
    // The stores are unreachable: a gateway still serves the tokens it has cached and refuses the
    // others (it stays in its load balancer, as for Redis); the API would only refuse calls.
    const reason = storeUnreachableReason(error) ?? (error instanceof Error ? error.message : String(error));
    const serves = runtime.gateway !== null;
    return { ready: serves, body: { status: serves ? 'degraded' : 'unavailable', redis, database: { state: 'down', reason } } };
  }
  if (!caught) return { ready: false, body: { status: 'catching_up', redis } };
  if (!redis || redis.state === 'up') return { ready: true, body: { status: 'ready', redis } };
  const refusesCalls = runtime.gateway !== null && runtime.config.limitsFailClosed;
  return { ready: !refusesCalls, body: { status: refusesCalls ? 'unavailable' : 'degraded', redis } };
}

async function caughtUp(runtime: Runtime): Promise<boolean> {
  if (runtime.projector) return runtime.projector.isCaughtUp;
  if ((await runtime.readModels.checkpoint(coreProjection.name)) !== null) return true;
  return (await runtime.store.headPosition()) === null;
}
