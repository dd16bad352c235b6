import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeasedLimiter } from '../../src/infra/limits/leased.js';
import { MemoryLimiter } from '../../src/infra/limits/memory.js';
import { type LimitRequest, quotaBucket } from '../../src/infra/limits/port.js';
import { RedisLimiter } from '../../src/infra/limits/redis.js';
import { INVALIDATION_TOPIC } from '../../src/projections/runner.js';
import { eventually, until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { ownerOn } from '../support/planOwner.js';
import { quotaCalls, unprojected } from '../support/quotaCalls.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * A token's monthly count is the month's charged calls whatever its limit: setting, raising,
 * lowering or removing `monthly_limit` in the middle of a month, or a plan change that turns a
 * token's own limit off and on, changes the ceiling, never the count. The calls just before a
 * change are held out of the usage totals (the ingester stopped): handed over, not projected,
 * as the last few hundred ms of calls are at any time.
 */

/** Small quotas, a rate no test reaches. Free has no custom limits: a token's own limit is off there. */
const FREE = 10;
const DEVELOPER = 20;
const PROFESSIONAL = 40;

const dir = mkdtempSync(join(tmpdir(), 'gw-limits-midmonth-'));
const plansFile = join(dir, 'plans.json');
writeFileSync(
  plansFile,
  JSON.stringify({
    free: { rps: 100, monthly_requests: FREE },
    developer: { rps: 100, monthly_requests: DEVELOPER },
    professional: { rps: 100, monthly_requests: PROFESSIONAL },
  }),
);

let evm: FakeUpstream;
let redis: TestRedisServer;

beforeAll(async () => {
  [evm, redis] = await Promise.all([startEvmFake(), startTestRedisServer()]);
});
afterAll(async () => {
  await evm?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe.each(['embedded', 'redis'] as const)('on the %s limiter', (backend) => {
  let t: TestApp;
  beforeAll(async () => {
    const env: Record<string, string> = { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plansFile };
    if (backend === 'redis') env.REDIS_URL = redis.url;
    t = await startTestApp({ env });
  });
  afterAll(async () => {
    await t?.close();
  });

  /** Runs `change` and waits until the gateway heard `topic` invalidated (the change feed follows the API's answer). */
  async function heard(
    topic: string | ((res: LightMyRequestResponse) => string),
    change: () => Promise<LightMyRequestResponse>,
  ): Promise<LightMyRequestResponse> {
    const topics: string[] = [];
    const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
    try {
      const res = await change();
      expect(res.statusCode, res.body).toBeLessThan(300);
      const awaited = typeof topic === 'string' ? topic : topic(res);
      await until(() => topics.includes(awaited));
      return res;
    } finally {
      await unsubscribe();
    }
  }

  /** A new owner on `plan` with one token (`fields` its own limits), known to the gateway. */
  async function tokenOn(plan: string, fields: Record<string, unknown> = {}) {
    const o = await ownerOn(t, plan);
    const created = await heard(
      (res) => `token:${res.json().id}`,
      () => t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'midmonth', ...fields } }),
    );
    const { id: tokenId, token } = created.json() as { id: string; token: string };
    const setLimit = (monthlyLimit: number | null) =>
      heard(`token:${tokenId}`, () =>
        t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${tokenId}`, headers: o.auth, payload: { monthly_limit: monthlyLimit } }),
      );
    const setPlan = (next: string) =>
      heard(`account:${o.accountId}`, () =>
        t.app.inject({
          method: 'PUT',
          url: `/api/v1/admin/accounts/${o.accountId}/plan`,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
          payload: { plan: next },
        }),
      );
    /** The token's month as the usage totals have it (its `current_month_usage`). */
    const projected = async () =>
      (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${tokenId}`, headers: o.auth })).json().current_month_usage as number;
    return { o, token, tokenId, setLimit, setPlan, projected };
  }

  it('a limit set mid-month counts the calls before it, the unprojected ones too; raising and lowering it keep the count', async () => {
    const tk = await tokenOn('developer');
    expect((await quotaCalls(t, tk.token, 4)).map(([status]) => status)).toEqual([200, 200, 200, 200]);
    expect(await eventually(tk.projected, (n) => n === 4)).toBe(4);
    await unprojected(t, async () => {
      expect((await quotaCalls(t, tk.token, 3)).map(([status]) => status)).toEqual([200, 200, 200]);
      expect(await tk.projected()).toBe(4);
      // 7 used: a limit of 8 leaves one.
      await tk.setLimit(8);
      expect(await quotaCalls(t, tk.token, 2)).toEqual([
        [200, '0'],
        [429, '0'],
      ]);
      await tk.setLimit(10);
      expect(await quotaCalls(t, tk.token, 3)).toEqual([
        [200, '1'],
        [200, '0'],
        [429, '0'],
      ]);
      await tk.setLimit(6);
      expect(await quotaCalls(t, tk.token, 1)).toEqual([[429, '0']]);
    });
    // The totals agree with what the limiter charged: 10.
    expect(await eventually(tk.projected, (n) => n === 10)).toBe(10);
  });

  it('a limit set below the month’s calls so far refuses at once, however recent those calls', async () => {
    const tk = await tokenOn('developer');
    await unprojected(t, async () => {
      expect((await quotaCalls(t, tk.token, 7)).every(([status]) => status === 200)).toBe(true);
      expect(await tk.projected()).toBe(0);
      await tk.setLimit(5);
      expect(await quotaCalls(t, tk.token, 1)).toEqual([[429, '0']]);
    });
  });

  it('a plan without custom limits in between: the token’s own limit, back on, counts the calls made meanwhile', async () => {
    const tk = await tokenOn('developer', { monthly_limit: 5 });
    expect(await quotaCalls(t, tk.token, 2)).toEqual([
      [200, '4'],
      [200, '3'],
    ]);
    await unprojected(t, async () => {
      // On Free the token counts against the account's 10, its own limit off, and the account's
      // count takes in the token's month (limits-plan-change-embedded and -redis test it); here
      // the token's own month is followed.
      await tk.setPlan('free');
      expect((await quotaCalls(t, tk.token, 2)).map(([status]) => status)).toEqual([200, 200]);
      // Back on Developer: its own 5, of which 4 are used.
      await tk.setPlan('developer');
      expect(await quotaCalls(t, tk.token, 2)).toEqual([
        [200, '0'],
        [429, '0'],
      ]);
    });
  });

  it('the account’s month is kept across an upgrade and a downgrade, the unprojected calls too', async () => {
    const tk = await tokenOn('developer');
    expect((await quotaCalls(t, tk.token, 4)).every(([status]) => status === 200)).toBe(true);
    await unprojected(t, async () => {
      expect((await quotaCalls(t, tk.token, 3)).every(([status]) => status === 200)).toBe(true);
      await tk.setPlan('professional');
      expect(await quotaCalls(t, tk.token, 1)).toEqual([[200, String(PROFESSIONAL - 8)]]);
      await tk.setPlan('developer');
      expect(await quotaCalls(t, tk.token, 1)).toEqual([[200, String(DEVELOPER - 9)]]);
    });
  });
});

describe('the limiter counts a token’s own month under its account’s bucket', () => {
  const NOW = Date.UTC(2026, 10, 16, 12);
  const request = (tokenId: string, key: string, limit: number | null, nowMs: number, cost = 1): LimitRequest => ({
    tokenId,
    rps: 50,
    monthly: { key, limit },
    cost,
    nowMs,
  });

  it('on Redis, through leases: what a lease did not use goes back to the token’s month too', async () => {
    const clock = { now: NOW };
    const limiter = new LeasedLimiter(new RedisLimiter(redis.url), () => clock.now);
    const direct = new RedisLimiter(redis.url);
    try {
      await Promise.all([limiter.whenReady(), direct.whenReady()]);
      const tokenId = randomUUID();
      const account = quotaBucket.account(randomUUID());
      const own = quotaBucket.token(tokenId);
      // 20 calls in one second, one in the next: that one leases ~19 more it never uses.
      for (let i = 0; i < 20; i++) expect((await limiter.take(request(tokenId, account, 100, NOW + i))).granted).toBe(1);
      expect((await limiter.take(request(tokenId, account, 100, NOW + 1000))).granted).toBe(1);
      expect(await direct.monthlyUsed(own, NOW)).toBeGreaterThan(21);
      expect(await limiter.monthlyUsed(own, NOW)).toBe(21);
      clock.now = NOW + 3000;
      limiter.releaseStale();
      expect(
        await eventually(
          () => direct.monthlyUsed(own, NOW),
          (n) => n === 21,
        ),
      ).toBe(21);
      expect(await direct.monthlyUsed(account, NOW)).toBe(21);
      // Given its own limit of 25: 4 left.
      const decision = await limiter.take(request(tokenId, own, 25, NOW + 3000, 6));
      expect(decision).toMatchObject({ granted: 4, refusedBy: 'monthly', monthly: { limit: 25, remaining: 0 } });
    } finally {
      await Promise.all([limiter.close(), direct.close()]);
    }
  });

  it('in process: the token’s month is read once, at its first call, and counted from then on', async () => {
    const reads: string[] = [];
    const limiter = new MemoryLimiter(async (bucket) => {
      reads.push(bucket);
      return bucket.startsWith('token:') ? 3 : 10;
    });
    await limiter.take(request('t', 'account:a', null, NOW, 2));
    expect(reads.sort()).toEqual(['account:a', 'token:t']);
    expect(await limiter.monthlyUsed('token:t', NOW)).toBe(5);
    expect(await limiter.monthlyUsed('account:a', NOW)).toBe(12);
    // Its own limit of 6 set: decided at once, from the count, 1 left.
    const decision = limiter.take(request('t', 'token:t', 6, NOW, 2));
    expect(decision).not.toBeInstanceOf(Promise);
    expect(await decision).toMatchObject({ granted: 1, monthly: { remaining: 0 } });
    expect(reads).toHaveLength(2);
  });
});
