import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AdmissionRequest } from '../../src/gateway/admission.js';
import { TokenGatekeeper } from '../../src/gateway/gatekeeper.js';
import { TokenCache } from '../../src/gateway/tokenCache.js';
import { openChangeFeed } from '../../src/infra/changefeed/index.js';
import { openLimiter } from '../../src/infra/limits/index.js';
import { PlanChangeCounts, planChangeMarkerKey } from '../../src/infra/limits/planChange.js';
import { quotaBucket } from '../../src/infra/limits/port.js';
import { monthKey, RedisLimiter } from '../../src/infra/limits/redis.js';
import { keySlot } from '../../src/infra/redis/client.js';
import { Queries } from '../../src/projections/queries.js';
import { INVALIDATION_TOPIC } from '../../src/projections/runner.js';
import { eventually, until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { ownerOn } from '../support/planOwner.js';
import { type QuotaAnswer, quotaCalls } from '../support/quotaCalls.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * On Redis, the account's monthly bucket follows a plan change that turns its tokens' own
 * limits off (Free: every call of the month counts against the account) or on (a token with its
 * own limit counts apart again, for its whole month), as the account view
 * (`Queries.accountQuotaUsage`) does; once per plan change, however often it is seen.
 */

/** Small quotas, a rate no test reaches. Free has no custom limits. */
const FREE = 10;
const DEVELOPER = 20;
/** A token's own monthly limit on Developer. */
const OWN = 15;

const dir = mkdtempSync(join(tmpdir(), 'gw-limits-plan-change-'));
const plansFile = join(dir, 'plans.json');
writeFileSync(plansFile, JSON.stringify({ free: { rps: 100, monthly_requests: FREE }, developer: { rps: 100, monthly_requests: DEVELOPER } }));

let evm: FakeUpstream;
let redis: TestRedisServer;
let t: TestApp;
/** Reads Redis's counts as they are (no lease of this process's to leave out). */
let counts: RedisLimiter;

beforeAll(async () => {
  [evm, redis] = await Promise.all([startEvmFake(), startTestRedisServer()]);
  t = await startTestApp({ env: { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plansFile, REDIS_URL: redis.url } });
  counts = new RedisLimiter(redis.url);
  await counts.whenReady();
});
afterAll(async () => {
  await counts?.close();
  await t?.close();
  await evm?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** An owner on Developer with a token of its own limit (`own`) and one counted on the account (`shared`). */
async function account() {
  const o = await ownerOn(t, 'developer');
  const heard: string[] = [];
  const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => heard.push(m));
  const made = async (payload: { name: string } & Record<string, unknown>) => {
    const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload });
    expect(res.statusCode, res.body).toBe(201);
    const { id, token } = res.json() as { id: string; token: string };
    await until(() => heard.includes(`token:${id}`));
    return { id, token };
  };
  try {
    const own = await made({ name: 'own', monthly_limit: OWN });
    const shared = await made({ name: 'shared' });
    /** Moves the account to `plan`; resolves once the gateway heard of it. */
    const setPlan = async (plan: string) => {
      const heardPlan: string[] = [];
      const off = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => heardPlan.push(m));
      try {
        const res = await t.app.inject({
          method: 'PUT',
          url: `/api/v1/admin/accounts/${o.accountId}/plan`,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
          payload: { plan },
        });
        expect(res.statusCode, res.body).toBe(200);
        await until(() => heardPlan.includes(`account:${o.accountId}`));
      } finally {
        await off();
      }
    };
    /** The account view's `usage.remaining` once the usage totals hold `requests` calls. */
    const viewRemaining = async (requests: number): Promise<number> => {
      const usage = await eventually(
        async () => (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json().usage as { requests: number; remaining: number },
        (u) => u.requests === requests,
      );
      expect(usage.requests).toBe(requests);
      return usage.remaining;
    };
    /** Waits until Redis holds exactly the calls made: the leases' unused calls are back. */
    const settled = async (ownCalls: number, accountCalls: number) => {
      const now = Date.now();
      const read = async () => [await counts.monthlyUsed(quotaBucket.token(own.id), now), await counts.monthlyUsed(quotaBucket.account(o.accountId), now)];
      expect(await eventually(read, ([a, b]) => a === ownCalls && b === accountCalls)).toEqual([ownCalls, accountCalls]);
    };
    return { o, own, shared, setPlan, viewRemaining, settled };
  } finally {
    await unsubscribe();
  }
}

describe('a plan change on Redis moves the account’s monthly count as the account view does', () => {
  it('down to Free, the calls of a token with its own limit count against the account; back up, they leave it again', async () => {
    const a = await account();
    expect((await quotaCalls(t, a.own.token, 8)).map(([, left]) => left)).toEqual(['14', '13', '12', '11', '10', '9', '8', '7']);
    expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '19']]);
    await a.settled(8, 1);
    expect(await a.viewRemaining(9)).toBe(DEVELOPER - 1);

    // Free: no custom limits; the account's 10 count all 9 calls of the month.
    await a.setPlan('free');
    expect(await a.viewRemaining(9)).toBe(FREE - 9);
    expect(await quotaCalls(t, a.shared.token, 2)).toEqual([
      [200, '0'],
      [429, '0'],
    ]);
    expect(await quotaCalls(t, a.own.token, 1)).toEqual([[429, '0']]);
    expect(await a.viewRemaining(10)).toBe(0);

    // Developer again: the token counts apart for its whole month (8), the account its other 2.
    await a.setPlan('developer');
    expect(await a.viewRemaining(10)).toBe(DEVELOPER - 2);
    expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 3)]]);
    expect(await quotaCalls(t, a.own.token, 1)).toEqual([[200, String(OWN - 9)]]);
    expect(await a.viewRemaining(12)).toBe(DEVELOPER - 3);
  });

  it('up from Free, the calls a token with its own limit made there leave the account’s count', async () => {
    const a = await account();
    await a.setPlan('free');
    expect((await quotaCalls(t, a.own.token, 6)).map(([, left]) => left)).toEqual(['9', '8', '7', '6', '5', '4']);
    // Its lease's unused calls back first: within their second they are the account's too.
    await a.settled(6, 6);
    expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '3']]);
    await a.settled(6, 7);
    expect(await a.viewRemaining(7)).toBe(FREE - 7);

    await a.setPlan('developer');
    expect(await a.viewRemaining(7)).toBe(DEVELOPER - 1);
    expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 2)]]);
    expect(await quotaCalls(t, a.own.token, 1)).toEqual([[200, String(OWN - 7)]]);
  });

  it('a plan change seen again (a replay, a second projector) moves nothing more; two gateways count alike', async () => {
    const a = await account();
    // A second gateway instance: its own token cache, change-feed connection and limiter, the same Redis.
    const feed = openChangeFeed({ redisUrl: redis.url });
    const limiter = openLimiter({ redisUrl: redis.url });
    const cache = new TokenCache(new Queries(t.runtime.readModels));
    const replay = new PlanChangeCounts(redis.url, {
      plans: t.runtime.config.plans,
      ownLimitTokens: (accountId) => t.runtime.queries.tokenIdsWithOwnMonthlyLimit(accountId),
    });
    try {
      await Promise.all([feed.whenReady(), limiter.whenReady(), replay.whenReady()]);
      await cache.listen(feed);
      const second = new TokenGatekeeper(cache, limiter, t.runtime.config.plans);
      const admit = async (token: string): Promise<QuotaAnswer> => {
        const request: AdmissionRequest = { chain: 'local', token, via: 'path', cost: 1, nowMs: Date.now() };
        const admission = await second.admit(request);
        return [admission.ok ? 200 : admission.status, admission.headers['x-monthlylimit-remaining']];
      };
      expect((await quotaCalls(t, a.own.token, 5)).map(([status]) => status)).toEqual([200, 200, 200, 200, 200]);
      await a.settled(5, 0);
      expect(await admit(a.own.token)).toEqual([200, String(OWN - 6)]);
      await a.settled(6, 0);

      await a.setPlan('free');
      // The second gateway heard of it too (its one cached token dropped).
      await until(() => cache.size === 0);
      await a.settled(6, 6);
      const events = await t.runtime.store.readStream(`account-${a.o.accountId}`);
      const change = events.filter((e) => e.type === 'AccountPlanChanged').at(-1);
      if (!change) throw new Error('no plan change on the account stream');
      expect(await replay.move(change)).toEqual({ kind: 'skipped', why: 'moved already' });
      await replay.committed([change, change]);
      await a.settled(6, 6);
      expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(FREE - 7)]]);
      expect(await admit(a.shared.token)).toEqual([200, String(FREE - 8)]);
      // The second gateway is a bare gatekeeper: its 2 admissions are counted, not metered.
      expect(await a.viewRemaining(6)).toBe(FREE - 6);
    } finally {
      await Promise.all([cache.close(), replay.close()]);
      await Promise.all([feed.close(), limiter.close()]);
    }
  });

  it('a plan change’s marker shares its account month’s slot, so one script moves the count and sets it on a Redis Cluster', () => {
    const now = Date.now();
    expect(keySlot(planChangeMarkerKey('acc-1', now, 'event-1'))).toBe(keySlot(monthKey(quotaBucket.account('acc-1'), now)));
  });
});
