import { decodeUsageCall, encodeUsageCall, type UsageCallFields, UsageRecord } from '../../domain/usage.js';

/**
 * A record as the usage queue's backends hold it (a Redis stream entry, a journal line): the
 * call's fields in their fixed order, then the account, the retention and whether it used quota
 * (null when absent) and how a read was served (null when absent). Without the key names a
 * record is about half the bytes.
 */
export type WireRecord = [...UsageCallFields, accountId: string, retentionDays: number | null, charged: boolean | null, cache: UsageRecord['cache'] | null];
/** The length of UsageCallFields: where the wire record's own fields start. */
const CALL_FIELDS: UsageCallFields['length'] = 12;

export const toWire = (r: UsageRecord): WireRecord => [...encodeUsageCall(r), r.accountId, r.retentionDays ?? null, r.charged ?? null, r.cache ?? null];

/** The record object of a wire record, for the schema to check; anything else (an object of an earlier version) as it is. */
function fromWire(item: unknown): unknown {
  if (!Array.isArray(item)) return item;
  // Any value may be wrong here: the schema checks the record built from them.
  const [accountId, retentionDays, charged, cache] = item.slice(CALL_FIELDS) as unknown[];
  // Object.assign, not `{ ...record, accountId }`: spreading with more properties takes V8's slow path (~1.4 µs a record).
  const record = Object.assign(decodeUsageCall(item.slice(0, CALL_FIELDS) as UsageCallFields), { accountId });
  if (retentionDays !== null && retentionDays !== undefined) Object.assign(record, { retentionDays });
  if (cache !== null && cache !== undefined) Object.assign(record, { cache });
  return charged === null || charged === undefined ? record : Object.assign(record, { charged });
}

/** The record a wire record (or an earlier version's record object) holds, or null when it is not a valid one. */
export function recordFromWire(item: unknown): UsageRecord | null {
  const parsed = UsageRecord.safeParse(fromWire(item));
  return parsed.success ? parsed.data : null;
}
