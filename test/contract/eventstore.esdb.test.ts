import { randomUUID } from 'node:crypto';
import { EventStoreDBClient, NO_STREAM, WrongExpectedVersionError } from '@eventstore/db-client';
import { describe, expect, it } from 'vitest';
import { EsdbEventStore } from '../../src/infra/eventstore/esdb.js';
import { WrongExpectedRevisionError } from '../../src/infra/eventstore/port.js';
import { FakeEsdbServer } from '../support/esdbFakeClient.js';
import { category, describeEventStoreContract, newEvent } from './eventstore.contract.js';

/**
 * Runs the event store contract against a real EventStoreDB / KurrentDB named by EVENTSTORE_URL,
 * else the adapter against an in-memory server with EventStoreDB's rules (test/support/esdbFakeClient.ts).
 */
const url = process.env.EVENTSTORE_URL;

if (url) {
  // Truncated events leave $all at the server's scavenge, which the suite does not start.
  describeEventStoreContract('EsdbEventStore', async () => EsdbEventStore.connect(url), { scavenge: null });
} else {
  let server = new FakeEsdbServer();
  describeEventStoreContract(
    'EsdbEventStore over an in-memory EventStoreDB',
    async () => {
      server = new FakeEsdbServer();
      return new EsdbEventStore(server.client);
    },
    { scavenge: () => server.scavenge() },
  );
}

describe('EsdbEventStore round trips', () => {
  const event = (type: string) => ({ id: randomUUID(), type, data: { type } });

  it("an append of several events is one call, answered with the last event's position and revision", async () => {
    const server = new FakeEsdbServer();
    const store = new EsdbEventStore(server.client);
    await store.append('t-1', [event('A')], 'no_stream');
    const before = server.roundTrips;
    const result = await store.append('t-1', [event('B'), event('C'), event('D')], 0);
    expect(server.roundTrips - before).toBe(1);
    const read = await store.readStream('t-1');
    expect(result).toEqual({ nextExpectedRevision: 3, position: read[3]!.position });
    // An idempotent retry too: answered with the last event it matched.
    const retry = [event('E'), event('F')];
    const first = await store.append('t-1', retry, 3);
    const calls = server.roundTrips;
    expect(await store.append('t-1', retry, 3)).toEqual(first);
    expect(server.roundTrips - calls).toBe(1);
  });
});

/** Runs `start` after `ticks` turns of the microtask queue. */
async function later<T>(ticks: number, start: () => Promise<T>): Promise<T> {
  for (let i = 0; i < ticks; i += 1) await Promise.resolve();
  return start();
}

/** A client to the server the suite runs against: EVENTSTORE_URL's, else a new in-memory one. */
const connect = (): EventStoreDBClient => (url ? EventStoreDBClient.connectionString(url) : new FakeEsdbServer().client);

describe('EsdbEventStore stream metadata', () => {
  it('concurrent updates from two processes keep both $tb and $maxAge, and what else the metadata held', async () => {
    const client = connect();
    const [a, b] = [new EsdbEventStore(client), new EsdbEventStore(client)];
    try {
      for (let round = 0; round < 8; round += 1) {
        const stream = `${category()}-1`;
        await a.append(
          stream,
          ['A', 'B', 'C'].map((t) => newEvent(t)),
          'no_stream',
        );
        await client.setStreamMetadata(stream, { cacheControl: 60, owner: 'ops' });
        // The second writer starts a few steps after the first, so that the two reads and writes interleave differently each round.
        await Promise.all([a.truncateBefore(stream, 2), later(round, () => b.limitStreamAge(stream, 3600 + round))]);
        expect((await client.getStreamMetadata(stream)).metadata).toEqual({ cacheControl: 60, owner: 'ops', truncateBefore: 2, maxAge: 3600 + round });
        await Promise.all([b.limitStreamAge(stream, 7200), later(round, () => a.truncateBefore(stream, 3))]);
        expect((await client.getStreamMetadata(stream)).metadata).toEqual({ cacheControl: 60, owner: 'ops', truncateBefore: 3, maxAge: 7200 });
        expect((await a.readStream(stream)).map((e) => e.type)).toEqual([]);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('$tb never moves back: concurrent truncations leave the highest', async () => {
    const client = connect();
    const stores = [1, 2, 3, 4].map(() => new EsdbEventStore(client));
    try {
      const stream = `${category()}-1`;
      await stores[0]!.append(
        stream,
        ['A', 'B', 'C', 'D', 'E', 'F'].map((t) => newEvent(t)),
        'no_stream',
      );
      await Promise.all([
        stores[0]!.truncateBefore(stream, 5),
        stores[1]!.truncateBefore(stream, 2),
        stores[2]!.truncateBefore(stream, 4),
        stores[3]!.truncateBefore(stream, 3),
      ]);
      expect((await client.getStreamMetadata(stream)).metadata).toEqual({ truncateBefore: 5 });
      await stores[1]!.truncateBefore(stream, 1);
      expect((await client.getStreamMetadata(stream)).metadata).toEqual({ truncateBefore: 5 });
      expect((await stores[0]!.readStream(stream)).map((e) => e.type)).toEqual(['F']);
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
  });
});

describe('EsdbEventStore headPosition', () => {
  it("is the last event of ours behind 2,500 of the server's own (stream metadata) events", async () => {
    const client = connect();
    const store = new EsdbEventStore(client);
    try {
      const stream = `${category()}-1`;
      const last = await store.append(stream, [newEvent('A')], 'no_stream');
      for (let i = 0; i < 2500; i += 1) await client.setStreamMetadata(stream, { note: i });
      expect(await store.headPosition()).toBe(last.position);
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(url !== undefined)('EsdbEventStore over the in-memory server: metadata conflicts and the head scan bound', () => {
  /** The server's client, with another writer setting `{ other: n }` on a stream's metadata before each of the first `times` metadata writes. */
  const interloped = (server: FakeEsdbServer, times: number) => {
    let left = times;
    const appendToStream = server.client.appendToStream.bind(server.client);
    return new Proxy(server.client, {
      get(target, key, receiver) {
        if (key !== 'appendToStream') return Reflect.get(target, key, receiver);
        return async (...args: Parameters<typeof appendToStream>) => {
          const [streamName] = args;
          if (streamName.startsWith('$$') && left > 0) {
            left -= 1;
            const { metadata = {} } = await server.client.getStreamMetadata(streamName.slice(2));
            await server.client.setStreamMetadata(streamName.slice(2), { ...metadata, other: times - left });
          }
          return appendToStream(...args);
        };
      },
    });
  };

  it('enforces the expected metadata revision as the server does; metastreamRevision is a log position, as client 6.2.1 sends it', async () => {
    const server = new FakeEsdbServer();
    await server.client.appendToStream('c-1', [{ id: randomUUID(), type: 'A', data: {} }] as never);
    await server.client.setStreamMetadata('c-1', { maxAge: 60 }, { expectedRevision: NO_STREAM });
    await expect(server.client.setStreamMetadata('c-1', { maxAge: 70 }, { expectedRevision: NO_STREAM })).rejects.toBeInstanceOf(WrongExpectedVersionError);
    const read = await server.client.getStreamMetadata('c-1');
    expect(read.metadata).toEqual({ maxAge: 60 });
    expect(read.metastreamRevision).not.toBe(0n);
    await server.client.setStreamMetadata('c-1', { maxAge: 70 }, { expectedRevision: 0n });
    await expect(server.client.setStreamMetadata('c-1', { maxAge: 80 }, { expectedRevision: 0n })).rejects.toBeInstanceOf(WrongExpectedVersionError);
    expect((await server.client.getStreamMetadata('c-1')).metadata).toEqual({ maxAge: 70 });
  });

  it('a metadata write that lost to another writer is done again over what that one wrote', async () => {
    const server = new FakeEsdbServer();
    const store = new EsdbEventStore(interloped(server, 2));
    await store.append('c-1', [newEvent('A'), newEvent('B')], 'no_stream');
    await store.truncateBefore('c-1', 1);
    expect((await server.client.getStreamMetadata('c-1')).metadata).toEqual({ other: 2, truncateBefore: 1 });
    await store.limitStreamAge('c-1', 60);
    expect((await server.client.getStreamMetadata('c-1')).metadata).toEqual({ other: 2, truncateBefore: 1, maxAge: 60 });
  });

  it('gives up after 5 lost metadata writes, with the conflict on the metadata stream', async () => {
    const server = new FakeEsdbServer();
    const store = new EsdbEventStore(interloped(server, 5));
    await store.append('c-1', [newEvent('A')], 'no_stream');
    await expect(store.limitStreamAge('c-1', 60)).rejects.toBeInstanceOf(WrongExpectedRevisionError);
    expect((await server.client.getStreamMetadata('c-1')).metadata).toEqual({ other: 5 });
  });

  it('past its time for looking back over system events, the head is the newest event of all', async () => {
    const server = new FakeEsdbServer();
    const store = new EsdbEventStore(server.client, { headScanMs: 0 });
    const first = await store.append('c-1', [newEvent('A')], 'no_stream');
    for (let i = 0; i < 1500; i += 1) await server.client.setStreamMetadata('c-1', { note: i });
    const head = await store.headPosition();
    expect(head! > first.position).toBe(true);
    expect(await new EsdbEventStore(server.client).headPosition()).toBe(first.position);
  });
});
