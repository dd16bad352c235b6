import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { LimitRequest } from '../../src/infra/limits/port.js';
import { RedisLimiter } from '../../src/infra/limits/redis.js';
import { ResilientLimiter } from '../../src/infra/limits/resilient.js';
import { eventually } from '../support/eventually.js';
import { expectRateHeldAcrossTwoProcesses } from '../support/hammer.js';
import { freePort, startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { blockFor } from '../support/stall.js';

async function until(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('Redis limiter across processes', () => {
  it('two processes hammering one token never get more than rps granted within any second', async () => {
    await expectRateHeldAcrossTwoProcesses(inject('redisUrl'));
  }, 20_000);
});

describe('ResilientLimiter', () => {
  const request = (overrides: Partial<LimitRequest> = {}): LimitRequest => {
    const id = randomUUID();
    return { tokenId: `tok${id}`, rps: 3, monthly: { key: `account:${id}`, limit: 100 }, cost: 1, nowMs: Date.now(), ...overrides };
  };

  it('answers from memory at once when Redis cannot be reached', async () => {
    // A command timeout far above the bound: the answer must not wait for it.
    const limiter = new ResilientLimiter(new RedisLimiter(`redis://127.0.0.1:${await freePort()}`, { commandTimeoutMs: 2_000 }));
    try {
      const req = request({ cost: 5 });
      const started = performance.now();
      const decision = await limiter.take(req);
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(decision).toMatchObject({ granted: 3, refusedBy: 'rate' });
      expect(limiter.backend).toBe('fallback');
      expect(limiter.fallbackCount).toBe(1);
      expect(await limiter.monthlyUsed(req.monthly.key, req.nowMs)).toBe(3);
    } finally {
      await limiter.close();
    }
  });

  it('fail-closed refuses every call while Redis cannot be reached', async () => {
    const limiter = new ResilientLimiter(new RedisLimiter(`redis://127.0.0.1:${await freePort()}`), { failClosed: true });
    try {
      const decision = await limiter.take(request({ cost: 2 }));
      // Not 'rate': the caller exceeded nothing, the gateway answers 503 (test/e2e/limits-fail-closed.test.ts).
      expect(decision).toMatchObject({ granted: 0, refusedBy: 'unavailable', retryAfterSeconds: 1 });
      expect(decision.rate.remaining).toBe(0);
    } finally {
      await limiter.close();
    }
  });

  it("takes Redis's reply that arrived during a stall of this process as the answer, not as a timeout", async () => {
    // Fail-closed: a reply called a timeout would refuse the call (and the next 500 ms of calls).
    const limiter = new ResilientLimiter(new RedisLimiter(inject('redisUrl'), { commandTimeoutMs: 50 }), { failClosed: true });
    try {
      await limiter.whenReady();
      const decision = limiter.take(request({ rps: 100, cost: 1 }));
      // The limiter sends its pipeline from a setImmediate: this one runs right after it, so the
      // process stalls (a long collection, a busy turn) while Redis's reply comes in, and the next
      // turn of the event loop starts with its timers, as after any stall.
      await new Promise((resolve) => setImmediate(() => resolve(blockFor(300))));
      expect(await decision).toMatchObject({ granted: 1, refusedBy: null });
      expect(limiter.fallbackCount).toBe(0);
      expect(limiter.backend).toBe('redis');
    } finally {
      await limiter.close();
    }
  });

  describe('through an outage of its Redis', () => {
    let server: TestRedisServer;
    let limiter: ResilientLimiter;
    beforeAll(async () => {
      server = await startTestRedisServer();
      // Bounds below are wide against this timeout: a loaded CI machine stalls for 100s of ms.
      limiter = new ResilientLimiter(new RedisLimiter(server.url, { commandTimeoutMs: 1_000 }));
      await limiter.whenReady();
    });
    afterAll(async () => {
      await limiter.close();
      await server.stop();
    });

    it('falls back to memory, keeps the month counted so far, and returns to Redis', async () => {
      const req = request({ rps: 100, cost: 3, monthly: { key: `account:${randomUUID()}`, limit: 5 } });
      expect(await limiter.take(req)).toMatchObject({ granted: 3 });
      expect(limiter.fallbackCount).toBe(0);

      await server.stop();
      await until(() => limiter.backend === 'fallback');
      const started = performance.now();
      const during = await limiter.take(req);
      expect(performance.now() - started).toBeLessThan(500);
      expect(limiter.fallbackCount).toBe(1);
      // Seeded with the 3 Redis had counted: only 2 left this month, not 5.
      expect(during).toMatchObject({ granted: 2, refusedBy: 'monthly' });

      await server.start();
      await until(() => limiter.backend === 'redis');

      // The restarted server is empty (no persistence): counting there starts again, from the 2
      // counted in memory meanwhile (sent once Redis answered again).
      const after = await limiter.take({ ...req, monthly: { key: req.monthly.key, limit: 100 } });
      expect(after).toMatchObject({ granted: 3 });
      expect(limiter.fallbackCount).toBe(1);
      const direct = new RedisLimiter(server.url, { commandTimeoutMs: 1000 });
      await direct.whenReady();
      expect(
        await eventually(
          () => direct.monthlyUsed(req.monthly.key, req.nowMs),
          (used) => used === 5,
        ),
      ).toBe(5);
      await direct.close();
    });

    it('falls back after one timeout when Redis hangs, and returns once it answers again', async () => {
      await until(() => limiter.backend === 'redis');
      const req = request({ rps: 100, cost: 1 });
      const fallbacksBefore = limiter.fallbackCount;
      server.pause();
      try {
        const started = performance.now();
        expect((await limiter.take(req)).granted).toBe(1);
        const firstMs = performance.now() - started;
        expect(firstMs).toBeGreaterThanOrEqual(950);
        expect(firstMs).toBeLessThan(3_000);
        // The next calls do not wait for the hung server again.
        const next = performance.now();
        expect((await limiter.take(req)).granted).toBe(1);
        expect(performance.now() - next).toBeLessThan(500);
        expect(limiter.fallbackCount).toBe(fallbacksBefore + 2);
      } finally {
        server.resume();
      }
      await until(() => limiter.backend === 'redis');
      expect((await limiter.take(req)).granted).toBe(1);
      expect(limiter.fallbackCount).toBe(fallbacksBefore + 2);
    });
  });
});
