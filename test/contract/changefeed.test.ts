import { EventEmitter } from 'node:events';
import { describe, expect, inject, it } from 'vitest';
import { openChangeFeed } from '../../src/infra/changefeed/index.js';
import { MemoryChangeFeed } from '../../src/infra/changefeed/memory.js';
import { RedisChangeFeed } from '../../src/infra/changefeed/redis.js';
import { startTestRedisServer } from '../support/redisServer.js';
import { changeFeedContract, collect } from './changefeed.contract.js';

changeFeedContract('in process', async () => {
  const bus = new EventEmitter();
  return { publisher: new MemoryChangeFeed(bus), subscriber: new MemoryChangeFeed(bus) };
});

changeFeedContract('redis', async () => {
  const publisher = new RedisChangeFeed(inject('redisUrl'));
  const subscriber = new RedisChangeFeed(inject('redisUrl'));
  await Promise.all([publisher.whenReady(), subscriber.whenReady()]);
  return { publisher, subscriber };
});

describe('Redis change feed', () => {
  it('subscribes again after Redis comes back', async () => {
    const server = await startTestRedisServer();
    const publisher = new RedisChangeFeed(server.url);
    const subscriber = new RedisChangeFeed(server.url);
    try {
      await Promise.all([publisher.whenReady(), subscriber.whenReady()]);
      const got: string[] = [];
      const before = collect(1);
      await subscriber.subscribe('tokens', (message) => {
        got.push(message);
        before.handler(message);
      });
      await publisher.publish('tokens', 'before');
      expect(await before.done).toEqual(['before']);

      await server.stop();
      await server.start();
      await Promise.all([publisher.whenReady(), subscriber.whenReady()]);
      // The subscriber may be a moment behind the publisher in reconnecting: publish until heard.
      const deadline = Date.now() + 5000;
      while (!got.includes('after') && Date.now() < deadline) {
        await publisher.publish('tokens', 'after').catch(() => {});
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(got).toContain('after');
    } finally {
      await publisher.close();
      await subscriber.close();
      await server.stop();
    }
  });
});

describe('openChangeFeed', () => {
  it('without Redis, connects the subscribers of one feed (the runtime shares it among its roles)', async () => {
    const api = openChangeFeed();
    const gateway = api;
    const heard = collect(1);
    await gateway.subscribe('tokens-factory', heard.handler);
    await api.publish('tokens-factory', 'tok1');
    expect(await heard.done).toEqual(['tok1']);
    await api.close();
  });

  it('with Redis, connects two connections', async () => {
    const api = openChangeFeed({ redisUrl: inject('redisUrl') });
    const gateway = openChangeFeed({ redisUrl: inject('redisUrl') });
    await Promise.all([api.whenReady(), gateway.whenReady()]);
    const heard = collect(1);
    await gateway.subscribe('tokens-factory', heard.handler);
    await api.publish('tokens-factory', 'tok1');
    expect(await heard.done).toEqual(['tok1']);
    await gateway.close();
    await api.close();
  });
});
