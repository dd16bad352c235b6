import { randomUUID } from 'node:crypto';
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisClient } from '../../src/infra/redis/client.js';
import { UsageIngester } from '../../src/infra/usage/ingester.js';
import type { QueuedUsage, UsageQueue } from '../../src/infra/usage/port.js';
import { RedisUsageQueue } from '../../src/infra/usage/redis.js';
import { MemoryEventStore } from '../support/memoryEventStore.js';
import { startTestRedisCluster, type TestRedisCluster } from '../support/redisCluster.js';
import { recordedCalls } from '../support/usageLog.js';
import { ABANDON_AFTER_MS, usageQueueContract, usageRecord } from './usagequeue.contract.js';

let cluster: TestRedisCluster;
let raw: Cluster;
const opened: UsageQueue[] = [];
beforeAll(async () => {
  cluster = await startTestRedisCluster();
  raw = redisClient(cluster.url) as Cluster;
}, 60_000);
afterAll(async () => {
  await Promise.all(opened.map((queue) => queue.close()));
  await raw?.quit();
  await cluster?.stop();
});

async function openQueue(options: ConstructorParameters<typeof RedisUsageQueue>[1]): Promise<RedisUsageQueue> {
  const queue = new RedisUsageQueue(cluster.url, options);
  opened.push(queue);
  await queue.whenReady(10_000);
  return queue;
}

/** Reads until `count` records came or `timeoutMs` passed. */
async function readAll(queue: UsageQueue, count: number, timeoutMs = 5000): Promise<QueuedUsage[]> {
  const got: QueuedUsage[] = [];
  const deadline = Date.now() + timeoutMs;
  while (got.length < count && Date.now() < deadline) got.push(...(await queue.read(count - got.length, 100)));
  return got;
}

// The default on a cluster: 16 streams, read one XREADGROUP each.
usageQueueContract('redis cluster', async () => {
  const stream = `usage-test-${randomUUID()}`;
  return { connect: (consumer) => openQueue({ consumer, stream, claimIdleMs: ABANDON_AFTER_MS }) };
});

describe('Redis usage queue on a cluster', () => {
  it('spreads its streams over every master, and keeps each account in one stream, in order', async () => {
    const queue = await openQueue({ consumer: 'c', stream: `usage-spread-${randomUUID()}` });
    expect(queue.streams).toHaveLength(16);
    const masterOf = async (key: string): Promise<string> => {
      const slot = Number(await raw.cluster('KEYSLOT', key));
      return String(raw.slots[slot]?.[0]);
    };
    expect(new Set(await Promise.all(queue.streams.map(masterOf))).size).toBe(3);

    const records = Array.from({ length: 400 }, (_, i) => usageRecord({ accountId: `acc-${i % 40}` }));
    for (const record of records) queue.enqueue(record);
    await queue.flush();
    const lengths = await Promise.all(queue.streams.map((stream) => raw.xlen(stream)));
    expect(lengths.filter((n) => n > 0).length).toBeGreaterThan(8);

    const got = await readAll(queue, records.length);
    expect(got).toHaveLength(records.length);
    const streamsOf = new Map<string, Set<string>>();
    for (const { ackId, record } of got) {
      const streams = streamsOf.get(record.accountId) ?? new Set();
      streams.add(ackId.slice(0, ackId.indexOf(':')));
      streamsOf.set(record.accountId, streams);
    }
    for (const streams of streamsOf.values()) expect(streams.size).toBe(1);
    for (const account of streamsOf.keys()) {
      const sent = records.filter((r) => r.accountId === account).map((r) => r.requestId);
      expect(got.filter((item) => item.record.accountId === account).map((item) => item.record.requestId)).toEqual(sent);
    }
    await queue.ack(got.map((item) => item.ackId));
    expect(await queue.depth()).toBe(0);
  });

  it('reads the stream of an earlier version (one `usage` stream) until it is empty', async () => {
    const base = `usage-upgrade-${randomUUID()}`;
    const before = await openQueue({ consumer: 'c', stream: base, streams: 1 });
    const old = Array.from({ length: 5 }, () => usageRecord());
    for (const record of old) before.enqueue(record);
    await before.close();

    const after = await openQueue({ consumer: 'c', stream: base });
    const fresh = Array.from({ length: 5 }, (_, i) => usageRecord({ accountId: `acc-${i}` }));
    for (const record of fresh) after.enqueue(record);
    await after.flush();
    expect(await after.depth()).toBe(10);
    const got = await readAll(after, 10);
    expect(new Set(got.map((item) => item.record.requestId))).toEqual(new Set([...old, ...fresh].map((r) => r.requestId)));
    await after.ack(got.map((item) => item.ackId));
    expect(await raw.xlen(base)).toBe(0);
    expect(await after.depth()).toBe(0);
  });

  it('a master killed and started again loses no record whose hand-over it acknowledged, and the ingester records each once', async () => {
    const stream = `usage-restart-${randomUUID()}`;
    const gateway = await openQueue({ consumer: 'gateway', stream });
    const store = new MemoryEventStore();
    // An acknowledgement the dead master missed leaves its records pending: handed out again once idle this long.
    const reader = await openQueue({ consumer: 'ingester', stream, claimIdleMs: 1000 });
    const ingester = new UsageIngester({ queue: reader, store, readBlockMs: 50, backoff: { initialMs: 20, maxMs: 200 } });
    ingester.start();
    const handedOver = (): Promise<void> => new Promise((resolve) => gateway.whenHandedOver(resolve));
    const accounts = Array.from({ length: 30 }, (_, i) => `acc-${i}`);
    const acknowledged: string[] = [];
    const send = async (count: number): Promise<string[]> => {
      const sent: string[] = [];
      for (let i = 0; i < count; i++) {
        const record = usageRecord({ accountId: accounts[i % accounts.length] });
        gateway.enqueue(record);
        sent.push(record.requestId);
        if (i % 10 === 9) await handedOver();
      }
      await handedOver();
      return sent;
    };
    acknowledged.push(...(await send(300)));
    // Killed with records in its streams not yet ingested, the ingester still reading.
    const victim = cluster.nodes[0];
    if (!victim) throw new Error('no node');
    await victim.stop();
    // Sent while it is down: answers do not wait, the records wait in the gateway's buffer.
    const during = await send(100);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await victim.start();
    await cluster.whenOk();
    await ingester.whenDrained(30_000);
    await ingester.stop();

    const stored = (await Promise.all(accounts.map((account) => recordedCalls(store, account)))).flat();
    const ids = stored.map((c) => c.requestId);
    expect(new Set(ids).size).toBe(ids.length);
    expect(new Set(ids)).toEqual(new Set([...acknowledged, ...during]));
    expect(gateway.dropped).toBe(0);
  }, 60_000);
});
