import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { GatewayInstances } from '../../src/infra/instances/port.js';
import { RedisGatewayInstances } from '../../src/infra/instances/redis.js';
import { redisClient } from '../../src/infra/redis/client.js';
import { until } from '../support/eventually.js';

/** The gateway-instances contract: what a gateway that is alone sees, whatever the adapter. */
export function gatewayInstancesContract(name: string, open: () => Promise<GatewayInstances>): void {
  describe(`GatewayInstances contract: ${name}`, () => {
    it('a gateway alone counts itself: 1', async () => {
      const instances = await open();
      try {
        expect(instances.count()).toBe(1);
      } finally {
        await instances.close();
      }
    });
  });
}

/**
 * Several gateways of one deployment on one Redis (a single server or a cluster): each counts
 * the others that are alive, a gateway that closes leaves at once, one that crashed when its
 * time runs out. Each test is a deployment of its own (its own key).
 */
export function sharedGatewayInstancesContract(name: string, url: () => string): void {
  describe(`GatewayInstances across gateways: ${name}`, () => {
    const ttlMs = 600;
    const open = async (key: string): Promise<RedisGatewayInstances> => {
      const instances = new RedisGatewayInstances(url(), { ttlMs, commandTimeoutMs: 2_000, key });
      await instances.whenReady();
      return instances;
    };

    it('counts every live gateway, tells the change, and a closed one leaves at the next heartbeat', async () => {
      const key = `gateway:instances:${randomUUID()}`;
      const a = await open(key);
      const told: number[] = [];
      a.onCount((count) => told.push(count));
      const b = await open(key);
      const c = await open(key);
      try {
        expect(c.count()).toBe(3);
        await until(() => a.count() === 3, 5_000);
        expect(told).toContain(3);
        await b.close();
        await until(() => a.count() === 2 && c.count() === 2, 5_000);
        expect(told.at(-1)).toBe(2);
      } finally {
        await Promise.all([a.close(), b.close(), c.close()]);
      }
    });

    it('a gateway that stopped without leaving (a crash) stops counting once its time is up', async () => {
      const key = `gateway:instances:${randomUUID()}`;
      const a = await open(key);
      // A crashed gateway's entry: written once, as its last heartbeat was, never again.
      const raw = redisClient(url());
      try {
        const [seconds, micros] = (await raw.time()) as [number, number];
        await raw.zadd(key, Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) + ttlMs, 'crashed');
        await a.beat();
        expect(a.count()).toBe(2);
        await until(() => a.count() === 1, 5_000);
      } finally {
        raw.disconnect();
        await a.close();
      }
    });
  });
}
