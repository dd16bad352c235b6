import { timeOrderedId, type UsageRecord } from '../../src/domain/usage.js';

/**
 * The id of a one-call `UsageRecorded` event, as the ingester gave them before compact batches
 * (src/domain/usageBatch.ts): tests and benchmarks write such events to hold the projections,
 * exports and appender to reading them still.
 */
export const usageEventId = (record: Pick<UsageRecord, 'requestId' | 'at'>): string => timeOrderedId(Date.parse(record.at), `usage:${record.requestId}`);
