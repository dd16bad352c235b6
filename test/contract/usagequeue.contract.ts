import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { USAGE_BATCH_EVENT_TYPE, usageBatchEventId } from '../../src/domain/usageBatch.js';
import { UsageIngester, usageBatchCodec } from '../../src/infra/usage/ingester.js';
import type { UsageQueue } from '../../src/infra/usage/port.js';
import { usageRecordsOf } from '../../src/projections/usageRecord.js';
import { MemoryEventStore } from '../support/memoryEventStore.js';
import { recordedCalls } from '../support/usageLog.js';

/** One isolated queue per test; `connect` opens a consumer's view of it. */
export interface QueueHarness {
  connect(consumer: string): Promise<UsageQueue>;
}

/** Records a consumer holds without acknowledging are handed to others after this long. */
export const ABANDON_AFTER_MS = 300;

export function usageRecord(overrides: Partial<UsageRecord> = {}): UsageRecord {
  return {
    requestId: randomUUID(),
    at: new Date().toISOString(),
    accountId: 'acc1',
    tokenId: 'tok1',
    chain: 'eth',
    method: 'eth_blockNumber',
    status: 200,
    rpcErrorCode: null,
    errorMessage: null,
    totalMs: 12.5,
    upstreamMs: 10,
    clientIp: '127.0.0.1',
    upstream: 'primary',
    ...overrides,
  };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads until `count` records came or `timeoutMs` passed. */
async function readAll(queue: UsageQueue, count: number, timeoutMs = 5000) {
  const got = [];
  const deadline = Date.now() + timeoutMs;
  while (got.length < count && Date.now() < deadline) got.push(...(await queue.read(count - got.length, 100)));
  return got;
}

export function usageQueueContract(name: string, newHarness: () => Promise<QueueHarness>): void {
  describe(`UsageQueue contract: ${name}`, () => {
    it('hands out enqueued records in order until they are acknowledged', async () => {
      const queue = await (await newHarness()).connect('a');
      // Charged, refused (not charged) and from before the flag: each comes out as it went in.
      const records = [
        usageRecord({ charged: true }),
        usageRecord({ status: 429, rpcErrorCode: -32005, errorMessage: 'nope', upstreamMs: null, upstream: null, charged: false }),
        usageRecord({ retentionDays: 30 }),
      ];
      for (const record of records) queue.enqueue(record);
      await queue.flush();
      expect(await queue.depth()).toBe(3);

      const got = await readAll(queue, 3);
      expect(got.map((item) => item.record)).toEqual(records);
      expect(await queue.read(10)).toEqual([]);
      await queue.ack(got.map((item) => item.ackId));
      expect(await queue.depth()).toBe(0);
      await queue.close();
    });

    it('reads at most `max` records at once', async () => {
      const queue = await (await newHarness()).connect('a');
      for (let i = 0; i < 5; i++) queue.enqueue(usageRecord());
      await queue.flush();
      expect(await queue.read(3)).toHaveLength(3);
      expect(await queue.read(3)).toHaveLength(2);
      await queue.close();
    });

    it('waits up to blockMs for a record to arrive', async () => {
      const queue = await (await newHarness()).connect('a');
      const started = Date.now();
      setTimeout(() => queue.enqueue(usageRecord()), 50);
      const got = await queue.read(10, 2000);
      expect(got).toHaveLength(1);
      expect(Date.now() - started).toBeLessThan(1500);
      expect(await queue.read(10, 50)).toEqual([]);
      await queue.close();
    });

    it('gives a restarted consumer the records it had read but not acknowledged', async () => {
      const harness = await newHarness();
      const before = await harness.connect('a');
      for (let i = 0; i < 3; i++) before.enqueue(usageRecord());
      await before.flush();
      const held = await readAll(before, 3);
      await before.close();

      const after = await harness.connect('a');
      const again = await readAll(after, 3);
      expect(again.map((item) => item.record.requestId).sort()).toEqual(held.map((item) => item.record.requestId).sort());
      await after.ack(again.map((item) => item.ackId));
      expect(await after.depth()).toBe(0);
      await after.close();
    });

    it('hands out again at once what it held when told its consumer restarts on the same queue (an ingester stopped and started anew)', async () => {
      const queue = await (await newHarness()).connect('a');
      for (let i = 0; i < 3; i++) queue.enqueue(usageRecord());
      await queue.flush();
      const held = await readAll(queue, 3);
      await queue.ack([held[0]!.ackId]);
      expect(await queue.read(10)).toEqual([]);

      queue.redeliverHeld();
      const again = await readAll(queue, 2, 2000);
      expect(again.map((item) => item.record.requestId).sort()).toEqual(
        held
          .slice(1)
          .map((item) => item.record.requestId)
          .sort(),
      );
      await queue.ack(again.map((item) => item.ackId));
      expect(await queue.depth()).toBe(0);
      expect(await queue.read(10)).toEqual([]);
      await queue.close();
    });

    it('hands records held too long by a silent consumer to another one', async () => {
      const harness = await newHarness();
      const crashed = await harness.connect('crashed');
      const other = await harness.connect('other');
      crashed.enqueue(usageRecord());
      await crashed.flush();
      expect(await readAll(crashed, 1)).toHaveLength(1);
      expect(await other.read(10)).toEqual([]);

      await sleep(ABANDON_AFTER_MS + 100);
      const claimed = await readAll(other, 1);
      expect(claimed).toHaveLength(1);
      await other.ack(claimed.map((item) => item.ackId));
      expect(await other.depth()).toBe(0);
      await crashed.close();
      await other.close();
    });

    it('through the ingester: N records are each recorded once, in compact batch events of their own account', async () => {
      const queue = await (await newHarness()).connect('ingester-1');
      const store = new MemoryEventStore();
      const ingester = new UsageIngester({ queue, store, batchSize: 200, readBlockMs: 50 });
      const accounts = ['acc-a', 'acc-b', 'acc-c'];
      const records = Array.from({ length: 1200 }, (_, i) => usageRecord({ accountId: accounts[i % 3] ?? 'acc-a' }));
      ingester.start();
      for (const record of records) queue.enqueue(record);
      await ingester.whenDrained(15_000);
      await ingester.stop();

      for (const account of accounts) {
        const events = await store.readStream(usageStream(account));
        // Batches: fewer events than calls, each with the id its calls give it.
        expect(events.length).toBeLessThan(400);
        const calls = await recordedCalls(store, account);
        expect(calls).toHaveLength(400);
        expect(new Set(calls.map((c) => c.requestId)).size).toBe(400);
        for (const event of events) {
          expect(event.type).toBe(USAGE_BATCH_EVENT_TYPE);
          expect(event.id).toBe(usageBatchEventId(usageRecordsOf(event)));
          expect(event.data.accountId).toBe(account);
        }
        expect(calls.every((c) => c.accountId === account)).toBe(true);
      }
      const stored = (await Promise.all(accounts.map((a) => recordedCalls(store, a)))).flat();
      expect(stored).toEqual(expect.arrayContaining(records));
      expect(new Set(stored.map((c) => c.requestId))).toEqual(new Set(records.map((r) => r.requestId)));
      await queue.close();
    });

    it('a consumer killed mid-batch (appended part, acknowledged nothing) loses and duplicates nothing after restart', async () => {
      const harness = await newHarness();
      const store = new MemoryEventStore();
      const records = Array.from({ length: 300 }, () => usageRecord());
      const victim = await harness.connect('ingester-1');
      for (const record of records) victim.enqueue(record);
      await victim.flush();

      // The dying ingester: read a batch, appended its first half, crashed before the ack.
      const batch = await readAll(victim, 200);
      await store.append(
        usageStream('acc1'),
        [
          usageBatchCodec.eventOf(
            batch.slice(0, 100).map(({ record }) => record),
            0,
          ),
        ],
        'any',
      );
      await victim.close();

      const restarted = await harness.connect('ingester-1');
      const ingester = new UsageIngester({ queue: restarted, store, readBlockMs: 50 });
      ingester.start();
      await ingester.whenDrained(15_000);
      await ingester.stop();

      const calls = await recordedCalls(store, 'acc1');
      expect(calls).toHaveLength(300);
      expect(new Set(calls.map((c) => c.requestId))).toEqual(new Set(records.map((r) => r.requestId)));
      await restarted.close();
    });
  });
}
