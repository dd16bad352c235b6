import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { openUsageQueue } from '../../src/infra/usage/index.js';
import { MemoryUsageBackend, MemoryUsageQueue } from '../../src/infra/usage/memory.js';
import type { UsageQueue } from '../../src/infra/usage/port.js';
import { RedisUsageQueue } from '../../src/infra/usage/redis.js';
import { ABANDON_AFTER_MS, usageQueueContract, usageRecord } from './usagequeue.contract.js';

usageQueueContract('in process', async () => {
  const backend = new MemoryUsageBackend({ visibilityTimeoutMs: ABANDON_AFTER_MS });
  return { connect: async (consumer) => new MemoryUsageQueue(backend, consumer) };
});

const opened: UsageQueue[] = [];
afterAll(async () => {
  await Promise.all(opened.map((queue) => queue.close()));
});

usageQueueContract('redis', async () => {
  // A stream of its own per test, on the shared test Redis.
  const stream = `usage-test-${randomUUID()}`;
  return {
    connect: async (consumer) => {
      const queue = new RedisUsageQueue(inject('redisUrl'), { consumer, stream, claimIdleMs: ABANDON_AFTER_MS });
      await queue.whenReady();
      opened.push(queue);
      return queue;
    },
  };
});

describe('openUsageQueue', () => {
  it('without Redis, queues in this process (the runtime hands the one queue to the gateway and the ingester)', async () => {
    const queue = openUsageQueue({ consumer: 'all' });
    const record = usageRecord();
    queue.enqueue(record);
    const ingester = queue;
    const got = await ingester.read(1000);
    expect(got.map((item) => item.record)).toContainEqual(record);
    await ingester.ack(got.map((item) => item.ackId));
  });

  it('with Redis, uses the Redis stream', async () => {
    const queue = openUsageQueue({ redisUrl: inject('redisUrl'), consumer: 'factory-test' });
    opened.push(queue);
    expect(queue).toBeInstanceOf(RedisUsageQueue);
    await queue.whenReady();
  });
});
