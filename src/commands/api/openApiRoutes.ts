import type { SwaggerOptions } from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { OpenAPIV3_1 } from 'openapi-types';
import { type FastifyPluginAsyncZod, jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SESSION_COOKIE } from './sessions.js';
import { PAGE_CSP, PAGE_HEADERS } from './webRoutes.js';

/** The OpenAPI 3.1 document's frame; @fastify/swagger adds every route from its schema. */
export const openApiOptions: SwaggerOptions = {
  openapi: {
    openapi: '3.1.0',
    info: {
      title: 'chain-gateway management API',
      version: 'v1',
      description:
        'Accounts, API tokens, access tokens, usage metrics, exports and alerts of a chain-gateway. Errors are RFC 9457 problem+json ' +
        '(`application/problem+json`) with a `code`; a refused input names the part and field (`body.name: …`).',
    },
    components: {
      securitySchemes: {
        session: {
          type: 'apiKey',
          in: 'cookie',
          name: SESSION_COOKIE,
          description: "The dashboard's session, set by sign-up and log-in (httpOnly, SameSite=Strict).",
        },
        accessToken: { type: 'http', scheme: 'bearer', bearerFormat: 'gka_…', description: 'A personal access token, created from a dashboard session.' },
        apiToken: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'gk_…',
          description: 'An API token (for chain calls); of the management API, only the metrics call takes it.',
        },
        adminToken: { type: 'http', scheme: 'bearer', description: "The operator's ADMIN_TOKEN; admin calls refuse everything when it is unset." },
      },
    },
    tags: [
      { name: 'auth', description: "Sign-up, log-in and log-out (the dashboard's session cookie)." },
      { name: 'account', description: 'The account, its plan and usage this month.' },
      { name: 'tokens', description: 'API tokens (`gk_…`) for chain calls.' },
      { name: 'access-tokens', description: 'Personal access tokens (`gka_…`) for this API.' },
      { name: 'metrics', description: 'Usage, performance and errors.' },
      { name: 'exports', description: 'Usage exports (CSV, JSON, PDF), per plan.' },
      { name: 'alerts', description: 'Alert rules and their notifications.' },
      { name: 'admin', description: 'Operator calls.' },
      { name: 'meta', description: 'This description.' },
    ],
  },
  transform: jsonSchemaTransform,
  transformObject: (document) => withoutUnusedSchemas(jsonSchemaTransformObject(document) as OpenAPIV3_1.Document),
};

/**
 * The document without the components nothing refers to: the type provider adds an input twin
 * (`…Input`) of every named schema, and answers are only ever output.
 */
function withoutUnusedSchemas(document: OpenAPIV3_1.Document): OpenAPIV3_1.Document {
  const schemas = document.components?.schemas ?? {};
  const refsIn = (value: unknown): string[] => [...JSON.stringify(value).matchAll(/"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1] as string);
  const used = new Set<string>();
  const pending = refsIn(document.paths);
  for (let name = pending.pop(); name !== undefined; name = pending.pop()) {
    if (used.has(name)) continue;
    used.add(name);
    pending.push(...refsIn(schemas[name]));
  }
  const kept = Object.fromEntries(Object.entries(schemas).filter(([name]) => used.has(name)));
  return { ...document, components: { ...document.components, schemas: kept } };
}

const OpenApiDocument = z
  .looseObject({ openapi: z.string(), info: z.looseObject({ title: z.string(), version: z.string() }), paths: z.record(z.string(), z.unknown()) })
  .meta({ id: 'OpenApiDocument', description: 'An OpenAPI 3.1 document.' });

/**
 * `GET /api/v1/openapi.json`, the document made from the routes' schemas, and `/api/docs`, a
 * page that renders it: Swagger UI, served from this service (no CDN) under the dashboard's
 * policy. Its page and files are scripts and style sheets of this origin only, and it styles
 * through the DOM, so no 'unsafe-inline' is needed (test/browser/api-docs.test.ts checks it).
 */
export const openApiRoutes: FastifyPluginAsyncZod = async (app) => {
  const describe = { summary: "This API's OpenAPI 3.1 description (the one /api/docs renders)", tags: ['meta'], response: { 200: OpenApiDocument } };
  app.get('/api/v1/openapi.json', { config: { auth: 'public' }, schema: describe }, async () => app.swagger() as z.infer<typeof OpenApiDocument>);

  await app.register(async (docs) => {
    const { 'cache-control': _cacheControl, ...pageHeaders } = PAGE_HEADERS;
    // After the API's no-store: the page and its files are the same for everyone; revalidated by ETag.
    docs.addHook('onSend', async (_request, reply, payload) => {
      reply.headers(pageHeaders).header('cache-control', 'no-cache');
      return payload;
    });
    await docs.register(swaggerUi, {
      routePrefix: '/api/docs',
      staticCSP: PAGE_CSP,
      // BaseLayout: without the top bar, whose logo is an SVG with an inline <style> the policy refuses.
      uiConfig: { layout: 'BaseLayout', deepLinking: true, defaultModelsExpandDepth: 0, tryItOutEnabled: false },
      theme: { title: 'chain-gateway API' },
    });
  });
};
