import { randomUUID } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import { openGatewayInstances, RedisGatewayInstances, SoleGatewayInstance } from '../../src/infra/instances/index.js';
import { until } from '../support/eventually.js';
import { freePort, startTestRedisServer } from '../support/redisServer.js';
import { gatewayInstancesContract, sharedGatewayInstancesContract } from './instances.contract.js';

gatewayInstancesContract('in process', async () => new SoleGatewayInstance());

gatewayInstancesContract('redis', async () => {
  const instances = new RedisGatewayInstances(inject('redisUrl'), { key: `gateway:instances:${randomUUID()}`, commandTimeoutMs: 2_000 });
  await instances.whenReady();
  return instances;
});

sharedGatewayInstancesContract('redis', () => inject('redisUrl'));

describe('openGatewayInstances', () => {
  it('without Redis, this process alone', async () => {
    const instances = openGatewayInstances(undefined);
    await instances.whenReady();
    expect(instances).toBeInstanceOf(SoleGatewayInstance);
    expect(instances.count()).toBe(1);
    await instances.close();
  });
});

describe('while Redis cannot be reached', () => {
  it('keeps the last count known, and counts again once Redis is back', async () => {
    const server = await startTestRedisServer();
    const options = { ttlMs: 600, commandTimeoutMs: 2_000, key: 'gateway:instances' };
    const a = new RedisGatewayInstances(server.url, options);
    const b = new RedisGatewayInstances(server.url, options);
    try {
      await Promise.all([a.whenReady(), b.whenReady()]);
      await a.beat();
      expect(a.count()).toBe(2);
      await server.stop();
      // Past the others' time: the count cannot be read, and a share jumping to the whole cap would send N times it.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      await a.beat();
      expect(a.count()).toBe(2);
      await server.start();
      await until(() => a.count() === 2 && b.count() === 2 && a.lastError === null, 10_000);
    } finally {
      await Promise.all([a.close(), b.close()]);
      await server.stop();
    }
  });

  it('a gateway whose Redis never answered is refused at start, naming why, and counts itself alone meanwhile', async () => {
    const instances = new RedisGatewayInstances(`redis://127.0.0.1:${await freePort()}`, { commandTimeoutMs: 200 });
    try {
      await expect(instances.whenReady(300)).rejects.toThrow(/redis not ready after 300 ms: .*ECONNREFUSED/);
      await instances.beat();
      expect([instances.count(), instances.lastError]).toEqual([1, null]);
    } finally {
      await instances.close();
    }
  });
});
