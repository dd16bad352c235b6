import swagger from '@fastify/swagger';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { accessTokenRoutes } from './accessTokenRoutes.js';
import { accountRoutes } from './accountRoutes.js';
import { alertRoutes } from './alertRoutes.js';
import { authRoutes } from './authRoutes.js';
import { answerSerializer, checkAnswerStatuses, completeRoutes } from './contract.js';
import type { ApiDeps } from './deps.js';
import { exportRoutes } from './exportRoutes.js';
import { refuseUnstorableText, zodValidatorCompiler } from './input.js';
import { metricsRoutes } from './metricsRoutes.js';
import { openApiOptions, openApiRoutes } from './openApiRoutes.js';
import { problemErrorHandler } from './problem.js';
import { tokenRoutes } from './tokenRoutes.js';

/**
 * The owner and management API (DESIGN §4), errors as RFC 9457 problem+json. Each route
 * declares its scope, inputs and answers as zod schemas; the OpenAPI document is made from them.
 */
export const managementApi: FastifyPluginAsync<ApiDeps> = async (app, deps) => {
  // JSON only: any other body is a 415, not a string that fails validation later.
  app.removeContentTypeParser('text/plain');
  app.setErrorHandler(problemErrorHandler);
  app.setValidatorCompiler(zodValidatorCompiler);
  // Before each route's schema: one check for every string of every body, whatever field it is in.
  app.addHook('preValidation', async (request) => refuseUnstorableText(request.body));
  // Vitest sets NODE_ENV=test: the suite checks every answer against its documented schema.
  const checkAnswers = process.env.NODE_ENV === 'test';
  app.setSerializerCompiler(answerSerializer(checkAnswers));
  if (checkAnswers) checkAnswerStatuses(app);
  app.decorateRequest('owner', null);
  completeRoutes(app, deps);
  // Before the routes: it collects each as it is added.
  await app.register(swagger, openApiOptions);
  const notFound = (request: FastifyRequest, reply: FastifyReply): void => {
    problemErrorHandler(Object.assign(new Error(`No route ${request.method} ${request.url.split('?')[0]}.`), { statusCode: 404 }), request, reply);
  };
  app.setNotFoundHandler(notFound);
  // What no route here serves under /api, /api itself included, is this API's 404, not the chain router's unknown chain "api".
  for (const url of ['/api', '/api/*']) app.all(url, { schema: { hide: true } }, notFound);
  // Every answer, errors included: some hold a raw token (shown once), none may sit in a cache or be sniffed as another type.
  app.addHook('onSend', (_request, reply, payload, done) => {
    reply.header('cache-control', 'no-store');
    reply.header('x-content-type-options', 'nosniff');
    done(null, payload);
  });
  await app.register(authRoutes, deps);
  await app.register(accountRoutes, deps);
  await app.register(accessTokenRoutes, deps);
  await app.register(tokenRoutes, deps);
  await app.register(metricsRoutes, deps);
  await app.register(exportRoutes, deps);
  await app.register(alertRoutes, deps);
  await app.register(openApiRoutes);
};
