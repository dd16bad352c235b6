import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { PostgresEventStore } from '../../src/infra/eventstore/postgres.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { category, describeEventStoreContract, expectStrictlyIncreasing, newEvent, SubscriptionReader } from './eventstore.contract.js';

const unavailable = await postgresUnavailable();

describe.skipIf(unavailable !== null)(unavailable ? `PostgresEventStore (skipped: ${unavailable})` : 'PostgresEventStore', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  describeEventStoreContract('PostgresEventStore', () => PostgresEventStore.open(db.url));

  const withClient = async <T>(run: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      return await run(client);
    } finally {
      await client.end();
    }
  };

  it('does not pass an event whose transaction commits after a later one did (the gap of sequence-ordered logs)', async () => {
    const store = await PostgresEventStore.open(db.url);
    const slow = new pg.Client({ connectionString: db.url });
    await slow.connect();
    const cat = category();
    const subscription = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
    const reader = new SubscriptionReader(subscription);
    try {
      await reader.untilCaughtUp();
      // An append in flight: it holds an earlier sequence number (and transaction) than the next one, and commits last.
      await slow.query('BEGIN');
      await slow.query(`INSERT INTO es_events (stream_id, revision, event_id, type, data, metadata, created) VALUES ($1, 0, $2, 'Slow', '{}', '{}', now())`, [
        `${cat}-slow`,
        newEvent('Slow').id,
      ]);
      const fast = await store.append(`${cat}-fast`, [newEvent('Fast')], 'no_stream');
      expect((await store.readStream(`${cat}-fast`)).map((e) => e.position)).toEqual([fast.position]);
      // Committed, but behind a transaction still open: not delivered yet, or the slow one would be skipped.
      expect(await reader.quietFor(300)).toEqual([]);
      await slow.query('COMMIT');
      const delivered = await reader.events(2);
      expect(delivered.map((e) => e.type)).toEqual(['Slow', 'Fast']);
      expectStrictlyIncreasing(delivered.map((e) => e.position));
    } finally {
      await subscription.close();
      await slow.end();
      await store.close();
    }
  });

  it('delivers every event once, in one order, to subscribers of other processes while several processes append', async () => {
    const cat = category();
    const writers = await Promise.all([1, 2, 3].map(() => PostgresEventStore.open(db.url, { poolSize: 4 })));
    const observer = await PostgresEventStore.open(db.url);
    const streams = 12;
    const appendsPerStream = 25;
    const expected = streams * appendsPerStream * 2;
    const subscription = observer.subscribeToAll({ streamPrefixes: [`${cat}-`] });
    const reader = new SubscriptionReader(subscription);
    try {
      await reader.untilCaughtUp();
      const receiving = reader.events(expected, 30_000);
      await Promise.all(
        Array.from({ length: streams }, async (_, s) => {
          const store = writers[s % writers.length]!;
          for (let i = 0; i < appendsPerStream; i++) {
            await store.append(`${cat}-${s}`, [newEvent('A', { s, i }), newEvent('B', { s, i })], i === 0 ? 'no_stream' : 2 * i - 1);
          }
        }),
      );
      const received: StoredEvent[] = await receiving;
      expect(await reader.quietFor(200)).toEqual([]);
      expect(new Set(received.map((e) => e.id)).size).toBe(expected);
      expectStrictlyIncreasing(received.map((e) => e.position));
      for (let s = 0; s < streams; s++) {
        expect(received.filter((e) => e.streamId === `${cat}-${s}`).map((e) => e.revision)).toEqual(Array.from({ length: 2 * appendsPerStream }, (_, r) => r));
      }
      // A subscriber starting from scratch afterwards reads the same order.
      const replay = observer.subscribeToAll({ streamPrefixes: [`${cat}-`] });
      try {
        const { events } = await new SubscriptionReader(replay).untilCaughtUp();
        expect(events.map((e) => e.position)).toEqual(received.map((e) => e.position));
      } finally {
        await replay.close();
      }
    } finally {
      await subscription.close();
      await Promise.all([...writers, observer].map((store) => store.close()));
    }
  });

  it('goes on delivering live events when its LISTEN connection is cut', async () => {
    const store = await PostgresEventStore.open(db.url);
    const cat = category();
    const subscription = store.subscribeToAll({ streamPrefixes: [`${cat}-`] });
    const reader = new SubscriptionReader(subscription);
    try {
      await reader.untilCaughtUp();
      expect(await reader.quietFor(100)).toEqual([]); // waiting for a wake-up now
      const cut = await withClient((client) =>
        client.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()`,
        ),
      );
      expect(cut.rowCount).toBeGreaterThan(0);
      await store.append(`${cat}-1`, [newEvent('AfterCut')], 'no_stream');
      expect((await reader.events(1)).map((e) => e.type)).toEqual(['AfterCut']);
    } finally {
      await subscription.close();
      await store.close();
    }
  });

  it('refuses to start on tables of a newer schema version, saying so', async () => {
    const other = await createTestDatabase();
    try {
      await (await PostgresEventStore.open(other.url)).close();
      const client = new pg.Client({ connectionString: other.url });
      await client.connect();
      await client.query(`UPDATE gw_schema SET version = 99 WHERE component = 'eventstore'`);
      await client.end();
      await expect(PostgresEventStore.open(other.url)).rejects.toMatchObject({
        code: 'schema_too_new',
        message: expect.stringMatching(/schema version 99.*newer release.*knows up to version 2/),
      });
    } finally {
      await other.drop();
    }
  });
});
