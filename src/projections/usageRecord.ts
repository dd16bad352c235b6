import { isInt, isNonNegative, isStringOrNull } from '../domain/guards.js';
import { hasUnstorableText, storableText } from '../domain/storableText.js';
import { USAGE_EVENT_TYPE, type UsageRecord } from '../domain/usage.js';
import { decodeUsageBatch, MAX_CALLS_PER_EVENT, USAGE_BATCH_EVENT_TYPE } from '../domain/usageBatch.js';
import type { StoredEvent } from '../infra/eventstore/port.js';

/*
 * The usage projections read every usage event: compact batches (src/domain/usageBatch.ts,
 * decoded and checked there) and the one-call `UsageRecorded` events of stores written before.
 * Those records were checked against the UsageRecord schema before they were appended, so this
 * only guards against an event that is not one (written by hand, a future shape): the same
 * verdicts as `UsageRecord.safeParse` (test/unit/usage-record.test.ts), a few times faster than
 * zod, and the event's own data object instead of a copy.
 */

/** The data of a usage event as a record, or null when it does not have the record's shape. */
export function asUsageRecord(data: Record<string, unknown>): UsageRecord | null {
  const {
    requestId,
    at,
    accountId,
    tokenId,
    chain,
    method,
    status,
    rpcErrorCode,
    errorMessage,
    totalMs,
    upstreamMs,
    clientIp,
    upstream,
    retentionDays,
    charged,
    cache,
  } = data;
  if (typeof requestId !== 'string' || requestId.length === 0) return null;
  if (typeof at !== 'string' || typeof accountId !== 'string' || typeof tokenId !== 'string' || typeof chain !== 'string') return null;
  if (typeof method !== 'string' || typeof clientIp !== 'string') return null;
  if (!isInt(status) || !(rpcErrorCode === null || isInt(rpcErrorCode))) return null;
  if (!isStringOrNull(errorMessage) || !isStringOrNull(upstream)) return null;
  if (!isNonNegative(totalMs) || !(upstreamMs === null || isNonNegative(upstreamMs))) return null;
  if (retentionDays !== undefined && !(isInt(retentionDays) && retentionDays > 0)) return null;
  if (charged !== undefined && typeof charged !== 'boolean') return null;
  if (cache !== undefined && cache !== 'hit' && cache !== 'miss' && cache !== 'coalesced' && cache !== 'hedged') return null;
  return data as UsageRecord;
}

/** The record a stored event carries, or null when it is not a (well-formed) usage event. */
export const usageRecordOf = (stored: StoredEvent): UsageRecord | null => (stored.type === USAGE_EVENT_TYPE ? asUsageRecord(stored.data) : null);

/** Batches decoded, by event: the usage projections each read every batch, which is decoded once. */
const decoded = new WeakMap<StoredEvent, UsageRecord[]>();

/**
 * The calls a stored usage event records, in order: one for a `UsageRecorded`, all of a batch's;
 * none for any other event or a malformed one. Shared, not copied: read them, never change them.
 */
export function usageRecordsOf(stored: StoredEvent): readonly UsageRecord[] {
  if (stored.type === USAGE_BATCH_EVENT_TYPE) {
    let records = decoded.get(stored);
    if (records === undefined) {
      records = (decodeUsageBatch(stored.data) ?? []).map(storableRecord);
      decoded.set(stored, records);
    }
    return records;
  }
  const one = usageRecordOf(stored);
  return one === null ? [] : [storableRecord(one)];
}

/**
 * The record with text every read model can hold: the gateway makes it so when it records a call,
 * but a log written before may hold a method or message with U+0000 or a lone surrogate, which
 * stopped the projector on PostgreSQL for every account. The record itself when it has none.
 */
function storableRecord(r: UsageRecord): UsageRecord {
  if (!hasUnstorableText(r.method) && (r.errorMessage === null || !hasUnstorableText(r.errorMessage))) return r;
  return { ...r, method: storableText(r.method), errorMessage: r.errorMessage === null ? null : storableText(r.errorMessage) };
}

/**
 * Where the raw row of call `index` of a stored usage event goes: its number in the account's
 * sequence of calls (raw-row documents are keyed by it, src/projections/usageMetrics.ts),
 * so that a rebuild writes the rows as live did. A one-call event's is its revision (the calls
 * before it, in a stream of such events); a batch's, the calls before it (`first`) plus its
 * place in the batch. A batch that does not say gets numbers past every other's.
 */
export function rawRowSlot(stored: StoredEvent, index: number): number {
  if (stored.type !== USAGE_BATCH_EVENT_TYPE) return stored.revision;
  const first = stored.data['first'];
  return Number.isSafeInteger(first) && (first as number) >= 0 ? (first as number) + index : stored.revision * MAX_CALLS_PER_EVENT + index;
}

/** Event types that record usage. */
export const USAGE_EVENT_TYPES: ReadonlySet<string> = new Set([USAGE_EVENT_TYPE, USAGE_BATCH_EVENT_TYPE]);
