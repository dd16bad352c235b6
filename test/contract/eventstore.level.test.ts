import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterAll, describe, expect, it } from 'vitest';
import { EventStoreError } from '../../src/infra/eventstore/errors.js';
import { openEventStore } from '../../src/infra/eventstore/index.js';
import { LevelEventStore, type LevelEventStoreOptions } from '../../src/infra/eventstore/level.js';
import { AppendPlan, EVENTS_PER_TURN } from '../../src/infra/eventstore/levelAppendPlan.js';
import { IdCeilings } from '../../src/infra/eventstore/levelIdCeilings.js';
import { eventIdKey, headKey, INDEXED_KEY, logKey, pad, streamKey } from '../../src/infra/eventstore/levelKeys.js';
import { type EventStore, type NewEvent, WrongExpectedRevisionError } from '../../src/infra/eventstore/port.js';
import { category, describeEventStoreContract, expectStrictlyIncreasing, newEvent, SubscriptionReader } from './eventstore.contract.js';

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gw-eventstore-'));
  dirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describeEventStoreContract('LevelEventStore', () => LevelEventStore.open(tempDir()));

describe('LevelEventStore append planning', () => {
  it('lets the event loop run between slices of a big append, and plans it as if it had not', async () => {
    const count = 10 * EVENTS_PER_TURN;
    let immediateRan = false;
    let lookupsBefore = 0;
    let encodedBefore = 0;
    const plan = new AppendPlan(
      {
        head: () => 4, // the stream exists: every event's id is looked up (a retry would be a no-op)
        eventId: () => {
          if (!immediateRan) lookupsBefore++;
          return undefined;
        },
        idCeiling: () => undefined, // not known: no id is taken as new without its lookup
      },
      100,
      '2026-11-24T00:00:00.000Z',
    );
    setImmediate(() => {
      immediateRan = true;
      encodedBefore = plan.logPuts.length + plan.indexPuts.length;
    });
    const events = Array.from({ length: count }, (_, i) => newEvent('A', { i }));
    const result = await plan.add('a-1', events, 4);
    // Without pauses every lookup would run before the immediate callback.
    expect(immediateRan).toBe(true);
    expect(lookupsBefore).toBeLessThan(EVENTS_PER_TURN);
    expect(encodedBefore).toBe(0);
    expect(result).toEqual({ nextExpectedRevision: 4 + count, position: String(100 + count).padStart(20, '0') });
    expect(plan.logPuts).toHaveLength(count);
    expect(plan.indexPuts).toHaveLength(count + 2); // an id each, the run, the head
    expect(plan.logPuts.map(([, json]) => (JSON.parse(json) as { data: { i: number } }).data.i)).toEqual(events.map((_, i) => i));
    expect(plan.appended.map((e) => e.data['i'])).toEqual(events.map((_, i) => i));
  });

  it("looks up only the ids at or below the stream's id ceiling: one above it cannot be in the stream", async () => {
    const looked: string[] = [];
    const plan = new AppendPlan(
      {
        head: () => 4,
        eventId: (_streamId, eventId) => {
          looked.push(eventId);
          return undefined;
        },
        idCeiling: () => orderedId(5),
      },
      100,
      '2026-11-24T00:00:00.000Z',
    );
    const events = [3, 7, 5, 9].map((n) => ({ ...newEvent('A'), id: orderedId(n) }));
    await plan.add('a-1', events, 4);
    expect(looked).toEqual([orderedId(3), orderedId(5)]);
    expect(plan.largestIds.get('a-1')).toBe(orderedId(9));
  });
});

describe('IdCeilings', () => {
  it('raises only a known ceiling, and forgets the stream learnt first when full', () => {
    const ceilings = new IdCeilings(2);
    ceilings.raise('a', 'x');
    expect(ceilings.get('a')).toBeUndefined(); // not known: an id in the index could be larger
    ceilings.learn('a', 'm');
    ceilings.raise('a', 'k');
    expect(ceilings.get('a')).toBe('m');
    ceilings.raise('a', 'p');
    expect(ceilings.get('a')).toBe('p');
    ceilings.learn('b', '');
    ceilings.learn('c', 'c9');
    expect([ceilings.get('a'), ceilings.get('b'), ceilings.get('c')]).toEqual([undefined, '', 'c9']);
  });

  it('gives no ceiling for a largest id that LevelDB and JavaScript may order apart', () => {
    const ceilings = new IdCeilings(10);
    // UTF-8 puts U+1F600 above U+FF01; UTF-16 code units put it below.
    ceilings.learn('a', '\u{1F600}');
    expect('\uFF01' > '\u{1F600}').toBe(true);
    expect(ceilings.knows('a')).toBe(true);
    expect(ceilings.get('a')).toBeUndefined();
    ceilings.raise('a', '\uFFFF');
    expect(ceilings.get('a')).toBeUndefined();
  });
});

/** Ids in the order of `n`, as usage events' ids are in time order. */
const orderedId = (n: number): string => `00000000-0000-7000-a000-${String(n).padStart(12, '0')}`;

describe('LevelEventStore specifics', () => {
  async function withStore<T>(run: (store: LevelEventStore, dir: string) => Promise<T>, options?: LevelEventStoreOptions): Promise<T> {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir, options);
    try {
      return await run(store, dir);
    } finally {
      await store.close();
    }
  }

  it('an empty store has no head and catches up at once with a null position', async () => {
    await withStore(async (store) => {
      expect(await store.headPosition()).toBeNull();
      const subscription = store.subscribeToAll();
      const reader = new SubscriptionReader(subscription);
      expect(await reader.untilCaughtUp()).toEqual({ events: [], caughtUpAt: null });
      await store.append('a-1', [newEvent('A')], 'no_stream');
      expect((await reader.events(1)).map((e) => e.type)).toEqual(['A']);
      await subscription.close();
    });
  });

  it('numbers the global log 1, 2, 3… as 20-digit positions', async () => {
    await withStore(async (store) => {
      await store.append('a-1', [newEvent('A'), newEvent('B')], 'no_stream');
      await store.append('b-1', [newEvent('C')], 'no_stream');
      const subscription = store.subscribeToAll();
      const { events, caughtUpAt } = await new SubscriptionReader(subscription).untilCaughtUp();
      await subscription.close();
      expect(events.map((e) => e.position)).toEqual(['00000000000000000001', '00000000000000000002', '00000000000000000003']);
      expect(caughtUpAt).toBe('00000000000000000003');
      expect(await store.headPosition()).toBe('00000000000000000003');
    });
  });

  it('with any, skips the ids already in the stream and appends the rest', async () => {
    await withStore(async (store) => {
      const a = newEvent('A');
      const b = newEvent('B');
      await store.append('s-1', [a], 'no_stream');
      await store.append('s-1', [a, b], 'any');
      expect((await store.readStream('s-1')).map((e) => e.id)).toEqual([a.id, b.id]);
    });
  });

  it('refuses an append at a definite revision that repeats only some ids already in the stream, and writes none of it', async () => {
    await withStore(async (store) => {
      const a = newEvent('A');
      await store.append('s-1', [a], 'no_stream');
      const error = await store.append('s-1', [a, newEvent('B')], 0).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EventStoreError);
      expect(error).toMatchObject({ code: 'duplicate_event_ids', details: { streamId: 's-1', ids: [a.id] } });
      expect(await store.readStream('s-1')).toHaveLength(1);
    });
  });

  it('refuses an append that holds the same id twice, an empty append and a bad expected revision', async () => {
    await withStore(async (store) => {
      const a = newEvent('A');
      await expect(store.append('s-1', [a, a], 'any')).rejects.toMatchObject({ code: 'duplicate_event_ids' });
      await expect(store.append('s-1', [], 'any')).rejects.toMatchObject({ code: 'invalid_append' });
      await expect(store.append('s-1', [newEvent('A')], -1)).rejects.toMatchObject({ code: 'invalid_append' });
      await expect(store.append('', [newEvent('A')], 'any')).rejects.toMatchObject({ code: 'invalid_append' });
      expect(await store.headPosition()).toBeNull();
    });
  });

  it('refuses an append over 1 MiB, like EventStoreDB', async () => {
    await withStore(async (store) => {
      const big = 'x'.repeat(600 * 1024);
      await expect(store.append('s-1', [newEvent('A', { big }), newEvent('B', { big })], 'any')).rejects.toMatchObject({
        code: 'append_too_large',
      });
      expect(await store.readStream('s-1')).toEqual([]);
      await store.append('s-1', [newEvent('A', { big })], 'no_stream');
    });
  });

  it('a retry that lands in the same group commit as the original writes nothing', async () => {
    await withStore(async (store) => {
      const batch = [newEvent('A'), newEvent('B')];
      const [first, retry] = await Promise.all([store.append('s-1', batch, 'any'), store.append('s-1', batch, 'any')]);
      expect(retry).toEqual(first);
      expect(await store.readStream('s-1')).toHaveLength(2);
    });
  });

  it('knows the ids already in a stream whether they sort above or below its largest, before and after a reopen', async () => {
    const dir = tempDir();
    const event = (n: number): NewEvent => ({ ...newEvent('A'), id: orderedId(n) });
    const ids = async (store: LevelEventStore): Promise<string[]> => (await store.readStream('s-1')).map((e) => e.id);
    let store = await LevelEventStore.open(dir);
    try {
      await store.append('s-1', [event(1), event(2), event(3)], 'no_stream');
      expect(await store.append('s-1', [event(2), event(3)], 'any')).toMatchObject({ nextExpectedRevision: 2 });
      // A late id (below the largest) that is new, one already there, and one above.
      await store.append('s-1', [event(0), event(3), event(5)], 'any');
      expect(await ids(store)).toEqual([1, 2, 3, 0, 5].map(orderedId));
      await store.close();
      store = await LevelEventStore.open(dir);
      expect(await store.append('s-1', [event(0), event(5)], 'any')).toMatchObject({ nextExpectedRevision: 4 });
      await store.append('s-1', [event(4), event(6)], 'any');
      expect(await ids(store)).toEqual([1, 2, 3, 0, 5, 4, 6].map(orderedId));
    } finally {
      await store.close();
    }
  });

  it('knows non-ASCII ids after a reopen, though LevelDB orders them apart from JavaScript', async () => {
    const dir = tempDir();
    let store = await LevelEventStore.open(dir);
    try {
      await store.append(
        's-1',
        [
          { ...newEvent('A'), id: '\u{1F600}' },
          { ...newEvent('A'), id: '\uFF01' },
        ],
        'no_stream',
      );
      await store.close();
      store = await LevelEventStore.open(dir);
      expect(await store.append('s-1', [{ ...newEvent('A'), id: '\uFF01' }], 'any')).toMatchObject({ nextExpectedRevision: 1 });
      expect(await store.readStream('s-1')).toHaveLength(2);
    } finally {
      await store.close();
    }
  });

  it('the same event id may be used in two streams', async () => {
    await withStore(async (store) => {
      const event = newEvent('A');
      await store.append('s-1', [event], 'no_stream');
      await store.append('s-2', [event], 'no_stream');
      expect((await store.readStream('s-2')).map((e) => e.id)).toEqual([event.id]);
    });
  });

  it('one failed append in a group commit does not affect the others', async () => {
    await withStore(async (store) => {
      await store.append('s-1', [newEvent('A')], 'no_stream');
      const results = await Promise.allSettled([
        store.append('s-1', [newEvent('B')], 0),
        store.append('s-2', [newEvent('X')], 5), // wrong: s-2 does not exist
        store.append('s-1', [newEvent('C')], 1), // sees B from the same group
        store.append('s-3', [newEvent('Y')], 'no_stream'),
      ]);
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
      expect((await store.readStream('s-1')).map((e) => e.type)).toEqual(['A', 'B', 'C']);
      expect(await store.readStream('s-2')).toEqual([]);
      const subscription = store.subscribeToAll();
      const { events } = await new SubscriptionReader(subscription).untilCaughtUp();
      await subscription.close();
      expect(events.map((e) => e.position)).toEqual(['1', '2', '3', '4'].map((n) => n.padStart(20, '0')));
    });
  });

  it('keeps everything across close and reopen, and goes on from there', async () => {
    const dir = tempDir();
    const first = await LevelEventStore.open(dir);
    const written = await first.append('s-1', [newEvent('A', { n: 1 }), newEvent('B', { n: 2 })], 'no_stream');
    const retried = newEvent('C');
    await first.append('s-2', [retried], 'no_stream');
    await first.close();

    const second = await LevelEventStore.open(dir);
    try {
      expect(await second.headPosition()).toBe('00000000000000000003');
      expect((await second.readStream('s-1')).map((e) => e.data)).toEqual([{ n: 1 }, { n: 2 }]);
      await expect(second.append('s-1', [newEvent('X')], 0)).rejects.toMatchObject({ actual: 1 });
      expect(await second.append('s-2', [retried], 'no_stream')).toEqual({ nextExpectedRevision: 0, position: '00000000000000000003' });
      const next = await second.append('s-1', [newEvent('D')], written.nextExpectedRevision);
      expect(next).toEqual({ nextExpectedRevision: 2, position: '00000000000000000004' });
    } finally {
      await second.close();
    }
  });

  it('lets only one store open a directory at a time', async () => {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir);
    try {
      await expect(LevelEventStore.open(dir)).rejects.toMatchObject({ code: 'store_locked' });
    } finally {
      await store.close();
    }
    const again = await LevelEventStore.open(dir);
    await again.close();
  });

  it('a subscriber too slow for the live buffer falls back to the log without a gap', async () => {
    await withStore(
      async (store) => {
        const cat = category();
        const subscription = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
        const reader = new SubscriptionReader(subscription);
        await reader.untilCaughtUp();
        await reader.quietFor(20); // now live
        // 100 events in groups while nobody reads: far over the buffer of 5.
        for (let i = 0; i < 20; i++) {
          await store.append(
            `${cat}-1`,
            Array.from({ length: 5 }, (_, j) => newEvent('E', { n: i * 5 + j })),
            'any',
          );
        }
        const events = await reader.events(100);
        expect(events.map((e) => e.data['n'])).toEqual(Array.from({ length: 100 }, (_, n) => n));
        expectStrictlyIncreasing(events.map((e) => e.position));
        await store.append(`${cat}-1`, [newEvent('Later')], 99);
        expect((await reader.events(1)).map((e) => e.type)).toEqual(['Later']);
        expect(reader.caughtUpCount).toBe(1);
        await subscription.close();
      },
      { liveBufferLimit: 5 },
    );
  });

  it('subscription from a position beyond the head waits for events past it', async () => {
    await withStore(async (store) => {
      await store.append('s-1', [newEvent('A')], 'no_stream');
      const subscription = store.subscribeToAll({ after: '00000000000000000003' });
      const reader = new SubscriptionReader(subscription);
      expect(await reader.untilCaughtUp()).toEqual({ events: [], caughtUpAt: '00000000000000000003' });
      await store.append('s-1', [newEvent('B'), newEvent('C'), newEvent('D')], 0);
      expect((await reader.events(1)).map((e) => e.type)).toEqual(['D']);
      await subscription.close();
    });
  });

  it('refuses a position that is not one of its own', async () => {
    await withStore(async (store) => {
      expect(() => store.subscribeToAll({ after: '00000000000000000001:00000000000000000001' })).toThrow(expect.objectContaining({ code: 'invalid_position' }));
    });
  });

  it('closing the store ends its subscriptions and refuses further calls', async () => {
    const store = await LevelEventStore.open(tempDir());
    await store.append('s-1', [newEvent('A')], 'no_stream');
    const subscription = store.subscribeToAll();
    const items: string[] = [];
    const iterating = (async () => {
      for await (const item of subscription) items.push(item.kind);
    })();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await store.close();
    await iterating;
    expect(items).toEqual(['event', 'caughtUp']);
    await expect(store.append('s-1', [newEvent('B')], 0)).rejects.toMatchObject({ code: 'store_closed' });
    await expect(store.readStream('s-1')).rejects.toMatchObject({ code: 'store_closed' });
  });

  it('appends queued when close() is called still complete', async () => {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir);
    const appends = Array.from({ length: 10 }, (_, i) => store.append(`s-${i}`, [newEvent('A')], 'no_stream'));
    await store.close();
    expect((await Promise.all(appends)).map((r) => r.nextExpectedRevision)).toEqual(Array(10).fill(0));
    const reopened = await LevelEventStore.open(dir);
    expect(await reopened.headPosition()).toBe('00000000000000000010');
    await reopened.close();
  });

  it('replays a larger log quickly and in order', async () => {
    await withStore(
      async (store) => {
        const total = 20_000;
        for (let b = 0; b < total / 500; b++) {
          await store.append(
            `usage-${b % 7}`,
            Array.from({ length: 500 }, (_, i) => newEvent('Used', { b, i, chain: 'eth' })),
            'any',
          );
        }
        const started = performance.now();
        const subscription = store.subscribeToAll();
        const { events } = await new SubscriptionReader(subscription).untilCaughtUp();
        const seconds = (performance.now() - started) / 1000;
        await subscription.close();
        expect(events).toHaveLength(total);
        expect(events[total - 1]!.position).toBe(String(total).padStart(20, '0'));
        // Generous bound for a loaded 2-core machine; the measured rate is ~100k+ events/s.
        expect(seconds).toBeLessThan(5);
      },
      { sync: false },
    );
  });
});

describe('LevelEventStore log and index stores', () => {
  const openDb = async (location: string): Promise<ClassicLevel<string, string>> => {
    const db = new ClassicLevel<string, string>(location, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
    await db.open();
    return db;
  };
  const logValue = (streamId: string, revision: number, event: NewEvent): string =>
    JSON.stringify({ streamId, revision, id: event.id, type: event.type, created: '2026-11-01T00:00:00.000Z', data: event.data, metadata: {} });

  /** Every later write of the store's index batches does `write` instead (a full or failing disk). */
  const failIndexWrites = (store: LevelEventStore, write: () => Promise<void>): void => {
    const index = (store as unknown as { stores: { index: ClassicLevel<string, string> } }).stores.index;
    const batch = index.batch.bind(index);
    index.batch = ((...args: Parameters<typeof batch>) => {
      const chained = batch(...(args as []));
      chained.write = write;
      return chained;
    }) as typeof index.batch;
  };

  it('keeps the log and its indexes in two LevelDB stores', async () => {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir);
    await store.append('a-1', [newEvent('A')], 'no_stream');
    await store.close();
    expect(existsSync(join(dir, 'log', 'CURRENT'))).toBe(true);
    expect(existsSync(join(dir, 'index', 'CURRENT'))).toBe(true);
    const log = await openDb(join(dir, 'log'));
    const index = await openDb(join(dir, 'index'));
    try {
      expect((await log.keys().all()).map((k) => k.slice(0, 2))).toEqual(['l\u0000']);
      expect(new Set((await index.keys().all()).map((k) => k.slice(0, 2)))).toEqual(new Set(['s\u0000', 'h\u0000', 'e\u0000', 'm\u0000']));
    } finally {
      await log.close();
      await index.close();
    }
  });

  it('indexes a stream by runs: one entry an append, however many events it holds', async () => {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir);
    await store.append(
      'a-1',
      Array.from({ length: 300 }, (_, n) => newEvent('A', { n })),
      'no_stream',
    );
    await store.append('a-1', [newEvent('A', { n: 300 })], 299);
    await store.append(
      'a-1',
      Array.from({ length: 5 }, (_, n) => newEvent('A', { n: 301 + n })),
      300,
    );
    await store.close();
    const index = await openDb(join(dir, 'index'));
    try {
      expect(await index.keys({ gte: 's\u0000a-1\u0000', lt: 's\u0000a-1\u0001' }).all()).toEqual([
        streamKey('a-1', 0),
        streamKey('a-1', 300),
        streamKey('a-1', 301),
      ]);
    } finally {
      await index.close();
    }
    const reopened = await LevelEventStore.open(dir);
    try {
      expect((await reopened.readStream('a-1')).map((e) => e.data['n'])).toEqual(Array.from({ length: 306 }, (_, n) => n));
      expect((await reopened.readStream('a-1', { fromRevision: 298, maxCount: 5 })).map((e) => e.revision)).toEqual([298, 299, 300, 301, 302]);
    } finally {
      await reopened.close();
    }
  });

  it('reads and goes on writing a store made with the log and its indexes in one LevelDB', async () => {
    const dir = tempDir();
    const [first, second] = [newEvent('A', { n: 0 }), newEvent('A', { n: 1 })];
    const legacy = await openDb(dir);
    await legacy.batch([
      { type: 'put', key: logKey(1), value: logValue('a-1', 0, first) },
      { type: 'put', key: streamKey('a-1', 0), value: pad(1) },
      { type: 'put', key: eventIdKey('a-1', first.id), value: `0 ${pad(1)}` },
      { type: 'put', key: logKey(2), value: logValue('a-1', 1, second) },
      { type: 'put', key: streamKey('a-1', 1), value: pad(2) },
      { type: 'put', key: eventIdKey('a-1', second.id), value: `1 ${pad(2)}` },
      { type: 'put', key: headKey('a-1'), value: '1' },
    ]);
    await legacy.close();

    let store = await LevelEventStore.open(dir);
    expect((await store.readStream('a-1')).map((e) => e.data)).toEqual([{ n: 0 }, { n: 1 }]);
    expect(await store.append('a-1', [second], 'any')).toEqual({ nextExpectedRevision: 1, position: pad(2) }); // an id it already has
    await expect(store.append('a-1', [newEvent('A', { n: 2 })], 0)).rejects.toBeInstanceOf(WrongExpectedRevisionError);
    await store.append('a-1', [newEvent('A', { n: 2 })], 1);
    await store.close();

    expect(existsSync(join(dir, 'log'))).toBe(false);
    store = await LevelEventStore.open(dir);
    try {
      expect((await store.readStream('a-1')).map((e) => [e.position, e.data])).toEqual([
        [pad(1), { n: 0 }],
        [pad(2), { n: 1 }],
        [pad(3), { n: 2 }],
      ]);
      const subscription = store.subscribeToAll();
      expect((await new SubscriptionReader(subscription).untilCaughtUp()).events).toHaveLength(3);
      await subscription.close();
    } finally {
      await store.close();
    }
  });

  it('rebuilds the indexes from the log when a crash left them behind it', async () => {
    const dir = tempDir();
    const events = [newEvent('A', { n: 0 }), newEvent('A', { n: 1 }), newEvent('A', { n: 2 })];
    let store = await LevelEventStore.open(dir);
    await store.append('a-1', [events[0]!], 'no_stream');
    await store.append('b-1', [newEvent('B')], 'no_stream');
    await store.append('a-1', [events[1]!, events[2]!], 0);
    await store.close();

    // What a crash after the last group's log batch and before its index batch leaves.
    const index = await openDb(join(dir, 'index'));
    await index.batch([
      { type: 'del', key: streamKey('a-1', 1) },
      { type: 'del', key: streamKey('a-1', 2) },
      { type: 'del', key: eventIdKey('a-1', events[1]!.id) },
      { type: 'del', key: eventIdKey('a-1', events[2]!.id) },
      { type: 'put', key: headKey('a-1'), value: '0' },
      { type: 'put', key: INDEXED_KEY, value: pad(2) },
    ]);
    await index.close();

    store = await LevelEventStore.open(dir);
    try {
      expect((await store.readStream('a-1')).map((e) => e.data)).toEqual([{ n: 0 }, { n: 1 }, { n: 2 }]);
      // The ids are known again (a retry adds nothing), and so is the head.
      expect(await store.append('a-1', [events[2]!], 'any')).toEqual({ nextExpectedRevision: 2, position: pad(4) });
      await expect(store.append('a-1', [newEvent('A')], 0)).rejects.toBeInstanceOf(WrongExpectedRevisionError);
      expect(await store.append('a-1', [newEvent('A', { n: 3 })], 2)).toEqual({ nextExpectedRevision: 3, position: pad(5) });
    } finally {
      await store.close();
    }
  });

  it('rebuilds a lost index store from the log', async () => {
    const dir = tempDir();
    let store = await LevelEventStore.open(dir);
    await store.append('a-1', [newEvent('A', { n: 0 }), newEvent('A', { n: 1 })], 'no_stream');
    await store.append('b-1', [newEvent('B')], 'no_stream');
    await store.close();
    rmSync(join(dir, 'index'), { recursive: true });

    store = await LevelEventStore.open(dir);
    try {
      expect((await store.readStream('a-1')).map((e) => e.data)).toEqual([{ n: 0 }, { n: 1 }]);
      expect((await store.readStream('b-1')).map((e) => e.type)).toEqual(['B']);
      await expect(store.append('b-1', [newEvent('B')], 'no_stream')).rejects.toBeInstanceOf(WrongExpectedRevisionError);
    } finally {
      await store.close();
    }
  });

  it('fails every later call with store_failed when an index batch fails after its log batch, and a reopen recovers', async () => {
    const dir = tempDir();
    let store = await LevelEventStore.open(dir);
    await store.append('a-1', [newEvent('A', { n: 0 })], 'no_stream');
    failIndexWrites(store, () => Promise.reject(new Error('disk full')));
    // Its log entries are on disk: the append stands.
    expect(await store.append('a-1', [newEvent('A', { n: 1 })], 0)).toEqual({ nextExpectedRevision: 1, position: pad(2) });
    await expect(store.append('a-1', [newEvent('A')], 1)).rejects.toMatchObject({ code: 'store_failed' });
    await expect(store.readStream('a-1')).rejects.toMatchObject({ code: 'store_failed' });
    await store.close();

    store = await LevelEventStore.open(dir);
    try {
      expect((await store.readStream('a-1')).map((e) => e.data)).toEqual([{ n: 0 }, { n: 1 }]);
      await store.append('a-1', [newEvent('A', { n: 2 })], 1);
    } finally {
      await store.close();
    }
  });

  it('does not commit an append that was queued while an index batch failed: it would be planned against the stale index', async () => {
    const dir = tempDir();
    let store = await LevelEventStore.open(dir);
    await store.append('a-1', [newEvent('A', { n: 0 })], 'no_stream');
    let indexWriteStarted: () => void = () => {};
    const started = new Promise<void>((resolve) => {
      indexWriteStarted = resolve;
    });
    failIndexWrites(store, () => {
      indexWriteStarted();
      return new Promise((_, reject) => setTimeout(() => reject(new Error('disk full')), 50));
    });
    const first = store.append('a-1', [newEvent('A', { n: 1 })], 0);
    await started;
    // Queued behind the failing group, expecting the revision the index still shows as the head.
    const queued = store.append('a-1', [newEvent('A', { n: 'stale' })], 0);
    expect(await first).toEqual({ nextExpectedRevision: 1, position: pad(2) });
    await expect(queued).rejects.toMatchObject({ code: 'store_failed' });
    await store.close();

    store = await LevelEventStore.open(dir);
    try {
      expect((await store.readStream('a-1')).map((e) => [e.revision, e.data])).toEqual([
        [0, { n: 0 }],
        [1, { n: 1 }],
      ]);
    } finally {
      await store.close();
    }
  });
});

describe('LevelEventStore truncation', () => {
  const openDb = async (location: string): Promise<ClassicLevel<string, string>> => {
    const db = new ClassicLevel<string, string>(location, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
    await db.open();
    return db;
  };
  /** Every key of the store's two LevelDBs, with the store closed. */
  const keysOf = async (dir: string): Promise<{ log: string[]; index: string[] }> => {
    const log = await openDb(join(dir, 'log'));
    const index = await openDb(join(dir, 'index'));
    try {
      return { log: await log.keys().all(), index: await index.keys().all() };
    } finally {
      await log.close();
      await index.close();
    }
  };
  /** Bytes of the files under `dir`. */
  const diskBytes = (dir: string): number =>
    readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .reduce((sum, entry) => sum + statSync(join(entry.parentPath, entry.name)).size, 0);

  it("deletes the dropped events' log entries, stream runs and ids; keeps the head and the other streams", async () => {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir);
    const a = Array.from({ length: 7 }, (_, n) => newEvent('A', { n }));
    await store.append('a-1', a.slice(0, 3), 'no_stream'); // seqs 1-3
    await store.append('b-1', [newEvent('B')], 'no_stream'); // seq 4
    await store.append('a-1', a.slice(3), 2); // seqs 5-8, revisions 3-6
    await store.truncateBefore('a-1', 4);
    await store.close();
    const { log, index } = await keysOf(dir);
    expect(log).toEqual([logKey(4), logKey(6), logKey(7), logKey(8), 'm\u0000lastseq']);
    expect(index.filter((k) => k.startsWith('s\u0000a-1\u0000'))).toEqual([streamKey('a-1', 4)]);
    expect(index.filter((k) => k.startsWith('e\u0000a-1\u0000')).sort()).toEqual(
      a
        .slice(4)
        .map((e) => eventIdKey('a-1', e.id))
        .sort(),
    );
    expect(index).toContain(headKey('a-1'));
    expect(index).toContain('t\u0000a-1');
    expect(index.some((k) => k.startsWith('p\u0000'))).toBe(false);
    const reopened = await LevelEventStore.open(dir);
    try {
      expect((await reopened.readStream('a-1')).map((e) => [e.revision, e.position, e.data['n']])).toEqual([
        [4, pad(6), 4],
        [5, pad(7), 5],
        [6, pad(8), 6],
      ]);
      expect((await reopened.append('a-1', [newEvent('A', { n: 7 })], 6)).position).toBe(pad(9));
      // The id of a dropped event is forgotten: appended again, it is a new event.
      expect((await reopened.append('a-1', [a[0]!], 'any')).nextExpectedRevision).toBe(8);
    } finally {
      await reopened.close();
    }
  });

  it("hands out no position twice after a truncation dropped the log's last entries, across a reopen", async () => {
    const dir = tempDir();
    let store = await LevelEventStore.open(dir);
    await store.append('a-1', [newEvent('A')], 'no_stream');
    const last = await store.append('b-1', [newEvent('B'), newEvent('B')], 'no_stream');
    await store.truncateBefore('b-1', 2);
    await store.close();
    store = await LevelEventStore.open(dir);
    try {
      expect(await store.headPosition()).toBe(last.position);
      const subscription = store.subscribeToAll({ after: last.position });
      const reader = new SubscriptionReader(subscription);
      expect((await reader.untilCaughtUp()).caughtUpAt).toBe(last.position);
      const next = await store.append('c-1', [newEvent('C')], 'no_stream');
      expect(next.position).toBe(pad(4));
      expect((await reader.events(1)).map((e) => e.position)).toEqual([pad(4)]);
      await subscription.close();
    } finally {
      await store.close();
    }
  });

  it('finishes at open a truncation that a crash interrupted after its truncation point was written', async () => {
    const dir = tempDir();
    let store = await LevelEventStore.open(dir);
    await store.append(
      'a-1',
      Array.from({ length: 5 }, (_, n) => newEvent('A', { n })),
      'no_stream',
    );
    await store.append('b-1', [newEvent('B')], 'no_stream');
    await store.close();
    // What truncateBefore('a-1', 3) writes before any delete.
    const index = await openDb(join(dir, 'index'));
    await index.batch([
      { type: 'put', key: 't\u0000a-1', value: '3' },
      { type: 'put', key: 'p\u0000a-1', value: '3' },
    ]);
    await index.close();
    store = await LevelEventStore.open(dir);
    try {
      expect((await store.readStream('a-1')).map((e) => e.revision)).toEqual([3, 4]);
      const subscription = store.subscribeToAll();
      const { events } = await new SubscriptionReader(subscription).untilCaughtUp();
      await subscription.close();
      expect(events.map((e) => `${e.streamId}@${e.revision}`)).toEqual(['a-1@3', 'a-1@4', 'b-1@0']);
    } finally {
      await store.close();
    }
    const { log, index: indexKeys } = await keysOf(dir);
    expect(log.filter((k) => k.startsWith('l\u0000'))).toEqual([logKey(4), logKey(5), logKey(6)]);
    expect(indexKeys.filter((k) => k.startsWith('e\u0000a-1\u0000'))).toHaveLength(2);
    expect(indexKeys.some((k) => k.startsWith('p\u0000'))).toBe(false);
  });

  it('a stream read that began before a truncation still reads the events after its point', async () => {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir);
    try {
      for (let i = 0; i < 50; i++) {
        await store.append(
          'a-1',
          Array.from({ length: 20 }, (_, n) => newEvent('A', { n: 20 * i + n })),
          i === 0 ? 'no_stream' : 20 * i - 1,
        );
      }
      // Reads racing the truncation: each sees either the whole stream or what is left of it, never a hole.
      const reads = Array.from({ length: 20 }, () => store.readStream('a-1'));
      await store.truncateBefore('a-1', 900);
      for (const read of await Promise.all([...reads, store.readStream('a-1')])) {
        const n = read.map((e) => e.data['n'] as number);
        expect(n).toEqual(Array.from({ length: n.length }, (_, i) => 1000 - n.length + i));
      }
      expect(await store.readStream('a-1')).toHaveLength(100);
    } finally {
      await store.close();
    }
  });

  it('gives back the disk space of what it dropped', async () => {
    const dir = tempDir();
    const store = await LevelEventStore.open(dir, { sync: false });
    const noise = (): string => randomBytes(150).toString('hex'); // 300 bytes LevelDB cannot compress
    try {
      for (let i = 0; i < 200; i++) {
        await store.append(
          'usage-a',
          Array.from({ length: 100 }, (_, n) => newEvent('A', { n: 100 * i + n, noise: noise() })),
          i === 0 ? 'no_stream' : 100 * i - 1,
        );
        await store.append('token-b', [newEvent('B', { i })], i === 0 ? 'no_stream' : i - 1);
      }
      await store.compactDropped(); // nothing dropped yet: LevelDB's own state only
      const before = diskBytes(dir);
      await store.truncateBefore('usage-a', 19_900);
      await store.compactDropped();
      const after = diskBytes(dir);
      expect(before).toBeGreaterThan(20_000 * 300);
      expect(after).toBeLessThan(before / 4);
      expect(await store.readStream('token-b')).toHaveLength(200);
      expect(await store.readStream('usage-a')).toHaveLength(100);
    } finally {
      await store.close();
    }
  });
});

describe('openEventStore', () => {
  it('opens the LevelDB store under <dataDir>/eventstore when no URL is given', async () => {
    const dataDir = tempDir();
    const store: EventStore = await openEventStore({ dataDir });
    try {
      expect(store).toBeInstanceOf(LevelEventStore);
      await store.append('s-1', [newEvent('A')], 'no_stream');
    } finally {
      await store.close();
    }
    await expect(LevelEventStore.open(join(dataDir, 'eventstore'))).resolves.toBeInstanceOf(LevelEventStore);
  });
});
