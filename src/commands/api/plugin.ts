import type { FastifyPluginAsync } from 'fastify';
import { accessTokenRoutes } from './accessTokenRoutes.js';
import { accountRoutes } from './accountRoutes.js';
import { alertRoutes } from './alertRoutes.js';
import { authRoutes } from './authRoutes.js';
import type { ApiDeps } from './deps.js';
import { exportRoutes } from './exportRoutes.js';
import { metricsRoutes } from './metricsRoutes.js';
import { problemErrorHandler } from './problem.js';
import { tokenRoutes } from './tokenRoutes.js';

/** The owner and management API (DESIGN §4), errors as RFC 9457 problem+json. */
export const managementApi: FastifyPluginAsync<ApiDeps> = async (app, deps) => {
  // JSON only: any other body is a 415, not a string that fails validation later.
  app.removeContentTypeParser('text/plain');
  app.setErrorHandler(problemErrorHandler);
  app.setNotFoundHandler((request, reply) => {
    problemErrorHandler(Object.assign(new Error(`No route ${request.method} ${request.url.split('?')[0]}.`), { statusCode: 404 }), request, reply);
  });
  await app.register(authRoutes, deps);
  await app.register(accountRoutes, deps);
  await app.register(accessTokenRoutes, deps);
  await app.register(tokenRoutes, deps);
  await app.register(metricsRoutes, deps);
  await app.register(exportRoutes, deps);
  await app.register(alertRoutes, deps);
};
