import type { SwaggerOptions, SwaggerTransform } from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { type FastifyPluginAsyncZod, jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import type { OpenAPIV3_1 } from 'openapi-types';
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
  transform: withAnswerHeaders,
  transformObject: (document) => withOpenAnswers(withHeadersAlwaysSent(withoutUnusedSchemas(jsonSchemaTransformObject(document) as OpenAPIV3_1.Document))),
};

type DeclaredAnswer = { description?: string; headers?: Record<string, z.ZodType>; content?: unknown };
const hasHeaders = (answer: unknown): answer is DeclaredAnswer & { headers: Record<string, z.ZodType> } =>
  typeof answer === 'object' && answer !== null && !(answer instanceof z.ZodType) && 'headers' in answer;

/**
 * The type provider's transform, keeping the headers an answer declares beside its content
 * (`{ description, headers, content }`, see contract.ts): it rebuilds each answer without them.
 * Each header's zod schema becomes JSON Schema; @fastify/swagger makes them the answer's headers.
 */
function withAnswerHeaders(...[route]: Parameters<SwaggerTransform>): ReturnType<SwaggerTransform> {
  const declared = (route.schema.response ?? {}) as Record<string, unknown>;
  const headersOf = new Map<string, Record<string, z.ZodType>>();
  const response = Object.fromEntries(
    Object.entries(declared).map(([status, answer]) => {
      if (!hasHeaders(answer)) return [status, answer];
      const { headers, ...rest } = answer;
      headersOf.set(status, headers);
      // An answer with headers and no body (log-out's 204): the transform knows a body-less answer as z.undefined().
      return [status, 'content' in rest ? rest : z.undefined().describe(rest.description ?? 'No content.')];
    }),
  );
  const transformed = jsonSchemaTransform({ ...route, schema: { ...route.schema, response } });
  const answers = (transformed.schema.response ?? {}) as Record<string, object>;
  for (const [status, headers] of headersOf) {
    const json = Object.fromEntries(
      Object.entries(headers).map(([name, schema]) => {
        const { $schema: _dialect, ...header } = z.toJSONSchema(schema, { target: 'draft-2020-12', io: 'output' });
        return [name, header];
      }),
    );
    answers[status] = { ...answers[status], headers: json };
  }
  return transformed;
}

/** Every header an answer documents is one it always sends: `required`, so a client may count on it. */
function withHeadersAlwaysSent(document: OpenAPIV3_1.Document): OpenAPIV3_1.Document {
  for (const operations of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(operations ?? {})) {
      const responses = (operation as OpenAPIV3_1.OperationObject).responses ?? {};
      for (const answer of Object.values(responses) as OpenAPIV3_1.ResponseObject[]) {
        for (const header of Object.values(answer.headers ?? {}) as OpenAPIV3_1.HeaderObject[]) header.required = true;
      }
    }
  }
  return document;
}

/** Names of the components a part of the document refers to, directly or through other components. */
function componentsReachedFrom(part: unknown, schemas: Record<string, unknown>): Set<string> {
  const refsIn = (value: unknown): string[] => [...JSON.stringify(value ?? null).matchAll(/"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1] as string);
  const reached = new Set<string>();
  const pending = refsIn(part);
  for (let name = pending.pop(); name !== undefined; name = pending.pop()) {
    if (reached.has(name)) continue;
    reached.add(name);
    pending.push(...refsIn(schemas[name]));
  }
  return reached;
}

/** Drops every `additionalProperties: false` under a schema, in place. */
function opened(schema: unknown): void {
  if (Array.isArray(schema)) for (const item of schema) opened(item);
  else if (typeof schema === 'object' && schema !== null) {
    const record = schema as Record<string, unknown>;
    if (record.additionalProperties === false) delete record.additionalProperties;
    for (const value of Object.values(record)) opened(value);
  }
}

/**
 * Answers documented open, as src/api/schemas.ts promises (a client must accept fields added
 * later): zod writes every output object closed (`additionalProperties: false`), and a client
 * that validates answers against the document would then refuse the next added field. Inputs
 * stay closed: an unknown field in a request is refused (400). A component an input refers to
 * too stays as it is.
 */
function withOpenAnswers(document: OpenAPIV3_1.Document): OpenAPIV3_1.Document {
  const schemas = (document.components?.schemas ?? {}) as Record<string, unknown>;
  const operations = Object.values(document.paths ?? {})
    .flatMap((path) => Object.values(path ?? {}) as unknown[])
    .filter((op): op is OpenAPIV3_1.OperationObject => typeof op === 'object' && op !== null && 'responses' in op);
  const inputs = componentsReachedFrom(
    operations.map((op) => [op.requestBody, op.parameters]),
    schemas,
  );
  for (const name of componentsReachedFrom(
    operations.map((op) => op.responses),
    schemas,
  )) {
    if (!inputs.has(name)) opened(schemas[name]);
  }
  for (const op of operations) {
    for (const answer of Object.values(op.responses ?? {}) as OpenAPIV3_1.ResponseObject[]) {
      for (const media of Object.values(answer.content ?? {})) opened(media.schema);
    }
  }
  return document;
}

/**
 * The document without the components nothing refers to: the type provider adds an input twin
 * (`…Input`) of every named schema, and answers are only ever output.
 */
function withoutUnusedSchemas(document: OpenAPIV3_1.Document): OpenAPIV3_1.Document {
  const schemas = document.components?.schemas ?? {};
  const used = componentsReachedFrom(document.paths, schemas);
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
