import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { EsdbEventStore } from '../../src/infra/eventstore/esdb.js';
import { FakeEsdbServer } from '../support/esdbFakeClient.js';
import { describeEventStoreContract } from './eventstore.contract.js';

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
