import { describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { usageStream } from '../../src/domain/usage.js';
import type { AppendResult, EventStore, ExpectedRevision, NewEvent } from '../../src/infra/eventstore/port.js';
import { BatchBytesBound, chunkBySize, UsageIngester, usageBatchCodec } from '../../src/infra/usage/ingester.js';
import { MemoryUsageBackend, MemoryUsageQueue } from '../../src/infra/usage/memory.js';
import { usageRecord } from '../contract/usagequeue.contract.js';
import { MemoryEventStore } from '../support/memoryEventStore.js';
import { recordedCalls } from '../support/usageLog.js';

/** A store that lets a test break appends: before writing, after writing, or record their sizes. */
class FaultyStore extends MemoryEventStore {
  failBefore = 0;
  failAfterWrite = 0;
  readonly appendSizes: number[] = [];

  override async append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    if (this.failBefore > 0) {
      this.failBefore -= 1;
      throw new Error('store unavailable');
    }
    this.appendSizes.push(Buffer.byteLength(JSON.stringify(events)));
    const result = await super.append(streamId, events, expected);
    if (this.failAfterWrite > 0) {
      this.failAfterWrite -= 1;
      throw new Error('connection lost after the write');
    }
    return result;
  }
}

/** A store whose appends wait until the test opens the gate. */
class GatedStore extends MemoryEventStore {
  private readonly gate: Promise<void>;
  open: () => void = () => {};

  constructor() {
    super();
    this.gate = new Promise((resolve) => {
      this.open = resolve;
    });
  }

  override async append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    await this.gate;
    return super.append(streamId, events, expected);
  }
}

const fastBackoff = { initialMs: 5, maxMs: 20 };

function setup(store: EventStore, options: { batchSize?: number; maxAppendBytes?: number; lingerMs?: number } = {}) {
  const queue = new MemoryUsageQueue(new MemoryUsageBackend(), 'ingester');
  // No linger unless a test is about it: the others time retries and failures.
  const ingester = new UsageIngester({ queue, store, readBlockMs: 20, lingerMs: 0, backoff: fastBackoff, ...options });
  return { queue, ingester };
}

describe('UsageIngester', () => {
  it('retries an append that failed after writing, without duplicating events', async () => {
    const store = new FaultyStore();
    store.failAfterWrite = 2;
    const { queue, ingester } = setup(store, { batchSize: 50 });
    const records = Array.from({ length: 200 }, () => usageRecord());
    for (const record of records) queue.enqueue(record);
    ingester.start();
    await ingester.whenDrained();
    await ingester.stop();

    const calls = await recordedCalls(store, 'acc1');
    expect(calls.map((c) => c.requestId)).toEqual(records.map((r) => r.requestId));
    expect(ingester.stats.appendFailures).toBe(2);
  });

  it('acknowledges nothing while the store refuses appends', async () => {
    const store = new FaultyStore();
    store.failBefore = Number.POSITIVE_INFINITY;
    const { queue, ingester } = setup(store);
    for (let i = 0; i < 10; i++) queue.enqueue(usageRecord());
    ingester.start();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(ingester.stats.appendFailures).toBeGreaterThan(1);
    expect(await queue.depth()).toBe(10);

    store.failBefore = 0;
    await ingester.whenDrained();
    await ingester.stop();
    expect(await recordedCalls(store, 'acc1')).toHaveLength(10);
  });

  it('stop gives up a failing append, leaving its records queued', async () => {
    const store = new FaultyStore();
    store.failBefore = Number.POSITIVE_INFINITY;
    const { queue, ingester } = setup(store);
    queue.enqueue(usageRecord());
    ingester.start();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await ingester.stop();
    expect(await queue.depth()).toBe(1);
  });

  it('stop finishes the batch in flight', async () => {
    const store = new GatedStore();
    const { queue, ingester } = setup(store);
    for (let i = 0; i < 5; i++) queue.enqueue(usageRecord());
    ingester.start();
    await new Promise((resolve) => setTimeout(resolve, 30));
    const stopped = ingester.stop();
    store.open();
    await stopped;
    expect(await recordedCalls(store, 'acc1')).toHaveLength(5);
    expect(await queue.depth()).toBe(0);
  });

  it('keeps each append under its size budget and each account in its own stream', async () => {
    const store = new FaultyStore();
    const { queue, ingester } = setup(store, { batchSize: 500, maxAppendBytes: 8 * 1024 });
    const bigMessage = 'x'.repeat(1000);
    for (let i = 0; i < 300; i++) queue.enqueue(usageRecord({ accountId: i % 2 ? 'odd' : 'even', errorMessage: bigMessage, status: 500 }));
    ingester.start();
    await ingester.whenDrained();
    await ingester.stop();

    expect(await recordedCalls(store, 'odd')).toHaveLength(150);
    expect(await recordedCalls(store, 'even')).toHaveLength(150);
    expect(store.appendSizes.length).toBeGreaterThan(2);
    for (const size of store.appendSizes) expect(size).toBeLessThanOrEqual(8 * 1024);
  });

  it('records a call queued twice once', async () => {
    const store = new MemoryEventStore();
    const { queue, ingester } = setup(store);
    const record = usageRecord();
    queue.enqueue(record);
    queue.enqueue(record);
    ingester.start();
    await ingester.whenDrained();
    await ingester.stop();
    expect(await recordedCalls(store, 'acc1')).toHaveLength(1);
  });

  it('lets records trickling in gather into one append for lingerMs', async () => {
    const store = new FaultyStore();
    const { queue, ingester } = setup(store, { lingerMs: 500 });
    ingester.start();
    for (let i = 0; i < 10; i++) {
      queue.enqueue(usageRecord());
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await ingester.whenDrained();
    await ingester.stop();
    expect(await recordedCalls(store, 'acc1')).toHaveLength(10);
    expect(store.appendSizes).toHaveLength(1);
  });

  it("appends the accounts' records of a batch together, each account's in order", async () => {
    /** Holds every append until one of each account has arrived: appends made one after the other never get there. */
    class BarrierStore extends MemoryEventStore {
      private readonly waiting: Array<() => void> = [];
      readonly appendedTo: string[] = [];
      constructor(private readonly expected: number) {
        super();
      }
      override async append(streamId: string, events: NewEvent[], expectedRevision: ExpectedRevision): Promise<AppendResult> {
        this.appendedTo.push(streamId);
        if (this.appendedTo.length <= this.expected) {
          await new Promise<void>((resolve) => {
            this.waiting.push(resolve);
            if (this.waiting.length === this.expected) for (const release of this.waiting) release();
          });
        }
        return super.append(streamId, events, expectedRevision);
      }
    }
    const accounts = ['acc1', 'acc2', 'acc3'];
    const store = new BarrierStore(accounts.length);
    const { queue, ingester } = setup(store, { batchSize: 30 });
    const records = Array.from({ length: 30 }, (_, i) => usageRecord({ accountId: accounts[i % 3] as string }));
    for (const record of records) queue.enqueue(record);
    ingester.start();
    await ingester.whenDrained(2000);
    await ingester.stop();
    expect(new Set(store.appendedTo.slice(0, 3))).toEqual(new Set(accounts.map(usageStream)));
    for (const account of accounts) {
      const calls = await recordedCalls(store, account);
      expect(calls.map((c) => c.requestId)).toEqual(records.filter((r) => r.accountId === account).map((r) => r.requestId));
    }
  });

  it("bounds a batch event from above as calls are added, and lets an append carry thousands of the gateway's calls", () => {
    const odd = usageRecord({ errorMessage: 'quote " backslash \\ newline \n tab \t control \u0001 é 漢 😀', method: 'eth_call', status: 502 });
    const long = usageRecord({ errorMessage: 'x'.repeat(500), upstreamMs: 1.2345678901234567e300, totalMs: 0.1 + 0.2, retentionDays: 365, at: 'yesterday' });
    const gateway = (i: number): UsageRecord =>
      usageRecord({
        requestId: `Ab3dEf7hIj9kLm1nOp-${(i * 7919).toString(36)}${i % 9 === 0 ? `:${i % 5}` : ''}`,
        at: new Date(Date.now() - 86_400_000 + i * 1_000_003).toISOString(),
        tokenId: `tok-${i % 10}`,
        chain: ['eth', 'sol', 'base'][i % 3] as string,
        method: ['eth_call', 'eth_getLogs', 'eth_blockNumber', 'getSlot'][i % 4] as string,
        clientIp: `10.1.${i % 7}.${i % 250}`,
        totalMs: (i % 5000) / 100,
        upstreamMs: i % 4 === 0 ? null : (i % 4000) / 100,
      });
    const records = [odd, long, ...Array.from({ length: 3000 }, (_, i) => gateway(i))];
    const bound = new BatchBytesBound();
    for (let n = 0; n < records.length; n++) {
      bound.add(records[n] as UsageRecord);
      if (n % 250 === 0 || n === records.length - 1) {
        const actual = Buffer.byteLength(JSON.stringify(usageBatchCodec.eventOf(records.slice(0, n + 1), 123_456_789)));
        expect(bound.bytes, `after ${n + 1} calls`).toBeGreaterThanOrEqual(actual);
      }
    }
    // The gateway's calls: one append of 256 KiB holds over 1,000 of them.
    const chunks = chunkBySize(
      records.slice(2).map((record, i) => ({ ackId: String(i), record })),
      256 * 1024,
    );
    expect((chunks[0] as unknown[]).length).toBeGreaterThan(1000);
  });
});
