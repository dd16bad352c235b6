import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { Admission } from '../../src/gateway/admission.js';
import { TokenGatekeeper } from '../../src/gateway/gatekeeper.js';
import { TokenCache } from '../../src/gateway/tokenCache.js';
import { openChangeFeed } from '../../src/infra/changefeed/index.js';
import { openLimiter } from '../../src/infra/limits/index.js';
import { quotaBucket } from '../../src/infra/limits/port.js';
import { Queries } from '../../src/projections/queries.js';
import { INVALIDATION_TOPIC } from '../../src/projections/runner.js';
import { eventually, until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { ownerOn } from '../support/planOwner.js';
import { ADMIN_TOKEN, listen, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * Rate limits, monthly quotas and plan changes as a paying customer sees them on the wire and as
 * the owner billing them counts them. Times are pinned (Date and performance faked) around each
 * burst of calls, so "the same second" and "the last tenth of a second of the month" are exact:
 * the gateway decides at the call's arrival, read from those two clocks.
 */

/** Small figures so a quota is spent in a few calls: Developer 8 a month at 4/s, Professional 20 at 10/s. */
const DEVELOPER = { rps: 4, monthly: 8 };
const PROFESSIONAL = { rps: 10, monthly: 20 };

const dir = mkdtempSync(join(tmpdir(), 'gw-limits-audit-'));
const plansFile = join(dir, 'plans.json');
writeFileSync(
  plansFile,
  JSON.stringify({
    developer: { rps: DEVELOPER.rps, monthly_requests: DEVELOPER.monthly },
    professional: { rps: PROFESSIONAL.rps, monthly_requests: PROFESSIONAL.monthly },
  }),
);

let evm: FakeUpstream;
let t: TestApp;

beforeAll(async () => {
  evm = await startEvmFake();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plansFile } });
});
afterAll(async () => {
  unpinClock();
  await t?.close();
  await evm?.close();
  rmSync(dir, { recursive: true, force: true });
});
afterEach(() => {
  unpinClock();
});

/**
 * Pins the clocks the gateway reads a call's arrival from: `Date.now()` less the time since the
 * call arrived by `performance.now()` (patched on the object, which the gateway imports from
 * node:perf_hooks: fake timers would replace only the global).
 */
const pinClock = (atMs: number) => {
  unpinClock();
  vi.useFakeTimers({ toFake: ['Date'], now: atMs });
  const frozen = performance.now();
  vi.spyOn(performance, 'now').mockReturnValue(frozen);
};
const unpinClock = () => {
  vi.useRealTimers();
  vi.restoreAllMocks();
};

const blockNumber = (id: number) => ({ jsonrpc: '2.0', id, method: 'eth_blockNumber', params: [] });

const rpc = (token: string, payload: unknown) =>
  t.app.inject({ method: 'POST', url: `/local/${token}`, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(payload) });

/** `n` single calls one after another; their answers. */
async function calls(token: string, n: number): Promise<LightMyRequestResponse[]> {
  const out: LightMyRequestResponse[] = [];
  for (let i = 0; i < n; i++) out.push(await rpc(token, blockNumber(i + 1)));
  return out;
}

/** Runs `change` and waits until the gateway heard `topic` invalidated (the change feed follows the API's answer). */
async function heard(topic: string, change: () => Promise<LightMyRequestResponse>): Promise<LightMyRequestResponse> {
  const topics: string[] = [];
  const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
  try {
    const res = await change();
    expect(res.statusCode, res.body).toBeLessThan(300);
    await until(() => topics.includes(topic));
    return res;
  } finally {
    await unsubscribe();
  }
}

const setPlan = (accountId: string, plan: string) =>
  heard(`account:${accountId}`, () =>
    t.app.inject({ method: 'PUT', url: `/api/v1/admin/accounts/${accountId}/plan`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, payload: { plan } }),
  );

/** A new owner on `plan` with one token (its own limits if given): the raw token, its id, the owner. */
async function tokenOn(plan: string, fields: Record<string, unknown> = {}) {
  const o = await ownerOn(t, plan);
  const topics: string[] = [];
  const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
  try {
    const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'audit', ...fields } });
    expect(res.statusCode, res.body).toBe(201);
    const tokenId = res.json().id as string;
    await until(() => topics.includes(`token:${tokenId}`));
    return { o, token: res.json().token as string, tokenId };
  } finally {
    await unsubscribe();
  }
}

/** A time in the middle of a second of the current month (the month the API's views count). */
const midSecond = (): number => Math.floor(Date.now() / 1000) * 1000 + 500;

describe('a stricter plan wins over a token’s own limits', () => {
  it('a token given 300/s on Unlimited is held to Developer’s rate once the account is downgraded', async () => {
    const { o, token } = await tokenOn('unlimited', { rate_limit: 300 });
    await setPlan(o.accountId, 'developer');
    pinClock(midSecond());
    const answers = await calls(token, DEVELOPER.rps + 1);
    expect(answers.map((a) => a.statusCode)).toEqual([...Array(DEVELOPER.rps).fill(200), 429]);
    expect(answers[0]?.headers['x-ratelimit-limit']).toBe(String(DEVELOPER.rps));
  });

  it('a token given its own monthly limit on Unlimited is held to Developer’s monthly total once downgraded', async () => {
    const { o, token, tokenId } = await tokenOn('unlimited', { monthly_limit: 1000 });
    await setPlan(o.accountId, 'developer');
    const answers: LightMyRequestResponse[] = [];
    // Two seconds' worth, within the rate: the month refuses, not the second.
    pinClock(midSecond());
    answers.push(...(await calls(token, DEVELOPER.rps)));
    pinClock(midSecond() + 1000);
    answers.push(...(await calls(token, DEVELOPER.rps)));
    pinClock(midSecond() + 2000);
    answers.push(...(await calls(token, 1)));
    expect(answers.map((a) => a.statusCode)).toEqual([...Array(DEVELOPER.monthly).fill(200), 429]);
    expect(answers[0]?.headers['x-monthlylimit-limit']).toBe(String(DEVELOPER.monthly));
    expect(answers.at(-1)?.json().error).toMatchObject({ code: -32005 });
    unpinClock();
    // The owner's view of the token's quota says what the gateway holds it to.
    const limits = await eventually(
      async () => (await t.app.inject({ method: 'GET', url: `/api/v1/metrics/tokens/${tokenId}`, headers: o.auth })).json().limits,
      (l) => l.used === DEVELOPER.monthly,
    );
    expect(limits).toMatchObject({ appliesTo: 'token', monthlyLimit: DEVELOPER.monthly, used: DEVELOPER.monthly, remaining: 0 });
  });
});

/** The limit headers of an answer, by their short names. */
const limitHeaders = (res: LightMyRequestResponse) => ({
  rateLimit: res.headers['x-ratelimit-limit'],
  rateRemaining: res.headers['x-ratelimit-remaining'],
  rateReset: res.headers['x-ratelimit-reset'],
  monthLimit: res.headers['x-monthlylimit-limit'],
  monthRemaining: res.headers['x-monthlylimit-remaining'],
  monthReset: res.headers['x-monthlylimit-reset'],
  retryAfter: res.headers['retry-after'],
});

/** The account's charged calls of the month as the API shows them (its limit less its remaining). */
const accountUsed = async (o: { auth: Record<string, string> }) => {
  const usage = (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json().usage;
  return usage.monthly_limit - usage.remaining;
};

describe('a Developer account’s second and month, call by call', () => {
  it('admits exactly the rate and the month, answers the next with 429 and headers that match what was charged', async () => {
    const { o, token } = await tokenOn('developer');
    const second = midSecond();
    const secondEnds = Math.floor(second / 1000) + 1;
    pinClock(second);
    const first = await calls(token, DEVELOPER.rps + 1);
    expect(first.map((a) => a.statusCode)).toEqual([...Array(DEVELOPER.rps).fill(200), 429]);
    first.slice(0, DEVELOPER.rps).forEach((a, i) => {
      expect(limitHeaders(a)).toMatchObject({
        rateLimit: String(DEVELOPER.rps),
        rateRemaining: String(DEVELOPER.rps - i - 1),
        rateReset: String(secondEnds),
        monthLimit: String(DEVELOPER.monthly),
        monthRemaining: String(DEVELOPER.monthly - i - 1),
        retryAfter: undefined,
      });
    });
    const refused = first[DEVELOPER.rps] as LightMyRequestResponse;
    expect(limitHeaders(refused)).toMatchObject({ rateRemaining: '0', monthRemaining: String(DEVELOPER.monthly - DEVELOPER.rps), retryAfter: '1' });
    expect(refused.json()).toMatchObject({ jsonrpc: '2.0', id: DEVELOPER.rps + 1, error: { code: -32005, data: { retryAfter: 1 } } });

    // The next second: a batch of 6 straddles the month (4 left): 4 served, 2 refused in a 200.
    const nextSecond = second + 1000;
    pinClock(nextSecond);
    const batch = await rpc(
      token,
      Array.from({ length: 6 }, (_, i) => blockNumber(100 + i)),
    );
    expect(batch.statusCode).toBe(200);
    const members = batch.json() as Array<{ id: number; result?: string; error?: { code: number } }>;
    expect(members.map((m) => (m.result !== undefined ? 'served' : m.error?.code))).toEqual(['served', 'served', 'served', 'served', -32005, -32005]);
    expect(limitHeaders(batch)).toMatchObject({ rateRemaining: '0', monthRemaining: '0' });

    // Spent for the month: a 429 that says so, waiting for the month's end rather than a second.
    pinClock(nextSecond + 1000);
    const spent = await rpc(token, blockNumber(200));
    expect(spent.statusCode).toBe(429);
    const monthEnds = Date.UTC(new Date(nextSecond).getUTCFullYear(), new Date(nextSecond).getUTCMonth() + 1, 1) / 1000;
    expect(limitHeaders(spent)).toMatchObject({
      monthRemaining: '0',
      monthReset: String(monthEnds),
      retryAfter: String(Math.ceil(monthEnds - (nextSecond + 1000) / 1000)),
    });
    expect(spent.json().error.message).toMatch(/monthly/i);
    unpinClock();

    // Billed: the 8 charged; metered: every call, the refused ones uncharged.
    expect(
      await eventually(
        () => accountUsed(o),
        (n) => n === DEVELOPER.monthly,
      ),
    ).toBe(DEVELOPER.monthly);
    const recorded = await eventually(
      () => recordedCalls(t.runtime.store, o.accountId),
      (r) => r.length === 12,
    );
    expect(recorded.filter((r) => r.charged).length).toBe(DEVELOPER.monthly);
    expect(recorded.filter((r) => !r.charged).map((r) => [r.status, r.rpcErrorCode])).toEqual([
      [429, -32005],
      [200, -32005],
      [200, -32005],
      [429, -32005],
    ]);
  });
});

/** The first instant of the UTC month after the one `ms` falls in. */
const nextMonth = (ms: number): number => Date.UTC(new Date(ms).getUTCFullYear(), new Date(ms).getUTCMonth() + 1, 1);

describe('the month rolls over at 00:00 UTC', () => {
  it('counts a call at 23:59:59.9 on the last day in the old month and one at 00:00:00 in the new one, whose quota starts afresh', async () => {
    const { o, token } = await tokenOn('developer');
    const boundary = nextMonth(Date.now());
    pinClock(boundary - 1100);
    expect((await calls(token, DEVELOPER.rps)).map((a) => a.statusCode)).toEqual(Array(DEVELOPER.rps).fill(200));
    pinClock(boundary - 100);
    const lastTenth = await calls(token, DEVELOPER.monthly - DEVELOPER.rps + 1);
    expect(lastTenth.map((a) => a.statusCode)).toEqual([...Array(DEVELOPER.monthly - DEVELOPER.rps).fill(200), 429]);
    expect(limitHeaders(lastTenth.at(-1) as LightMyRequestResponse)).toMatchObject({
      monthRemaining: '0',
      monthReset: String(boundary / 1000),
      retryAfter: '1',
    });

    pinClock(boundary);
    const first = await rpc(token, blockNumber(1));
    expect(first.statusCode, JSON.stringify([first.headers, first.body])).toBe(200);
    expect(limitHeaders(first)).toMatchObject({
      rateRemaining: String(DEVELOPER.rps - 1),
      rateReset: String(boundary / 1000 + 1),
      monthRemaining: String(DEVELOPER.monthly - 1),
      monthReset: String(nextMonth(boundary) / 1000),
      retryAfter: undefined,
    });
    unpinClock();

    const recorded = await eventually(
      () => recordedCalls(t.runtime.store, o.accountId),
      (r) => r.length === DEVELOPER.monthly + 2,
    );
    expect(recorded.filter((r) => r.charged && Date.parse(r.at) < boundary).length).toBe(DEVELOPER.monthly);
    expect(recorded.filter((r) => r.charged && Date.parse(r.at) >= boundary).length).toBe(1);
    // The owner's views of each month: this one spent, the next one with its one call.
    expect(
      await eventually(
        () => accountUsed(o),
        (n) => n === DEVELOPER.monthly,
      ),
    ).toBe(DEVELOPER.monthly);
    const usedNextMonth = await eventually(
      async () => {
        pinClock(boundary + 60_000);
        try {
          return await accountUsed(o);
        } finally {
          unpinClock();
        }
      },
      (n) => n === 1,
    );
    expect(usedNextMonth).toBe(1);
  });
});

describe('plan and token changes take effect on the next call, the month’s usage kept', () => {
  it('an upgrade lifts a spent month at once and a downgrade brings it back, counted from the same usage', async () => {
    const { o, token } = await tokenOn('developer');
    const second = midSecond();
    pinClock(second);
    await calls(token, DEVELOPER.rps);
    pinClock(second + 1000);
    await calls(token, DEVELOPER.rps);
    expect((await rpc(token, blockNumber(1))).statusCode).toBe(429);
    unpinClock();

    await setPlan(o.accountId, 'professional');
    pinClock(second + 2000);
    const upgraded = await rpc(token, blockNumber(2));
    expect(upgraded.statusCode).toBe(200);
    expect(limitHeaders(upgraded)).toMatchObject({
      rateLimit: String(PROFESSIONAL.rps),
      monthLimit: String(PROFESSIONAL.monthly),
      monthRemaining: String(PROFESSIONAL.monthly - DEVELOPER.monthly - 1),
    });
    unpinClock();

    await setPlan(o.accountId, 'developer');
    pinClock(second + 3000);
    const downgraded = await rpc(token, blockNumber(3));
    expect(downgraded.statusCode).toBe(429);
    expect(limitHeaders(downgraded)).toMatchObject({ monthLimit: String(DEVELOPER.monthly), monthRemaining: '0' });
  });

  it('a token disabled then enabled keeps its month: the 403 meanwhile costs nothing', async () => {
    const { o, token, tokenId } = await tokenOn('developer', { monthly_limit: 5 });
    const patch = (payload: Record<string, unknown>) =>
      heard(`token:${tokenId}`, () => t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${tokenId}`, headers: o.auth, payload }));
    const second = midSecond();
    pinClock(second);
    expect((await calls(token, 3)).map((a) => a.statusCode)).toEqual([200, 200, 200]);
    unpinClock();
    await patch({ status: 'disabled' });
    pinClock(second + 1000);
    const disabled = await rpc(token, blockNumber(1));
    expect(disabled.statusCode).toBe(403);
    expect(disabled.json().error).toMatchObject({ code: -32003 });
    expect(disabled.headers['x-monthlylimit-remaining']).toBeUndefined();
    unpinClock();
    await patch({ status: 'active' });
    pinClock(second + 2000);
    const enabled = await calls(token, 3);
    expect(enabled.map((a) => [a.statusCode, a.headers['x-monthlylimit-remaining']])).toEqual([
      [200, '1'],
      [200, '0'],
      [429, '0'],
    ]);
  });

  it('a rate limit lowered through the API holds from the next call', async () => {
    const { o, token, tokenId } = await tokenOn('professional');
    await heard(`token:${tokenId}`, () => t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${tokenId}`, headers: o.auth, payload: { rate_limit: 2 } }));
    pinClock(midSecond());
    const answers = await calls(token, 3);
    expect(answers.map((a) => [a.statusCode, a.headers['x-ratelimit-limit'], a.headers['x-ratelimit-remaining']])).toEqual([
      [200, '2', '1'],
      [200, '2', '0'],
      [429, '2', '0'],
    ]);
  });
});

describe('over a WebSocket', () => {
  it('counts each call frame and batch member as a call against the second and the month; the upgrade costs nothing', async () => {
    const { o, token } = await tokenOn('developer');
    const { wsBase } = await listen(t);
    const ws = await WsClient.open(`${wsBase}/local/${token}`);
    try {
      const second = midSecond();
      pinClock(second);
      ws.ws.send(JSON.stringify(Array.from({ length: 6 }, (_, i) => blockNumber(100 + i))));
      await until(() => ws.frames.length === 1);
      const members = ws.frames[0] as unknown as Array<{ result?: string; error?: { code: number } }>;
      expect(members.map((m) => (m.result !== undefined ? 'served' : m.error?.code))).toEqual(['served', 'served', 'served', 'served', -32005, -32005]);
      pinClock(second + 1000);
      const served = await Promise.all(Array.from({ length: DEVELOPER.monthly - DEVELOPER.rps }, () => ws.call('eth_blockNumber')));
      expect(served.every((f) => typeof f.result === 'string')).toBe(true);
      pinClock(second + 2000);
      const spent = await ws.call('eth_blockNumber');
      expect(spent.error).toMatchObject({ code: -32005, message: expect.stringMatching(/monthly/i) });
    } finally {
      unpinClock();
      ws.close();
    }
    expect(
      await eventually(
        () => accountUsed(o),
        (n) => n === DEVELOPER.monthly,
      ),
    ).toBe(DEVELOPER.monthly);
    const recorded = await eventually(
      () => recordedCalls(t.runtime.store, o.accountId),
      (r) => r.length === 6 + DEVELOPER.monthly - DEVELOPER.rps + 1,
    );
    expect(recorded.filter((r) => r.charged).length).toBe(DEVELOPER.monthly);
  });
});

describe('bad limits through the API', () => {
  const bad: Array<[string, unknown]> = [
    ['a negative number', -1],
    ['zero', 0],
    ['a fraction', 1.5],
    ['a string', '5'],
    ['a boolean', true],
    ['an object', { n: 5 }],
    ['a number beyond any plan', 1e13],
  ];
  it.each(bad)('refuses %s as rate_limit or monthly_limit with 400 naming the field, on creation and on change', async (_, value) => {
    const o = await ownerOn(t, 'professional');
    const tokenId = (await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x' } })).json().id as string;
    for (const field of ['rate_limit', 'monthly_limit']) {
      const created = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'bad', [field]: value } });
      const changed = await t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${tokenId}`, headers: o.auth, payload: { [field]: value } });
      for (const res of [created, changed]) {
        expect(res.statusCode, `${field}: ${res.body}`).toBe(400);
        expect(res.body).toContain(field);
      }
    }
  });

  it('refuses numbers JSON cannot hold exactly (1e400) with 400, not 500', async () => {
    const o = await ownerOn(t, 'professional');
    for (const field of ['rate_limit', 'monthly_limit']) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/api/v1/tokens',
        headers: { ...o.auth, 'content-type': 'application/json' },
        payload: `{"name":"huge","${field}":1e400}`,
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.body).toContain(field);
    }
  });
});

describe('two gateway instances on one Redis', () => {
  /** A second gateway instance beside `r`'s: its own token cache, change-feed connection and leased limiter. */
  let r: TestApp;
  let feed: Awaited<ReturnType<typeof openChangeFeed>>;
  let limiter: ReturnType<typeof openLimiter>;
  let cache: TokenCache;
  let second: TokenGatekeeper;
  beforeAll(async () => {
    r = await startTestApp({ env: { REDIS_URL: inject('redisUrl'), UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plansFile } });
    feed = await openChangeFeed({ redisUrl: inject('redisUrl') });
    limiter = openLimiter({ redisUrl: inject('redisUrl') });
    await limiter.whenReady();
    cache = new TokenCache(new Queries(r.runtime.readModels));
    await cache.listen(feed);
    second = new TokenGatekeeper(cache, limiter, r.runtime.config.plans);
  });
  afterAll(async () => {
    await cache?.close();
    await feed?.close();
    await limiter?.close();
    await r?.close();
  });

  const first = () => {
    const gatekeeper = r.runtime.gateway?.gatekeeper;
    if (!gatekeeper) throw new Error('no gateway');
    return gatekeeper;
  };
  /** One call on instance `on` at `nowMs` (the limiter's clock is the call's arrival). */
  const admit = async (on: 'a' | 'b', token: string, nowMs: number, cost = 1): Promise<Admission> =>
    (on === 'a' ? first() : second).admit({ chain: 'local', token, via: 'path', cost, nowMs });
  const granted = (a: Admission) => (a.ok ? a.granted : 0);

  /** A new owner on `plan` with one token, created once both instances heard of it. */
  async function redisToken(plan: string, fields: Record<string, unknown> = {}) {
    const o = await ownerOn(r, plan);
    const topics: string[] = [];
    const unsubscribe = await feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
    try {
      const res = await r.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'redis', ...fields } });
      expect(res.statusCode, res.body).toBe(201);
      await until(() => topics.includes(`token:${res.json().id}`));
      return { o, token: res.json().token as string, tokenId: res.json().id as string };
    } finally {
      await unsubscribe();
    }
  }

  it('admit exactly the month between them across 00:00 UTC, each month counted in its own', async () => {
    const { o, token } = await redisToken('developer');
    const boundary = nextMonth(Date.now());
    // Eight seconds before the month ends, both instances calling in turn, 3 calls each a second:
    // a lease one holds may refuse the other's call within a second, never admit one too many.
    let admitted = 0;
    for (let at = boundary - 8100; at < boundary - 100; at += 1000) {
      let inSecond = 0;
      for (let i = 0; i < 6; i++) {
        const decision = await admit(i % 2 === 0 ? 'a' : 'b', token, at);
        if (!decision.ok) expect(decision).toMatchObject({ status: 429 });
        inSecond += granted(decision);
      }
      expect(inSecond).toBeLessThanOrEqual(DEVELOPER.rps);
      admitted += inSecond;
    }
    expect(admitted).toBe(DEVELOPER.monthly);
    for (const on of ['a', 'b'] as const) {
      expect(await admit(on, token, boundary - 100)).toMatchObject({ ok: false, status: 429, code: 'monthly_limit_reached', retryAfterSeconds: 1 });
    }

    const fresh = [await admit('a', token, boundary), await admit('b', token, boundary)];
    expect(fresh.map(granted)).toEqual([1, 1]);
    expect(fresh[1]?.headers).toMatchObject({
      'x-monthlylimit-remaining': String(DEVELOPER.monthly - 2),
      'x-monthlylimit-reset': String(nextMonth(boundary) / 1000),
    });
    const bucket = quotaBucket.account(o.accountId);
    expect(await limiter.monthlyUsed(bucket, boundary - 1)).toBe(DEVELOPER.monthly);
    expect(await limiter.monthlyUsed(bucket, boundary)).toBe(2);
  });

  it('a downgrade heard by both holds the token’s own rate on each at once', async () => {
    const { o, token } = await redisToken('unlimited', { rate_limit: 300 });
    const topics: string[] = [];
    const unsubscribe = await feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
    try {
      await r.app.inject({
        method: 'PUT',
        url: `/api/v1/admin/accounts/${o.accountId}/plan`,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        payload: { plan: 'developer' },
      });
      await until(() => topics.includes(`account:${o.accountId}`));
    } finally {
      await unsubscribe();
    }
    const at = midSecond();
    const a = await admit('a', token, at, 10);
    const b = await admit('b', token, at, 10);
    expect(granted(a) + granted(b)).toBe(DEVELOPER.rps);
    expect(a.headers['x-ratelimit-limit']).toBe(String(DEVELOPER.rps));
  });
});
