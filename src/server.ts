import Fastify, { type FastifyInstance } from 'fastify';
import { managementApi } from './commands/api/plugin.js';
import { problemErrorHandler } from './commands/api/problem.js';
import type { Runtime } from './runtime.js';

/** The HTTP server of a process: the management API and/or the gateway, by role, and health checks. */
export async function buildServer(runtime: Runtime, options: { logger?: boolean } = {}): Promise<FastifyInstance> {
  const { role } = runtime.config;
  const app = Fastify({
    logger: options.logger ? { level: runtime.config.logLevel } : false,
    trustProxy: true,
    bodyLimit: 1024 * 1024,
    // Malformed URLs (bad percent-encoding) fail before any route: answer them as problems too.
    frameworkErrors: (error, request, reply) => {
      problemErrorHandler(error, request, reply);
    },
  });

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const projecting = runtime.projector;
    const ready = projecting ? projecting.isCaughtUp : true;
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'catching_up' });
  });

  if (role === 'all' || role === 'api') await app.register(managementApi, runtime.api);
  return app;
}
