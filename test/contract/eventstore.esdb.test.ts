import { describe, it } from 'vitest';
import { EsdbEventStore } from '../../src/infra/eventstore/esdb.js';
import { describeEventStoreContract } from './eventstore.contract.js';

/** Runs the event store contract against a real EventStoreDB / KurrentDB named by EVENTSTORE_URL. */
const url = process.env.EVENTSTORE_URL;

if (url) {
  describeEventStoreContract('EsdbEventStore', async () => EsdbEventStore.connect(url));
} else {
  describe.skip('EsdbEventStore contract: skipped, EVENTSTORE_URL is not set (e.g. esdb://127.0.0.1:2113?tls=false)', () => {
    it('needs a running EventStoreDB', () => {});
  });
}
