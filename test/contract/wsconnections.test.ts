import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { redisClient } from '../../src/infra/redis/client.js';
import { MemoryConnectionCounter, openConnectionCounter, RedisConnectionCounter } from '../../src/infra/wsconnections/index.js';
import { until } from '../support/eventually.js';
import { freePort, startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { connectionCounterContract, sharedConnectionCounterContract } from './wsconnections.contract.js';

connectionCounterContract('in process', async () => new MemoryConnectionCounter());

connectionCounterContract('redis', async () => {
  const counter = new RedisConnectionCounter(inject('redisUrl'), { commandTimeoutMs: 2000 });
  await counter.whenReady();
  // Every verdict must come from Redis here, not from the fallback.
  return {
    acquire: async (tokenId, cap) => {
      const verdict = await counter.acquire(tokenId, cap);
      expect(counter.fallbackCount).toBe(0);
      return verdict;
    },
    close: () => counter.close(),
  };
});

sharedConnectionCounterContract('redis', () => inject('redisUrl'));

describe('openConnectionCounter', () => {
  it('with Redis, two gateway instances count together', async () => {
    const [a, b] = [openConnectionCounter({ redisUrl: inject('redisUrl') }), openConnectionCounter({ redisUrl: inject('redisUrl') })];
    await Promise.all([a.whenReady(), b.whenReady()]);
    const token = `tok-${randomUUID()}`;
    expect((await a.acquire(token, 1)).granted).toBe(true);
    expect(await b.acquire(token, 1)).toEqual({ granted: false, connections: 1 });
    await Promise.all([a.close(), b.close()]);
  });

  it('without Redis, counts in this process', async () => {
    const counter = openConnectionCounter();
    await counter.whenReady();
    expect(counter).toBeInstanceOf(MemoryConnectionCounter);
    await counter.close();
  });
});

describe('while Redis cannot be reached', () => {
  it('each instance applies the cap to its own connections', async () => {
    const counter = new RedisConnectionCounter(`redis://127.0.0.1:${await freePort()}`, { commandTimeoutMs: 2000 });
    try {
      const token = `tok-${randomUUID()}`;
      expect((await counter.acquire(token, 2)).granted).toBe(true);
      expect((await counter.acquire(token, 2)).granted).toBe(true);
      expect(await counter.acquire(token, 2)).toEqual({ granted: false, connections: 2 });
      expect(counter.fallbackCount).toBe(3);
    } finally {
      await counter.close();
    }
  });

  describe('an outage of the shared Redis', () => {
    let server: TestRedisServer;
    beforeAll(async () => {
      server = await startTestRedisServer();
    });
    afterAll(async () => {
      await server?.stop();
    });

    it('fails open per instance, and once Redis is back every instance writes its counts again', async () => {
      const ttl = { instanceTtlMs: 900, commandTimeoutMs: 2000 };
      const logged: string[] = [];
      const log = { warn: (m: string) => logged.push(`warn ${m}`), info: (m: string) => logged.push(`info ${m}`) };
      const [a, b] = [new RedisConnectionCounter(server.url, ttl), new RedisConnectionCounter(server.url, { ...ttl, log })];
      const token = `tok-${randomUUID()}`;
      const inspect = redisClient(server.url);
      try {
        await Promise.all([a.whenReady(), b.whenReady()]);
        const onA = [await a.acquire(token, 2), await a.acquire(token, 2)];
        expect(onA.every((v) => v.granted)).toBe(true);
        expect((await b.acquire(token, 2)).granted).toBe(false);

        await server.stop();
        // B knows only its own connections: it lets in up to the cap; A, holding the cap already, refuses.
        expect((await b.acquire(token, 2)).granted).toBe(true);
        expect((await b.acquire(token, 2)).granted).toBe(true);
        expect(await b.acquire(token, 2)).toEqual({ granted: false, connections: 2 });
        expect((await a.acquire(token, 2)).granted).toBe(false);
        expect(b.fallbackCount).toBe(3);
        // Said once when B starts counting on its own, not at every upgrade.
        expect(logged).toEqual([expect.stringMatching(/^warn ws connections: Redis cannot be reached .*its own connections/)]);

        // Back empty (no persistence): the heartbeats write both instances' counts again.
        await server.start();
        await until(async () => (await inspect.hmget(`wsconn:{${token}}`, a.instanceId, b.instanceId)).join() === '2,2', 5000);
        await until(() => logged.length === 2);
        expect(logged[1]).toMatch(/^info ws connections: Redis is back/);
        const c = new RedisConnectionCounter(server.url, ttl);
        try {
          await c.whenReady();
          expect(await c.acquire(token, 2)).toEqual({ granted: false, connections: 4 });
          for (const v of onA) if (v.granted) v.release();
          await until(async () => (await inspect.hget(`wsconn:{${token}}`, a.instanceId)) === null);
          expect(await c.acquire(token, 2)).toEqual({ granted: false, connections: 2 });
        } finally {
          await c.close();
        }
      } finally {
        inspect.disconnect();
        await Promise.all([a.close(), b.close()]);
      }
    }, 20_000);
  });
});
