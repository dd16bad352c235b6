import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventStoreError } from '../../src/infra/eventstore/errors.js';
import {
  type EventStore,
  type NewEvent,
  type StoredEvent,
  type Subscription,
  type SubscriptionItem,
  WrongExpectedRevisionError,
} from '../../src/infra/eventstore/port.js';

export interface EventStoreContractOptions {
  /**
   * What must happen before truncated events leave the global log: on EventStoreDB, a scavenge
   * (the in-memory server's `scavenge()`). `null`: nothing the suite can do (a real server), so
   * it does not look for their absence there. Other stores: nothing (absent).
   */
  scavenge?: (() => Promise<void> | void) | null;
}

/**
 * The behaviour every event store adapter must have. Streams and categories are unique per
 * test (`c<random>-…`), and every subscription is filtered to its test's categories, so the
 * suite can run against a shared EventStoreDB holding other data.
 */
export function describeEventStoreContract(name: string, open: () => Promise<EventStore>, options: EventStoreContractOptions = {}): void {
  describe(`${name} (event store contract)`, () => {
    let store: EventStore;
    beforeAll(async () => {
      store = await open();
    });
    afterAll(async () => {
      await store?.close();
    });

    describe('append and readStream', () => {
      it('stores events in order with revisions, ids, data, metadata, positions and creation time', async () => {
        const stream = `${category()}-1`;
        const before = Date.now();
        const events = [
          newEvent('Opened', { n: 1, nested: { list: [1, 'two', null] } }, { correlationId: 'abc' }),
          newEvent('Renamed', { n: 2, name: 'ünïcødé ✓' }),
          newEvent('Closed', { n: 3 }),
        ];
        const result = await store.append(stream, events, 'no_stream');
        const read = await store.readStream(stream);

        expect(read.map((e) => [e.streamId, e.revision, e.id, e.type, e.data])).toEqual(events.map((e, i) => [stream, i, e.id, e.type, e.data]));
        expect(read[0]!.metadata).toEqual({ correlationId: 'abc' });
        expect(read[1]!.metadata).toEqual({});
        for (const event of read) {
          const created = Date.parse(event.created);
          expect(event.created).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
          expect(created).toBeGreaterThanOrEqual(before - 60_000); // a server's clock may differ a little
          expect(created).toBeLessThanOrEqual(Date.now() + 60_000);
        }
        expectStrictlyIncreasing(read.map((e) => e.position));
        expect(result).toEqual({ nextExpectedRevision: 2, position: read[2]!.position });
      });

      it('appends after the existing events and reports the new last revision', async () => {
        const stream = `${category()}-1`;
        const first = await store.append(stream, [newEvent('A'), newEvent('B')], 'no_stream');
        const second = await store.append(stream, [newEvent('C')], 1);
        expect(second.nextExpectedRevision).toBe(2);
        expect(second.position > first.position).toBe(true);
        const read = await store.readStream(stream);
        expect(read.map((e) => [e.revision, e.type])).toEqual([
          [0, 'A'],
          [1, 'B'],
          [2, 'C'],
        ]);
        expect(read[2]!.position).toBe(second.position);
      });

      it('reads a stream that does not exist as empty', async () => {
        expect(await store.readStream(`${category()}-missing`)).toEqual([]);
        expect(await store.readStream(`${category()}-missing`, { fromRevision: 3, maxCount: 2 })).toEqual([]);
      });

      it('reads a slice with fromRevision and maxCount', async () => {
        const stream = `${category()}-1`;
        await store.append(
          stream,
          ['A', 'B', 'C', 'D', 'E'].map((t) => newEvent(t)),
          'no_stream',
        );
        expect((await store.readStream(stream, { fromRevision: 2 })).map((e) => e.type)).toEqual(['C', 'D', 'E']);
        expect((await store.readStream(stream, { maxCount: 2 })).map((e) => e.type)).toEqual(['A', 'B']);
        expect((await store.readStream(stream, { fromRevision: 1, maxCount: 3 })).map((e) => e.revision)).toEqual([1, 2, 3]);
        expect(await store.readStream(stream, { fromRevision: 5 })).toEqual([]);
      });

      it('reads a slice across appends that other streams came between', async () => {
        const stream = `${category()}-1`;
        const other = `${category()}-1`;
        await store.append(
          stream,
          ['A', 'B', 'C'].map((t) => newEvent(t)),
          'no_stream',
        );
        await store.append(other, [newEvent('Z')], 'no_stream');
        await store.append(stream, [newEvent('D')], 2);
        await store.append(other, [newEvent('Y')], 0);
        await store.append(
          stream,
          ['E', 'F', 'G'].map((t) => newEvent(t)),
          3,
        );
        const types = async (options: { fromRevision?: number; maxCount?: number }) => (await store.readStream(stream, options)).map((e) => e.type);
        expect(await types({})).toEqual(['A', 'B', 'C', 'D', 'E', 'F', 'G']);
        expect(await types({ fromRevision: 1, maxCount: 5 })).toEqual(['B', 'C', 'D', 'E', 'F']);
        expect(await types({ fromRevision: 3, maxCount: 1 })).toEqual(['D']);
        expect(await types({ fromRevision: 5 })).toEqual(['F', 'G']);
        expect(await types({ fromRevision: 7 })).toEqual([]);
        const read = await store.readStream(stream, { fromRevision: 2, maxCount: 3 });
        expect(read.map((e) => e.revision)).toEqual([2, 3, 4]);
        expectStrictlyIncreasing(read.map((e) => e.position));
      });

      it('keeps streams apart', async () => {
        const cat = category();
        await store.append(`${cat}-a`, [newEvent('A1')], 'no_stream');
        await store.append(`${cat}-b`, [newEvent('B1')], 'no_stream');
        await store.append(`${cat}-a`, [newEvent('A2')], 0);
        expect((await store.readStream(`${cat}-a`)).map((e) => e.type)).toEqual(['A1', 'A2']);
        expect((await store.readStream(`${cat}-b`)).map((e) => e.type)).toEqual(['B1']);
      });
    });

    describe('expected revision', () => {
      it('no_stream: accepted for a new stream, refused once it exists', async () => {
        const stream = `${category()}-1`;
        await store.append(stream, [newEvent('A')], 'no_stream');
        await expectWrongRevision(store.append(stream, [newEvent('B')], 'no_stream'), stream, 'no_stream', 0);
      });

      it('stream_exists: refused for a new stream, accepted once it exists', async () => {
        const stream = `${category()}-1`;
        await expectWrongRevision(store.append(stream, [newEvent('A')], 'stream_exists'), stream, 'stream_exists', 'no_stream');
        await store.append(stream, [newEvent('A')], 'any');
        expect((await store.append(stream, [newEvent('B')], 'stream_exists')).nextExpectedRevision).toBe(1);
      });

      it('a number: the revision of the last event, nothing else', async () => {
        const stream = `${category()}-1`;
        await expectWrongRevision(store.append(stream, [newEvent('A')], 0), stream, 0, 'no_stream');
        await store.append(stream, [newEvent('A'), newEvent('B')], 'no_stream');
        await expectWrongRevision(store.append(stream, [newEvent('C')], 0), stream, 0, 1);
        await expectWrongRevision(store.append(stream, [newEvent('C')], 2), stream, 2, 1);
        expect((await store.append(stream, [newEvent('C')], 1)).nextExpectedRevision).toBe(2);
        expect(await store.readStream(stream)).toHaveLength(3);
      });

      it('any: always accepted', async () => {
        const stream = `${category()}-1`;
        expect((await store.append(stream, [newEvent('A')], 'any')).nextExpectedRevision).toBe(0);
        expect((await store.append(stream, [newEvent('B')], 'any')).nextExpectedRevision).toBe(1);
      });

      it('20 concurrent appends at the same expected revision: exactly one wins', async () => {
        const stream = `${category()}-1`;
        await store.append(stream, [newEvent('Start')], 'no_stream');
        const outcomes = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => store.append(stream, [newEvent('Racer', { i })], 0)));
        const won = outcomes.filter((o) => o.status === 'fulfilled');
        const lost = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected');
        expect(won).toHaveLength(1);
        expect(lost).toHaveLength(19);
        for (const o of lost) expect(o.reason).toBeInstanceOf(WrongExpectedRevisionError);
        const read = await store.readStream(stream);
        expect(read.map((e) => e.type)).toEqual(['Start', 'Racer']);
      });

      it('20 concurrent creations of the same stream: exactly one wins', async () => {
        const stream = `${category()}-1`;
        const outcomes = await Promise.allSettled(
          Array.from({ length: 20 }, (_, i) => store.append(stream, [newEvent('Created', { i }), newEvent('Named', { i })], 'no_stream')),
        );
        expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
        for (const o of outcomes) if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(WrongExpectedRevisionError);
        const read = await store.readStream(stream);
        expect(read).toHaveLength(2);
        expect(read[0]!.data).toEqual(read[1]!.data); // both events come from the same append
      });
    });

    describe('idempotent appends', () => {
      it('re-appending the same event ids writes nothing and answers as the first time', async () => {
        const stream = `${category()}-1`;
        const batch = [newEvent('A'), newEvent('B')];
        const first = await store.append(stream, batch, 'no_stream');
        const retry = await store.append(stream, batch, 'no_stream');
        expect(retry).toEqual(first);
        expect(await store.readStream(stream)).toHaveLength(2);
      });

      it('a retry after the stream moved on still writes nothing', async () => {
        const stream = `${category()}-1`;
        const batch = [newEvent('A'), newEvent('B')];
        const first = await store.append(stream, batch, 'no_stream');
        await store.append(stream, [newEvent('C')], 1);
        const retry = await store.append(stream, batch, 'no_stream');
        expect(retry).toEqual(first);
        expect((await store.readStream(stream)).map((e) => e.type)).toEqual(['A', 'B', 'C']);
      });

      // What exactly-once usage appends (src/infra/usage/exactlyOnce.ts) rely on.
      it("a refused append names the stream's last revision, for no_stream and for a stale revision", async () => {
        const stream = `${category()}-1`;
        await store.append(stream, [newEvent('A'), newEvent('B'), newEvent('C')], 'no_stream');
        await expect(store.append(stream, [newEvent('D')], 'no_stream')).rejects.toMatchObject({ actual: 2 });
        await expect(store.append(stream, [newEvent('D')], 0)).rejects.toMatchObject({ actual: 2 });
        await expect(store.append(`${category()}-1`, [newEvent('D')], 0)).rejects.toMatchObject({ actual: 'no_stream' });
        expect(await store.readStream(stream)).toHaveLength(3);
      });

      it('at a stale revision, an append repeating only some of the events after it writes nothing', async () => {
        const stream = `${category()}-1`;
        const b = newEvent('B');
        await store.append(stream, [newEvent('A'), b], 'no_stream');
        await expect(store.append(stream, [b, newEvent('C')], 0)).rejects.toThrow();
        await expect(store.append(stream, [newEvent('C'), b], 0)).rejects.toThrow();
        expect((await store.readStream(stream)).map((e) => e.type)).toEqual(['A', 'B']);
      });

      it('a retried single event with its original expected revision writes nothing', async () => {
        const stream = `${category()}-1`;
        await store.append(stream, [newEvent('A')], 'no_stream');
        const event = newEvent('B');
        const first = await store.append(stream, [event], 0);
        const retry = await store.append(stream, [event], 0);
        expect(retry.nextExpectedRevision).toBe(first.nextExpectedRevision);
        expect(await store.readStream(stream)).toHaveLength(2);
      });
    });

    describe('subscribeToAll', () => {
      it('delivers history of the chosen streams in order, then caughtUp, then live events', async () => {
        const wanted = category();
        const other = category();
        await store.append(`${wanted}-1`, [newEvent('W1'), newEvent('W2')], 'no_stream');
        await store.append(`${other}-1`, [newEvent('O1')], 'no_stream');
        const last = await store.append(`${wanted}-2`, [newEvent('W3')], 'no_stream');

        const subscription = store.subscribeToAll({ streamPrefixes: [`${wanted}-`] });
        const reader = new SubscriptionReader(subscription);
        try {
          const history = await reader.untilCaughtUp();
          expect(history.events.map((e) => e.type)).toEqual(['W1', 'W2', 'W3']);
          expectStrictlyIncreasing(history.events.map((e) => e.position));
          expect(history.caughtUpAt).not.toBeNull();
          expect(history.caughtUpAt! >= last.position).toBe(true);

          await store.append(`${other}-1`, [newEvent('O2')], 0);
          const live = await store.append(`${wanted}-1`, [newEvent('W4')], 1);
          await store.append(`${wanted}-3`, [newEvent('W5'), newEvent('W6')], 'no_stream');
          const liveEvents = await reader.events(3);
          expect(liveEvents.map((e) => e.type)).toEqual(['W4', 'W5', 'W6']);
          expect(liveEvents[0]!.position).toBe(live.position);
          expect(liveEvents[0]!.position > history.caughtUpAt!).toBe(true);
          expectStrictlyIncreasing([...history.events, ...liveEvents].map((e) => e.position));
          expect(reader.caughtUpCount).toBe(1);
        } finally {
          await subscription.close();
        }
      });

      it('delivers the same events as readStream, with the same fields', async () => {
        const cat = category();
        await store.append(`${cat}-1`, [newEvent('A', { x: 1 }, { m: true }), newEvent('B', { y: [1, 2] })], 'no_stream');
        const subscription = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
        try {
          const { events } = await new SubscriptionReader(subscription).untilCaughtUp();
          expect(events).toEqual(await store.readStream(`${cat}-1`));
        } finally {
          await subscription.close();
        }
      });

      it('delivers live events with the same fields as readStream', async () => {
        const cat = category();
        const subscription = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
        const reader = new SubscriptionReader(subscription);
        try {
          await reader.untilCaughtUp();
          expect(await reader.quietFor(50), 'waiting for live events').toEqual([]);
          await store.append(`${cat}-1`, [newEvent('A', { x: 1, s: 'é"\\', n: null }, { m: true }), newEvent('B', { y: [1, { z: 2 }] })], 'no_stream');
          const live = await reader.events(2);
          expect(live).toStrictEqual(await store.readStream(`${cat}-1`));
          expect(live[1]!.metadata).toStrictEqual({});
        } finally {
          await subscription.close();
        }
      });

      it('starts strictly after a given position', async () => {
        const cat = category();
        await store.append(`${cat}-1`, [newEvent('A'), newEvent('B')], 'no_stream');
        const [, b] = await store.readStream(`${cat}-1`);
        await store.append(`${cat}-2`, [newEvent('C')], 'no_stream');
        await store.append(`${cat}-1`, [newEvent('D')], 1);

        const subscription = store.subscribeToAll({ after: b!.position, streamPrefixes: [`${cat}-`] });
        try {
          const reader = new SubscriptionReader(subscription);
          const { events } = await reader.untilCaughtUp();
          expect(events.map((e) => e.type)).toEqual(['C', 'D']);
          await store.append(`${cat}-2`, [newEvent('E')], 0);
          expect((await reader.events(1)).map((e) => e.type)).toEqual(['E']);
        } finally {
          await subscription.close();
        }
      });

      it('from the caughtUp position of one subscription, a new one sees only what came later', async () => {
        const cat = category();
        await store.append(`${cat}-1`, [newEvent('A')], 'no_stream');
        const first = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
        const { caughtUpAt } = await new SubscriptionReader(first).untilCaughtUp();
        await first.close();
        await store.append(`${cat}-1`, [newEvent('B')], 0);

        const second = store.subscribeToAll({ after: caughtUpAt!, streamPrefixes: [`${cat}-`] });
        try {
          const { events } = await new SubscriptionReader(second).untilCaughtUp();
          expect(events.map((e) => e.type)).toEqual(['B']);
        } finally {
          await second.close();
        }
      });

      it('filters by several prefixes', async () => {
        const [a, b, c] = [category(), category(), category()];
        await store.append(`${a}-1`, [newEvent('A')], 'no_stream');
        await store.append(`${b}-1`, [newEvent('B')], 'no_stream');
        await store.append(`${c}-1`, [newEvent('C')], 'no_stream');
        const subscription = store.subscribeToAll({ streamPrefixes: [`${a}-`, `${c}-`] });
        try {
          const { events } = await new SubscriptionReader(subscription).untilCaughtUp();
          expect(events.map((e) => e.type)).toEqual(['A', 'C']);
        } finally {
          await subscription.close();
        }
      });

      it('loses and repeats nothing when appends race the catch-up', async () => {
        const cat = category();
        const writers = 4;
        const perWriter = 60;
        const old = 300;
        // History first (more than one read batch), so a catch-up is still reading while appends go on.
        for (let w = 0; w < writers; w++) {
          await store.append(
            `${cat}-${w}`,
            Array.from({ length: old }, (_, i) => newEvent('Old', { w, i })),
            'no_stream',
          );
        }
        // Subscriptions start at different moments of the appending, each one a chance to hit the race.
        const expected = writers * (old + perWriter);
        const subscriptions: Subscription[] = [];
        const readers: Array<{ reader: SubscriptionReader; received: Promise<StoredEvent[]> }> = [];
        const subscribe = (): void => {
          const subscription = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
          const reader = new SubscriptionReader(subscription);
          subscriptions.push(subscription);
          readers.push({ reader, received: reader.events(expected) }); // reading while the appends go on
        };
        subscribe();
        try {
          await Promise.all(
            Array.from({ length: writers }, async (_, w) => {
              for (let i = 0; i < perWriter; i++) {
                await store.append(`${cat}-${w}`, [newEvent('New', { w, i })], old - 1 + i);
                if (w === 0 && i % 10 === 5) subscribe();
              }
            }),
          );
          for (const { reader, received: receiving } of readers) {
            const received = await receiving;
            // Nothing more arrives (every event was delivered exactly once), bar a late caughtUp.
            expect(await reader.quietFor(100)).toEqual([]);
            expect(reader.caughtUpCount).toBe(1);
            expect(new Set(received.map((e) => e.id)).size).toBe(expected);
            expectStrictlyIncreasing(received.map((e) => e.position));
            for (let w = 0; w < writers; w++) {
              const revisions = received.filter((e) => e.streamId === `${cat}-${w}`).map((e) => e.revision);
              expect(revisions).toEqual(Array.from({ length: old + perWriter }, (_, i) => i));
            }
          }
        } finally {
          await Promise.all(subscriptions.map((subscription) => subscription.close()));
        }
      });

      it('ends the iteration when closed', async () => {
        const cat = category();
        await store.append(`${cat}-1`, [newEvent('A')], 'no_stream');
        const subscription = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
        const seen: SubscriptionItem[] = [];
        const iterating = (async () => {
          for await (const item of subscription) {
            seen.push(item);
            if (item.kind === 'caughtUp') void subscription.close();
          }
        })();
        await withTimeout(iterating, 5000, 'iteration did not end after close()');
        expect(seen.map((i) => i.kind)).toEqual(['event', 'caughtUp']);
      });
    });

    describe('truncateBefore', () => {
      /** The events of the categories' streams in the global log, from the start. */
      const globalLog = async (...categories: string[]): Promise<StoredEvent[]> => {
        await options.scavenge?.();
        const subscription = store.subscribeToAll({ streamPrefixes: categories.map((c) => `${c}-`) });
        try {
          return (await new SubscriptionReader(subscription).untilCaughtUp()).events;
        } finally {
          await subscription.close();
        }
      };
      const seesGlobalLog = options.scavenge !== null;

      it('drops the events before the revision from stream reads; the others keep their revisions and positions', async () => {
        const stream = `${category()}-1`;
        await store.append(
          stream,
          ['A', 'B', 'C'].map((t) => newEvent(t)),
          'no_stream',
        );
        await store.append(`${category()}-1`, [newEvent('Other')], 'no_stream');
        await store.append(
          stream,
          ['D', 'E'].map((t) => newEvent(t)),
          2,
        );
        const before = await store.readStream(stream);
        await store.truncateBefore(stream, 2); // inside the first append
        expect(await store.readStream(stream)).toEqual(before.slice(2));
        expect((await store.readStream(stream, { maxCount: 2 })).map((e) => [e.revision, e.type])).toEqual([
          [2, 'C'],
          [3, 'D'],
        ]);
        expect((await store.readStream(stream, { fromRevision: 1, maxCount: 1 })).map((e) => e.type)).toEqual(['C']);
        expect((await store.readStream(stream, { fromRevision: 4 })).map((e) => e.type)).toEqual(['E']);
      });

      it('keeps the revisions: expected revisions are checked against the last one, and appends go on from it', async () => {
        const stream = `${category()}-1`;
        await store.append(
          stream,
          ['A', 'B', 'C'].map((t) => newEvent(t)),
          'no_stream',
        );
        await store.truncateBefore(stream, 2);
        await expectWrongRevision(store.append(stream, [newEvent('D')], 'no_stream'), stream, 'no_stream', 2);
        await expectWrongRevision(store.append(stream, [newEvent('D')], 0), stream, 0, 2);
        expect((await store.append(stream, [newEvent('D')], 2)).nextExpectedRevision).toBe(3);
        expect((await store.readStream(stream)).map((e) => [e.revision, e.type])).toEqual([
          [2, 'C'],
          [3, 'D'],
        ]);
      });

      it('drops them from the global log: a subscription from the start sees only what is left, in order', async () => {
        const cat = category();
        const other = category();
        // Many appends, each its own run of events, between appends to another stream.
        for (let i = 0; i < 30; i++) {
          await store.append(
            `${cat}-1`,
            Array.from({ length: 10 }, (_, j) => newEvent('A', { n: 10 * i + j })),
            i === 0 ? 'no_stream' : 10 * i - 1,
          );
          await store.append(`${other}-1`, [newEvent('B', { n: i })], i === 0 ? 'no_stream' : i - 1);
        }
        await store.truncateBefore(`${cat}-1`, 157);
        const kept = await store.readStream(`${cat}-1`);
        expect(kept.map((e) => e.data['n'])).toEqual(Array.from({ length: 300 - 157 }, (_, i) => 157 + i));
        const log = await globalLog(cat, other);
        expectStrictlyIncreasing(log.map((e) => e.position));
        expect(log.filter((e) => e.streamId === `${other}-1`)).toHaveLength(30);
        const mine = log.filter((e) => e.streamId === `${cat}-1`);
        if (seesGlobalLog) expect(mine).toEqual(kept);
        else expect(mine.slice(-kept.length)).toEqual(kept);
      });

      it('past the last event: drops every event, and none appended later; positions go on past the dropped ones', async () => {
        const cat = category();
        const stream = `${cat}-1`;
        const dropped = await store.append(
          stream,
          ['A', 'B', 'C'].map((t) => newEvent(t)),
          'no_stream',
        );
        await store.truncateBefore(stream, 1000);
        expect(await store.readStream(stream)).toEqual([]);
        if (seesGlobalLog) expect(await globalLog(cat)).toEqual([]);
        const next = await store.append(stream, [newEvent('D')], 2);
        expect(next.nextExpectedRevision).toBe(3);
        expect(next.position > dropped.position).toBe(true);
        const read = await store.readStream(stream);
        expect(read.map((e) => [e.revision, e.type])).toEqual([[3, 'D']]);
        if (seesGlobalLog) expect(await globalLog(cat)).toEqual(read);
        // A truncation of the stream as it is now drops that one too.
        await store.truncateBefore(stream, 4);
        expect(await store.readStream(stream)).toEqual([]);
      });

      it('an earlier revision than before, or 0, changes nothing', async () => {
        const stream = `${category()}-1`;
        await store.append(
          stream,
          ['A', 'B', 'C', 'D'].map((t) => newEvent(t)),
          'no_stream',
        );
        await store.truncateBefore(stream, 0);
        expect(await store.readStream(stream)).toHaveLength(4);
        await store.truncateBefore(stream, 3);
        await store.truncateBefore(stream, 1);
        expect((await store.readStream(stream)).map((e) => e.type)).toEqual(['D']);
        await store.truncateBefore(stream, 3);
        expect((await store.readStream(stream)).map((e) => e.type)).toEqual(['D']);
      });

      it('a stream that does not exist: nothing happens, and it can be created afterwards from revision 0', async () => {
        const stream = `${category()}-missing`;
        await store.truncateBefore(stream, 5);
        expect(await store.readStream(stream)).toEqual([]);
        expect((await store.append(stream, [newEvent('A')], 'no_stream')).nextExpectedRevision).toBe(0);
        expect((await store.readStream(stream)).map((e) => e.type)).toEqual(['A']);
      });

      it('refuses a revision that is not a non-negative whole number, changing nothing', async () => {
        const stream = `${category()}-1`;
        await store.append(stream, [newEvent('A'), newEvent('B')], 'no_stream');
        for (const revision of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
          const error = await store.truncateBefore(stream, revision).then(
            () => undefined,
            (e: unknown) => e,
          );
          expect(error, String(revision)).toBeInstanceOf(EventStoreError);
          expect(error).toMatchObject({ code: 'invalid_truncation' });
        }
        expect(await store.readStream(stream)).toHaveLength(2);
      });
    });

    describe('headPosition', () => {
      it('is at or after the position of the last append', async () => {
        const result = await store.append(`${category()}-1`, [newEvent('A')], 'no_stream');
        const head = await store.headPosition();
        expect(head).not.toBeNull();
        expect(head! >= result.position).toBe(true);
        const next = await store.append(`${category()}-1`, [newEvent('B')], 'no_stream');
        expect(next.position > head!).toBe(true);
        expect((await store.headPosition())! >= next.position).toBe(true);
      });
    });
  });
}

/** A category name no other test or run uses: no `-` inside, per the stream naming rule. */
export function category(): string {
  return `c${randomBytes(6).toString('hex')}`;
}

export function newEvent(type: string, data: Record<string, unknown> = {}, metadata?: Record<string, unknown>): NewEvent {
  return metadata ? { id: randomUUID(), type, data, metadata } : { id: randomUUID(), type, data };
}

export function expectStrictlyIncreasing(positions: string[]): void {
  for (let i = 1; i < positions.length; i++) {
    expect(positions[i]! > positions[i - 1]!, `position ${positions[i]} after ${positions[i - 1]}`).toBe(true);
  }
}

async function expectWrongRevision(
  append: Promise<unknown>,
  streamId: string,
  expected: WrongExpectedRevisionError['expected'],
  actual: WrongExpectedRevisionError['actual'],
): Promise<void> {
  const error = await append.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(WrongExpectedRevisionError);
  expect(error).toMatchObject({ streamId, expected, actual });
}

export async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Pulls a subscription on demand, with deadlines, remembering how often it said caughtUp. */
export class SubscriptionReader {
  caughtUpCount = 0;
  private readonly iterator: AsyncIterator<SubscriptionItem>;
  private pending: Promise<IteratorResult<SubscriptionItem>> | undefined;

  constructor(subscription: Subscription) {
    this.iterator = subscription[Symbol.asyncIterator]();
  }

  /** Events up to the caughtUp marker. */
  async untilCaughtUp(ms = 10_000): Promise<{ events: StoredEvent[]; caughtUpAt: string | null }> {
    const events: StoredEvent[] = [];
    for (;;) {
      const item = await this.next(ms, `no caughtUp after ${events.length} events`);
      if (item.kind === 'caughtUp') return { events, caughtUpAt: item.position };
      events.push(item.event);
    }
  }

  /** The next `count` events, skipping the caughtUp marker. */
  async events(count: number, ms = 10_000): Promise<StoredEvent[]> {
    const events: StoredEvent[] = [];
    while (events.length < count) {
      const item = await this.next(ms, `only ${events.length} of ${count} events arrived`);
      if (item.kind === 'event') events.push(item.event);
    }
    return events;
  }

  /** Events that arrive within `ms` (expected: none). */
  async quietFor(ms: number): Promise<StoredEvent[]> {
    const events: StoredEvent[] = [];
    const deadline = Date.now() + ms;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) return events;
      this.pending ??= this.iterator.next();
      const result = await Promise.race([this.pending, sleep(left).then(() => 'quiet' as const)]);
      if (result === 'quiet') return events;
      this.pending = undefined;
      if (result.done) return events;
      if (result.value.kind === 'event') events.push(result.value.event);
      else this.caughtUpCount++;
    }
  }

  private async next(ms: number, message: string): Promise<SubscriptionItem> {
    this.pending ??= this.iterator.next();
    const result = await withTimeout(this.pending, ms, message);
    this.pending = undefined;
    if (result.done) throw new Error('subscription ended');
    if (result.value.kind === 'caughtUp') this.caughtUpCount++;
    return result.value;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
