import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { usageCallsThrough } from '../../src/domain/usageBatch.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import type { EventStore, NewEvent, StoredEvent } from '../../src/infra/eventstore/port.js';
import { ExactlyOnceAppender, type ExactlyOnceOptions } from '../../src/infra/usage/exactlyOnce.js';
import { UsageIngester, usageBatchCodec } from '../../src/infra/usage/ingester.js';
import { MemoryUsageBackend, MemoryUsageQueue } from '../../src/infra/usage/memory.js';
import { usageRecordsOf } from '../../src/projections/usageRecord.js';
import { usageRecord } from '../contract/usagequeue.contract.js';
import { EsdbLikeEventStore } from '../support/esdbLikeEventStore.js';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A consumer whose acknowledgements get lost: every `failEvery`-th one, or all of them. */
class LossyAckQueue extends MemoryUsageQueue {
  private acks = 0;
  constructor(
    backend: MemoryUsageBackend,
    consumer: string,
    private readonly failEvery: number,
  ) {
    super(backend, consumer);
  }

  override async ack(ackIds: string[]): Promise<void> {
    this.acks += 1;
    if (this.acks % this.failEvery === 0) throw new Error('acknowledgement lost');
    await super.ack(ackIds);
  }
}

const ingesterOn = (queue: MemoryUsageQueue, store: EventStore, batchSize: number, exactlyOnce?: ExactlyOnceOptions): UsageIngester =>
  new UsageIngester({ queue, store, batchSize, readBlockMs: 10, lingerMs: 0, backoff: { initialMs: 5, maxMs: 20 }, exactlyOnce });

async function waitFor(condition: () => Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** The request ids of the calls a stream records, in order. */
const callIds = async (store: EventStore, stream: string): Promise<string[]> =>
  (await store.readStream(stream)).flatMap((e) => usageRecordsOf(e).map((r) => r.requestId));

/** Each event numbers its calls right after the ones before it: the stream's calls are 0, 1, 2, … with no gap or repeat. */
async function expectCallsNumbered(store: EventStore, stream: string): Promise<void> {
  let next = 0;
  for (const event of await store.readStream(stream)) {
    expect(event.data['first'], `${stream}@${event.revision}`).toBe(next);
    next = usageCallsThrough(event) ?? Number.NaN;
  }
}

function expectEachOnce(ids: string[], records: UsageRecord[]): void {
  expect(new Set(ids).size).toBe(ids.length);
  expect([...ids].sort()).toEqual(records.map((r) => r.requestId).sort());
}

const openLevelStore = async (): Promise<EventStore> => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-exactly-once-'));
  dirs.push(dir);
  return LevelEventStore.open(dir);
};

const stores: Array<[string, () => Promise<EventStore>, ExactlyOnceOptions]> = [
  ['an EventStoreDB-like store', async () => new EsdbLikeEventStore(), {}],
  ['the embedded store', openLevelStore, {}],
];

describe('EsdbLikeEventStore (the double)', () => {
  it('writes an id twice when a redelivery regroups it behind a new one with expected revision any, as EventStoreDB does', async () => {
    const store = new EsdbLikeEventStore();
    const event = (id: string): NewEvent => ({ id, type: 'T', data: {} });
    await store.append('s-1', [event('a')], 'any');
    await store.append('s-1', [event('b'), event('a')], 'any');
    expect((await store.readStream('s-1')).map((e) => e.id)).toEqual(['a', 'b', 'a']);
    // An identical retry is recognized; a partial one at a definite revision is refused.
    await store.append('s-1', [event('b'), event('a')], 'any');
    await expect(store.append('s-1', [event('b'), event('c')], 0)).rejects.toMatchObject({ actual: 2 });
    expect(await store.readStream('s-1')).toHaveLength(3);
  });
});

describe.each(stores)('exactly-once usage appends on %s', (_name, open, exactlyOnce) => {
  it("a crashed ingester's records handed out again, regrouped with new ones: N records, each once", async () => {
    const store = await open();
    const backend = new MemoryUsageBackend({ visibilityTimeoutMs: 50 });
    const first = ingesterOn(new LossyAckQueue(backend, 'gw-1', 1), store, 7, exactlyOnce);
    const before = Array.from({ length: 30 }, () => usageRecord());
    for (const record of before) backend.add(record);
    first.start();
    await waitFor(async () => (await callIds(store, usageStream('acc1'))).length === 30, 'the first appends');
    await first.stop(); // appended, never acknowledged: "crashed"

    const after = Array.from({ length: 20 }, () => usageRecord());
    for (const record of after) backend.add(record);
    const second = ingesterOn(new MemoryUsageQueue(backend, 'gw-2'), store, 11, exactlyOnce);
    second.start();
    await second.whenDrained();
    await second.stop();

    expectEachOnce(await callIds(store, usageStream('acc1')), [...before, ...after]);
    await expectCallsNumbered(store, usageStream('acc1'));
    expect(second.stats.duplicatesDropped).toBeGreaterThanOrEqual(30);
    expect(second.stats.appendedRecords).toBe(20);
    await store.close();
  });

  it('several ingesters on one stream with lost acknowledgements: N records, each once', async () => {
    const store = await open();
    const backend = new MemoryUsageBackend({ visibilityTimeoutMs: 30 });
    const ingesters = [
      ingesterOn(new LossyAckQueue(backend, 'gw-1', 3), store, 5, exactlyOnce),
      ingesterOn(new LossyAckQueue(backend, 'gw-2', 4), store, 7, exactlyOnce),
      ingesterOn(new LossyAckQueue(backend, 'gw-3', 5), store, 13, exactlyOnce),
    ];
    for (const ingester of ingesters) ingester.start();
    const records: UsageRecord[] = [];
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 15; i++) {
        const record = usageRecord({ accountId: i % 4 === 0 ? 'acc2' : 'acc1' });
        records.push(record);
        backend.add(record);
      }
      await sleep(3);
    }
    await waitFor(async () => backend.size === 0, 'every record acknowledged', 20_000);
    for (const ingester of ingesters) await ingester.stop();

    expectEachOnce([...(await callIds(store, usageStream('acc1'))), ...(await callIds(store, usageStream('acc2')))], records);
    await expectCallsNumbered(store, usageStream('acc1'));
    await expectCallsNumbered(store, usageStream('acc2'));
    const stats = ingesters.map((ingester) => ingester.stats);
    expect(stats.reduce((sum, s) => sum + s.ackFailures, 0)).toBeGreaterThan(0);
    expect(stats.reduce((sum, s) => sum + s.duplicatesDropped, 0)).toBeGreaterThan(0);
    await store.close();
  });
});

describe('ExactlyOnceAppender', () => {
  it('appends a new stream at once, then each batch at the revision it last saw, without reading', async () => {
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec);
    for (let i = 0; i < 5; i++) {
      const records = [usageRecord(), usageRecord()];
      expect(await appender.append('usage-a', records, Date.now())).toEqual({ appended: 2, duplicates: 0, conflicts: 0 });
    }
    expect(store.appendCalls).toBe(5);
    expect(store.readCalls).toBe(0);
    // One event per append, holding its calls.
    expect(await store.readStream('usage-a')).toHaveLength(5);
    expect(await callIds(store, 'usage-a')).toHaveLength(10);
  });

  it('after another writer appended, reads what it appended and drops the ids already there', async () => {
    const store = new EsdbLikeEventStore();
    const mine = new ExactlyOnceAppender(store, usageBatchCodec);
    const theirs = new ExactlyOnceAppender(store, usageBatchCodec);
    const [a, b, c] = [usageRecord(), usageRecord(), usageRecord()];
    await mine.append('usage-a', [a!], Date.now());
    await theirs.append('usage-a', [b!], Date.now());
    const outcome = await mine.append('usage-a', [c!, b!], Date.parse(b!.at));
    expect(outcome).toEqual({ appended: 1, duplicates: 1, conflicts: 1 });
    expect(await callIds(store, 'usage-a')).toEqual([a!.requestId, b!.requestId, c!.requestId]);
  });

  it('looks back in the stream for a record older than the ids it remembers', async () => {
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 5, readPage: 2 });
    const old = usageRecord();
    await appender.append('usage-a', [old], Date.parse(old.at));
    await sleep(30);
    for (let i = 0; i < 4; i++) {
      const record = usageRecord();
      await appender.append('usage-a', [record], Date.parse(record.at)); // forgets `old` by now
    }
    expect(store.readCalls).toBe(0);
    const outcome = await appender.append('usage-a', [usageRecord(), old], Date.parse(old.at));
    expect(outcome).toMatchObject({ appended: 1, duplicates: 1 });
    expect(store.readCalls).toBeGreaterThan(0);
    expect(await callIds(store, 'usage-a')).toHaveLength(6);
  });

  it('a record whose time is not a time is looked for in the whole stream', async () => {
    const store = new EsdbLikeEventStore();
    const writer = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 5 });
    const odd = usageRecord({ at: 'not a time' });
    await writer.append('usage-a', [odd], Number.NaN);
    await sleep(20);
    await writer.append('usage-a', [usageRecord()], Date.now());
    const again = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 5 });
    await again.append('usage-a', [odd], Number.NaN);
    await again.append('usage-a', [usageRecord(), odd], Number.NaN);
    expect(await callIds(store, 'usage-a')).toHaveLength(3);
  });

  it('a retry after an append whose answer was lost writes nothing more', async () => {
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec);
    await appender.append('usage-a', [usageRecord()], Date.now());
    const batch = [usageRecord(), usageRecord()];
    const original = store.append.bind(store);
    let lose = true;
    store.append = async (...args) => {
      const result = await original(...args);
      if (lose) {
        lose = false;
        throw new Error('connection lost after the write');
      }
      return result;
    };
    await expect(appender.append('usage-a', batch, Date.now())).rejects.toThrow('connection lost');
    // Answered as a retry of the same batch at the same revision: once in the stream.
    expect(await appender.append('usage-a', batch, Date.now())).toMatchObject({ appended: 2 });
    expect(await callIds(store, 'usage-a')).toHaveLength(3);
  });

  it('on the embedded store, after a restart, a redelivery regrouped with new calls lands once: the tail is read back, not the stream', async () => {
    const store = await openLevelStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 5 });
    const history: UsageRecord[] = [];
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 10; i++) {
        const batch = [usageRecord(), usageRecord(), usageRecord()];
        history.push(...batch);
        await appender.append('usage-a', batch, Date.now());
      }
      await sleep(30);
    }
    // The same batch again: the store holds that very event.
    const last = history.slice(-3);
    expect(await appender.append('usage-a', last, Date.parse((last[0] as UsageRecord).at))).toMatchObject({ appended: 0, duplicates: 3 });
    const reads = vi.spyOn(store, 'readStream');
    const restarted = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 5 });
    const regrouped = [...history.slice(-4), usageRecord()];
    expect(await restarted.append('usage-a', regrouped, Date.parse((regrouped[0] as UsageRecord).at))).toMatchObject({ appended: 1, duplicates: 4 });
    expect(reads).toHaveBeenCalledTimes(1);
    expect(reads.mock.calls[0]?.[1]?.fromRevision).toBeGreaterThan(0);
    expectEachOnce(await callIds(store, 'usage-a'), [...history, regrouped.at(-1) as UsageRecord]);
    await store.close();
  });

  it('on a stream whose start retention dropped, looks back no further than what is left, and numbers calls on', async () => {
    const store = await openLevelStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 5 });
    const history: UsageRecord[] = [];
    for (let i = 0; i < 40; i++) {
      const batch = [usageRecord(), usageRecord()];
      history.push(...batch);
      await appender.append('usage-a', batch, Date.now());
    }
    await store.truncateBefore('usage-a', 30);
    const reads = vi.spyOn(store, 'readStream');
    const restarted = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 60_000 });
    // Every record is older than the window: the whole remaining stream is looked through, once.
    const redelivered = [...history.slice(-4), usageRecord()];
    expect(await restarted.append('usage-a', redelivered, Date.parse((history[0] as UsageRecord).at))).toMatchObject({ appended: 1, duplicates: 4 });
    expect(reads.mock.calls.length).toBeLessThanOrEqual(3);
    const events = await store.readStream('usage-a');
    expect((events.at(-1) as StoredEvent).data['first']).toBe(80);

    // All of it dropped: a fresh appender numbers its calls past any the stream could have used.
    await store.truncateBefore('usage-a', 41);
    const again = new ExactlyOnceAppender(store, usageBatchCodec);
    expect(await again.append('usage-a', [usageRecord()], Date.now())).toMatchObject({ appended: 1 });
    const [last] = await store.readStream('usage-a');
    expect(Number.isSafeInteger(last?.data['first'])).toBe(true);
    expect(last?.data['first'] as number).toBeGreaterThan(80);
    await store.close();
  });

  it('when what another writer appended after its head is gone (retention), learns the stream again instead of reading forward for ever', async () => {
    const store = await openLevelStore();
    const mine = new ExactlyOnceAppender(store, usageBatchCodec);
    const theirs = new ExactlyOnceAppender(store, usageBatchCodec);
    const first = [usageRecord(), usageRecord()];
    await mine.append('usage-a', first, Date.now());
    const others: UsageRecord[] = [];
    for (let i = 0; i < 4; i++) {
      const batch = [usageRecord()];
      others.push(...batch);
      await theirs.append('usage-a', batch, Date.now());
    }
    // Revisions 1–3 (theirs) dropped; 4 stays, so mine, at head 0, is refused and finds a gap.
    await store.truncateBefore('usage-a', 4);
    const fresh = usageRecord();
    const outcome = await Promise.race([
      mine.append('usage-a', [fresh], Date.now()),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('append never ended')), 5_000)),
    ]);
    expect(outcome).toMatchObject({ appended: 1 });
    const calls = await callIds(store, 'usage-a');
    expect(calls).toEqual([(others.at(-1) as UsageRecord).requestId, fresh.requestId]);
    const [last] = (await store.readStream('usage-a')).slice(-1);
    // Numbered after the last event it read: theirs, 2 + 4 calls.
    expect(last?.data['first']).toBe(6);
    await store.close();
  });

  it('forgets the least recently used stream beyond maxStreams, and still appends it exactly once', async () => {
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec, { maxStreams: 2 });
    const first = usageRecord();
    await appender.append('usage-a', [first], Date.now());
    await appender.append('usage-b', [usageRecord()], Date.now());
    await appender.append('usage-c', [usageRecord()], Date.now());
    expect(await appender.append('usage-a', [first, usageRecord()], Date.parse(first.at))).toMatchObject({ appended: 1, duplicates: 1 });
    expect(await callIds(store, 'usage-a')).toHaveLength(2);
  });
});

describe('ExactlyOnceAppender on EventStoreDB: round trips', () => {
  /** As the ingester appends: with the records' earliest and latest times. */
  const appendRecords = (appender: ExactlyOnceAppender<UsageRecord>, stream: string, records: UsageRecord[]) => {
    const times = records.map((r) => Date.parse(r.at));
    return appender.append(stream, records, Math.min(...times), Math.max(...times));
  };
  const expectOnceEach = async (store: EsdbLikeEventStore, stream: string, records: UsageRecord[]) =>
    expect([...(await callIds(store, stream))].sort()).toEqual(records.map((r) => r.requestId).sort());

  it('an append of a batch is one call to the server', async () => {
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec);
    for (let i = 0; i < 5; i++) await appendRecords(appender, 'usage-a', [usageRecord(), usageRecord(), usageRecord()]);
    expect(store.roundTrips).toBe(5);
  });

  it('after 20,000 other streams, a redelivered batch on the first lands once, in one round trip', async () => {
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec);
    const first = [usageRecord(), usageRecord()];
    await appendRecords(appender, 'usage-first', first);
    for (let i = 0; i < 20_000; i++) await appendRecords(appender, `usage-${i}`, [usageRecord()]);
    const before = store.roundTrips;
    const fresh = usageRecord();
    expect(await appendRecords(appender, 'usage-first', [...first, fresh])).toEqual({ appended: 1, duplicates: 2, conflicts: 0 });
    expect(store.roundTrips - before).toBe(1);
    await expectOnceEach(store, 'usage-first', [...first, fresh]);
  });

  it('the ids of streams idle for twice the clock skew are let go; a late redelivery to one still lands once', async () => {
    let clock = Date.now();
    const at = (): string => new Date(clock).toISOString();
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 1_000, now: () => clock });
    const idle: UsageRecord[][] = [];
    for (let i = 0; i < 500; i++) {
      idle.push([usageRecord({ at: at() }), usageRecord({ at: at() })]);
      await appendRecords(appender, `usage-${i}`, idle[i] ?? []);
    }
    expect(appender.rememberedIds).toBe(1_000);
    clock += 2_500;
    await appendRecords(appender, 'usage-busy', [usageRecord({ at: at() })]);
    expect(appender.rememberedIds).toBe(1);
    const late = idle[7] ?? [];
    const fresh = usageRecord({ at: at() });
    expect(await appendRecords(appender, 'usage-7', [...late, fresh])).toMatchObject({ appended: 1, duplicates: 2 });
    await expectOnceEach(store, 'usage-7', [...late, fresh]);
  });

  it('a stream a redelivery of old records is checked against keeps its ids while in use: its tail is read back once, not for each batch', async () => {
    let clock = Date.now();
    const at = (): string => new Date(clock).toISOString();
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec, { clockSkewMs: 1_000, now: () => clock });
    const old = Array.from({ length: 6 }, () => usageRecord({ at: at() }));
    for (let i = 0; i < old.length; i += 2) await appendRecords(appender, 'usage-a', old.slice(i, i + 2));
    // Idle past twice the skew: its ids go at the next append elsewhere.
    clock += 2_500;
    await appendRecords(appender, 'usage-b', [usageRecord({ at: at() })]);
    const readsBefore = store.readCalls;
    // The old records come again, batch by batch, with other streams' new ones between (a redelivery after a restart).
    for (let i = 0; i < old.length; i += 2) {
      expect(await appendRecords(appender, 'usage-a', old.slice(i, i + 2))).toMatchObject({ appended: 0, duplicates: 2 });
      clock += 10;
      await appendRecords(appender, 'usage-b', [usageRecord({ at: at() })]);
    }
    expect(store.readCalls - readsBefore).toBe(1);
    await expectOnceEach(store, 'usage-a', old);
  });

  it('with its ids forgotten (maxIds), a stream reads back only its tail for a redelivered batch and appends it once', async () => {
    const store = new EsdbLikeEventStore();
    const appender = new ExactlyOnceAppender(store, usageBatchCodec, { maxIds: 4, clockSkewMs: 5 });
    const old = Array.from({ length: 40 }, () => usageRecord());
    for (let i = 0; i < old.length; i += 2) await appendRecords(appender, 'usage-a', old.slice(i, i + 2));
    await sleep(30);
    const recent = Array.from({ length: 6 }, () => usageRecord());
    for (let i = 0; i < recent.length; i += 2) await appendRecords(appender, 'usage-a', recent.slice(i, i + 2));
    const records = [...old, ...recent];
    for (let i = 0; i < 3; i++) await appendRecords(appender, `usage-${i}`, [usageRecord(), usageRecord()]);
    expect(appender.rememberedIds).toBeLessThanOrEqual(4);
    const reads = store.readCalls;
    const fresh = usageRecord();
    expect(await appendRecords(appender, 'usage-a', [...records.slice(-3), fresh])).toMatchObject({ appended: 1, duplicates: 3 });
    expect(store.readCalls - reads).toBe(1);
    await expectOnceEach(store, 'usage-a', [...records, fresh]);
  });

  it('a concurrent writer on the same stream: refused, reads only what it appended, appends the rest', async () => {
    const store = new EsdbLikeEventStore();
    const mine = new ExactlyOnceAppender(store, usageBatchCodec);
    const theirs = new ExactlyOnceAppender(store, usageBatchCodec);
    const history = Array.from({ length: 30 }, () => usageRecord());
    for (let i = 0; i < history.length; i += 3) await appendRecords(mine, 'usage-a', history.slice(i, i + 3));
    // Another ingester was handed two of the records this one is about to append (a redelivery).
    const [a, b, c, d, x] = Array.from({ length: 5 }, () => usageRecord()) as [UsageRecord, UsageRecord, UsageRecord, UsageRecord, UsageRecord];
    await appendRecords(theirs, 'usage-a', [a, b, x]);
    const { calls, eventsRead } = { calls: { ...store.server.calls }, eventsRead: store.server.eventsRead };
    expect(await appendRecords(mine, 'usage-a', [a, b, c, d])).toEqual({ appended: 2, duplicates: 2, conflicts: 1 });
    expect(store.server.calls.appendToStream - calls.appendToStream).toBe(2);
    expect(store.server.calls.readStream - calls.readStream).toBe(1);
    // Their append was one event.
    expect(store.server.eventsRead - eventsRead).toBe(1);
    await expectOnceEach(store, 'usage-a', [...history, a, b, x, c, d]);
  });
});
