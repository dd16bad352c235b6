import { randomUUID } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import { openLimiter } from '../../src/infra/limits/index.js';
import { LeasedLimiter } from '../../src/infra/limits/leased.js';
import { MemoryLimiter } from '../../src/infra/limits/memory.js';
import { RedisLimiter } from '../../src/infra/limits/redis.js';
import { ResilientLimiter } from '../../src/infra/limits/resilient.js';
import { limiterContract } from './limits.contract.js';

/** Generous command deadline: a loaded test machine must not turn a slow reply into a failure. */
const TEST_TIMEOUT_MS = 1000;

limiterContract('in process', async () => new MemoryLimiter());

limiterContract('redis', async () => {
  const limiter = new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS });
  await limiter.whenReady();
  return limiter;
});

limiterContract('leased over redis', async () => {
  const limiter = new LeasedLimiter(new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS }));
  await limiter.whenReady();
  return limiter;
});

// What openLimiter composes for REDIS_URL.
limiterContract('resilient over leased redis', async () => {
  const limiter = new ResilientLimiter(new LeasedLimiter(new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS })));
  await limiter.whenReady();
  // Every answer must come from Redis here, not from the fallback.
  return {
    take: async (request) => {
      const decision = await limiter.take(request);
      expect(limiter.fallbackCount).toBe(0);
      return decision;
    },
    refund: (request) => limiter.refund(request),
    monthlyUsed: (key, nowMs) => limiter.monthlyUsed(key, nowMs),
    close: () => limiter.close(),
  };
});

describe('openLimiter', () => {
  it('without Redis, counts in this process (the runtime shares the one limiter among its roles)', async () => {
    const limiter = openLimiter();
    await limiter.whenReady();
    const key = `account:${randomUUID()}`;
    const nowMs = Date.now();
    await limiter.take({ tokenId: 't', rps: 10, monthly: { key, limit: 100 }, cost: 4, nowMs });
    expect(await limiter.monthlyUsed(key, nowMs)).toBe(4);
    await limiter.close();
  });

  it('with Redis, counts in Redis', async () => {
    const limiter = openLimiter({ redisUrl: inject('redisUrl') });
    await limiter.whenReady();
    const key = `account:${randomUUID()}`;
    const nowMs = Date.now();
    await limiter.take({ tokenId: 't', rps: 10, monthly: { key, limit: 100 }, cost: 2, nowMs });
    const direct = new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS });
    await direct.whenReady();
    // Redis holds the call and this process's lease; once the lease is given back, the call alone.
    expect(await direct.monthlyUsed(key, nowMs)).toBeGreaterThanOrEqual(2);
    expect(await limiter.monthlyUsed(key, nowMs)).toBe(2);
    await limiter.close();
    expect(await direct.monthlyUsed(key, nowMs)).toBe(2);
    await direct.close();
  });
});

describe('RedisLimiter batching (the calls of one event-loop turn go as one pipeline)', () => {
  it('gives each call of a turn its own decision, in order, across tokens and buckets', async () => {
    const limiter = new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS });
    await limiter.whenReady();
    const nowMs = Date.now();
    const a = `account:${randomUUID()}`;
    const b = `token:${randomUUID()}`;
    // One turn: token ta (rps 2) three times, token tb (rps 5, monthly 1) twice.
    const decisions = await Promise.all([
      limiter.take({ tokenId: 'ta', rps: 2, monthly: { key: a, limit: null }, cost: 1, nowMs }),
      limiter.take({ tokenId: 'tb', rps: 5, monthly: { key: b, limit: 1 }, cost: 1, nowMs }),
      limiter.take({ tokenId: 'ta', rps: 2, monthly: { key: a, limit: null }, cost: 1, nowMs }),
      limiter.take({ tokenId: 'tb', rps: 5, monthly: { key: b, limit: 1 }, cost: 1, nowMs }),
      limiter.take({ tokenId: 'ta', rps: 2, monthly: { key: a, limit: null }, cost: 1, nowMs }),
    ]);
    expect(decisions.map((d) => d.granted)).toEqual([1, 1, 1, 0, 0]);
    expect(decisions[3]?.refusedBy).toBe('monthly');
    expect(decisions[4]?.refusedBy).toBe('rate');
    expect(await limiter.monthlyUsed(a, nowMs)).toBe(2);
    expect(await limiter.monthlyUsed(b, nowMs)).toBe(1);
    await limiter.close();
  });

  it('rejects every call of the turn when Redis cannot be reached (the resilient wrapper then answers)', async () => {
    const limiter = new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS });
    await limiter.whenReady();
    await limiter.close();
    const request = { tokenId: 't', rps: 5, monthly: { key: `account:${randomUUID()}`, limit: null }, cost: 1, nowMs: Date.now() };
    const results = await Promise.allSettled([limiter.take(request), limiter.take(request)]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
  });
});
