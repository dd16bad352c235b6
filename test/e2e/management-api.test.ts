import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isWellFormedToken } from '../../src/domain/tokenFormat.js';
import { ADMIN_TOKEN, owner, signUp, startTestApp, type TestApp } from '../support/testApp.js';

let t: TestApp;
beforeAll(async () => {
  // Every account here signs up from the one test address: more than the 20 an hour it may by default.
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

const inject = (options: InjectOptions) => t.app.inject(options);
const setPlan = (accountId: string, plan: string) =>
  inject({ method: 'PUT', url: `/api/v1/admin/accounts/${accountId}/plan`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, payload: { plan } });

describe('sign-up, log-in, log-out', () => {
  it('signs up on Free with a session cookie, and refuses the same email twice', async () => {
    const res = await inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email: 'Ada@Example.com', password: 'long enough pw' } });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({ email: 'ada@example.com', plan: 'free' });
    expect(String(res.headers['set-cookie'])).toMatch(/gw_session=.+; Path=\/; HttpOnly; SameSite=Strict/);
    const again = await inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email: 'ada@example.com', password: 'another pw 123' } });
    expect(again.statusCode).toBe(409);
    expect(again.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(again.json()).toMatchObject({ status: 409, code: 'email_taken' });
  });

  it('refuses at sign-up a password that is the email, its name part, or blanks: the first guesses an attacker tries', async () => {
    for (const [email, password] of [
      ['grace.hopper@example.com', 'Grace.Hopper@example.com'],
      ['grace.hopper@example.com', 'grace.hopper'],
      ['blank@example.com', '          '],
    ]) {
      const res = await inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email, password } });
      expect(res.statusCode, password).toBe(400);
      expect(res.json().errors).toEqual([expect.objectContaining({ in: 'body', path: 'password' })]);
    }
    // Containing the name is fine: only the guesses themselves are refused.
    expect(
      (await inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email: 'grace.hopper@example.com', password: 'grace.hopper likes cobol' } }))
        .statusCode,
    ).toBe(201);
  });

  it('logs in with the right password only, and a logged-out session no longer works', async () => {
    const { email } = await signUp(t.app);
    const wrong = await inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email, password: 'not the password' } });
    expect(wrong.statusCode).toBe(401);
    const ok = await inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email, password: 'correct horse battery' } });
    expect(ok.statusCode).toBe(200);
    const cookie = String(ok.headers['set-cookie']).split(';')[0] as string;
    expect((await inject({ method: 'GET', url: '/api/v1/account', headers: { cookie } })).statusCode).toBe(200);
    expect((await inject({ method: 'POST', url: '/api/v1/auth/logout', headers: { cookie } })).statusCode).toBe(204);
    expect((await inject({ method: 'GET', url: '/api/v1/account', headers: { cookie } })).statusCode).toBe(401);
  });

  it('takes a session cookie that is not percent-encoding as no session: 401, not 500', async () => {
    // A cookie of our name set by a sibling subdomain, or mangled on the way, must not break every call.
    const cookie = 'gw_session=%E0%A4%A';
    const account = await inject({ method: 'GET', url: '/api/v1/account', headers: { cookie } });
    expect(account.statusCode).toBe(401);
    expect(account.json().code).toBe('unauthorized');
    expect((await inject({ method: 'POST', url: '/api/v1/auth/logout', headers: { cookie } })).statusCode).toBe(204);
  });

  it('marks the session cookie Secure when the request came over HTTPS, without SECURE_COOKIES', async () => {
    // Behind a TLS proxy (TRUST_PROXY) that says so in X-Forwarded-Proto; a plain HTTP request keeps a cookie it can use.
    const proxied = await startTestApp({ env: { TRUST_PROXY: 'true' } });
    try {
      const over = (proto: string) => ({ 'x-forwarded-proto': proto, 'x-forwarded-for': '192.0.2.44' });
      const { email } = await signUp(proxied.app);
      const login = (proto: string) =>
        proxied.app.inject({ method: 'POST', url: '/api/v1/auth/login', headers: over(proto), payload: { email, password: 'correct horse battery' } });
      const secure = await login('https');
      expect(secure.statusCode).toBe(200);
      expect(String(secure.headers['set-cookie'])).toMatch(/; Secure$/);
      const logout = await proxied.app.inject({ method: 'POST', url: '/api/v1/auth/logout', headers: over('https') });
      expect(String(logout.headers['set-cookie'])).toMatch(/; Secure$/);
      expect(String((await login('http')).headers['set-cookie'])).not.toMatch(/Secure/);
    } finally {
      await proxied.close();
    }
  });

  it('shows the account with its plan, limits and usage', async () => {
    const o = await owner(t.app);
    const res = await inject({ method: 'GET', url: '/api/v1/account', headers: o.auth });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      id: o.accountId,
      plan: { id: 'free', max_tokens: 2, monthly_requests: 100_000 },
      usage: { requests: 0, monthly_limit: 100_000, remaining: 100_000 },
      tokens: { count: 0, max: 2 },
    });
  });
});

describe('access tokens', () => {
  it('are created from a session, shown once, listed masked, and revocable', async () => {
    const { cookie } = await signUp(t.app);
    const created = await inject({ method: 'POST', url: '/api/v1/access-tokens', headers: { cookie }, payload: { name: 'ci' } });
    expect(created.statusCode).toBe(201);
    const { token, id } = created.json();
    expect(isWellFormedToken('access', token)).toBe(true);
    const list = await inject({ method: 'GET', url: '/api/v1/access-tokens', headers: { cookie } });
    expect(list.body).not.toContain(token);
    expect(list.json().access_tokens).toEqual([expect.objectContaining({ id, name: 'ci', status: 'active' })]);
    const auth = { authorization: `Bearer ${token}` };
    expect((await inject({ method: 'GET', url: '/api/v1/tokens', headers: auth })).statusCode).toBe(200);
    expect((await inject({ method: 'DELETE', url: `/api/v1/access-tokens/${id}`, headers: { cookie } })).json().status).toBe('revoked');
    expect((await inject({ method: 'GET', url: '/api/v1/tokens', headers: auth })).statusCode).toBe(401);
  });
});

describe('API tokens', () => {
  it('creates a gk_ token shown once, lists it without the string, and gets it', async () => {
    const o = await owner(t.app);
    const res = await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'backend', description: 'prod' } });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(isWellFormedToken('api', body.token)).toBe(true);
    expect(body).toMatchObject({
      name: 'backend',
      description: 'prod',
      status: 'active',
      expires_at: null,
      monthly_limit: null,
      rate_limit: null,
      masked: `gk_${body.token.slice(3, 7)}…${body.token.slice(-4)}`,
      current_month_usage: 0,
      last_used_at: null,
    });
    const list = await inject({ method: 'GET', url: '/api/v1/tokens', headers: o.auth });
    expect(list.body).not.toContain(body.token);
    expect(list.json().tokens.map((x: { id: string }) => x.id)).toEqual([body.id]);
    const one = await inject({ method: 'GET', url: `/api/v1/tokens/${body.id}`, headers: o.auth });
    expect(one.json()).toEqual({ ...body, token: undefined });
  });

  it('stores the token string nowhere, only its SHA-256', async () => {
    const o = await owner(t.app);
    const { token } = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x' } })).json();
    const sub = t.runtime.store.subscribeToAll();
    const seen: string[] = [];
    for await (const item of sub) {
      if (item.kind === 'caughtUp') break;
      seen.push(JSON.stringify(item.event));
    }
    await sub.close();
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.join('\n')).not.toContain(token);
    expect(seen.join('\n')).not.toContain(o.accessToken);
  });

  it('enforces the plan: Free has 2 tokens, no custom limits, no expiration', async () => {
    const o = await owner(t.app);
    for (const name of ['a', 'b']) expect((await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name } })).statusCode).toBe(201);
    const third = await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'c' } });
    expect(third.statusCode).toBe(409);
    expect(third.json()).toMatchObject({ code: 'token_limit_reached', maxTokens: 2 });
    const o2 = await owner(t.app);
    const custom = await inject({ method: 'POST', url: '/api/v1/tokens', headers: o2.auth, payload: { name: 'c', monthly_limit: 10 } });
    expect(custom.statusCode).toBe(403);
    expect(custom.json().code).toBe('plan_feature_unavailable');
    const expiring = await inject({ method: 'POST', url: '/api/v1/tokens', headers: o2.auth, payload: { name: 'c', expires_in_days: 3 } });
    expect(expiring.statusCode).toBe(403);
  });

  it('allows custom limits and expiration from Developer up, below the account total', async () => {
    const o = await owner(t.app);
    expect((await setPlan(o.accountId, 'developer')).json().plan.id).toBe('developer');
    const ok = await inject({
      method: 'POST',
      url: '/api/v1/tokens',
      headers: o.auth,
      payload: { name: 'c', monthly_limit: 1000, rate_limit: 10, expires_in_days: 30 },
    });
    expect(ok.statusCode).toBe(201);
    expect(ok.json()).toMatchObject({ monthly_limit: 1000, rate_limit: 10 });
    expect(Date.parse(ok.json().expires_at) - Date.now()).toBeGreaterThan(29 * 86_400_000);
    const tooHigh = await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'd', monthly_limit: 5_000_000 } });
    expect(tooHigh.statusCode).toBe(422);
    expect(tooHigh.json().code).toBe('limit_above_account');
  });

  it('edits, toggles, revokes (final), and frees the slot', async () => {
    const o = await owner(t.app);
    const { id } = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'a' } })).json();
    await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'b' } });
    const patched = await inject({
      method: 'PATCH',
      url: `/api/v1/tokens/${id}`,
      headers: o.auth,
      payload: { name: 'renamed', description: 'd', status: 'disabled' },
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({ name: 'renamed', description: 'd', status: 'disabled' });
    expect((await inject({ method: 'PATCH', url: `/api/v1/tokens/${id}`, headers: o.auth, payload: { status: 'active' } })).json().status).toBe('active');
    const revoked = await inject({ method: 'DELETE', url: `/api/v1/tokens/${id}`, headers: o.auth });
    expect(revoked.statusCode).toBe(200);
    expect(revoked.json().status).toBe('revoked');
    const edit = await inject({ method: 'PATCH', url: `/api/v1/tokens/${id}`, headers: o.auth, payload: { status: 'active' } });
    expect(edit.statusCode).toBe(409);
    expect(edit.json().code).toBe('token_revoked');
    expect((await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'c' } })).statusCode).toBe(201);
  });

  it('gives the audit history: each event with its time and the state after it', async () => {
    const o = await owner(t.app);
    const { id } = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'a' } })).json();
    await inject({ method: 'PATCH', url: `/api/v1/tokens/${id}`, headers: o.auth, payload: { name: 'b' } });
    await inject({ method: 'PATCH', url: `/api/v1/tokens/${id}`, headers: o.auth, payload: { status: 'disabled' } });
    await inject({ method: 'DELETE', url: `/api/v1/tokens/${id}`, headers: o.auth });
    const res = await inject({ method: 'GET', url: `/api/v1/tokens/${id}/history`, headers: o.auth });
    expect(res.statusCode).toBe(200);
    const events = res.json().events;
    expect(events.map((e: { type: string }) => e.type)).toEqual(['ApiTokenCreated', 'ApiTokenRenamed', 'ApiTokenDisabled', 'ApiTokenRevoked']);
    expect(events.map((e: { state: { name: string; status: string } }) => [e.state.name, e.state.status])).toEqual([
      ['a', 'active'],
      ['b', 'active'],
      ['b', 'disabled'],
      ['b', 'revoked'],
    ]);
    expect(events.every((e: { at: string; revision: number }, i: number) => !Number.isNaN(Date.parse(e.at)) && e.revision === i)).toBe(true);
  });

  it('creates exactly 2 of 20 concurrent tokens on Free, refusing 18 with a reason', async () => {
    const o = await owner(t.app);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: `t${i}` } })),
    );
    const codes = results.map((r) => r.statusCode);
    expect(codes.filter((c) => c === 201)).toHaveLength(2);
    expect(codes.filter((c) => c === 409)).toHaveLength(18);
    expect(results.filter((r) => r.statusCode === 409).every((r) => r.json().code === 'token_limit_reached')).toBe(true);
    expect((await inject({ method: 'GET', url: '/api/v1/tokens', headers: o.auth })).json().tokens).toHaveLength(2);
  });
});

describe("one account never touches another's tokens", () => {
  it('refuses every token route with 404 for a foreign token', async () => {
    const a = await owner(t.app);
    const b = await owner(t.app);
    const { id } = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: a.auth, payload: { name: 'mine' } })).json();
    const keyId = (await inject({ method: 'GET', url: '/api/v1/access-tokens', headers: { cookie: a.cookie } })).json().access_tokens[0].id;
    const attempts = [
      { method: 'GET' as const, url: `/api/v1/tokens/${id}` },
      { method: 'PATCH' as const, url: `/api/v1/tokens/${id}`, payload: { name: 'stolen' } },
      { method: 'PATCH' as const, url: `/api/v1/tokens/${id}`, payload: { status: 'disabled' } },
      { method: 'DELETE' as const, url: `/api/v1/tokens/${id}` },
      { method: 'GET' as const, url: `/api/v1/tokens/${id}/history` },
    ];
    for (const attempt of attempts) {
      for (const headers of [b.auth, { cookie: b.cookie }]) {
        const res = await inject({ ...attempt, headers });
        expect(res.statusCode, `${attempt.method} ${attempt.url}`).toBe(404);
      }
    }
    expect((await inject({ method: 'DELETE', url: `/api/v1/access-tokens/${keyId}`, headers: { cookie: b.cookie } })).statusCode).toBe(404);
    expect((await inject({ method: 'GET', url: '/api/v1/tokens', headers: b.auth })).json().tokens).toEqual([]);
    expect((await inject({ method: 'GET', url: `/api/v1/tokens/${id}`, headers: a.auth })).json()).toMatchObject({ name: 'mine', status: 'active' });
  });
});

describe('authentication of the management API', () => {
  it('refuses no credentials, an API token, a malformed or unknown access token', async () => {
    const o = await owner(t.app);
    const { token } = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x' } })).json();
    const cases = [
      {},
      { authorization: `Bearer ${token}` },
      { authorization: 'Bearer gka_nope' },
      { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` },
      { authorization: `Bearer ${o.accessToken.slice(0, -1)}${o.accessToken.endsWith('A') ? 'B' : 'A'}` },
    ];
    for (const headers of cases) {
      const res = await inject({ method: 'GET', url: '/api/v1/tokens', headers });
      expect(res.statusCode, JSON.stringify(headers)).toBe(401);
      expect(res.headers['content-type']).toMatch(/problem\+json/);
    }
  });
  it('access tokens cannot manage access tokens (a dashboard session is needed)', async () => {
    const o = await owner(t.app);
    expect((await inject({ method: 'POST', url: '/api/v1/access-tokens', headers: o.auth, payload: { name: 'x' } })).statusCode).toBe(401);
  });
  it('operator calls need the admin token', async () => {
    const o = await owner(t.app);
    expect((await inject({ method: 'PUT', url: `/api/v1/admin/accounts/${o.accountId}/plan`, payload: { plan: 'developer' } })).statusCode).toBe(401);
    expect(
      (await inject({ method: 'PUT', url: `/api/v1/admin/accounts/${o.accountId}/plan`, headers: o.auth, payload: { plan: 'developer' } })).statusCode,
    ).toBe(401);
    expect((await setPlan(o.accountId, 'gold')).statusCode).toBe(400);
    expect((await setPlan('acc_0000000000000000', 'developer')).statusCode).toBe(404);
  });
});

describe('bad input: a clear 4xx problem and no event appended', () => {
  it('refuses malformed JSON, wrong types, unknown fields, over-long strings, invalid ids, wrong media types', async () => {
    const o = await owner(t.app);
    const { id } = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x' } })).json();
    const head = await t.runtime.store.headPosition();
    const json = { ...o.auth, 'content-type': 'application/json' };
    const cases: Array<[InjectOptions, number]> = [
      [{ method: 'POST', url: '/api/v1/tokens', headers: json, payload: '{"name": ' }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: json, payload: '' }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: json, payload: '[]' }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: json, payload: 'null' }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 42 } }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x', admin: true } }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x'.repeat(101) } }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: '   ' } }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x', expires_in_days: -1 } }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x', expires_in_days: 1.5 } }, 400],
      [{ method: 'POST', url: '/api/v1/tokens', headers: { ...o.auth, 'content-type': 'text/plain' }, payload: 'name=x' }, 415],
      [{ method: 'POST', url: '/api/v1/tokens', headers: json, payload: `{"name":"${'x'.repeat(2_000_000)}"}` }, 413],
      [{ method: 'PATCH', url: `/api/v1/tokens/${id}`, headers: o.auth, payload: {} }, 400],
      [{ method: 'PATCH', url: `/api/v1/tokens/${id}`, headers: o.auth, payload: { status: 'revoked' } }, 400],
      [{ method: 'PATCH', url: '/api/v1/tokens/not-an-id', headers: o.auth, payload: { name: 'y' } }, 400],
      [{ method: 'DELETE', url: '/api/v1/tokens/tok_0000000000000000', headers: o.auth }, 404],
      [{ method: 'GET', url: '/api/v1/tokens/%00%ff', headers: o.auth }, 400],
      [{ method: 'POST', url: '/api/v1/auth/signup', payload: { email: 'not-an-email', password: 'long enough' } }, 400],
      [{ method: 'POST', url: '/api/v1/auth/signup', payload: { email: 'a@b.co', password: 'short' } }, 400],
    ];
    for (const [request, status] of cases) {
      const res = await inject(request);
      expect(res.statusCode, `${request.method} ${request.url} ${String(request.payload).slice(0, 40)}`).toBe(status);
      expect(res.headers['content-type'], String(request.url)).toMatch(/^application\/problem\+json/);
      expect(res.json()).toMatchObject({ status, type: expect.any(String), title: expect.any(String), detail: expect.any(String) });
    }
    expect(await t.runtime.store.headPosition()).toBe(head);
  });
});

describe('the management API answers as itself', () => {
  it('answers an unknown /api path with its own 404 problem, whatever the method', async () => {
    const o = await owner(t.app);
    for (const [method, url] of [
      ['GET', '/api/v1/nope'],
      ['POST', '/api/v1/nope'],
      ['DELETE', '/api/v1/tokens'],
      ['PUT', '/api/v1/tokens'],
      ['GET', '/api/v1/tokens/tok_0000000000000000/extra'],
      ['GET', '/api/v2/tokens'],
      ['GET', '/api'],
      ['POST', '/api'],
      ['GET', '/api?x=1'],
      ['GET', '/api/'],
    ] as const) {
      const res = await inject({ method, url, headers: o.auth });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(res.json(), `${method} ${url}`).toMatchObject({ status: 404, code: 'not_found' });
    }
  });

  it('names where a bad value was: query, body or path parameters', async () => {
    const o = await owner(t.app);
    const query = await inject({ method: 'GET', url: '/api/v1/metrics/user?foo=1', headers: o.auth });
    expect(query.statusCode).toBe(400);
    expect(query.json().detail).toMatch(/^query: .*"foo"/);
    expect(query.json().errors[0]).toMatchObject({ in: 'query' });
    const field = await inject({ method: 'GET', url: '/api/v1/metrics/user?start=yesterday', headers: o.auth });
    expect(field.json().detail).toMatch(/^query\.start: /);
    const body = await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x', admin: true } });
    expect(body.json().detail).toMatch(/^body: .*"admin"/);
    const params = await inject({ method: 'PATCH', url: '/api/v1/tokens/not-an-id', headers: o.auth, payload: { name: 'y' } });
    expect(params.json().detail).toMatch(/^params\.id: /);
  });

  it('refuses a disabled API token on the metrics call with 403 token_disabled, as chain calls do', async () => {
    const o = await owner(t.app);
    const created = await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'metrics' } });
    const { id, token } = created.json();
    const asToken = { authorization: `Bearer ${token}` };
    expect((await inject({ method: 'GET', url: '/api/v1/metrics/user', headers: asToken })).statusCode).toBe(200);
    await inject({ method: 'PATCH', url: `/api/v1/tokens/${id}`, headers: o.auth, payload: { status: 'disabled' } });
    const disabled = await inject({ method: 'GET', url: '/api/v1/metrics/user', headers: asToken });
    expect(disabled.statusCode).toBe(403);
    expect(disabled.json()).toMatchObject({ status: 403, code: 'token_disabled' });
    await inject({ method: 'DELETE', url: `/api/v1/tokens/${id}`, headers: o.auth });
    const revoked = await inject({ method: 'GET', url: '/api/v1/metrics/user', headers: asToken });
    expect(revoked.statusCode).toBe(401);
  });

  it("marks every answer, a raw token's above all, not to be cached or sniffed", async () => {
    const o = await owner(t.app);
    const answers = [
      await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'shown once' } }),
      await inject({ method: 'POST', url: '/api/v1/access-tokens', headers: { cookie: o.cookie }, payload: { name: 'shown once' } }),
      await inject({ method: 'GET', url: '/api/v1/tokens', headers: o.auth }),
      await inject({ method: 'GET', url: '/api/v1/tokens' }),
      await inject({ method: 'GET', url: '/api/v1/nope', headers: o.auth }),
      await inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email: o.email, password: 'correct horse battery' } }),
    ];
    expect(answers.map((a) => a.statusCode)).toEqual([201, 201, 200, 401, 404, 200]);
    for (const a of answers) {
      expect(a.headers['cache-control'], a.body.slice(0, 60)).toBe('no-store');
      expect(a.headers['x-content-type-options']).toBe('nosniff');
    }
  });
});
