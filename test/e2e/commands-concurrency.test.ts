import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Difference, verifyReadModels } from '../../src/cli/verify.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import type { EventStore } from '../../src/infra/eventstore/port.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { PROJECTIONS } from '../../src/projections/all.js';
import { ownerOn } from '../support/planOwner.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { type Roles, startRoles } from '../support/roles.js';
import { ADMIN_TOKEN, listen, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * The management commands under concurrency, through the HTTP API: on PostgreSQL with two `api`
 * runtimes (each its own pools and aggregate caches) and a projector, so each race is between
 * processes' worth of parts; and on the embedded default (one process, requests at once). After
 * each scenario the read models replayed from the log equal the live ones (src/cli/verify.ts).
 */

interface Cluster {
  /** Base URLs of the API processes; requests are spread over them. */
  apis: string[];
  store: EventStore;
  readModels: ReadModelStore;
  /** A new owner (account, access token) on `plan`. */
  owner(plan: string): Promise<{ accountId: string; auth: Record<string, string>; cookie: string }>;
}

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

async function send(base: string, method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

/** `n` requests at once, the i-th on API `i % apis`. */
const atOnce = (c: Cluster, n: number, request: (base: string, i: number) => Promise<Answer>): Promise<Answer[]> =>
  Promise.all(Array.from({ length: n }, (_, i) => request(c.apis[i % c.apis.length] as string, i)));

const statuses = (answers: Answer[]) => answers.map((a) => a.status).sort();
const codesOf = (answers: Answer[]) => [...new Set(answers.filter((a) => a.status >= 400).map((a) => a.body['code']))];

async function eventTypes(c: Cluster, stream: string): Promise<string[]> {
  return (await c.store.readStream(stream)).map((e) => e.type);
}

/**
 * The read models replayed from the events equal the live ones. The projector keeps running here
 * (a revoke frees its slot after its answer): a comparison a commit overlapped is made again.
 */
async function expectReplayEqual(c: Cluster): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const found: Difference[] = [];
    try {
      await verifyReadModels({ store: c.store, live: c.readModels, projections: PROJECTIONS, plans: DEFAULT_PLANS, report: async (d) => void found.push(d) });
    } catch (error) {
      if (attempt < 5 && error instanceof Error && error.message.startsWith('The read models changed while they were compared')) continue;
      throw error;
    }
    expect(found).toEqual([]);
    return;
  }
}

const alert = (i: number) => ({ name: `a${i}`, type: 'error_rate', threshold: 5, window_minutes: 10, channels: [{ type: 'email', to: 'ops@example.com' }] });

function scenarios(cluster: () => Cluster) {
  it('token creations at the plan maximum: exactly the maximum succeed, the rest 409 token_limit_reached', async () => {
    const c = cluster();
    const o = await c.owner('developer');
    const answers = await atOnce(c, 30, (base, i) => send(base, 'POST', '/api/v1/tokens', o.auth, { name: `t${i}` }));
    expect(statuses(answers)).toEqual([...Array(5).fill(201), ...Array(25).fill(409)]);
    expect(codesOf(answers)).toEqual(['token_limit_reached']);
    const created = answers.filter((a) => a.status === 201).map((a) => a.body['id']);
    expect((await eventTypes(c, `account-${o.accountId}`)).filter((t) => t === 'ApiTokenIssued')).toHaveLength(5);
    for (const id of created) expect(await eventTypes(c, `token-${id}`)).toEqual(['ApiTokenCreated']);
    const listed = (await send(c.apis[0] as string, 'GET', '/api/v1/tokens', o.auth)).body['tokens'] as Array<{ id: string }>;
    expect(listed.map((t) => t.id).sort()).toEqual([...created].sort());
    await expectReplayEqual(c);
  });

  it('a revoke racing creations at the maximum frees one slot: at most one creation takes it, never more than the maximum', async () => {
    const c = cluster();
    const o = await c.owner('free');
    const first = await atOnce(c, 2, (base, i) => send(base, 'POST', '/api/v1/tokens', o.auth, { name: `t${i}` }));
    expect(statuses(first)).toEqual([201, 201]);
    const revokedId = first[0]?.body['id'] as string;
    const [revoke, ...creations] = await Promise.all([
      send(c.apis[0] as string, 'DELETE', `/api/v1/tokens/${revokedId}`, o.auth),
      ...Array.from({ length: 12 }, (_, i) => send(c.apis[i % c.apis.length] as string, 'POST', '/api/v1/tokens', o.auth, { name: `r${i}` })),
    ]);
    expect(revoke).toMatchObject({ status: 200, body: { status: 'revoked' } });
    const won = creations.filter((a) => a.status === 201);
    expect(won.length).toBeLessThanOrEqual(1);
    expect(codesOf(creations)).toEqual(creations.length === won.length ? [] : ['token_limit_reached']);
    // Whatever the order, the slot is free once the revoke answered.
    if (won.length === 0) expect((await send(c.apis[1 % c.apis.length] as string, 'POST', '/api/v1/tokens', o.auth, { name: 'after' })).status).toBe(201);
    const listed = (await send(c.apis[0] as string, 'GET', '/api/v1/tokens', o.auth)).body['tokens'] as Array<{ status: string }>;
    expect(listed.filter((t) => t.status === 'active')).toHaveLength(2);
    await expectReplayEqual(c);
  });

  it('alert creations at the plan maximum, and a delete racing them: the maximum holds', async () => {
    const c = cluster();
    const o = await c.owner('free');
    const answers = await atOnce(c, 20, (base, i) => send(base, 'POST', '/api/v1/alerts', o.auth, alert(i)));
    expect(statuses(answers)).toEqual([...Array(5).fill(201), ...Array(15).fill(409)]);
    expect(codesOf(answers)).toEqual(['alert_limit_reached']);
    const taken = (await eventTypes(c, `account-${o.accountId}`)).filter((t) => t === 'AlertSlotTaken');
    expect(taken).toHaveLength(5);
    const deleted = answers.find((a) => a.status === 201)?.body['id'] as string;
    const [del, ...more] = await Promise.all([
      send(c.apis[0] as string, 'DELETE', `/api/v1/alerts/${deleted}`, o.auth),
      ...Array.from({ length: 8 }, (_, i) => send(c.apis[i % c.apis.length] as string, 'POST', '/api/v1/alerts', o.auth, alert(100 + i))),
    ]);
    expect(del.status).toBe(204);
    expect(more.filter((a) => a.status === 201).length).toBeLessThanOrEqual(1);
    const listed = (await send(c.apis[0] as string, 'GET', '/api/v1/alerts', o.auth)).body['alerts'] as unknown[];
    expect(listed.length).toBeLessThanOrEqual(5);
    expect(listed.length).toBe(4 + more.filter((a) => a.status === 201).length);
    await expectReplayEqual(c);
  });

  it('sign-ups with one email at once, differing in case: exactly one account, the others 409 email_taken', async () => {
    const c = cluster();
    const local = `race-${Math.random().toString(36).slice(2)}`;
    const spellings = [`${local}@example.com`, `${local.toUpperCase()}@Example.com`, `${local}@EXAMPLE.COM`];
    const answers = await atOnce(c, 9, (base, i) =>
      send(base, 'POST', '/api/v1/auth/signup', {}, { email: spellings[i % spellings.length], password: `password number ${i}` }),
    );
    expect(statuses(answers)).toEqual([201, ...Array(8).fill(409)]);
    expect(codesOf(answers)).toEqual(['email_taken']);
    const winner = answers.findIndex((a) => a.status === 201);
    // The account is the one answered 201, with that request's password.
    const login = await send(c.apis[0] as string, 'POST', '/api/v1/auth/login', {}, { email: `${local}@example.com`, password: `password number ${winner}` });
    expect(login).toMatchObject({ status: 200, body: { id: answers[winner]?.body['id'] } });
    await expectReplayEqual(c);
  });

  it('edits of one token at once each land: no lost update of its limits', async () => {
    const c = cluster();
    const o = await c.owner('developer');
    const id = (await send(c.apis[0] as string, 'POST', '/api/v1/tokens', o.auth, { name: 't' })).body['id'] as string;
    for (let round = 1; round <= 8; round++) {
      const patches = [{ monthly_limit: 1000 + round }, { rate_limit: round }, { name: `n${round}` }, { description: `d${round}` }];
      const answers = await atOnce(c, patches.length, (base, i) => send(base, 'PATCH', `/api/v1/tokens/${id}`, o.auth, patches[i]));
      expect(statuses(answers)).toEqual([200, 200, 200, 200]);
      expect(answers.map((a) => a.body)).toMatchObject(patches);
      const now = (await send(c.apis[0] as string, 'GET', `/api/v1/tokens/${id}`, o.auth)).body;
      expect(now).toMatchObject({ monthly_limit: 1000 + round, rate_limit: round, name: `n${round}`, description: `d${round}` });
    }
    await expectReplayEqual(c);
  });

  it('the same toggle sent many times at once: every answer shows it', async () => {
    const c = cluster();
    const o = await c.owner('developer');
    const id = (await send(c.apis[0] as string, 'POST', '/api/v1/tokens', o.auth, { name: 't' })).body['id'] as string;
    for (const status of ['disabled', 'active', 'disabled']) {
      const answers = await atOnce(c, 10, (base) => send(base, 'PATCH', `/api/v1/tokens/${id}`, o.auth, { status }));
      for (const a of answers) expect(a).toMatchObject({ status: 200, body: { status } });
    }
    await expectReplayEqual(c);
  });

  it('a revoke racing renames: renames before it land, those after get 409 token_revoked; the stream says which', async () => {
    const c = cluster();
    const o = await c.owner('developer');
    const id = (await send(c.apis[0] as string, 'POST', '/api/v1/tokens', o.auth, { name: 't' })).body['id'] as string;
    const [revoke, ...renames] = await Promise.all([
      send(c.apis[0] as string, 'DELETE', `/api/v1/tokens/${id}`, o.auth),
      ...Array.from({ length: 12 }, (_, i) => send(c.apis[i % c.apis.length] as string, 'PATCH', `/api/v1/tokens/${id}`, o.auth, { name: `n${i}` })),
    ]);
    expect(revoke).toMatchObject({ status: 200, body: { status: 'revoked' } });
    expect(codesOf(renames).filter((code) => code !== 'token_revoked')).toEqual([]);
    const events = await c.store.readStream(`token-${id}`);
    const revokedAt = events.findIndex((e) => e.type === 'ApiTokenRevoked');
    expect(events.slice(revokedAt + 1)).toEqual([]);
    const renamedTo = events.filter((e) => e.type === 'ApiTokenRenamed').map((e) => e.data['name'] as string);
    expect([...renamedTo].sort()).toEqual(renames.flatMap((a, i) => (a.status === 200 ? [`n${i}`] : [])).sort());
    const now = (await send(c.apis[1 % c.apis.length] as string, 'GET', `/api/v1/tokens/${id}`, o.auth)).body;
    expect(now).toMatchObject({ status: 'revoked', name: renamedTo.length ? renamedTo[renamedTo.length - 1] : 't' });
    await expectReplayEqual(c);
  });

  it('edits of one alert at once each land, and every answer shows its own', async () => {
    const c = cluster();
    const o = await c.owner('developer');
    const id = (await send(c.apis[0] as string, 'POST', '/api/v1/alerts', o.auth, alert(0))).body['id'] as string;
    for (let round = 1; round <= 6; round++) {
      const patches = [{ threshold: 10 + round }, { window_minutes: 10 + round }, { name: `a${round}` }, { enabled: round % 2 === 0 }];
      const answers = await atOnce(c, patches.length, (base, i) => send(base, 'PATCH', `/api/v1/alerts/${id}`, o.auth, patches[i]));
      expect(statuses(answers)).toEqual([200, 200, 200, 200]);
      expect(answers.map((a) => a.body)).toMatchObject(patches);
      const now = (await send(c.apis[0] as string, 'GET', `/api/v1/alerts/${id}`, o.auth)).body;
      expect(now).toMatchObject(Object.assign({}, ...patches));
    }
    const toggles = await atOnce(c, 10, (base) => send(base, 'PATCH', `/api/v1/alerts/${id}`, o.auth, { enabled: false }));
    for (const a of toggles) expect(a).toMatchObject({ status: 200, body: { enabled: false } });
    await expectReplayEqual(c);
  });

  it('a downgrade racing creations: no token is issued over the plan of its moment', async () => {
    const c = cluster();
    const o = await c.owner('professional');
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const [plan, ...creations] = await Promise.all([
      send(c.apis[0] as string, 'PUT', `/api/v1/admin/accounts/${o.accountId}/plan`, admin, { plan: 'free' }),
      ...Array.from({ length: 12 }, (_, i) => send(c.apis[i % c.apis.length] as string, 'POST', '/api/v1/tokens', o.auth, { name: `t${i}` })),
    ]);
    expect(plan.status).toBe(200);
    expect(codesOf(creations).filter((code) => code !== 'token_limit_reached')).toEqual([]);
    let live = 0;
    let max: number | null = DEFAULT_PLANS.professional.max_tokens;
    for (const e of await c.store.readStream(`account-${o.accountId}`)) {
      if (e.type === 'AccountPlanChanged') max = DEFAULT_PLANS[e.data['to'] as 'free'].max_tokens;
      if (e.type === 'ApiTokenIssued') {
        expect(max === null || live < max).toBe(true);
        live++;
      }
    }
    expect(live).toBe(creations.filter((a) => a.status === 201).length);
    await expectReplayEqual(c);
  });

  it('access tokens created and revoked at once: every answer is true', async () => {
    const c = cluster();
    const o = await c.owner('free');
    const cookie = { cookie: o.cookie };
    const created = await atOnce(c, 10, (base, i) => send(base, 'POST', '/api/v1/access-tokens', cookie, { name: `k${i}` }));
    expect(statuses(created)).toEqual(Array(10).fill(201));
    const target = created[0]?.body['id'] as string;
    const revokes = await atOnce(c, 10, (base) => send(base, 'DELETE', `/api/v1/access-tokens/${target}`, cookie));
    for (const a of revokes) expect(a).toMatchObject({ status: 200, body: { id: target, status: 'revoked' } });
    expect(await eventTypes(c, `accesstoken-${target}`)).toEqual(['AccessTokenCreated', 'AccessTokenRevoked']);
    const refused = await atOnce(c, 2, (base) => send(base, 'GET', '/api/v1/tokens', { authorization: `Bearer ${created[0]?.body['token']}` }));
    expect(statuses(refused)).toEqual([401, 401]);
    await expectReplayEqual(c);
  });
}

const unavailable = await postgresUnavailable();
/** No alert evaluation: its appends would move the read models while a replay is compared with them. */
const QUIET = { ALERT_EVALUATION_INTERVAL_SECONDS: '0' };

describe.skipIf(unavailable !== null)(
  unavailable ? `two api runtimes on one PostgreSQL (skipped: ${unavailable})` : 'two api runtimes on one PostgreSQL',
  () => {
    let db: TestDatabase;
    let redis: TestRedisServer;
    let roles: Roles;
    let second: TestApp;
    let cluster: Cluster;

    beforeAll(async () => {
      [db, redis] = await Promise.all([createTestDatabase(), startTestRedisServer()]);
      const env = { DATABASE_URL: db.url, REDIS_URL: redis.url, LOG_LEVEL: 'warn', ...QUIET };
      roles = await startRoles(env, { gateways: 0 });
      second = await startTestApp({ env: { ...env, ROLE: 'api' } });
      const bases = [(await listen(roles.api)).url, (await listen(second)).url];
      cluster = {
        apis: bases,
        store: roles.api.runtime.store,
        readModels: roles.api.runtime.readModels,
        owner: (plan) => ownerOn(roles.api, plan),
      };
    }, 60_000);
    afterAll(async () => {
      await second?.close();
      await roles?.stop();
      await redis?.stop();
      await db?.drop();
    });

    scenarios(() => cluster);
  },
);

describe('the embedded default: one process, requests at once', () => {
  let app: TestApp;
  let cluster: Cluster;

  beforeAll(async () => {
    app = await startTestApp({ env: QUIET });
    cluster = { apis: [(await listen(app)).url], store: app.runtime.store, readModels: app.runtime.readModels, owner: (plan) => ownerOn(app, plan) };
  });
  afterAll(async () => {
    await app?.close();
  });

  scenarios(() => cluster);
});
