import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AdmissionRequest } from '../../src/gateway/admission.js';
import { TokenGatekeeper } from '../../src/gateway/gatekeeper.js';
import { TokenCache } from '../../src/gateway/tokenCache.js';
import { openChangeFeed } from '../../src/infra/changefeed/index.js';
import { openLimiter } from '../../src/infra/limits/index.js';
import { ownMonthlyLimitBefore, PlanChangeCounts, planChangeMarkerKey } from '../../src/infra/limits/planChange.js';
import { quotaBucket } from '../../src/infra/limits/port.js';
import { inAccountKey, monthKey, RedisLimiter } from '../../src/infra/limits/redis.js';
import { keySlot } from '../../src/infra/redis/client.js';
import { Queries } from '../../src/projections/queries.js';
import { eventually, until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import {
  DEVELOPER,
  downToFreeAndBack,
  FREE,
  OWN,
  ownLimitRemovedMidMonth,
  ownLimitSetMidMonth,
  planChangeAccount,
  type Settle,
  upFromFree,
  writePlanChangePlans,
} from '../support/planChangeAccount.js';
import { type QuotaAnswer, quotaCalls } from '../support/quotaCalls.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/**
 * On Redis, the account's monthly bucket follows a plan change that turns its tokens' own
 * limits off (Free: every call of the month counts against the account) or on (a token with its
 * own limit counts apart again, for its whole month), as the account view
 * (`Queries.accountQuotaUsage`) does; once per plan change, however often it is seen.
 */

const dir = mkdtempSync(join(tmpdir(), 'gw-limits-plan-change-'));
const plansFile = writePlanChangePlans(dir);

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

/** Waits until Redis holds exactly the calls made: the leases' unused calls are back. */
const settled: Settle = async (a, ownCalls, accountCalls, token = a.own) => {
  const now = Date.now();
  const read = async () => [await counts.monthlyUsed(quotaBucket.token(token.id), now), await counts.monthlyUsed(quotaBucket.account(a.o.accountId), now)];
  expect(await eventually(read, ([own, account]) => own === ownCalls && account === accountCalls)).toEqual([ownCalls, accountCalls]);
};

describe('a plan change on Redis moves the account’s monthly count as the account view does', () => {
  it('down to Free, the calls of a token with its own limit count against the account; back up, they leave it again', () => downToFreeAndBack(t, settled));

  it('up from Free, the calls a token with its own limit made there leave the account’s count', () => upFromFree(t, settled));

  it('a token given its own limit mid-month: its earlier calls leave the account’s count, and Free counts them once', () => ownLimitSetMidMonth(t, settled));

  it('a token’s own limit removed mid-month: its calls so far join the account’s count', () => ownLimitRemovedMidMonth(t, settled));

  it('a plan change seen again (a replay, a second projector) moves nothing more; two gateways count alike', async () => {
    const a = await planChangeAccount(t);
    // A second gateway instance: its own token cache, change-feed connection and limiter, the same Redis.
    const feed = openChangeFeed({ redisUrl: redis.url });
    const limiter = openLimiter({ redisUrl: redis.url });
    const cache = new TokenCache(new Queries(t.runtime.readModels));
    const replay = new PlanChangeCounts(redis.url, {
      plans: t.runtime.config.plans,
      ownLimitTokens: (accountId) => t.runtime.queries.tokenIdsWithOwnMonthlyLimit(accountId),
      tokenCounting: async () => null,
      ownLimitBefore: async () => false,
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
      await settled(a, 5, 0);
      expect(await admit(a.own.token)).toEqual([200, String(OWN - 6)]);
      await settled(a, 6, 0);

      await a.setPlan('free');
      // The second gateway heard of it too (its one cached token dropped).
      await until(() => cache.size === 0);
      await settled(a, 6, 6);
      const events = await t.runtime.store.readStream(`account-${a.o.accountId}`);
      const change = events.filter((e) => e.type === 'AccountPlanChanged').at(-1);
      if (!change) throw new Error('no plan change on the account stream');
      expect(await replay.move(change)).toEqual({ kind: 'skipped', why: 'moved already' });
      await replay.committed([change, change]);
      await settled(a, 6, 6);
      expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(FREE - 7)]]);
      expect(await admit(a.shared.token)).toEqual([200, String(FREE - 8)]);
      // The second gateway is a bare gatekeeper: its 2 admissions are counted, not metered.
      expect(await a.viewRemaining(6)).toBe(FREE - 6);
    } finally {
      await Promise.all([cache.close(), replay.close()]);
      await Promise.all([feed.close(), limiter.close()]);
    }
  });

  it('a limit change seen again moves nothing more', async () => {
    const a = await planChangeAccount(t);
    const { queries, config } = t.runtime;
    const replay = new PlanChangeCounts(redis.url, {
      plans: config.plans,
      ownLimitTokens: (accountId) => queries.tokenIdsWithOwnMonthlyLimit(accountId),
      tokenCounting: async (tokenId) => {
        const token = await queries.tokenDoc(tokenId);
        return token === null ? null : { accountId: token.accountId, apart: token.monthlyLimit !== null };
      },
      ownLimitBefore: (change) => ownMonthlyLimitBefore(t.runtime.store, change),
    });
    try {
      await replay.whenReady();
      expect((await quotaCalls(t, a.own.token, 3)).map(([status]) => status)).toEqual([200, 200, 200]);
      await settled(a, 3, 0);
      await a.setLimit(a.own, null);
      await settled(a, 3, 3);
      const change = (await t.runtime.store.readStream(`token-${a.own.id}`)).filter((e) => e.type === 'ApiTokenLimitsChanged').at(-1);
      if (!change) throw new Error('no limit change on the token stream');
      expect(await replay.move(change)).toEqual({ kind: 'skipped', why: 'moved already' });
      await settled(a, 3, 3);
    } finally {
      await replay.close();
    }
  });

  it('a rate limit edit moves nothing, even where no part of the token’s month is kept (the month an older version counted)', async () => {
    const a = await planChangeAccount(t);
    expect((await quotaCalls(t, a.shared.token, 3)).map(([status]) => status)).toEqual([200, 200, 200]);
    await settled(a, 3, 3, a.shared);
    // As a gateway of an older version left it: the account's month holds the calls, no part is kept.
    const raw = new Redis(redis.url);
    try {
      await raw.del(inAccountKey(a.shared.id, Date.now()));
    } finally {
      raw.disconnect();
    }
    await a.setLimit(a.shared, null, { rate_limit: 7 });
    expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 4)]]);
    await settled(a, 4, 4, a.shared);
  });

  it('a plan change’s marker shares its account month’s slot, so one script moves the count and sets it on a Redis Cluster', () => {
    const now = Date.now();
    expect(keySlot(planChangeMarkerKey('acc-1', now, 'event-1'))).toBe(keySlot(monthKey(quotaBucket.account('acc-1'), now)));
    // A token's part in its account's month is counted and set with the token's month, by one script.
    expect(keySlot(inAccountKey('tok-1', now))).toBe(keySlot(monthKey(quotaBucket.token('tok-1'), now)));
  });
});
