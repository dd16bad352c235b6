import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { UsageIngester } from '../../src/infra/usage/ingester.js';
import type { QueuedUsage } from '../../src/infra/usage/port.js';
import { RedisUsageQueue } from '../../src/infra/usage/redis.js';
import { MemoryEventStore } from '../support/memoryEventStore.js';
import { freePort, startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { recordedCalls } from '../support/usageLog.js';
import { usageRecord } from './usagequeue.contract.js';

describe('Redis usage queue through a Redis outage', () => {
  let server: TestRedisServer;
  beforeAll(async () => {
    server = await startTestRedisServer();
  });
  afterAll(async () => {
    await server.stop();
  });

  it('keeps records enqueued while Redis is down and delivers them all once it is back', async () => {
    const queue = new RedisUsageQueue(server.url, { consumer: 'ingester-1' });
    await queue.whenReady();
    const store = new MemoryEventStore();
    const ingester = new UsageIngester({ queue, store, readBlockMs: 50, backoff: { initialMs: 20, maxMs: 200 } });
    ingester.start();

    const before = Array.from({ length: 100 }, () => usageRecord());
    for (const record of before) queue.enqueue(record);
    await ingester.whenDrained();

    await server.stop();
    const during = Array.from({ length: 500 }, () => usageRecord());
    for (const record of during) queue.enqueue(record);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(queue.buffered).toBe(500);
    expect(await queue.depth()).toBe(500);

    // Back empty (no persistence): stream and consumer group are made again.
    await server.start();
    await ingester.whenDrained(15_000);
    await ingester.stop();
    await queue.close();

    const calls = await recordedCalls(store, 'acc1');
    expect(calls).toHaveLength(600);
    expect(new Set(calls.map((c) => c.requestId))).toEqual(new Set([...before, ...during].map((r) => r.requestId)));
    expect(queue.dropped).toBe(0);
  });

  it('reads again at once the entries Redis gave this consumer in an answer that was lost, not after claimIdleMs', async () => {
    const persistent = await startTestRedisServer({ persistent: true });
    const stream = `usage-lost-${randomUUID()}`;
    const queue = new RedisUsageQueue(persistent.url, { consumer: 'lost', stream, claimIdleMs: 60_000 });
    try {
      await queue.whenReady();
      expect(await queue.read(10)).toEqual([]); // its own pending list, empty, gone through once
      const records = [usageRecord(), usageRecord(), usageRecord()];
      for (const record of records) queue.enqueue(record);
      await queue.flush();
      // Redis hands them to this consumer, and the answer never reaches it.
      const raw = new Redis(persistent.url);
      await raw.call('XREADGROUP', 'GROUP', 'ingester', 'lost', 'COUNT', '10', 'STREAMS', stream, '>');
      raw.disconnect();
      await persistent.stop();
      await expect(queue.read(10)).rejects.toThrow();
      await persistent.start();
      await queue.whenReady(10_000);
      let got: QueuedUsage[] = [];
      for (let i = 0; i < 50 && got.length === 0; i++) {
        got = await queue.read(10).catch(() => []);
        if (got.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(got.map((item) => item.record.requestId)).toEqual(records.map((r) => r.requestId));
      // Read again, not twice: the next read has nothing more.
      expect(await queue.read(10)).toEqual([]);
    } finally {
      await queue.close();
      await persistent.stop();
    }
  });

  it('does not hold answers while Redis is stalled or down, and sends their records once it is back', async () => {
    const queue = new RedisUsageQueue(server.url, { consumer: 'stall', stream: `usage-stall-${randomUUID()}`, handoverTimeoutMs: 100 });
    await queue.whenReady();
    const handedOver = (): Promise<void> => new Promise((resolve) => queue.whenHandedOver(resolve));
    server.pause();
    try {
      queue.enqueue(usageRecord());
      await handedOver(); // released after handoverTimeoutMs, not when Redis answers
      queue.enqueue(usageRecord());
      let atOnce = false;
      queue.whenHandedOver(() => {
        atOnce = true;
      });
      expect(atOnce, 'a stalled Redis: answers wait no more').toBe(true);
    } finally {
      server.resume();
    }
    await queue.flush();
    expect(await queue.depth()).toBe(2);

    await server.stop();
    queue.enqueue(usageRecord());
    await handedOver();
    await server.start();
    await queue.flush();
    // Back empty (no persistence): only the record sent since.
    expect(await queue.depth()).toBe(1);
    queue.enqueue(usageRecord());
    let waited = false;
    queue.whenHandedOver(() => {
      waited = true;
    });
    expect(waited, 'Redis back: answers wait for their records again').toBe(false);
    await handedOver();
    await queue.close();
  });
});

describe('Redis usage queue: a read cut by an outage', () => {
  let server: TestRedisServer;
  beforeAll(async () => {
    server = await startTestRedisServer({ persistent: true });
  });
  afterAll(async () => {
    await server.stop();
  });

  it('hands out the records it held before the failure on the next read, none lost and none twice', async () => {
    const queue = new RedisUsageQueue(server.url, { consumer: 'c' });
    await queue.whenReady();
    const records = Array.from({ length: 250 }, () => usageRecord());
    for (const record of records) queue.enqueue(record);
    await queue.flush();
    // 60 of the first entry's 100 handed out, 40 held for the next read.
    const handedOut = await queue.read(60);
    expect(handedOut).toHaveLength(60);

    await server.stop();
    // Takes the 40 held records, then fails asking Redis for more.
    await expect(queue.read(1000)).rejects.toThrow();
    await server.start();
    await queue.whenReady();

    for (let i = 0; i < 20 && handedOut.length < records.length; i++) handedOut.push(...(await queue.read(1000)));
    expect(handedOut.map((item) => item.record)).toEqual(records);
    await queue.ack(handedOut.map((item) => item.ackId));
    expect(await queue.depth()).toBe(0);
    await queue.close();
  });
});

describe('Redis usage queue', () => {
  it('never throws on enqueue, and bounds its buffer while Redis cannot be reached', async () => {
    const queue = new RedisUsageQueue(`redis://127.0.0.1:${await freePort()}`, { consumer: 'c', bufferCapacity: 10, closeTimeoutMs: 50 });
    for (let i = 0; i < 15; i++) queue.enqueue(usageRecord());
    expect(queue.buffered).toBe(10);
    expect(queue.dropped).toBe(5);
    expect(await queue.depth()).toBe(10);
    await expect(queue.read(10)).rejects.toThrow();
    await queue.close();
  });

  it('sends up to 100 records per stream entry and acknowledges an entry once all its records are', async () => {
    const stream = `usage-test-${randomUUID()}`;
    const raw = new Redis(inject('redisUrl'));
    const queue = new RedisUsageQueue(inject('redisUrl'), { consumer: 'c', stream });
    await queue.whenReady();
    const records = Array.from({ length: 250 }, () => usageRecord());
    for (const record of records) queue.enqueue(record);
    await queue.flush();
    expect(await raw.xlen(stream)).toBe(3);
    expect(await queue.depth()).toBe(250);

    // Handed out at most `max` at a time, in order, across entries.
    const first = await queue.read(60);
    const rest = [...(await queue.read(1000)), ...(await queue.read(1000)), ...(await queue.read(1000))];
    expect([...first, ...rest].map((item) => item.record)).toEqual(records);
    expect(first).toHaveLength(60);
    await queue.ack(first.map((item) => item.ackId));
    // 60 of the first entry's 100: still there, and handed out again to a restarted consumer.
    expect(await raw.xlen(stream)).toBe(3);
    expect(await queue.depth()).toBe(250);
    await queue.ack(rest.slice(0, 40).map((item) => item.ackId));
    expect(await raw.xlen(stream)).toBe(2);
    expect(await queue.depth()).toBe(150);
    await queue.close();

    const restarted = new RedisUsageQueue(inject('redisUrl'), { consumer: 'c', stream });
    await restarted.whenReady();
    const again: QueuedUsage[] = [];
    for (let i = 0; i < 5 && again.length < 150; i++) again.push(...(await restarted.read(1000)));
    expect(again.map((item) => item.record)).toEqual(records.slice(100));
    await restarted.ack(again.map((item) => item.ackId));
    expect(await raw.xlen(stream)).toBe(0);
    expect(await restarted.depth()).toBe(0);
    await restarted.close();
    await raw.quit();
  });

  it('calls back once Redis acknowledged the XADD of every record enqueued before, sending at the end of the turn', async () => {
    const stream = `usage-test-${randomUUID()}`;
    const raw = new Redis(inject('redisUrl'));
    const queue = new RedisUsageQueue(inject('redisUrl'), { consumer: 'c', stream });
    await queue.whenReady();
    let nothingPending = false;
    queue.whenHandedOver(() => {
      nothingPending = true;
    });
    expect(nothingPending, 'nothing enqueued: at once').toBe(true);
    // A steady trickle, as under load: a record at every turn of the event loop, each one's
    // answer waiting for its acknowledgement.
    let enqueued = 0;
    const handedOver: Array<Promise<number>> = [];
    const until = Date.now() + 300;
    while (Date.now() < until) {
      queue.enqueue(usageRecord());
      enqueued += 1;
      const through = enqueued;
      handedOver.push(new Promise((resolve) => queue.whenHandedOver(() => resolve(through))));
      await new Promise((resolve) => setImmediate(resolve));
    }
    let waited = false;
    queue.enqueue(usageRecord());
    queue.whenHandedOver(() => {
      waited = true;
    });
    expect(waited, 'not before Redis acknowledged it').toBe(false);
    const last = await handedOver.at(-1);
    // Each answer's records, and the ones before, are in the stream when it is released.
    expect(last).toBe(enqueued);
    const entries = (await raw.xrange(stream, '-', '+')) as Array<[string, string[]]>;
    const inStream = entries.reduce((n, [, fields]) => n + Number(fields[fields.indexOf('n') + 1]), 0);
    expect(inStream).toBeGreaterThanOrEqual(enqueued);
    await queue.flush();
    expect(waited).toBe(true);
    // What arrives during a send goes together in the next one: fewer entries than records.
    expect(await raw.xlen(stream)).toBeLessThan(enqueued + 1);
    await queue.close();
    await raw.quit();
  });

  it('sends records as positional arrays, half the bytes of the objects, and reads every field back as it was', async () => {
    const stream = `usage-test-${randomUUID()}`;
    const raw = new Redis(inject('redisUrl'));
    const queue = new RedisUsageQueue(inject('redisUrl'), { consumer: 'c', stream });
    await queue.whenReady();
    const records = [
      usageRecord({ retentionDays: 30 }),
      usageRecord(),
      usageRecord({ status: 502, rpcErrorCode: -32010, errorMessage: 'upstream unavailable "quoted"', upstreamMs: null, upstream: null, retentionDays: 3650 }),
      usageRecord({ method: 'wallet/getaccount', chain: 'trx', totalMs: 0, clientIp: '2001:db8::1' }),
    ];
    for (const record of records) queue.enqueue(record);
    await queue.flush();
    const [[, fields]] = (await raw.xrange(stream, '-', '+')) as [[string, string[]]];
    const sent = fields[fields.indexOf('b') + 1] as string;
    expect(sent.length).toBeLessThan(JSON.stringify(records).length * 0.6);

    const got = await queue.read(10);
    expect(got.map((item) => item.record)).toEqual(records);
    expect(got[1]?.record).not.toHaveProperty('retentionDays');
    await queue.ack(got.map((item) => item.ackId));
    await queue.close();
    await raw.quit();
  });

  it('reads entries of one record each, as earlier versions wrote them', async () => {
    const stream = `usage-test-${randomUUID()}`;
    const raw = new Redis(inject('redisUrl'));
    const old = [usageRecord(), usageRecord()];
    for (const record of old) await raw.xadd(stream, '*', 'r', JSON.stringify(record));
    const queue = new RedisUsageQueue(inject('redisUrl'), { consumer: 'c', stream });
    await queue.whenReady();
    const got = await queue.read(10);
    expect(got.map((item) => item.record)).toEqual(old);
    await queue.ack(got.map((item) => item.ackId));
    expect(await raw.xlen(stream)).toBe(0);
    await queue.close();
    await raw.quit();
  });

  it('acknowledges more entries in one call than Lua unpacks at once (8,000): all gone, none pending', async () => {
    const stream = `usage-test-${randomUUID()}`;
    const raw = new Redis(inject('redisUrl'));
    const entries = 8_200;
    const write = raw.pipeline();
    for (let i = 0; i < entries; i++) write.xadd(stream, '*', 'r', JSON.stringify(usageRecord()));
    await write.exec();
    const queue = new RedisUsageQueue(inject('redisUrl'), { consumer: 'c', stream });
    await queue.whenReady();
    const got: QueuedUsage[] = [];
    while (got.length < entries) {
      const read = await queue.read(entries - got.length);
      if (read.length === 0) break;
      got.push(...read);
    }
    expect(got).toHaveLength(entries);
    await queue.ack(got.map((item) => item.ackId));
    expect(await raw.xlen(stream)).toBe(0);
    expect(((await raw.xpending(stream, 'ingester')) as [number])[0]).toBe(0);
    expect(await queue.depth()).toBe(0);
    await queue.close();
    await raw.quit();
  });

  it('acknowledges and skips a stream entry that is not a usage record', async () => {
    const stream = `usage-test-${randomUUID()}`;
    const raw = new Redis(inject('redisUrl'));
    await raw.xadd(stream, '*', 'r', '{"not":"a record"}');
    await raw.xadd(stream, '*', 'r', 'not json');
    // Wire records of the wrong length or types: the entry is dropped as malformed too.
    await raw.xadd(stream, '*', 'n', '2', 'b', '[["req-1","2026-01-01T00:00:00.000Z"],[1,2,3,4,5,6,7,8,9,10,11,12,13,14]]');
    const queue = new RedisUsageQueue(inject('redisUrl'), { consumer: 'c', stream });
    await queue.whenReady();
    const good = usageRecord();
    queue.enqueue(good);
    await queue.flush();

    const got = await queue.read(10);
    expect(got.map((item) => item.record)).toEqual([good]);
    expect(queue.malformed).toBe(4);
    await queue.ack(got.map((item) => item.ackId));
    expect(await queue.depth()).toBe(0);
    expect(await raw.xlen(stream)).toBe(0);
    await queue.close();
    await raw.quit();
  });
});
