import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisClient, redisClient } from '../../src/infra/redis/client.js';
import type { ConnectionCounter, ConnectionVerdict } from '../../src/infra/wsconnections/port.js';
import { RedisConnectionCounter } from '../../src/infra/wsconnections/redis.js';
import { until } from '../support/eventually.js';

/** A token of its own per test, so tests never see each other's counts (on a cluster, spread over the masters). */
const freshToken = () => `tok-${randomUUID()}`;

type Grant = Extract<ConnectionVerdict, { granted: true }>;

function granted(verdict: ConnectionVerdict): Grant {
  if (!verdict.granted) throw new Error(`refused at ${verdict.connections} connections`);
  return verdict;
}

/** The connection counter contract: what one gateway instance sees, whatever the adapter. */
export function connectionCounterContract(name: string, open: () => Promise<ConnectionCounter>): void {
  describe(`ConnectionCounter contract: ${name}`, () => {
    let counter: ConnectionCounter;
    beforeAll(async () => {
      counter = await open();
    });
    afterAll(() => counter.close());

    it('grants up to the cap, refuses the next with the count, and a release lets one more in', async () => {
      const token = freshToken();
      const first = granted(await counter.acquire(token, 2));
      granted(await counter.acquire(token, 2));
      expect(await counter.acquire(token, 2)).toEqual({ granted: false, connections: 2 });
      first.release();
      await until(async () => (await counter.acquire(token, 2)).granted);
      expect((await counter.acquire(token, 2)).granted).toBe(false);
    });

    it('frees one connection however often a grant is released', async () => {
      const token = freshToken();
      const grants = [granted(await counter.acquire(token, 3)), granted(await counter.acquire(token, 3)), granted(await counter.acquire(token, 3))];
      const first = grants[0] as Grant;
      first.release();
      first.release();
      first.release();
      await until(async () => (await counter.acquire(token, 3)).granted);
      expect(await counter.acquire(token, 3)).toEqual({ granted: false, connections: 3 });
    });

    it('counts each token apart', async () => {
      const [a, b] = [freshToken(), freshToken()];
      granted(await counter.acquire(a, 1));
      expect((await counter.acquire(a, 1)).granted).toBe(false);
      expect((await counter.acquire(b, 1)).granted).toBe(true);
    });

    it('counts connections without a cap too: a cap set later applies to them', async () => {
      const token = freshToken();
      for (let i = 0; i < 5; i++) granted(await counter.acquire(token, null));
      expect(await counter.acquire(token, 5)).toEqual({ granted: false, connections: 5 });
      expect((await counter.acquire(token, 6)).granted).toBe(true);
    });

    it('grants exactly the cap to upgrades arriving together', async () => {
      const token = freshToken();
      const verdicts = await Promise.all(Array.from({ length: 20 }, () => counter.acquire(token, 5)));
      expect(verdicts.filter((v) => v.granted)).toHaveLength(5);
    });

    it('comes back to nothing once every connection is released', async () => {
      const token = freshToken();
      const grants = await Promise.all(Array.from({ length: 4 }, async () => granted(await counter.acquire(token, 4))));
      for (const g of grants) g.release();
      await until(async () => {
        const again = await Promise.all(Array.from({ length: 4 }, () => counter.acquire(token, 4)));
        const all = again.every((v) => v.granted);
        for (const v of again) if (v.granted) v.release();
        return all;
      });
    });
  });
}

/**
 * What several gateway instances sharing one Redis (a server or a cluster) see: the cap holds
 * across them, a vanished instance's connections stop counting within the TTL, and a lost
 * count comes back with the next heartbeat.
 */
export function sharedConnectionCounterContract(name: string, url: () => string): void {
  describe(`ConnectionCounter across instances: ${name}`, () => {
    const TTL_MS = 900;
    const opened: RedisConnectionCounter[] = [];
    let redis: RedisClient;
    const instance = async (instanceTtlMs = TTL_MS) => {
      const counter = new RedisConnectionCounter(url(), { instanceTtlMs, commandTimeoutMs: 2000 });
      opened.push(counter);
      await counter.whenReady();
      return counter;
    };
    beforeAll(async () => {
      redis = redisClient(url());
    });
    afterAll(async () => {
      await Promise.all(opened.map((c) => c.close()));
      redis.disconnect();
    });

    it('holds the cap across instances: two on A, B refused; one released on A, B gets it', async () => {
      const [a, b] = [await instance(), await instance()];
      const token = freshToken();
      const first = granted(await a.acquire(token, 2));
      granted(await a.acquire(token, 2));
      expect(await b.acquire(token, 2)).toEqual({ granted: false, connections: 2 });
      first.release();
      await until(async () => (await b.acquire(token, 2)).granted);
      expect((await a.acquire(token, 2)).granted).toBe(false);
      expect(a.fallbackCount + b.fallbackCount).toBe(0);
    });

    it('grants exactly the cap to upgrades arriving together on three instances', async () => {
      const instances = [await instance(), await instance(), await instance()];
      const token = freshToken();
      const verdicts = await Promise.all(instances.flatMap((c) => Array.from({ length: 10 }, () => c.acquire(token, 7))));
      expect(verdicts.filter((v) => v.granted)).toHaveLength(7);
    });

    it('keeps the tokens of many hash slots apart', async () => {
      const [a, b] = [await instance(), await instance()];
      const tokens = Array.from({ length: 30 }, freshToken);
      for (const token of tokens) granted(await a.acquire(token, 1));
      const onB = await Promise.all(tokens.map((token) => b.acquire(token, 1)));
      expect(onB.every((v) => !v.granted)).toBe(true);
      expect((await b.acquire(freshToken(), 1)).granted).toBe(true);
    });

    it('stops counting an instance that vanished without releasing, within the TTL, and cleans its fields', async () => {
      const b = await instance();
      const token = freshToken();
      // A crashed instance's fields, as it wrote them (the key layout of src/infra/wsconnections/redis.ts), its time running out.
      const [seconds = 0, micros = 0] = (await redis.time()).map(Number);
      const redisNowMs = seconds * 1000 + Math.floor(micros / 1000);
      await redis.hset(`wsconn:{${token}}`, 'crashed', '2', 'crashed:t', String(redisNowMs + TTL_MS));
      expect((await b.acquire(token, 2)).granted).toBe(false);
      const started = Date.now();
      await until(async () => (await b.acquire(token, 2)).granted, 5000);
      expect(Date.now() - started).toBeLessThan(TTL_MS + 500);
      expect(await redis.hget(`wsconn:{${token}}`, 'crashed')).toBeNull();
    });

    it('writes a lost count again with the next heartbeat', async () => {
      const [a, b] = [await instance(), await instance()];
      const token = freshToken();
      granted(await a.acquire(token, 2));
      granted(await a.acquire(token, 2));
      await redis.del(`wsconn:{${token}}`);
      // Lost (Redis restarted empty, a failover): at most a third of the TTL later, A has written its count again.
      await until(async () => (await redis.hget(`wsconn:{${token}}`, a.instanceId)) === '2', 2000);
      expect((await b.acquire(token, 2)).granted).toBe(false);
    });

    it('keeps a live instance counted past its TTL through its heartbeat, and removes its counts when it closes', async () => {
      const [a, b] = [await instance(), await instance()];
      const token = freshToken();
      granted(await a.acquire(token, 1));
      await new Promise((resolve) => setTimeout(resolve, TTL_MS * 2));
      expect((await b.acquire(token, 1)).granted).toBe(false);
      await a.close();
      expect(await redis.exists(`wsconn:{${token}}`)).toBe(0);
      expect((await b.acquire(token, 1)).granted).toBe(true);
    });
  });
}
