import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeasedLimiter } from '../../src/infra/limits/leased.js';
import type { LimitRequest } from '../../src/infra/limits/port.js';
import { RedisLimiter } from '../../src/infra/limits/redis.js';
import { ResilientLimiter } from '../../src/infra/limits/resilient.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';

/**
 * Redis slower than the limiter's deadline (a busy node, an fsync stall) still runs the take it
 * was sent, and counts what it grants in the month. The gateway has given up on it: the call was
 * decided without Redis. Those units must go back, or every late reply costs the token's monthly
 * quota calls it never made (found running two gateways on a Redis Cluster: a token with a
 * monthly limit of 30 got 29 calls, Redis counted 30).
 */
const COMMAND_TIMEOUT_MS = 200;
/** Long enough for the deadline to pass, well within ioredis's own timeout (10 × the deadline), after which no reply is read. */
const REDIS_PAUSE_MS = 2 * COMMAND_TIMEOUT_MS;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function nextSecond(): Promise<void> {
  await sleep(1000 - (Date.now() % 1000) + 5);
}

describe('a take Redis answers after its deadline', () => {
  let server: TestRedisServer;
  let direct: RedisLimiter;
  beforeAll(async () => {
    server = await startTestRedisServer();
    direct = new RedisLimiter(server.url, { commandTimeoutMs: 1000 });
    await direct.whenReady();
  });
  afterAll(async () => {
    await direct.close();
    await server.stop();
  });

  /** Redis stopped while the take is sent, started again once its deadline has passed. */
  async function lateWhile<T>(take: () => Promise<T>): Promise<PromiseSettledResult<T>> {
    server.pause();
    try {
      const [settled] = await Promise.allSettled([take()]);
      await sleep(REDIS_PAUSE_MS);
      return settled as PromiseSettledResult<T>;
    } finally {
      server.resume();
    }
  }

  /** The month's count in Redis once late replies and their give-backs have landed. */
  async function monthUsedSettled(key: string): Promise<number> {
    await sleep(300);
    return direct.monthlyUsed(key, Date.now());
  }

  it('counts nothing in the month: the caller was told it failed', async () => {
    const limiter = new RedisLimiter(server.url, { commandTimeoutMs: COMMAND_TIMEOUT_MS });
    try {
      await limiter.whenReady();
      const key = `token:${randomUUID()}`;
      const request = (cost: number): LimitRequest => ({ tokenId: 'tok_late', rps: 100, monthly: { key, limit: 1000 }, cost, nowMs: Date.now() });
      // The script is loaded and the connection warm: only Redis's pause makes the next one late.
      expect(await limiter.take(request(1))).toMatchObject({ granted: 1 });

      const late = await lateWhile(() => limiter.take(request(4)));
      expect(late.status).toBe('rejected');
      expect(await monthUsedSettled(key)).toBe(1);
    } finally {
      await limiter.close();
    }
  });

  it("gives a gateway's lease back: a call refused while Redis was late uses no quota (fail-closed)", async () => {
    // The gateway's limiter as src/infra/limits/index.ts composes it.
    const limiter = new ResilientLimiter(new LeasedLimiter(new RedisLimiter(server.url, { commandTimeoutMs: COMMAND_TIMEOUT_MS })), { failClosed: true });
    try {
      await limiter.whenReady();
      const key = `token:${randomUUID()}`;
      const request = (): LimitRequest => ({ tokenId: 'tok_lease', rps: 10, monthly: { key, limit: 100 }, cost: 1, nowMs: Date.now() });
      // A busy second: the next second's first call leases the token's calls for it.
      await nextSecond();
      const busy = await Promise.all(Array.from({ length: 10 }, () => limiter.take(request())));
      expect(busy.map((d) => d.granted)).toEqual(Array(10).fill(1));
      await nextSecond();

      const late = await lateWhile(async () => limiter.take(request()));
      expect(late).toMatchObject({ status: 'fulfilled', value: { granted: 0, refusedBy: 'unavailable' } });
      // The 10 admitted calls, not the 10 the late lease asked for besides.
      expect(await monthUsedSettled(key)).toBe(10);
    } finally {
      await limiter.close();
    }
  });
});
