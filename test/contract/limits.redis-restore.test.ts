import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeasedLimiter } from '../../src/infra/limits/leased.js';
import { type LimitRequest, quotaBucket } from '../../src/infra/limits/port.js';
import { inAccountKey, monthKey, RedisLimiter } from '../../src/infra/limits/redis.js';
import { ResilientLimiter } from '../../src/infra/limits/resilient.js';
import { eventually, until } from '../support/eventually.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';

/**
 * A month counter made in the middle of a month (Redis restarted empty, a failover to a replica
 * behind) starts from what the usage totals say the bucket used before, not from zero: the
 * limiter reads them (`restoreFrom`) when a take or a count makes the counter. Here the totals
 * are a map the test sets; test/e2e/quota-redis-restart.test.ts runs the whole service.
 */
describe('a month counter Redis lost', () => {
  let server: TestRedisServer;
  let direct: Redis;
  beforeAll(async () => {
    server = await startTestRedisServer();
    direct = new Redis(server.url);
  });
  afterAll(async () => {
    direct.disconnect();
    await server.stop();
  });

  /** A limiter whose usage totals are `totals` (by bucket), each read answered after `readMs`; the buckets read, and the lines said. */
  function limiterOn(totals: Record<string, number>, readMs = 0) {
    const reads: string[] = [];
    const logged: string[] = [];
    const limiter = new RedisLimiter(server.url, {
      restoreFrom: async (bucket) => {
        reads.push(bucket);
        await new Promise((resolve) => setTimeout(resolve, readMs));
        return totals[bucket] ?? 0;
      },
      log: (line) => logged.push(line),
    });
    return { limiter, reads, logged };
  }

  const counter = async (key: string): Promise<number | null> => {
    const value = await direct.get(key);
    return value === null ? null : Number(value);
  };

  const tokenRequest = (limit: number, cost: number): LimitRequest => {
    const tokenId = `tok${randomUUID()}`;
    return { tokenId, rps: 1_000, monthly: { key: quotaBucket.token(tokenId), limit }, cost, nowMs: Date.now() };
  };

  it('starts from the usage totals, and decides the take that made it with them', async () => {
    const request = tokenRequest(10, 5);
    const { limiter, reads } = limiterOn({ [request.monthly.key]: 8 });
    try {
      await limiter.whenReady();
      const decision = await limiter.take(request);
      // Before: 5 granted, the month counted from 0 again.
      expect([decision.granted, decision.refusedBy, decision.monthly.remaining]).toEqual([2, 'monthly', 0]);
      expect(reads).toEqual([request.monthly.key]);
      // 8 before, 5 granted by Redis, 3 of them given back.
      expect(
        await eventually(
          () => counter(monthKey(request.monthly.key, request.nowMs)),
          (n) => n === 10,
        ),
      ).toBe(10);
      expect((await limiter.take({ ...request, cost: 1 })).granted).toBe(0);
      // Read once: the counter is there now.
      expect(reads).toHaveLength(1);
    } finally {
      await limiter.close();
    }
  });

  it("restores an account's month, and the token's own month and its part in the account's", async () => {
    const accountId = randomUUID();
    const tokenId = `tok${randomUUID()}`;
    const account = quotaBucket.account(accountId);
    const own = quotaBucket.token(tokenId);
    const { limiter } = limiterOn({ [account]: 7, [own]: 4 });
    const nowMs = Date.now();
    try {
      await limiter.whenReady();
      const decision = await limiter.take({ tokenId, rps: 1_000, monthly: { key: account, limit: 100 }, cost: 1, nowMs });
      expect([decision.granted, decision.monthly.remaining]).toEqual([1, 92]);
      const counters = () => Promise.all([monthKey(account, nowMs), monthKey(own, nowMs), inAccountKey(tokenId, nowMs)].map(counter));
      expect(await eventually(counters, (c) => c.join() === '8,5,5'), 'account month, token month, token part in the account').toEqual([8, 5, 5]);
    } finally {
      await limiter.close();
    }
  });

  it('leaves a counter that is there alone (a gateway upgraded mid-month)', async () => {
    const request = tokenRequest(10, 1);
    await direct.set(monthKey(request.monthly.key, request.nowMs), '3');
    const { limiter, reads } = limiterOn({ [request.monthly.key]: 8 });
    try {
      await limiter.whenReady();
      expect((await limiter.take(request)).monthly.remaining).toBe(6);
      expect(reads).toEqual([]);
      expect(await counter(monthKey(request.monthly.key, request.nowMs))).toBe(4);
    } finally {
      await limiter.close();
    }
  });

  it('counts from 0 when the totals answer late, and says so (calls counted meanwhile could be in a late answer too)', async () => {
    const request = tokenRequest(10, 2);
    const { limiter, logged } = limiterOn({ [request.monthly.key]: 8 }, 1_300);
    try {
      await limiter.whenReady();
      expect((await limiter.take(request)).granted).toBe(2);
      expect(logged).toEqual([
        `limits: the month counter ${monthKey(request.monthly.key, request.nowMs)} is new and its month's earlier calls could not be read (no answer within 1000 ms): it counts from 0`,
      ]);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(await counter(monthKey(request.monthly.key, request.nowMs))).toBe(2);
    } finally {
      await limiter.close();
    }
  });

  it("holds this process's other takes of the bucket until the restore is in the counter", async () => {
    const accountId = randomUUID();
    const account = quotaBucket.account(accountId);
    const { limiter } = limiterOn({ [account]: 10 }, 150);
    const nowMs = Date.now();
    try {
      await limiter.whenReady();
      // 20 tokens of an exhausted account at once: the first take makes the counter, the others are sent with it or after it.
      const decisions = await Promise.all(
        Array.from({ length: 20 }, () => limiter.take({ tokenId: `tok${randomUUID()}`, rps: 1_000, monthly: { key: account, limit: 10 }, cost: 1, nowMs })),
      );
      // Before: 9 granted (those sent during the read saw a counter without the month's 10).
      expect(decisions.filter((d) => d.granted > 0)).toHaveLength(0);
      expect(
        await eventually(
          () => counter(monthKey(account, nowMs)),
          (n) => n === 10,
        ),
      ).toBe(10);
    } finally {
      await limiter.close();
    }
  });

  it("reads nothing when a month begins (the bucket's previous month has its counter)", async () => {
    const request = tokenRequest(10, 1);
    const lastMonth = Date.UTC(new Date(request.nowMs).getUTCFullYear(), new Date(request.nowMs).getUTCMonth() - 1, 15);
    await direct.set(monthKey(request.monthly.key, lastMonth), '7');
    const { limiter, reads } = limiterOn({ [request.monthly.key]: 8 });
    try {
      await limiter.whenReady();
      expect((await limiter.take(request)).monthly.remaining).toBe(9);
      expect(reads).toEqual([]);
    } finally {
      await limiter.close();
    }
  });

  it('waits at its stop for a restore under way', async () => {
    const accountId = randomUUID();
    const tokenId = `tok${randomUUID()}`;
    const account = quotaBucket.account(accountId);
    const own = quotaBucket.token(tokenId);
    const nowMs = Date.now();
    await direct.set(monthKey(account, nowMs), '3');
    const { limiter } = limiterOn({ [own]: 4 }, 200);
    await limiter.whenReady();
    expect((await limiter.take({ tokenId, rps: 1_000, monthly: { key: account, limit: 100 }, cost: 1, nowMs })).granted).toBe(1);
    // The token's own month is made by the count after the take, its restore reading the totals: the stop comes now.
    await new Promise((resolve) => setTimeout(resolve, 20));
    await limiter.close();
    // Before: 1, the restore dropped without a word.
    expect(await counter(monthKey(own, nowMs))).toBe(5);
  });

  it('restores a counter Redis lost while the limiter runs (restarted empty)', async () => {
    const request = tokenRequest(10, 4);
    const totals: Record<string, number> = {};
    const { limiter } = limiterOn(totals);
    try {
      await limiter.whenReady();
      expect((await limiter.take(request)).granted).toBe(4);
      // The usage totals have them by now; then Redis restarts with nothing.
      totals[request.monthly.key] = 4;
      await server.stop();
      await server.start();
      await limiter.whenReady(10_000);
      const decision = await limiter.take({ ...request, cost: 10 });
      // Before: 10 granted, a fresh month.
      expect([decision.granted, decision.monthly.remaining]).toEqual([6, 0]);
    } finally {
      await limiter.close();
    }
  });

  it('counts a bucket this process has no Redis count of from the usage totals while Redis is away (fail-open)', async () => {
    const request = tokenRequest(10, 5);
    const totals: Record<string, number> = { [request.monthly.key]: 8 };
    const limiter = new ResilientLimiter(new LeasedLimiter(new RedisLimiter(server.url, { commandTimeoutMs: 200 })), {
      usedBefore: async (bucket) => totals[bucket] ?? 0,
    });
    try {
      await limiter.whenReady();
      await server.stop();
      await until(() => limiter.backend === 'fallback');
      const decision = await limiter.take(request);
      // Before: 5 granted, the month counted from 0 in process.
      expect([decision.granted, decision.refusedBy]).toEqual([2, 'monthly']);
    } finally {
      await server.start();
      await limiter.close();
    }
  });
});
