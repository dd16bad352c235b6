import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerOn } from '../support/planOwner.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { servedOpenApi } from '../support/servedOpenApi.js';
import { owner, signUp, startTestApp, type TestApp } from '../support/testApp.js';
import { usageCall } from '../support/usageCall.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * The management API as an attacker and an integrator see it: another account's ids, replayed
 * and revoked credentials, cross-origin writes, hostile bodies, and where a secret may show up.
 * Every answer here is also checked against the served OpenAPI document.
 */

const DAY_MS = 86_400_000;
/** The service's clock runs `shift` ahead of the real one: sessions and token dates are judged by it. */
let shift = 0;
let t: TestApp;
let openApi: ReturnType<typeof servedOpenApi>;
beforeAll(async () => {
  t = await startTestApp({ now: () => new Date(Date.now() + shift), env: { ALERT_EVALUATION_INTERVAL_SECONDS: '0' } });
  openApi = servedOpenApi((await t.app.inject({ method: 'GET', url: '/api/v1/openapi.json' })).body);
}, 60_000);
afterAll(async () => {
  await t?.close();
});

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
interface Call {
  method: Method;
  /** The document's path template (`/api/v1/tokens/{id}`), to check the answer against. */
  template: string;
  url?: string;
  headers?: Record<string, string>;
  payload?: InjectOptions['payload'];
}

/** Sends `call` and checks its answer is one the served document gives for the operation. */
async function send(call: Call): Promise<LightMyRequestResponse> {
  const res = await t.app.inject({ method: call.method, url: call.url ?? call.template, headers: call.headers, payload: call.payload });
  const mediaType = String(res.headers['content-type'] ?? '').split(';')[0] ?? '';
  if (/[/+]json$/.test(mediaType)) openApi.conforms(call.template, res.statusCode, mediaType, res.json(), call.method.toLowerCase());
  return res;
}

const json = (headers: Record<string, string>) => ({ ...headers, 'content-type': 'application/json' });
const emailChannel = [{ type: 'email', to: 'ops@example.com' }];
const errorRate = { name: 'Errors', type: 'error_rate', threshold: 5, window_minutes: 10, channels: emailChannel };

/** Account A's resources of every kind that has an id. */
async function accountWithEverything() {
  const a = await ownerOn(t, 'developer');
  const token = (await send({ method: 'POST', template: '/api/v1/tokens', headers: a.auth, payload: { name: 'a-token', monthly_limit: 1000 } })).json();
  const alert = (
    await send({ method: 'POST', template: '/api/v1/alerts', headers: a.auth, payload: { ...errorRate, name: 'a-alert', token_id: token.id } })
  ).json();
  const keys = (await send({ method: 'GET', template: '/api/v1/access-tokens', headers: { cookie: a.cookie } })).json();
  return { ...a, tokenId: token.id as string, token: token.token as string, alertId: alert.id as string, keyId: keys.access_tokens[0].id as string };
}

describe('cross-account access: account B never reaches account A by id', () => {
  it('answers B 404 not_found, as for an unknown id, on every operation of the served document that takes an id, and changes nothing of A', async () => {
    const a = await accountWithEverything();
    const b = await ownerOn(t, 'developer');
    const idOf: Record<string, string> = {
      '/api/v1/tokens/{id}': a.tokenId,
      '/api/v1/tokens/{id}/history': a.tokenId,
      '/api/v1/metrics/tokens/{id}': a.tokenId,
      '/api/v1/access-tokens/{id}': a.keyId,
      '/api/v1/alerts/{id}': a.alertId,
      '/api/v1/alerts/{id}/notifications': a.alertId,
      '/api/v1/admin/accounts/{id}/plan': a.accountId,
    };
    const bodies: Record<string, unknown> = {
      'PATCH /api/v1/tokens/{id}': { status: 'disabled', name: 'stolen' },
      'PATCH /api/v1/alerts/{id}': { threshold: 9, channels: [{ type: 'email', to: 'attacker@example.com' }] },
      'PUT /api/v1/admin/accounts/{id}/plan': { plan: 'free' },
    };
    const operations = Object.entries(openApi.doc.paths)
      .filter(([path]) => path.includes('{id}'))
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => ({ method: m.toUpperCase() as Method, template: path })));
    expect(operations.length).toBeGreaterThanOrEqual(10);
    const head = await t.runtime.store.headPosition();
    for (const op of operations) {
      const id = idOf[op.template];
      expect(id, `a new operation takes an id: ${op.method} ${op.template}; add it here`).toBeDefined();
      const key = `${op.method} ${op.template}`;
      const url = op.template.replace('{id}', id as string);
      const payload = bodies[key] as InjectOptions['payload'];
      const scope = openApi.doc.paths[op.template]?.[op.method.toLowerCase()] as { security?: Array<Record<string, unknown>> };
      const schemes = (scope.security ?? []).flatMap((s) => Object.keys(s));
      for (const [via, headers] of [
        ['access token', b.auth],
        ['session', { cookie: b.cookie }],
      ] as const) {
        const res = await send({ ...op, url, headers: payload ? json(headers) : headers, payload: payload ? JSON.stringify(payload) : undefined });
        // A credential the operation does not take is a 401 whoever owns the id (admin: the operator's token only).
        const takes = schemes.includes(via === 'session' ? 'session' : 'accessToken');
        expect(res.statusCode, `${key} as B by ${via}`).toBe(takes ? 404 : 401);
        if (takes) {
          expect(res.json(), key).toMatchObject({ code: 'not_found' });
          // The same answer as for an id no one has: nothing tells that A's exists.
          const unknown = await send({
            ...op,
            url: op.template.replace('{id}', `${(id as string).slice(0, 4)}0000000000000000`),
            headers: payload ? json(headers) : headers,
            payload: payload ? JSON.stringify(payload) : undefined,
          });
          expect(unknown.statusCode, key).toBe(404);
          expect(Object.keys(unknown.json()).sort(), key).toEqual(Object.keys(res.json()).sort());
        }
      }
    }
    expect(await t.runtime.store.headPosition(), 'B appended nothing').toBe(head);
    const tokenNow = (await send({ method: 'GET', template: '/api/v1/tokens/{id}', url: `/api/v1/tokens/${a.tokenId}`, headers: a.auth })).json();
    expect(tokenNow).toMatchObject({ name: 'a-token', status: 'active' });
    const alertNow = (await send({ method: 'GET', template: '/api/v1/alerts/{id}', url: `/api/v1/alerts/${a.alertId}`, headers: a.auth })).json();
    expect(alertNow).toMatchObject({ threshold: 5, channels: [expect.objectContaining({ to: 'ops@example.com' })] });
    expect((await send({ method: 'GET', template: '/api/v1/account', headers: a.auth })).json().plan.id).toBe('developer');
    expect((await send({ method: 'GET', template: '/api/v1/access-tokens', headers: { cookie: a.cookie } })).json().access_tokens[0].status).toBe('active');
  });

  it("never lets B point its alert at A's token, on an edit as on a creation", async () => {
    const a = await accountWithEverything();
    const b = await ownerOn(t, 'developer');
    const own = (await send({ method: 'POST', template: '/api/v1/alerts', headers: b.auth, payload: errorRate })).json();
    const edit = await send({
      method: 'PATCH',
      template: '/api/v1/alerts/{id}',
      url: `/api/v1/alerts/${own.id}`,
      headers: b.auth,
      payload: { type: 'token_usage', threshold: 90, token_id: a.tokenId },
    });
    expect(edit.statusCode).toBe(404);
    expect((await send({ method: 'GET', template: '/api/v1/alerts/{id}', url: `/api/v1/alerts/${own.id}`, headers: b.auth })).json().token_id).toBeNull();
  });

  it("shows B none of A's usage, tokens or alerts in its lists, metrics and exports, whichever credential B uses", async () => {
    const a = await accountWithEverything();
    const b = await ownerOn(t, 'developer');
    const bToken = (await send({ method: 'POST', template: '/api/v1/tokens', headers: b.auth, payload: { name: 'b-token' } })).json();
    const at = new Date(Date.now() + shift - 60_000).toISOString();
    await recordUsage(t.runtime, [usageCall(a.accountId, a.tokenId, at, { requestId: `audit-a-${a.accountId}`, clientIp: '203.0.113.7' })]);
    const aMetrics = (await send({ method: 'GET', template: '/api/v1/metrics/user', headers: a.auth })).json();
    expect(aMetrics.totals.requests, "A's own call is counted").toBe(1);
    const seen: string[] = [];
    for (const headers of [b.auth, { cookie: b.cookie }, { authorization: `Bearer ${bToken.token}` }]) {
      const metrics = await send({ method: 'GET', template: '/api/v1/metrics/user', headers });
      expect(metrics.json().totals.requests).toBe(0);
      seen.push(metrics.body);
    }
    for (const template of ['/api/v1/tokens', '/api/v1/alerts', '/api/v1/account']) seen.push((await send({ method: 'GET', template, headers: b.auth })).body);
    for (const format of ['csv', 'json']) {
      const file = await send({ method: 'GET', template: `/api/v1/exports/usage.${format}`, headers: b.auth });
      expect(file.statusCode).toBe(200);
      seen.push(file.body);
    }
    for (const text of seen) {
      for (const secret of [a.accountId, a.tokenId, a.alertId, a.email, '203.0.113.7', 'a-token', 'a-alert']) expect(text).not.toContain(secret);
    }
  });
});

describe('sessions and access tokens', () => {
  const cookieOf = (res: LightMyRequestResponse): string => String(res.headers['set-cookie']);

  it('sets the session cookie HttpOnly, SameSite=Strict, Path=/, for 7 days, no Domain, not Secure over plain HTTP; log-out clears it alike', async () => {
    const email = `flags-${Math.random().toString(36).slice(2)}@example.com`;
    const signup = await send({ method: 'POST', template: '/api/v1/auth/signup', payload: { email, password: 'correct horse battery' } });
    const login = await send({ method: 'POST', template: '/api/v1/auth/login', payload: { email, password: 'correct horse battery' } });
    for (const res of [signup, login]) {
      const attributes = cookieOf(res)
        .split(';')
        .map((p) => p.trim());
      expect(attributes[0]).toMatch(/^gw_session=[A-Za-z0-9_-]{43}$/);
      expect(attributes).toEqual(expect.arrayContaining(['Path=/', 'HttpOnly', 'SameSite=Strict']));
      expect(attributes.some((a) => /^(Domain|Secure)/i.test(a))).toBe(false);
      const expires = Date.parse(attributes.find((a) => a.startsWith('Expires='))?.slice(8) ?? '');
      expect(Math.abs(expires - (Date.now() + shift + 7 * DAY_MS))).toBeLessThan(60_000);
    }
    expect(cookieOf(signup).split(';')[0]).not.toBe(cookieOf(login).split(';')[0]);
    const logout = await send({ method: 'POST', template: '/api/v1/auth/logout', headers: { cookie: cookieOf(login).split(';')[0] as string } });
    expect(logout.statusCode).toBe(204);
    expect(cookieOf(logout)).toBe('gw_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0');
  });

  it('log-out ends that session on the server for every route that takes one, and no other session of the account', async () => {
    const first = await signUp(t.app);
    const second = (await send({ method: 'POST', template: '/api/v1/auth/login', payload: { email: first.email, password: 'correct horse battery' } })).headers[
      'set-cookie'
    ];
    const secondCookie = String(second).split(';')[0] as string;
    const routes = ['/api/v1/account', '/api/v1/access-tokens', '/api/v1/metrics/user'];
    for (const template of routes) expect((await send({ method: 'GET', template, headers: { cookie: first.cookie } })).statusCode).toBe(200);
    expect((await send({ method: 'POST', template: '/api/v1/auth/logout', headers: { cookie: first.cookie } })).statusCode).toBe(204);
    for (const template of routes) {
      // The old cookie, replayed as a client that ignored the clearing would.
      const replayed = await send({ method: 'GET', template, headers: { cookie: first.cookie } });
      expect(replayed.statusCode, template).toBe(401);
      expect(replayed.json().code).toBe('unauthorized');
      expect((await send({ method: 'GET', template, headers: { cookie: secondCookie } })).statusCode, template).toBe(200);
    }
    const write = await send({
      method: 'POST',
      template: '/api/v1/tokens',
      headers: json({ cookie: first.cookie }),
      payload: JSON.stringify({ name: 'after logout' }),
    });
    expect(write.statusCode).toBe(401);
  });

  it('refuses an access token from the moment its revocation is answered, on every scope it had', async () => {
    const o = await owner(t.app);
    const keyId = (await send({ method: 'GET', template: '/api/v1/access-tokens', headers: { cookie: o.cookie } })).json().access_tokens[0].id;
    const revoked = await send({
      method: 'DELETE',
      template: '/api/v1/access-tokens/{id}',
      url: `/api/v1/access-tokens/${keyId}`,
      headers: { cookie: o.cookie },
    });
    expect(revoked.json().status).toBe('revoked');
    for (const template of ['/api/v1/tokens', '/api/v1/account', '/api/v1/metrics/user', '/api/v1/alerts', '/api/v1/exports/usage.csv']) {
      const res = await send({ method: 'GET', template, headers: o.auth });
      expect(res.statusCode, template).toBe(401);
      expect(res.json().detail).toBe('The access token is not valid.');
    }
    expect((await send({ method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'x' } })).statusCode).toBe(401);
  });

  it('refuses a session past its 7 days, and an API token past its date on the metrics call, whatever the client still holds', async () => {
    const o = await ownerOn(t, 'developer');
    const created = (await send({ method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'expiring', expires_in_days: 1 } })).json();
    const asToken = { authorization: `Bearer ${created.token}` };
    expect((await send({ method: 'GET', template: '/api/v1/metrics/user', headers: asToken })).statusCode).toBe(200);
    try {
      shift += DAY_MS + 60_000;
      const expiredToken = await send({ method: 'GET', template: '/api/v1/metrics/user', headers: asToken });
      expect(expiredToken.statusCode).toBe(401);
      expect((await send({ method: 'GET', template: '/api/v1/account', headers: { cookie: o.cookie } })).statusCode, 'a day old: still open').toBe(200);
      shift += 6 * DAY_MS;
      const ended = await send({ method: 'GET', template: '/api/v1/account', headers: { cookie: o.cookie } });
      expect(ended.statusCode).toBe(401);
      expect(ended.json().detail).toBe('The session has ended; log in again.');
    } finally {
      shift = 0;
    }
  });
});

describe('cross-origin writes with the session cookie (CSRF)', () => {
  it('refuses what a form or a no-cors fetch of another origin can send, appending nothing, and answers no CORS on /api', async () => {
    const o = await ownerOn(t, 'developer');
    const tokenId = (await send({ method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'kept' } })).json().id;
    const cookie = { cookie: o.cookie, origin: 'https://evil.example', referer: 'https://evil.example/page' };
    const forms: Array<[string, string]> = [
      ['application/x-www-form-urlencoded', 'name=stolen'],
      ['multipart/form-data; boundary=x', '--x\r\nContent-Disposition: form-data; name="name"\r\n\r\nstolen\r\n--x--\r\n'],
      ['text/plain', '{"name":"stolen"}'],
      ['text/plain;charset=UTF-8', '{"name":"stolen"}'],
    ];
    const writes: Call[] = [
      { method: 'POST', template: '/api/v1/tokens' },
      { method: 'POST', template: '/api/v1/access-tokens' },
      { method: 'POST', template: '/api/v1/alerts' },
    ];
    const head = await t.runtime.store.headPosition();
    for (const write of writes) {
      for (const [type, body] of forms) {
        const res = await send({ ...write, headers: { ...cookie, 'content-type': type }, payload: body });
        expect(res.statusCode, `${write.template} as ${type}`).toBe(415);
        expect(res.json().code).toBe('unsupported_media_type');
      }
      // A no-cors fetch without a body sends no content type at all.
      const bodiless = await send({ ...write, headers: cookie });
      expect(bodiless.statusCode, write.template).toBe(400);
    }
    expect(await t.runtime.store.headPosition()).toBe(head);
    // No preflight is granted, so JSON, PATCH and DELETE from another origin never leave the browser.
    const preflight = await t.app.inject({
      method: 'OPTIONS',
      url: `/api/v1/tokens/${tokenId}`,
      headers: { origin: 'https://evil.example', 'access-control-request-method': 'DELETE', 'access-control-request-headers': 'content-type' },
    });
    const read = await send({ method: 'GET', template: '/api/v1/tokens', headers: cookie });
    for (const res of [preflight, read]) {
      expect(Object.keys(res.headers).filter((h) => h.startsWith('access-control-'))).toEqual([]);
    }
    expect(read.statusCode).toBe(200);
  });
});

/** Each operation of the document that takes a body, with a valid body and the headers of its scope. */
function bodyOperations(
  o: { auth: Record<string, string>; cookie: string },
  alertId: string,
  tokenId: string,
): Array<Call & { valid: Record<string, unknown> }> {
  return [
    {
      method: 'POST',
      template: '/api/v1/auth/signup',
      valid: { email: `n-${Math.random().toString(36).slice(2)}@example.com`, password: 'correct horse battery' },
    },
    { method: 'POST', template: '/api/v1/auth/login', valid: { email: 'nobody@example.com', password: 'correct horse battery' } },
    { method: 'POST', template: '/api/v1/tokens', headers: o.auth, valid: { name: 'n', description: 'd' } },
    { method: 'PATCH', template: '/api/v1/tokens/{id}', url: `/api/v1/tokens/${tokenId}`, headers: o.auth, valid: { name: 'n', description: 'd' } },
    { method: 'POST', template: '/api/v1/access-tokens', headers: { cookie: o.cookie }, valid: { name: 'n' } },
    {
      method: 'POST',
      template: '/api/v1/alerts',
      headers: o.auth,
      valid: { ...errorRate, channels: [{ type: 'webhook', url: 'https://hooks.example.com/x' }] },
    },
    { method: 'PATCH', template: '/api/v1/alerts/{id}', url: `/api/v1/alerts/${alertId}`, headers: o.auth, valid: { name: 'n' } },
    {
      method: 'PUT',
      template: '/api/v1/admin/accounts/{id}/plan',
      url: `/api/v1/admin/accounts/${alertId.replace('alr', 'acc')}/plan`,
      headers: { authorization: 'Bearer test-admin-token-0123456789' },
      valid: { plan: 'free' },
    },
  ];
}

/** Every string of `value` with `insert` put in its middle, one at a time, with the path it went to. */
function eachStringWith(value: unknown, insert: string, path: string[] = []): Array<{ body: unknown; path: string }> {
  if (typeof value === 'string') return [{ body: `${value.slice(0, 1)}${insert}${value.slice(1)}`, path: path.join('.') }];
  if (Array.isArray(value))
    return value.flatMap((item, i) =>
      eachStringWith(item, insert, [...path, String(i)]).map((v) => ({ ...v, body: value.map((x, j) => (j === i ? v.body : x)) })),
    );
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).flatMap(([key, item]) =>
      eachStringWith(item, insert, [...path, key]).map((v) => ({ ...v, body: { ...value, [key]: v.body } })),
    );
  }
  return [];
}

describe('hostile bodies', () => {
  it('covers every operation of the served document that takes a body', async () => {
    const o = await owner(t.app);
    const documented = Object.entries(openApi.doc.paths).flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([, op]) => 'requestBody' in (op as object))
        .map(([m]) => `${m.toUpperCase()} ${path}`),
    );
    expect(
      bodyOperations(o, 'alr_0000000000000000', 'tok_0000000000000000')
        .map((op) => `${op.method} ${op.template}`)
        .sort(),
    ).toEqual(documented.sort());
  });

  it('refuses U+0000 and unpaired surrogates in any string or key of any body with 400 naming the field, appending nothing', async () => {
    const o = await ownerOn(t, 'developer');
    const tokenId = (await send({ method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'n' } })).json().id;
    const alertId = (await send({ method: 'POST', template: '/api/v1/alerts', headers: o.auth, payload: errorRate })).json().id;
    const head = await t.runtime.store.headPosition();
    let sent = 0;
    for (const op of bodyOperations(o, alertId, tokenId)) {
      for (const insert of ['\u0000', '\uD800', '\uDFFF', 'a\uDC00']) {
        for (const { body, path } of eachStringWith(op.valid, insert)) {
          const res = await send({ ...op, headers: json(op.headers ?? {}), payload: JSON.stringify(body) });
          expect(res.statusCode, `${op.method} ${op.template} ${path} ${JSON.stringify(insert)}`).toBe(400);
          expect(res.json()).toMatchObject({ code: 'validation_failed', errors: [{ in: 'body', path }] });
          sent++;
        }
      }
      const inKey = await send({ ...op, headers: json(op.headers ?? {}), payload: JSON.stringify({ ...op.valid, 'x\u0000': 1 }) });
      expect(inKey.statusCode).toBe(400);
      expect(inKey.json().errors[0].path).toBe('x\u0000');
    }
    expect(sent).toBeGreaterThan(40);
    expect(await t.runtime.store.headPosition()).toBe(head);
    // Text that is well-formed, however unusual, is kept as sent.
    const name = 'Ünïcödé 🚀 עברית e\u0301 \u200d\t';
    const created = await send({ method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'x', description: name } });
    expect(created.json().description).toBe(name);
  });

  it('answers a prototype key, deep nesting, a near-1 MiB string, huge numbers and a body on a body-less route with a 4xx problem, never a 500', async () => {
    const o = await ownerOn(t, 'developer');
    const tokenId = (await send({ method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'n' } })).json().id;
    const alertId = (await send({ method: 'POST', template: '/api/v1/alerts', headers: o.auth, payload: errorRate })).json().id;
    const head = await t.runtime.store.headPosition();
    for (const op of bodyOperations(o, alertId, tokenId)) {
      const valid = JSON.stringify(op.valid);
      for (const payload of [
        `{"__proto__":{"admin":true},${valid.slice(1)}`,
        `{"constructor":{"prototype":{"admin":true}},${valid.slice(1)}`,
        `${'['.repeat(50_000)}${']'.repeat(50_000)}`,
        `{"deep":${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}}`,
        `{"wide":[${'1,'.repeat(400_000)}1]}`,
        JSON.stringify({ ...op.valid, name: 'x'.repeat(1_000_000) }),
        `{${valid.slice(1, -1)},"threshold":1e999}`,
        '\uFEFF{}',
      ]) {
        const res = await send({ ...op, headers: json(op.headers ?? {}), payload });
        expect(res.statusCode, `${op.method} ${op.template} ${payload.slice(0, 40)}`).toBeGreaterThanOrEqual(400);
        expect(res.statusCode, `${op.method} ${op.template} ${payload.slice(0, 40)}: ${res.body.slice(0, 200)}`).toBeLessThan(500);
        expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      }
    }
    expect(({} as Record<string, unknown>).admin, 'no prototype was polluted').toBeUndefined();
    const stray = await send({
      method: 'DELETE',
      template: '/api/v1/tokens/{id}',
      url: `/api/v1/tokens/${tokenId}`,
      headers: { ...o.auth, 'content-type': 'text/plain' },
      payload: 'x',
    });
    expect(stray.statusCode).toBe(415);
    expect(await t.runtime.store.headPosition()).toBe(head);
  });
});

describe('secrets are shown once', () => {
  it('the token strings and a webhook secret are in their creation answers only: never in lists, reads, edits, history, metrics, exports or errors', async () => {
    const o = await ownerOn(t, 'developer');
    const api = (await send({ method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'secret' } })).json();
    const access = (await send({ method: 'POST', template: '/api/v1/access-tokens', headers: { cookie: o.cookie }, payload: { name: 'secret' } })).json();
    const alert = (
      await send({
        method: 'POST',
        template: '/api/v1/alerts',
        headers: o.auth,
        payload: { ...errorRate, channels: [{ type: 'webhook', url: 'https://hooks.example.com/a' }] },
      })
    ).json();
    const secrets = [api.token as string, access.token as string, alert.channels[0].secret as string];
    expect(secrets.every((s) => typeof s === 'string' && s.length > 20)).toBe(true);
    await recordUsage(t.runtime, [usageCall(o.accountId, api.id, new Date(Date.now() - 60_000).toISOString(), { requestId: `audit-s-${api.id}` })]);
    const asApi = { authorization: `Bearer ${api.token}` };
    const asAccess = { authorization: `Bearer ${access.token}` };
    const calls: Call[] = [
      { method: 'GET', template: '/api/v1/tokens', headers: o.auth },
      { method: 'GET', template: '/api/v1/tokens/{id}', url: `/api/v1/tokens/${api.id}`, headers: o.auth },
      { method: 'PATCH', template: '/api/v1/tokens/{id}', url: `/api/v1/tokens/${api.id}`, headers: o.auth, payload: { name: 'renamed' } },
      { method: 'GET', template: '/api/v1/tokens/{id}/history', url: `/api/v1/tokens/${api.id}/history`, headers: o.auth },
      { method: 'GET', template: '/api/v1/metrics/tokens/{id}', url: `/api/v1/metrics/tokens/${api.id}`, headers: o.auth },
      { method: 'GET', template: '/api/v1/metrics/user', headers: asApi },
      { method: 'GET', template: '/api/v1/exports/usage.csv', headers: asAccess },
      { method: 'GET', template: '/api/v1/exports/usage.json', headers: asAccess },
      { method: 'GET', template: '/api/v1/access-tokens', headers: { cookie: o.cookie } },
      { method: 'GET', template: '/api/v1/alerts', headers: o.auth },
      { method: 'GET', template: '/api/v1/alerts/{id}', url: `/api/v1/alerts/${alert.id}`, headers: o.auth },
      { method: 'PATCH', template: '/api/v1/alerts/{id}', url: `/api/v1/alerts/${alert.id}`, headers: o.auth, payload: { name: 'renamed' } },
      { method: 'GET', template: '/api/v1/account', headers: asAccess },
      // Refusals: a token where another credential is wanted, or sent in a wrong place.
      { method: 'GET', template: '/api/v1/tokens', headers: asApi },
      { method: 'POST', template: '/api/v1/access-tokens', headers: asAccess, payload: { name: 'x' } },
      { method: 'GET', template: '/api/v1/tokens/{id}', url: `/api/v1/tokens/${api.token}`, headers: o.auth },
      { method: 'GET', template: '/api/v1/metrics/user', url: `/api/v1/metrics/user?chain=${api.token}`, headers: o.auth },
      { method: 'GET', template: '/api/v1/metrics/user', url: `/api/v1/metrics/user?${api.token}=1`, headers: o.auth },
      { method: 'POST', template: '/api/v1/tokens', headers: o.auth, payload: { name: 'x', [access.token]: true } },
    ];
    const answers: string[] = [];
    for (const call of calls) {
      const res = await send(call);
      expect(res.statusCode, `${call.method} ${call.url ?? call.template}`).toBeLessThan(500);
      answers.push(`${JSON.stringify(res.headers)}\n${res.body}`);
    }
    // Paths no route serves answer the API's own 404, which repeats the path: a token in it is masked.
    for (const url of [`/api/v1/${api.token}`, `/api/v1/tokens/x/${access.token}`, `/api/${api.token}?a=1`]) {
      const res = await t.app.inject({ method: 'GET', url, headers: o.auth });
      expect(res.statusCode).toBe(404);
      expect(res.json().detail).toContain('…');
      answers.push(res.body);
    }
    for (const answer of answers) {
      for (const secret of secrets) expect(answer).not.toContain(secret);
    }
  });
});

describe('on PostgreSQL', () => {
  let pg: TestApp | undefined;
  let db: TestDatabase | undefined;
  let skip: string | null = null;
  beforeAll(async () => {
    skip = await postgresUnavailable();
    if (skip) return;
    db = await createTestDatabase();
    pg = await startTestApp({ env: { DATABASE_URL: db.url } });
  }, 60_000);
  afterAll(async () => {
    await pg?.close();
    await db?.drop();
  });

  it('a name with U+0000 or a lone surrogate is a 400, and the read models keep projecting for every account', async (context) => {
    if (skip || !pg) return context.skip(skip ?? 'no PostgreSQL');
    const app = pg.app;
    const a = await owner(app);
    for (const raw of ['{"name":"x\\u0000y"}', '{"name":"x\\ud800y"}']) {
      const res = await app.inject({ method: 'POST', url: '/api/v1/tokens', headers: json(a.auth), payload: raw });
      expect(res.statusCode, raw).toBe(400);
      expect(res.json().errors).toEqual([{ in: 'body', path: 'name', message: 'must not contain U+0000 or unpaired surrogates' }]);
    }
    const b = await owner(app);
    const created = await app.inject({ method: 'POST', url: '/api/v1/tokens', headers: b.auth, payload: { name: 'after' } });
    expect(created.statusCode).toBe(201);
    expect((await app.inject({ method: 'GET', url: '/api/v1/tokens', headers: b.auth })).json().tokens).toHaveLength(1);
    expect((await app.inject({ method: 'POST', url: '/api/v1/tokens', headers: a.auth, payload: { name: 'x' } })).statusCode, 'A kept both slots').toBe(201);
  }, 30_000);
});
