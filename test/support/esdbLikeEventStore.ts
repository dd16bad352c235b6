import { EsdbEventStore } from '../../src/infra/eventstore/esdb.js';
import { FakeEsdbServer } from './esdbFakeClient.js';

/**
 * The EventStoreDB adapter itself over an in-memory EventStoreDB (FakeEsdbServer, which has the
 * server's idempotency rules, not the embedded store's): for tests of code that must be
 * exactly-once on EventStoreDB, counting the round trips it costs.
 */
export class EsdbLikeEventStore extends EsdbEventStore {
  constructor(readonly server = new FakeEsdbServer()) {
    super(server.client);
  }

  get appendCalls(): number {
    return this.server.calls.appendToStream;
  }

  get readCalls(): number {
    return this.server.calls.readStream;
  }

  /** Every call to the server. */
  get roundTrips(): number {
    return this.server.roundTrips;
  }
}
