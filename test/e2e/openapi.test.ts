import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import Fastify from 'fastify';
import createClient from 'openapi-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { paths } from '../../clients/typescript/schema.js';
import type { ApiDeps } from '../../src/commands/api/deps.js';
import { managementApi } from '../../src/commands/api/plugin.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

const CLIENT = join(import.meta.dirname, '../../clients/typescript');

let t: TestApp;
let baseUrl: string;
let document: { openapi: string; paths: Record<string, Record<string, { security?: unknown[]; responses: Record<string, unknown> }>> };

beforeAll(async () => {
  t = await startTestApp();
  baseUrl = await t.app.listen({ host: '127.0.0.1', port: 0 });
  document = (await t.app.inject({ method: 'GET', url: '/api/v1/openapi.json' })).json();
});
afterAll(async () => {
  await t?.close();
});

describe('GET /api/v1/openapi.json', () => {
  it('is a valid OpenAPI 3.1 document', async () => {
    expect(document.openapi).toBe('3.1.0');
    const result = await new Validator().validate(document);
    expect(result.errors, String(JSON.stringify(result.errors)).slice(0, 2000)).toBeUndefined();
    expect(result.valid).toBe(true);
  });

  it('describes every route the management API registers, with its credentials and problem answers', async () => {
    const registered: string[] = [];
    const app = Fastify();
    app.addHook('onRoute', (route) => {
      for (const method of [route.method].flat()) {
        if (route.url.startsWith('/api/v1/') && method !== 'HEAD') registered.push(`${method} ${route.url.replace(/:(\w+)/g, '{$1}')}`);
      }
    });
    await app.register(managementApi, {} as ApiDeps);
    await app.ready();
    await app.close();
    const documented = Object.entries(document.paths).flatMap(([path, operations]) => Object.keys(operations).map((m) => `${m.toUpperCase()} ${path}`));
    expect(registered.length).toBeGreaterThan(20);
    expect(documented.sort()).toEqual(registered.sort());

    const security = (path: string, method: string) => document.paths[path]?.[method]?.security;
    expect(security('/api/v1/metrics/user', 'get')).toEqual([{ apiToken: [] }, { accessToken: [] }, { session: [] }]);
    expect(security('/api/v1/access-tokens', 'post')).toEqual([{ session: [] }]);
    expect(security('/api/v1/admin/accounts/{id}/plan', 'put')).toEqual([{ adminToken: [] }]);
    expect(security('/api/v1/auth/login', 'post')).toEqual([]);
    const patch = document.paths['/api/v1/tokens/{id}']?.patch?.responses ?? {};
    expect(Object.keys(patch)).toEqual(expect.arrayContaining(['200', '400', '401', '404', '413', '415', '500']));
    expect(patch['404']).toMatchObject({ content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } } });
  });

  it('documents answers open (a client must accept fields added later) and request bodies closed (unknown fields are refused)', () => {
    const closedUnder = (value: unknown): number =>
      Array.isArray(value)
        ? value.reduce((n: number, v) => n + closedUnder(v), 0)
        : typeof value === 'object' && value !== null
          ? (Object.entries(value).some(([k, v]) => k === 'additionalProperties' && v === false) ? 1 : 0) +
            Object.values(value).reduce((n: number, v) => n + closedUnder(v), 0)
          : 0;
    const full = document as unknown as {
      components: { schemas: Record<string, unknown> };
      paths: Record<string, Record<string, { requestBody?: unknown; responses: unknown }>>;
    };
    expect(closedUnder(full.components.schemas)).toBe(0);
    const operations = Object.values(full.paths).flatMap((ops) => Object.values(ops));
    expect(operations.reduce((n, op) => n + closedUnder(op.responses), 0)).toBe(0);
    const bodies = operations.filter((op) => op.requestBody !== undefined);
    expect(bodies.length).toBeGreaterThan(5);
    for (const op of bodies) expect(closedUnder(op.requestBody), JSON.stringify(op.requestBody).slice(0, 200)).toBeGreaterThan(0);
  });

  it('uses only formats generators know (JSON Schema 2020-12 and the OpenAPI registry): an invented one makes strict validators refuse the document', () => {
    const KNOWN = new Set([
      'date-time',
      'date',
      'time',
      'duration',
      'email',
      'idn-email',
      'hostname',
      'idn-hostname',
      'ipv4',
      'ipv6',
      'uri',
      'uri-reference',
      'iri',
      'iri-reference',
      'uuid',
      'uri-template',
      'json-pointer',
      'relative-json-pointer',
      'regex',
      'int32',
      'int64',
      'float',
      'double',
      'byte',
      'binary',
      'password',
    ]);
    const formats = new Set<string>();
    const collect = (value: unknown): void => {
      if (Array.isArray(value)) value.forEach(collect);
      else if (typeof value === 'object' && value !== null) {
        for (const [k, v] of Object.entries(value)) {
          if (k === 'format' && typeof v === 'string') formats.add(v);
          else collect(v);
        }
      }
    };
    collect(document);
    expect([...formats].filter((f) => !KNOWN.has(f))).toEqual([]);
  });

  it('is the one the committed TypeScript client was made from (run npm run generate:client when this fails)', () => {
    const committed = readFileSync(join(CLIENT, 'openapi.json'), 'utf8');
    expect(JSON.parse(committed), 'clients/typescript/openapi.json is stale').toEqual(document);
    const stamp = /sha256 ([0-9a-f]{64})/.exec(readFileSync(join(CLIENT, 'schema.d.ts'), 'utf8'))?.[1];
    expect(stamp, 'clients/typescript/schema.d.ts was not made from openapi.json').toBe(createHash('sha256').update(committed).digest('hex'));
  });
});

describe('the generated TypeScript client', () => {
  it('signs up, creates an API token and reads it back against the live service, typed from the document', async () => {
    const client = createClient<paths>({ baseUrl });
    const email = `client-${Date.now()}@example.com`;
    const signedUp = await client.POST('/api/v1/auth/signup', { body: { email, password: 'correct horse battery' } });
    expect(signedUp.response.status).toBe(201);
    expect(signedUp.data?.plan).toBe('free');
    const cookie = String(signedUp.response.headers.get('set-cookie')).split(';')[0] as string;

    const created = await client.POST('/api/v1/tokens', { headers: { cookie }, body: { name: 'from the client' } });
    expect(created.response.status).toBe(201);
    const id = created.data?.id ?? '';
    expect(created.data?.token).toMatch(/^gk_/);

    const read = await client.GET('/api/v1/tokens/{id}', { headers: { cookie }, params: { path: { id } } });
    expect(read.data).toMatchObject({ id, name: 'from the client', status: 'active' });

    const refused = await client.GET('/api/v1/tokens/{id}', { headers: { cookie }, params: { path: { id: 'not-an-id' } } });
    expect(refused.response.status).toBe(400);
    expect(refused.error).toMatchObject({ code: 'validation_failed', errors: expect.arrayContaining([expect.objectContaining({ in: 'params', path: 'id' })]) });
  });
});
