import Fastify, { type FastifyInstance } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { answerSerializer, checkAnswerStatuses, completeRoutes } from '../../src/commands/api/contract.js';
import type { ApiDeps } from '../../src/commands/api/deps.js';
import { parseInput, zodValidatorCompiler } from '../../src/commands/api/input.js';
import { problemErrorHandler } from '../../src/commands/api/problem.js';

const ADMIN = 'admin-token-for-the-contract-test';
// Only the admin scope's hook runs here, and it reads nothing but the operator token.
const deps = { adminToken: ADMIN } as Partial<ApiDeps> as ApiDeps;
const auth = { authorization: `Bearer ${ADMIN}` };

const Thing = z.object({ id: z.string(), size: z.number() });

/** A management-API-like app: the same compilers, hooks and error handler as managementApi, with `routes`. */
async function app(routes: FastifyPluginAsyncZod, check = true): Promise<FastifyInstance> {
  const server = Fastify();
  server.setErrorHandler(problemErrorHandler);
  server.setValidatorCompiler(zodValidatorCompiler);
  server.setSerializerCompiler(answerSerializer(check));
  if (check) checkAnswerStatuses(server);
  server.decorateRequest('owner', null);
  completeRoutes(server, deps);
  await server.register(routes);
  await server.ready();
  return server;
}

describe('routes declare their contract', () => {
  it('refuses to start with a route that does not say who may call it', async () => {
    await expect(
      app(async (a) => {
        a.get('/api/v1/open', async () => 'open');
      }),
    ).rejects.toThrow(/GET \/api\/v1\/open: declare who may call it/);
  });

  it('authenticates by the declared scope before it validates: no credential is a 401 even for a bad body', async () => {
    const server = await app(async (a) => {
      a.post('/api/v1/things', { config: { auth: 'admin' }, schema: { body: z.strictObject({ size: z.number() }), response: { 200: Thing } } }, async (r) => ({
        id: 't1',
        size: r.body.size,
      }));
    });
    const anonymous = await server.inject({ method: 'POST', url: '/api/v1/things', payload: { size: 'big' } });
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.headers['content-type']).toMatch(/^application\/problem\+json/);
    const bad = await server.inject({ method: 'POST', url: '/api/v1/things', headers: auth, payload: { size: 'big' } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ code: 'validation_failed', detail: expect.stringMatching(/^body\.size: /), errors: [{ in: 'body', path: 'size' }] });
    const good = await server.inject({ method: 'POST', url: '/api/v1/things', headers: auth, payload: { size: 3 } });
    expect(good.json()).toEqual({ id: 't1', size: 3 });
    await server.close();
  });

  it('names the query part of a refused query string as `query`', async () => {
    const server = await app(async (a) => {
      a.get(
        '/api/v1/things',
        { config: { auth: 'public' }, schema: { querystring: z.strictObject({ limit: z.coerce.number().int().optional() }) } },
        async () => null,
      );
    });
    const res = await server.inject({ method: 'GET', url: '/api/v1/things?limit=x' });
    expect(res.json()).toMatchObject({ detail: expect.stringMatching(/^query\.limit: /), errors: [{ in: 'query', path: 'limit' }] });
    await server.close();
  });

  it('says a field left out is required, in the route schema and in a handler check alike', async () => {
    const Body = z.strictObject({ name: z.string(), size: z.number().optional() });
    const server = await app(async (a) => {
      a.post('/api/v1/things', { config: { auth: 'public' }, schema: { body: Body } }, async () => null);
      a.post('/api/v1/checked', { config: { auth: 'public' } }, async (r) => parseInput('body', Body, r.body));
    });
    for (const url of ['/api/v1/things', '/api/v1/checked']) {
      const res = await server.inject({ method: 'POST', url, payload: { size: 'big' } });
      expect(res.statusCode).toBe(400);
      expect(res.json()).toMatchObject({
        detail: 'body.name: required',
        errors: [
          { in: 'body', path: 'name', message: 'required' },
          { in: 'body', path: 'size', message: expect.stringMatching(/expected number, received string/) },
        ],
      });
    }
    await server.close();
  });
});

describe('under test, every answer must be the documented one', () => {
  const answering =
    (body: unknown, status = 200): FastifyPluginAsyncZod =>
    async (a) => {
      a.get('/api/v1/thing', { config: { auth: 'public' }, schema: { response: { 200: Thing } } }, async (_r, reply) =>
        reply.code(status as 200).send(body as z.infer<typeof Thing>),
      );
    };

  it('turns an answer with a field its schema does not name into a 500 that says so', async () => {
    const server = await app(answering({ id: 't1', size: 1, secret: 'leak' }));
    const res = await server.inject({ method: 'GET', url: '/api/v1/thing' });
    expect(res.statusCode).toBe(500);
    expect(res.json()).toMatchObject({ code: 'undocumented_answer', detail: expect.stringContaining('fields its documented schema does not name') });
    await server.close();
  });

  it('turns an answer of the wrong type into a 500 that names the field', async () => {
    const server = await app(answering({ id: 't1', size: 'one' }));
    const res = await server.inject({ method: 'GET', url: '/api/v1/thing' });
    expect(res.statusCode).toBe(500);
    expect(res.json().detail).toMatch(/breaks its documented schema[\s\S]*size/);
    await server.close();
  });

  it('turns a status the route does not document into a 500', async () => {
    const server = await app(answering({ id: 't1', size: 1 }, 202));
    const res = await server.inject({ method: 'GET', url: '/api/v1/thing' });
    expect(res.statusCode).toBe(500);
    expect(res.json()).toMatchObject({ code: 'undocumented_status', detail: expect.stringContaining('answered 202') });
    await server.close();
  });

  it('sends a documented answer as it is, and does not check outside the test suite', async () => {
    const server = await app(answering({ id: 't1', size: 1 }));
    expect((await server.inject({ method: 'GET', url: '/api/v1/thing' })).json()).toEqual({ id: 't1', size: 1 });
    await server.close();
    const production = await app(answering({ id: 't1', size: 1, extra: true }), false);
    expect((await production.inject({ method: 'GET', url: '/api/v1/thing' })).json()).toEqual({ id: 't1', size: 1, extra: true });
    await production.close();
  });
});
