import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { LeasedLimiter, type LeaseSource } from '../../src/infra/limits/leased.js';
import { MemoryLimiter } from '../../src/infra/limits/memory.js';
import type { LimitDecision, LimitRequest, RefundRequest } from '../../src/infra/limits/port.js';
import { RedisLimiter } from '../../src/infra/limits/redis.js';

/** The Redis limiter, counting what reaches it. */
class CountingSource implements LeaseSource {
  takes = 0;
  releases = 0;
  constructor(private readonly redis: RedisLimiter) {}
  get ready(): boolean {
    return this.redis.ready;
  }
  whenReady(timeoutMs?: number): Promise<void> {
    return this.redis.whenReady(timeoutMs);
  }
  /** Set: every take fails, as when Redis goes away. */
  failTakes = false;
  take(request: LimitRequest): Promise<LimitDecision> {
    this.takes += 1;
    if (this.failTakes) return Promise.reject(new Error('Redis is away'));
    return this.redis.take(request);
  }
  release(key: string, tokenId: string, nowMs: number, units: number): Promise<void> {
    this.releases += 1;
    return this.redis.release(key, tokenId, nowMs, units);
  }
  refund(request: RefundRequest): Promise<void> {
    return this.redis.refund(request);
  }
  monthlyUsed(key: string, nowMs: number): Promise<number> {
    return this.redis.monthlyUsed(key, nowMs);
  }
  close(): Promise<void> {
    return this.redis.close();
  }
}

/** A seeded generator, so a failing sequence can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('LeasedLimiter over Redis', () => {
  let direct: RedisLimiter;
  beforeAll(async () => {
    direct = new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: 1000 });
    await direct.whenReady();
  });
  afterAll(() => direct.close());

  const open = async (now: () => number = Date.now) => {
    const source = new CountingSource(new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: 1000 }));
    const limiter = new LeasedLimiter(source, now);
    await limiter.whenReady();
    return { source, limiter };
  };

  it('decides every call of one process exactly as a single counter would, headers included', async () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const next = random(seed);
      const { limiter } = await open(() => 0);
      const reference = new MemoryLimiter();
      const id = randomUUID();
      const rps = 2 + Math.floor(next() * 20);
      const limit = next() < 0.3 ? null : 50 + Math.floor(next() * 200);
      let nowMs = Date.UTC(2025, 4, 31, 23, 59, 50);
      /** Granted calls not yet answered: some fail, and their units go back (a refund), maybe a second or a month later. */
      const granted: RefundRequest[] = [];
      for (let i = 0; i < 400; i++) {
        // Bursts within a second, gaps of a few seconds, a month boundary on the way; batches of 0 (all invalid) to 4 calls.
        nowMs += next() < 0.85 ? Math.floor(next() * 120) : Math.floor(next() * 3000);
        const request: LimitRequest = { tokenId: `tok${id}`, rps, monthly: { key: `account:${id}`, limit }, cost: Math.floor(next() * 5), nowMs };
        const got = await limiter.take(request);
        expect(got, `seed ${seed}, call ${i}`).toEqual(await reference.take(request));
        if (got.granted > 0) granted.push({ tokenId: request.tokenId, bucket: request.monthly.key, units: got.granted, nowMs });
        if (granted.length > 0 && next() < 0.3) {
          const failed = granted.splice(Math.floor(next() * granted.length), 1)[0] as RefundRequest;
          const refund = { ...failed, units: 1 + Math.floor(next() * failed.units) };
          await limiter.refund(refund);
          await reference.refund(refund);
        }
      }
      await limiter.close();
    }
  });

  it('asks Redis a few times in a busy second without history, then about once per second', async () => {
    const { source, limiter } = await open();
    const id = randomUUID();
    const start = (Math.floor(Date.now() / 1000) + 1) * 1000;
    const request = (nowMs: number): LimitRequest => ({ tokenId: `tok${id}`, rps: 1000, monthly: { key: `account:${id}`, limit: null }, cost: 1, nowMs });
    for (let i = 0; i < 200; i++) expect((await limiter.take(request(start + i))).granted).toBe(1);
    // No history yet: the lease doubles (1, 1 + 1, 1 + 3, 1 + 7, …).
    expect(source.takes).toBeLessThanOrEqual(9);
    const before = source.takes;
    for (let i = 0; i < 200; i++) expect((await limiter.take(request(start + 1000 + i))).granted).toBe(1);
    expect(source.takes - before).toBe(1);
    await limiter.close();
  });

  it('answers at once the calls its lease covers: only a call that reaches Redis waits', async () => {
    const { source, limiter } = await open();
    const id = randomUUID();
    const start = (Math.floor(Date.now() / 1000) + 1) * 1000;
    const request = (nowMs: number): LimitRequest => ({ tokenId: `tok${id}`, rps: 1000, monthly: { key: `account:${id}`, limit: null }, cost: 1, nowMs });
    for (let i = 0; i < 200; i++) await limiter.take(request(start + i));
    const before = source.takes;
    let waited = 0;
    for (let i = 0; i < 200; i++) {
      const decision = limiter.take(request(start + 1000 + i));
      if (decision instanceof Promise) waited += 1;
      expect((await decision).granted).toBe(1);
    }
    expect(source.takes - before).toBe(1);
    expect(waited).toBe(1);
    await limiter.close();
  });

  it("asks Redis once for a token's lone call in a second, and has nothing to give back", async () => {
    const clock = { now: Date.UTC(2025, 4, 10, 11, 0, 0) };
    const { source, limiter } = await open(() => clock.now);
    const id = randomUUID();
    const key = `account:${id}`;
    // Called once a second, as most of a gateway's tokens are: each call is its own request to Redis.
    for (let second = 0; second < 3; second++) {
      const decision = await limiter.take({ tokenId: `tok${id}`, rps: 50, monthly: { key, limit: 1000 }, cost: 1, nowMs: clock.now + second * 1000 });
      expect(decision).toMatchObject({ granted: 1, monthly: { remaining: 1000 - second - 1 } });
    }
    clock.now += 5000;
    limiter.releaseStale();
    expect(source.takes).toBe(3);
    expect(source.releases).toBe(0);
    expect(await direct.monthlyUsed(key, clock.now)).toBe(3);
    await limiter.close();
  });

  /** A new token with 40 calls in the second at `start` and one in the next, which leases ~39 more that are never used. */
  const withLease = async (start: number) => {
    const clock = { now: start };
    const { source, limiter } = await open(() => clock.now);
    const id = randomUUID();
    const key = `account:${id}`;
    const request = (nowMs: number, cost = 1): LimitRequest => ({ tokenId: `tok${id}`, rps: 50, monthly: { key, limit: 1000 }, cost, nowMs });
    for (let i = 0; i < 40; i++) await limiter.take(request(start + i));
    const one = await limiter.take(request(start + 1000));
    return { clock, source, limiter, key, request, one };
  };

  it('gives back what a lease did not use once its second is over: refused and unmade calls use no quota', async () => {
    const { clock, source, limiter, key, one } = await withLease(Date.UTC(2025, 4, 10, 12, 0, 0));
    const releasedBefore = source.releases;
    expect(one).toMatchObject({ granted: 1, monthly: { remaining: 1000 - 41 } });
    expect(await direct.monthlyUsed(key, clock.now)).toBeGreaterThan(41); // Redis counts the lease...
    expect(await limiter.monthlyUsed(key, clock.now)).toBe(41); // ...this process knows what it holds.
    clock.now += 2000;
    limiter.releaseStale();
    expect(source.releases).toBe(releasedBefore + 1);
    await new Promise((r) => setTimeout(r, 50));
    expect(await direct.monthlyUsed(key, clock.now)).toBe(41);
    await limiter.close();
  });

  it('keeps the lease of a call whose request to Redis failed, and gives it back with the rest', async () => {
    const { clock, source, limiter, key, request } = await withLease(Date.UTC(2025, 4, 10, 13, 0, 0));
    source.failTakes = true;
    // More than the lease holds: the rest must come from Redis, which fails.
    await expect(limiter.take(request(clock.now + 1001, 45))).rejects.toThrow('Redis is away');
    source.failTakes = false;
    clock.now += 2000;
    limiter.releaseStale();
    await new Promise((r) => setTimeout(r, 50));
    // The 41 calls granted; the failed call used none of the lease it drew on.
    expect(await direct.monthlyUsed(key, clock.now)).toBe(41);
    await limiter.close();
  });

  it('fails the calls waiting behind a failed lease request with it, instead of each asking Redis again in turn', async () => {
    const { clock, source, limiter, request } = await withLease(Date.UTC(2025, 4, 10, 14, 0, 0));
    source.failTakes = true;
    const before = source.takes;
    // Each needs more than the lease holds: the first asks Redis (with more for the lease); the others wait for it.
    // Asking again one after another, the last would wait one deadline per call ahead of it (1.5 s seen with 500 ms).
    const calls = Array.from({ length: 6 }, (_, i) => limiter.take(request(clock.now + 1001 + i, 45)));
    const settled = await Promise.allSettled(calls);
    expect(settled.map((s) => (s.status === 'rejected' ? String(s.reason) : 'granted'))).toEqual(Array(6).fill('Error: Redis is away'));
    expect(source.takes - before).toBe(1);
    source.failTakes = false;
    // The lease is intact: a call it covers is still granted from it.
    expect(await limiter.take(request(clock.now + 1010))).toMatchObject({ granted: 1 });
    await limiter.close();
  });

  it('two processes sharing a token never admit more than its rate together', async () => {
    const [a, b] = [await open(), await open()];
    const id = randomUUID();
    const rps = 30;
    const second = Math.floor(Date.now() / 1000) + 1;
    const granted = new Map<number, number>();
    // Three seconds of demand from both, interleaved, each call at its own instant.
    for (let s = 0; s < 3; s++) {
      for (let i = 0; i < 40; i++) {
        const nowMs = (second + s) * 1000 + i * 20;
        const request: LimitRequest = { tokenId: `tok${id}`, rps, monthly: { key: `account:${id}`, limit: null }, cost: 1, nowMs };
        const [x, y] = await Promise.all([a.limiter.take(request), b.limiter.take(request)]);
        granted.set(s, (granted.get(s) ?? 0) + x.granted + y.granted);
      }
    }
    for (const total of granted.values()) expect(total).toBe(rps);
    await a.limiter.close();
    await b.limiter.close();
  });
});
