import { type UsageRecord, usageStream } from '../../src/domain/usage.js';
import type { EventStore } from '../../src/infra/eventstore/port.js';
import { usageRecordsOf } from '../../src/projections/usageRecord.js';

/** The calls an account's usage stream records, in order, whatever events hold them (one call each, or batches). */
export const recordedCalls = async (store: Pick<EventStore, 'readStream'>, accountId: string): Promise<UsageRecord[]> =>
  (await store.readStream(usageStream(accountId))).flatMap(usageRecordsOf);
