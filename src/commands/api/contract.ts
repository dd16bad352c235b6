import { isDeepStrictEqual } from 'node:util';
import type { FastifyInstance, FastifySerializerCompiler, RouteOptions } from 'fastify';
import { z } from 'zod';
import { Problem } from '../../api/schemas.js';
import type { ApiDeps } from './deps.js';
import { SECURITY, scopeHooks } from './owner.js';
import { problem, TITLES, UndocumentedAnswer } from './problem.js';

const PROBLEM_TYPE = 'application/problem+json';

/** What a status means on any route; a route's own problems say more in its description. */
const MEANINGS: Record<number, string> = {
  400: 'The request broke its schema (`validation_failed`, `errors[]` names each field and the part it was in), or malformed JSON.',
  401: 'No credential, or one that is not valid for this call (`unauthorized`).',
  403: 'Refused: the plan lacks the feature, or the API token is disabled.',
  404: 'No such resource for this account (`not_found`).',
  409: "The resource's state does not allow this, or a limit is reached.",
  413: 'The body is larger than 1 MiB (`body_too_large`).',
  415: 'The body is not `application/json` (`unsupported_media_type`).',
  422: "Well-formed but not applicable (e.g. a limit above the account's).",
  429: 'Too many attempts from this address or for this email, or too many exports of the account at once; see `Retry-After`.',
  500: 'Something went wrong on our side; it has been logged (`internal_error`).',
  503: 'Too busy to check a password right now (`overloaded`), or the database is not answering (`store_unavailable`); see `Retry-After`.',
};

/** Headers an answer always carries, as the document lists them (the handler sets them; fastify does not read these). */
export type AnswerHeaders = Record<string, z.ZodType>;

const RETRY_AFTER: AnswerHeaders = {
  'Retry-After': z
    .string()
    .regex(/^[1-9]\d*$/)
    .describe('Seconds to wait before trying again.'),
};
/** The refusals that say when to come back (docs/decisions.md: log-in and sign-up limits, password hashing cap). */
const PROBLEM_HEADERS: Record<number, AnswerHeaders> = { 429: RETRY_AFTER, 503: RETRY_AFTER };

/** Problem+json answers for `statuses`, for a route's `schema.response`. */
export function problems(...statuses: number[]) {
  return Object.fromEntries(
    statuses.map((status) => {
      const headers = PROBLEM_HEADERS[status];
      const description = MEANINGS[status] ?? TITLES[status] ?? 'Error';
      return [status, { description, ...(headers ? { headers } : {}), content: { [PROBLEM_TYPE]: { schema: Problem } } }];
    }),
  );
}

/** A JSON answer that always carries `headers` (e.g. the session cookie), for a route's `schema.response`. */
export function jsonWithHeaders<S extends z.ZodType>(schema: S, headers: AnswerHeaders, description: string) {
  return { description, headers, content: { 'application/json': { schema } } };
}

const SUCCESS: Record<string, string> = { 200: 'OK.', 201: 'Created.' };

/** A success answer given as a bare schema, as a JSON response with a description for the document. */
function jsonResponse(status: string, answer: unknown): unknown {
  if (!(answer instanceof z.ZodType) || answer instanceof z.ZodUndefined) return answer;
  const description = z.globalRegistry.get(answer)?.description ?? SUCCESS[status] ?? 'OK.';
  return { description, content: { 'application/json': { schema: answer } } };
}

// Fastify reads a body on DELETE too: a stray one that is not JSON is a 415, one over 1 MiB a 413.
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * Completes every /api/v1 route from the one scope it declares (`config.auth`): the scope's
 * hook, its OpenAPI security, and the problems any route of its kind can answer (401 for a
 * credential, 400 for an input, 413/415 for a body, 500). A route without a scope is a
 * start-up error, not an open door.
 */
export function completeRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const hooks = scopeHooks(deps);
  app.addHook('onRoute', (route: RouteOptions) => {
    if (!route.url.startsWith('/api/v1/')) return;
    const scope = route.config?.auth;
    if (!scope) throw new Error(`${String(route.method)} ${route.url}: declare who may call it (config.auth)`);
    const methods = [route.method].flat();
    const schema = route.schema ?? {};
    // Any route reads a store, and any store may be unreachable for a while (503 `store_unavailable`).
    const statuses = [500, 503];
    if (scope !== 'public') statuses.push(401);
    if (scope === 'metrics') statuses.push(403);
    if (schema.params || schema.querystring || schema.body) statuses.push(400);
    if (methods.some((m) => BODY_METHODS.has(m))) statuses.push(400, 413, 415);
    const answers = Object.entries((schema.response ?? {}) as Record<string, unknown>).map(([status, answer]) => [status, jsonResponse(status, answer)]);
    route.schema = { ...schema, security: SECURITY[scope], response: { ...problems(...statuses), ...Object.fromEntries(answers) } };
    if (scope === 'public') return;
    // onRoute runs again for the HEAD copy of a GET: the hook is added once.
    const onRequest = [route.onRequest ?? []].flat();
    if (!onRequest.includes(hooks[scope])) route.onRequest = [...onRequest, hooks[scope]];
  });
}

const plain = (value: unknown): unknown => JSON.parse(JSON.stringify(value) ?? 'null');

/**
 * Serializes answers as JSON. With `check` (the test suite), an answer must match its
 * documented schema exactly: a wrong type, a missing field or one the schema does not name is
 * a 500 that says which, so every answer the e2e tests see is one the OpenAPI document
 * describes. Production skips the check: a schema slip must not turn answers into errors.
 */
export function answerSerializer(check: boolean): FastifySerializerCompiler<z.ZodType> {
  return ({ schema, method, url, httpStatus }) =>
    (data) => {
      if (check) {
        const result = z.safeEncode(schema, data);
        const where = `${method} ${url} ${httpStatus}`;
        if (!result.success) throw new UndocumentedAnswer(`${where}: the answer breaks its documented schema:\n${z.prettifyError(result.error)}`);
        if (!isDeepStrictEqual(plain(result.data), plain(data))) {
          throw new UndocumentedAnswer(`${where}: the answer has fields its documented schema does not name: ${JSON.stringify(data).slice(0, 500)}`);
        }
      }
      return JSON.stringify(data);
    };
}

/** With `check`, an answer whose status its route does not document is a 500 that says so. */
export function checkAnswerStatuses(app: FastifyInstance): void {
  app.addHook('onSend', async (request, reply, payload) => {
    if (!request.routeOptions.config.auth) return payload;
    const documented = Object.keys(request.routeOptions.schema?.response ?? {});
    const status = String(reply.statusCode);
    if (documented.includes(status) || documented.includes(`${status[0]}xx`)) return payload;
    reply.code(500).type(PROBLEM_TYPE);
    return JSON.stringify(
      problem(500, 'undocumented_status', `${request.method} ${request.routeOptions.url} answered ${status}, which its schema does not document.`),
    );
  });
}
