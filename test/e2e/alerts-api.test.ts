import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeEvent } from '../../src/domain/eventCodec.js';
import { ADMIN_TOKEN, owner, signUp, startTestApp, type TestApp } from '../support/testApp.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { ALERT_EVALUATION_INTERVAL_SECONDS: '0' } });
});
afterAll(async () => {
  await t?.close();
});

const inject = (options: InjectOptions) => t.app.inject(options);
const setPlan = (accountId: string, plan: string) =>
  inject({ method: 'PUT', url: `/api/v1/admin/accounts/${accountId}/plan`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, payload: { plan } });
const ownerOn = async (plan: string) => {
  const o = await owner(t.app);
  if (plan !== 'free') expect((await setPlan(o.accountId, plan)).statusCode).toBe(200);
  return o;
};
const errorRate = { name: 'Errors', type: 'error_rate', threshold: 5, window_minutes: 10, channels: [{ type: 'email', to: 'ops@example.com' }] };

describe('alert CRUD', () => {
  it('creates, lists, gets, edits and deletes an alert', async () => {
    const o = await ownerOn('free');
    const created = await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: errorRate });
    expect(created.statusCode).toBe(201);
    const alert = created.json();
    expect(alert).toMatchObject({
      id: expect.stringMatching(/^alr_[0-9A-Za-z]{16}$/),
      name: 'Errors',
      type: 'error_rate',
      condition: null,
      threshold: 5,
      window_minutes: 10,
      token_id: null,
      min_requests: 10,
      baseline_hours: null,
      enabled: true,
      state: 'ok',
      last_value: null,
      fired_at: null,
      resolved_at: null,
      channels: [{ id: expect.stringMatching(/^chn_/), type: 'email', to: 'ops@example.com', status: 'active' }],
    });
    expect((await inject({ method: 'GET', url: '/api/v1/alerts', headers: o.auth })).json()).toEqual({ alerts: [alert] });
    expect((await inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}`, headers: { cookie: o.cookie } })).json()).toEqual(alert);

    const patched = await inject({
      method: 'PATCH',
      url: `/api/v1/alerts/${alert.id}`,
      headers: o.auth,
      payload: { threshold: 7.5, name: 'Errors!', enabled: false },
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({ threshold: 7.5, name: 'Errors!', enabled: false, window_minutes: 10, channels: alert.channels });

    const notifications = await inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}/notifications`, headers: o.auth });
    expect(notifications.json()).toEqual({ alert_id: alert.id, notifications: [] });

    expect((await inject({ method: 'DELETE', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).statusCode).toBe(204);
    expect((await inject({ method: 'GET', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).statusCode).toBe(404);
    expect((await inject({ method: 'DELETE', url: `/api/v1/alerts/${alert.id}`, headers: o.auth })).statusCode).toBe(404);
    expect((await inject({ method: 'GET', url: '/api/v1/alerts', headers: o.auth })).json()).toEqual({ alerts: [] });
  });

  it("changing the type starts the rule from that type's defaults", async () => {
    const o = await ownerOn('free');
    const { id } = (await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: errorRate })).json();
    const toUsage = await inject({ method: 'PATCH', url: `/api/v1/alerts/${id}`, headers: o.auth, payload: { type: 'usage_threshold' } });
    expect(toUsage.statusCode).toBe(200);
    expect(toUsage.json()).toMatchObject({ type: 'usage_threshold', threshold: 5, window_minutes: null, min_requests: null });
    const toLatency = await inject({ method: 'PATCH', url: `/api/v1/alerts/${id}`, headers: o.auth, payload: { type: 'response_time' } });
    expect(toLatency.statusCode).toBe(400);
    expect(toLatency.json()).toMatchObject({
      code: 'validation_failed',
      detail: expect.stringMatching(/^body\.threshold: /),
      errors: [{ in: 'body', path: 'threshold' }],
    });
  });

  it("needs credentials, and hides other owners' alerts behind 404", async () => {
    const a = await ownerOn('free');
    const b = await ownerOn('free');
    const { id } = (await inject({ method: 'POST', url: '/api/v1/alerts', headers: a.auth, payload: errorRate })).json();
    expect((await inject({ method: 'GET', url: '/api/v1/alerts' })).statusCode).toBe(401);
    for (const [method, url, payload] of [
      ['GET', `/api/v1/alerts/${id}`, undefined],
      ['PATCH', `/api/v1/alerts/${id}`, { threshold: 9 }],
      ['DELETE', `/api/v1/alerts/${id}`, undefined],
      ['GET', `/api/v1/alerts/${id}/notifications`, undefined],
    ] as const) {
      const res = await inject({ method, url, headers: b.auth, ...(payload ? { payload } : {}) });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
      expect(res.json()).toMatchObject({ code: 'not_found' });
    }
    expect((await inject({ method: 'GET', url: `/api/v1/alerts/${id}`, headers: a.auth })).json().threshold).toBe(5);
  });
});

describe('validation (400)', () => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['an unknown type', { ...errorRate, type: 'latency' }, 'type'],
    ['a percentage above 100', { ...errorRate, threshold: 150 }, 'threshold'],
    ['a percentage of 0', { ...errorRate, threshold: 0 }, 'threshold'],
    ['a window of 0 minutes', { ...errorRate, window_minutes: 0 }, 'window_minutes'],
    ['a window over a day', { ...errorRate, window_minutes: 1441 }, 'window_minutes'],
    ['a window on a monthly rule', { ...errorRate, type: 'usage_threshold', threshold: 80 }, 'window_minutes'],
    ['an unknown condition', { ...errorRate, type: 'response_time', condition: 'p99', threshold: 500 }, 'condition'],
    ['a fractional count', { ...errorRate, type: 'rate_limiting', condition: 'hitting', threshold: 2.5 }, 'threshold'],
    ['token_usage without a token', { ...errorRate, type: 'token_usage', window_minutes: undefined, threshold: 80 }, 'token_id'],
    ['a malformed token id', { ...errorRate, token_id: 'tok_short' }, 'token_id'],
    ['no channel', { ...errorRate, channels: [] }, 'channels'],
    ['an unknown channel type', { ...errorRate, channels: [{ type: 'pager', to: 'x' }] }, 'channels.0.type'],
    ['a bad email', { ...errorRate, channels: [{ type: 'email', to: 'nope' }] }, 'channels.0.to'],
    ['a non-http webhook URL', { ...errorRate, channels: [{ type: 'webhook', url: 'ftp://example.com/x' }] }, 'channels.0.url'],
    ['a phone number not in E.164', { ...errorRate, channels: [{ type: 'sms', to: '555-0100' }] }, 'channels.0.to'],
    [
      'the same channel twice',
      {
        ...errorRate,
        channels: [
          { type: 'email', to: 'a@example.com' },
          { type: 'email', to: 'a@example.com' },
        ],
      },
      'channels.1',
    ],
    ['an unknown field', { ...errorRate, severity: 'high' }, ''],
    ['a missing name', { ...errorRate, name: '' }, 'name'],
  ];
  for (const [what, payload, path] of cases) {
    it(`refuses ${what}`, async () => {
      const o = await ownerOn('free');
      const res = await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(res.json().code).toBe('validation_failed');
      expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path);
      // The rule's own checks answer in the shape of the schema's: each error names the part of the request.
      expect(res.json().errors.map((e: { in?: string }) => e.in)).toEqual(res.json().errors.map(() => 'body'));
      expect(res.json().detail).toMatch(/^body[.:]/);
    });
  }
  it('refuses malformed ids and empty patches', async () => {
    const o = await ownerOn('free');
    expect((await inject({ method: 'GET', url: '/api/v1/alerts/tok_0123456789abcdef', headers: o.auth })).statusCode).toBe(400);
    const { id } = (await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: errorRate })).json();
    expect((await inject({ method: 'PATCH', url: `/api/v1/alerts/${id}`, headers: o.auth, payload: {} })).statusCode).toBe(400);
    expect((await inject({ method: 'PATCH', url: `/api/v1/alerts/${id}`, headers: o.auth, payload: { threshold: -1 } })).statusCode).toBe(400);
  });
});

describe('rules tied to the account', () => {
  it("a token_id must be one of the caller's tokens (404 otherwise)", async () => {
    const a = await ownerOn('developer');
    const b = await ownerOn('developer');
    const token = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: a.auth, payload: { name: 'backend', monthly_limit: 1000 } })).json();
    const payload = { name: 'Token', type: 'token_usage', threshold: 90, token_id: token.id, channels: [{ type: 'email', to: 'a@example.com' }] };
    const mine = await inject({ method: 'POST', url: '/api/v1/alerts', headers: a.auth, payload });
    expect(mine.statusCode).toBe(201);
    expect(mine.json()).toMatchObject({ type: 'token_usage', condition: 'percent_of_limit', token_id: token.id, window_minutes: null });
    const theirs = await inject({ method: 'POST', url: '/api/v1/alerts', headers: b.auth, payload });
    expect(theirs.statusCode).toBe(404);
    expect(theirs.json().detail).toContain(token.id);
  });
  it('a percentage of a monthly limit the account does not have is 422', async () => {
    const o = await ownerOn('unlimited');
    const res = await inject({
      method: 'POST',
      url: '/api/v1/alerts',
      headers: o.auth,
      payload: { name: 'Usage', type: 'usage_threshold', threshold: 80, channels: [{ type: 'email', to: 'a@example.com' }] },
    });
    expect(res.statusCode).toBe(422);
    expect(res.json().code).toBe('alert_not_applicable');
  });
});

describe('channels per plan (403 naming the plan that has it)', () => {
  const withChannel = (channel: Record<string, unknown>) => ({ ...errorRate, channels: [{ type: 'email', to: 'a@example.com' }, channel] });
  const cases: Array<[string, Record<string, unknown>, string, string]> = [
    ['free', { type: 'webhook', url: 'https://hooks.example.com/a' }, 'developer', 'Developer'],
    ['developer', { type: 'chat', url: 'https://hooks.slack.com/services/T/B/X' }, 'professional', 'Professional'],
    ['developer', { type: 'incident', routing_key: 'R0UT1NGKEY0123456789abcdef012345' }, 'professional', 'Professional'],
    ['professional', { type: 'sms', to: '+14155550100' }, 'unlimited', 'Unlimited'],
  ];
  for (const [plan, channel, required, name] of cases) {
    it(`${plan} cannot use ${channel.type}`, async () => {
      const o = await ownerOn(plan);
      const res = await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: withChannel(channel) });
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({ code: 'plan_feature_unavailable', plan, required_plan: required, detail: expect.stringContaining(`${name} plan`) });
    });
  }
  it('every channel of the plan is accepted on Unlimited', async () => {
    const o = await ownerOn('unlimited');
    const channels = [
      { type: 'email', to: 'a@example.com' },
      { type: 'webhook', url: 'https://hooks.example.com/a' },
      { type: 'chat', url: 'https://chat.example.com/x' },
      { type: 'incident', routing_key: 'R0UT1NGKEY0123456789abcdef012345' },
      { type: 'sms', to: '+14155550100' },
    ];
    const res = await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: { ...errorRate, channels } });
    expect(res.statusCode).toBe(201);
    expect(res.json().channels.map((c: { type: string }) => c.type)).toEqual(['email', 'webhook', 'chat', 'incident', 'sms']);
    expect(res.json().channels[3]).toMatchObject({ routing_key: 'R0UT1NGKEY0123456789abcdef012345' });
  });
  it('the PATCH of channels is checked too', async () => {
    const o = await ownerOn('free');
    const { id } = (await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: errorRate })).json();
    const res = await inject({
      method: 'PATCH',
      url: `/api/v1/alerts/${id}`,
      headers: o.auth,
      payload: { channels: [{ type: 'webhook', url: 'https://hooks.example.com/a' }] },
    });
    expect(res.statusCode).toBe(403);
  });
});

describe('webhook secrets', () => {
  it('are shown once, at creation (and for endpoints an edit adds), never again', async () => {
    const o = await ownerOn('developer');
    const res = await inject({
      method: 'POST',
      url: '/api/v1/alerts',
      headers: o.auth,
      payload: { ...errorRate, channels: [{ type: 'webhook', url: 'https://hooks.example.com/a' }] },
    });
    expect(res.statusCode).toBe(201);
    const [hook] = res.json().channels;
    expect(hook).toMatchObject({
      type: 'webhook',
      url: 'https://hooks.example.com/a',
      status: 'active',
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/),
    });
    const id = res.json().id;
    for (const url of [`/api/v1/alerts/${id}`, '/api/v1/alerts']) {
      expect((await inject({ method: 'GET', url, headers: o.auth })).body).not.toContain('whsec_');
    }
    const patched = await inject({
      method: 'PATCH',
      url: `/api/v1/alerts/${id}`,
      headers: o.auth,
      payload: {
        channels: [
          { type: 'webhook', url: 'https://hooks.example.com/a' },
          { type: 'webhook', url: 'https://hooks.example.com/b' },
        ],
      },
    });
    const [kept, added] = patched.json().channels;
    expect(kept).toEqual({ id: hook.id, type: 'webhook', url: 'https://hooks.example.com/a', status: 'active' });
    expect(added).toMatchObject({ url: 'https://hooks.example.com/b', secret: expect.stringMatching(/^whsec_/) });
    expect(added.secret).not.toBe(hook.secret);
    const history = await t.runtime.store.readStream(`alert-${id}`);
    expect(JSON.stringify(history)).toContain(hook.secret);
  });
});

describe('sessions work like access tokens', () => {
  it('creates an alert from a dashboard session', async () => {
    const { cookie } = await signUp(t.app);
    const res = await inject({ method: 'POST', url: '/api/v1/alerts', headers: { cookie }, payload: errorRate });
    expect(res.statusCode).toBe(201);
  });
});

describe('alert rules per plan (max_alerts: a slot on the account stream)', () => {
  const create = (o: { auth: Record<string, string> }, name: string) =>
    inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: { ...errorRate, name } });
  const createN = async (o: { auth: Record<string, string> }, n: number) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const res = await create(o, `rule ${i}`);
      expect(res.statusCode, res.body).toBe(201);
      ids.push(res.json().id as string);
    }
    return ids;
  };
  const remove = (o: { auth: Record<string, string> }, id: string) => inject({ method: 'DELETE', url: `/api/v1/alerts/${id}`, headers: o.auth });
  const listed = async (o: { auth: Record<string, string> }) => (await inject({ method: 'GET', url: '/api/v1/alerts', headers: o.auth })).json().alerts.length;

  it("shows each plan's maximum on the account", async () => {
    const o = await ownerOn('free');
    expect((await inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json().plan).toMatchObject({ id: 'free', max_alerts: 5 });
  });

  it('creates up to the maximum, refuses the next with 409 alert_limit_reached, and takes one again once one is deleted', async () => {
    const o = await ownerOn('free');
    const ids = await createN(o, 5);
    const refused = await create(o, 'sixth');
    expect(refused.statusCode).toBe(409);
    expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(refused.json()).toMatchObject({ code: 'alert_limit_reached', maxAlerts: 5, plan: 'free', detail: expect.stringContaining('Free plan allows 5') });
    expect(await listed(o)).toBe(5);

    expect((await remove(o, ids[0] as string)).statusCode).toBe(204);
    expect((await create(o, 'after a delete')).statusCode).toBe(201);
    expect((await create(o, 'over again')).statusCode).toBe(409);
    expect(await listed(o)).toBe(5);
  });

  it('lets exactly one of two concurrent creations at max - 1 through', async () => {
    const o = await ownerOn('free');
    await createN(o, 4);
    const results = await Promise.all([create(o, 'a'), create(o, 'b')]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([201, 409]);
    expect(results.find((r) => r.statusCode === 409)?.json().code).toBe('alert_limit_reached');
    expect(await listed(o)).toBe(5);
  });

  it('creates exactly 20 of 30 concurrent rules on Developer', async () => {
    const o = await ownerOn('developer');
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => create(o, `r${i}`)));
    const codes = results.map((r) => r.statusCode);
    expect(codes.filter((c) => c === 201)).toHaveLength(20);
    expect(codes.filter((c) => c === 409)).toHaveLength(10);
    expect(await listed(o)).toBe(20);
  });

  it('a refused or invalid create takes no slot', async () => {
    const o = await ownerOn('free');
    const webhook = await inject({
      method: 'POST',
      url: '/api/v1/alerts',
      headers: o.auth,
      payload: { ...errorRate, channels: [{ type: 'webhook', url: 'https://hooks.example.com/x' }] },
    });
    expect(webhook.statusCode).toBe(403);
    const invalid = await inject({ method: 'POST', url: '/api/v1/alerts', headers: o.auth, payload: { ...errorRate, threshold: -1 } });
    expect(invalid.statusCode).toBe(400);
    await createN(o, 5);
    expect((await create(o, 'sixth')).statusCode).toBe(409);
  });

  it('after a downgrade keeps the alerts over the new maximum and refuses new ones until below it', async () => {
    const o = await ownerOn('developer');
    const ids = await createN(o, 7);
    expect((await setPlan(o.accountId, 'free')).statusCode).toBe(200);
    expect(await listed(o)).toBe(7);
    expect((await create(o, 'x')).json().code).toBe('alert_limit_reached');
    for (const id of ids.slice(0, 2)) expect((await remove(o, id)).statusCode).toBe(204);
    expect((await create(o, 'still at 5')).statusCode).toBe(409);
    expect((await remove(o, ids[2] as string)).statusCode).toBe(204);
    expect((await create(o, 'at 4')).statusCode).toBe(201);
  });

  it('counts the alerts an account had before slots existed: kept, and creation refused until below the maximum', async () => {
    const o = await ownerOn('free');
    // Seven alerts written as the versions before alert slots wrote them: AlertCreated on the alert's stream only.
    const legacy = Array.from({ length: 7 }, (_, i) => `alr_legacy${i}${Math.random().toString(36).slice(2).padEnd(9, '0').slice(0, 9)}`);
    let position = '';
    for (const alertId of legacy) {
      const created = {
        type: 'AlertCreated',
        version: 1,
        data: {
          alertId,
          accountId: o.accountId,
          name: alertId,
          rule: { type: 'error_rate', condition: null, threshold: 5, windowMinutes: 10, tokenId: null, minRequests: 10, baselineHours: null },
          channels: [{ type: 'email', id: `chn_${alertId.slice(4)}`, active: true, to: 'ops@example.com' }],
          enabled: true,
          at: new Date().toISOString(),
        },
      };
      position = (await t.runtime.store.append(`alert-${alertId}`, [encodeEvent(created)], 'no_stream')).position;
    }
    await t.runtime.projector?.waitFor(position);
    expect(await listed(o)).toBe(7);

    expect((await create(o, 'over')).json()).toMatchObject({ code: 'alert_limit_reached', maxAlerts: 5 });
    for (const id of legacy.slice(0, 2)) expect((await remove(o, id)).statusCode).toBe(204);
    expect((await create(o, 'still at 5')).statusCode).toBe(409);
    expect((await remove(o, legacy[2] as string)).statusCode).toBe(204);
    expect((await create(o, 'at 4')).statusCode).toBe(201);
    expect((await create(o, 'at 5')).statusCode).toBe(409);
    expect(await listed(o)).toBe(5);
  });
});
