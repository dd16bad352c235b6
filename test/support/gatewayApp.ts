import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import type { UsageRecord } from '../../src/domain/usage.js';
import type { Gatekeeper } from '../../src/gateway/admission.js';
import { parseChainsConfig } from '../../src/gateway/chains.js';
import { ChainFront, clientErrorHandler, fastifyTrustProxy } from '../../src/gateway/front.js';
import { type GatewayLimits, gatewayRoutes } from '../../src/gateway/routes.js';
import { type UpstreamPoolOptions, UpstreamPools } from '../../src/gateway/upstream.js';

/** A fastify app serving only the chain-facing routes, on a loopback port, recording usage in memory. */
export interface TestGateway {
  url: string;
  app: FastifyInstance;
  usage: UsageRecord[];
  pools: UpstreamPools;
  close(): Promise<void>;
}

/** A chain entry for the test config: defaults to a JSON-RPC chain. */
export function chainEntry(id: string, urls: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { id, name: id, protocol: 'jsonrpc', timeoutMs: 2_000, upstreams: urls.map((url, i) => ({ url, label: `${id}-${i + 1}` })), ...extra };
}

export async function startGateway(options: {
  chains: Record<string, unknown>[];
  gatekeeper: Gatekeeper;
  limits?: Partial<GatewayLimits>;
  pool?: UpstreamPoolOptions;
  trustProxy?: boolean;
  /** Where the app logs (at info), when a test reads it; otherwise it does not log. */
  log?: { write(line: string): void };
}): Promise<TestGateway> {
  const registry = parseChainsConfig({ chains: options.chains }, 'test');
  const pools = new UpstreamPools(registry, options.pool);
  const usage: UsageRecord[] = [];
  // As the service does: chain calls on the node:http front, the rest on fastify.
  // Request ids tell which of the two served a call.
  const trustProxy = options.trustProxy ?? false;
  const front = new ChainFront({ trustProxy, nextId: () => `front-${randomUUID()}` });
  const logger = options.log ? { level: 'info', stream: options.log } : false;
  const app = Fastify({
    logger,
    trustProxy: fastifyTrustProxy(trustProxy),
    genReqId: () => `fastify-${randomUUID()}`,
    serverFactory: front.serverFactory,
    clientErrorHandler,
  });
  await app.register(gatewayRoutes, {
    chains: registry,
    gatekeeper: options.gatekeeper,
    recordUsage: (r) => usage.push(r),
    pools,
    limits: options.limits,
    front,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    app,
    usage,
    pools,
    close: async () => {
      await app.close();
      await pools.close();
    },
  };
}
