import { z } from 'zod';
import { sha256Hex } from './sha256.js';

/** One chain-facing call (one batch member) as metered by the gateway. */
export const UsageRecord = z.object({
  /** Unique per record: the HTTP request id, suffixed with `:<index>` for batch members. */
  requestId: z.string().min(1),
  /** ISO 8601 UTC time the call arrived. */
  at: z.string(),
  accountId: z.string(),
  tokenId: z.string(),
  chain: z.string(),
  /** JSON-RPC method, or the REST path after the token. */
  method: z.string(),
  /** HTTP status of the answer (a batch member carries the batch's status). */
  status: z.number().int(),
  /** JSON-RPC error code when the answer carried one (from the gateway or the node). */
  rpcErrorCode: z.number().int().nullable(),
  errorMessage: z.string().nullable(),
  totalMs: z.number().nonnegative(),
  upstreamMs: z.number().nonnegative().nullable(),
  clientIp: z.string(),
  /** Which upstream answered, by its configured label. */
  upstream: z.string().nullable(),
  /**
   * Days the account's plan kept usage when the call was metered: read models may expire what
   * this call counts after that (absent in records from before it was carried).
   */
  retentionDays: z.number().int().positive().optional(),
  /**
   * Whether the call used quota: the limiter granted it, so it counts against the monthly limit
   * (absent in records from before it was carried: see `usedQuota`).
   */
  charged: z.boolean().optional(),
  /**
   * How a served read was answered: from the response cache (hit), by its own upstream call
   * (miss), by sharing an identical call in flight (coalesced), or with a second upstream asked
   * because the first was slow (hedged). Absent for calls no upstream was asked for, and in
   * records from before it was carried.
   */
  cache: z.enum(['hit', 'miss', 'coalesced', 'hedged']).optional(),
});
export type UsageRecord = z.infer<typeof UsageRecord>;

/** A call as the exports list it: a usage record without its account (the export's) and retention. */
export type UsageCall = Omit<UsageRecord, 'accountId' | 'retentionDays'>;

/**
 * A call's fields in a fixed order: an array about half the size of the object. The exports'
 * raw rows (`RawRowFields`) and the usage queue's wire records add their own fields after them.
 */
export type UsageCallFields = [
  requestId: string,
  at: string,
  tokenId: string,
  chain: string,
  method: string,
  status: number,
  rpcErrorCode: number | null,
  errorMessage: string | null,
  totalMs: number,
  upstreamMs: number | null,
  clientIp: string,
  upstream: string | null,
];

export const encodeUsageCall = (r: UsageCall, at: string = r.at): UsageCallFields => [
  r.requestId,
  at,
  r.tokenId,
  r.chain,
  r.method,
  r.status,
  r.rpcErrorCode,
  r.errorMessage,
  r.totalMs,
  r.upstreamMs,
  r.clientIp,
  r.upstream,
];

export function decodeUsageCall(fields: UsageCallFields | RawRowFields): UsageCall {
  const [requestId, at, tokenId, chain, method, status, rpcErrorCode, errorMessage, totalMs, upstreamMs, clientIp, upstream] = fields;
  return { requestId, at, tokenId, chain, method, status, rpcErrorCode, errorMessage, totalMs, upstreamMs, clientIp, upstream };
}

/**
 * A raw row as the exports' read model keeps it: the call's fields, then whether it used quota
 * (1 or 0: fewer bytes than a boolean in every stored row) and, when the call has one, how a
 * read was served. Rows projected by earlier versions end after the call's fields: `usedQuota`
 * then tells from the status, as it does for records that never said.
 */
export type RawRowFields = [...UsageCallFields, charged?: 0 | 1, cache?: NonNullable<UsageRecord['cache']>];

/** A call's own fields in a raw row (checked against UsageCallFields): every version's rows hold these; the charged flag and the cache follow. */
export const CALL_FIELD_COUNT: UsageCallFields['length'] = 12;

export function encodeRawRow(r: UsageCall, at: string = r.at): RawRowFields {
  const row: RawRowFields = encodeUsageCall(r, at);
  row.push(usedQuota(r) ? 1 : 0);
  if (r.cache !== undefined) row.push(r.cache);
  return row;
}

export function decodeRawRow(row: RawRowFields): UsageCall {
  const call = decodeUsageCall(row);
  const charged = row[12];
  const cache = row[13];
  if (charged !== undefined) call.charged = charged === 1;
  if (cache !== undefined) call.cache = cache;
  return call;
}

export const USAGE_EVENT_TYPE = 'UsageRecorded';
export const usageStream = (accountId: string): string => `usage-${accountId}`;

/** A call is an error when its HTTP status is an error or it carried a JSON-RPC error. */
export const isErrorUsage = (r: Pick<UsageRecord, 'status' | 'rpcErrorCode'>): boolean => r.status >= 400 || r.rpcErrorCode !== null;

/**
 * Whether a call counts against the monthly quota: what the limiter charged. Records from before
 * the gateway said so count unless they were refused (401, 403, 429), the nearest the record tells.
 */
export const usedQuota = (r: Pick<UsageRecord, 'status' | 'charged'>): boolean => r.charged ?? (r.status !== 401 && r.status !== 403 && r.status !== 429);

/** The largest time a UUIDv7 holds: 48 bits of milliseconds. */
const MAX_UUID7_MS = 2 ** 48 - 1;

/**
 * A UUIDv7-shaped id, deterministic so that a retried append is idempotent: its first 48 bits
 * `ms` (clamped; 0 when not a time), the rest from `seed`'s SHA-256. Usage events get one led by
 * their (earliest) call's time, so a stream's new ids sort after its old ones: the embedded
 * store then needs no index lookup to know an id is new, and LevelDB appends its id index
 * instead of scattering it (docs/decisions.md, "Usage event ids in time order").
 */
export function timeOrderedId(ms: number, seed: string): string {
  const t = (Number.isFinite(ms) ? Math.min(Math.max(ms, 0), MAX_UUID7_MS) : 0).toString(16).padStart(12, '0');
  const h = sha256Hex(seed);
  return `${t.slice(0, 8)}-${t.slice(8, 12)}-7${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * `toISOString()` form of a day 1–28 (valid in every month): such a string is its own canonical
 * form. The gateway writes times this way, so the round trip through Date (~1.5 µs a record) is
 * left for the rest.
 */
export const CANONICAL_ISO = /^\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{3}Z$/;
