import { randomUUID } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import { MemoryAttemptCounter, openAttemptCounter, RedisAttemptCounter, ResilientAttemptCounter } from '../../src/infra/attempts/index.js';
import { freePort } from '../support/redisServer.js';
import { attemptCounterContract } from './attempts.contract.js';

/** Generous command deadline: a loaded test machine must not turn a slow reply into a failure. */
const TEST_TIMEOUT_MS = 2000;

attemptCounterContract('in process', async () => new MemoryAttemptCounter());

attemptCounterContract('redis', async () => {
  const counter = new RedisAttemptCounter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS });
  await counter.whenReady();
  return counter;
});

// What openAttemptCounter composes for REDIS_URL.
attemptCounterContract('resilient over redis', async () => {
  const counter = new ResilientAttemptCounter(new RedisAttemptCounter(inject('redisUrl'), { commandTimeoutMs: TEST_TIMEOUT_MS }));
  await counter.whenReady();
  // Every answer must come from Redis here, not from the fallback.
  const fromRedis = async <T>(answer: Promise<T>): Promise<T> => {
    const value = await answer;
    expect(counter.fallbackCount).toBe(0);
    return value;
  };
  return {
    take: (key, rule, nowMs) => fromRedis(counter.take(key, rule, nowMs)),
    giveBack: (key, nowMs) => fromRedis(counter.giveBack(key, nowMs)),
    reset: (key) => fromRedis(counter.reset(key)),
    close: () => counter.close(),
  };
});

describe('openAttemptCounter', () => {
  const rule = { limit: 1, windowMs: 60_000 };

  it('with Redis, two API instances count together', async () => {
    const [a, b] = [openAttemptCounter({ redisUrl: inject('redisUrl') }), openAttemptCounter({ redisUrl: inject('redisUrl') })];
    await Promise.all([a.whenReady(), b.whenReady()]);
    const key = `test:${randomUUID()}`;
    expect((await a.take(key, rule, Date.now())).allowed).toBe(true);
    expect((await b.take(key, rule, Date.now())).allowed).toBe(false);
    await Promise.all([a.close(), b.close()]);
  });

  it('without Redis, counts in this process', async () => {
    const counter = openAttemptCounter();
    await counter.whenReady();
    expect(counter).toBeInstanceOf(MemoryAttemptCounter);
    await counter.close();
  });

  it('counts in this process while Redis cannot be reached', async () => {
    const counter = new ResilientAttemptCounter(new RedisAttemptCounter(`redis://127.0.0.1:${await freePort()}`, { commandTimeoutMs: TEST_TIMEOUT_MS }));
    try {
      const key = `test:${randomUUID()}`;
      expect((await counter.take(key, rule, Date.now())).allowed).toBe(true);
      expect((await counter.take(key, rule, Date.now())).allowed).toBe(false);
      expect(counter.fallbackCount).toBe(2);
    } finally {
      await counter.close();
    }
  });
});
