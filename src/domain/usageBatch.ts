import { isInt, isIntOrNull, isString, isStringOrNull } from './guards.js';
import { CANONICAL_ISO, timeOrderedId, USAGE_EVENT_TYPE, type UsageRecord } from './usage.js';

/**
 * One account's calls of one ingest batch as a single event, column by column: the form the
 * usage log keeps them in (docs/decisions.md, "Usage is logged in compact batches"). Every
 * call's record is still there, field for field, for auditors and exports; what repeats from
 * call to call is written once:
 *
 * - `shapes`: the distinct (token, chain, method, status, JSON-RPC code, message, upstream,
 *   retention, charged, cache) of the batch; `shape[i]` is call i's index into them;
 * - `ips` / `ip[i]`: the distinct client IPs;
 * - request ids are `<stem><base-36 counter>[:<batch member>]` (src/server.ts): `stems` / `stem[i]`,
 *   `num[i]` the counter's difference from the previous call's, `member[i]` the member index
 *   plus one (0 for none; the column is left out when all are 0);
 * - `at[0]` the first call's time in ms, then each call's difference from the one before;
 * - `totalMs` / `upstreamMs` in hundredths of a millisecond, the gateway's precision (null: none);
 * - `odd[i]`: a call's field that does not fit its column exactly (an id of another form, a
 *   time that is not canonical ISO, a finer latency), kept as it was;
 * - `first`: how many calls the stream held before this event's: call i is the stream's call
 *   number `first + i`, which places its raw row (src/projections/usageRecord.ts).
 *
 * Decoding gives back the records that were encoded, equal field by field (tested).
 */
export const USAGE_BATCH_EVENT_TYPE = 'UsageBatchRecorded';

/** Calls one event holds at most. */
export const MAX_CALLS_PER_EVENT = 4096;

type Shape = [
  tokenId: string,
  chain: string,
  method: string,
  status: number,
  rpcErrorCode: number | null,
  errorMessage: string | null,
  upstream: string | null,
  retentionDays: number | null,
  charged: boolean | null,
  cache: NonNullable<UsageRecord['cache']> | null,
];

interface OddFields {
  requestId?: string;
  at?: string;
  totalMs?: number;
  upstreamMs?: number;
}

export type UsageBatchData = {
  accountId: string;
  first: number;
  calls: number;
  shapes: Shape[];
  shape: number[];
  ips: string[];
  ip: number[];
  stems: string[];
  stem: number[];
  num: number[];
  member?: number[];
  at: number[];
  totalMs: number[];
  upstreamMs: Array<number | null>;
  odd?: Record<string, OddFields>;
};

const REQUEST_ID = /^(.*-)([0-9a-z]{1,10})(?::(\d{1,6}))?$/;

/** Index of `value` in a dictionary being built, added when new. */
function indexIn<K>(index: Map<K, number>, list: unknown[], key: K, value: unknown): number {
  let i = index.get(key);
  if (i === undefined) {
    i = list.length;
    list.push(value);
    index.set(key, i);
  }
  return i;
}

const centi = (ms: number): number | null => {
  const c = Math.round(ms * 100);
  return c / 100 === ms ? c : null;
};

/** Characters the shape keys use as separators and markers. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: they are what it looks for
const KEY_MARKS = /[\u0000-\u0004]/;
const keyPart = (v: string | number | boolean | null): string =>
  v === null ? '\u0001' : typeof v === 'string' ? v : typeof v === 'number' ? `\u0002${v}` : v ? '\u0003' : '\u0004';

/**
 * A shape's dictionary key: its fields joined (a JSON text per call cost more than the rest of
 * the encoding); JSON when a string holds one of the separators, so no two shapes share a key.
 */
function shapeKeyOf(s: Shape): string {
  for (const v of s) if (typeof v === 'string' && KEY_MARKS.test(v)) return JSON.stringify(s);
  return s.map(keyPart).join('\u0000');
}

/** The time in ms of an ISO text that `toISOString()` gives back exactly, else null. */
function canonicalMs(at: string): number | null {
  if (CANONICAL_ISO.test(at)) return Date.parse(at);
  const ms = Date.parse(at);
  return Number.isFinite(ms) && new Date(ms).toISOString() === at ? ms : null;
}

/** Encodes one account's calls (at most MAX_CALLS_PER_EVENT, all of `accountId`), after the stream's `first` calls, column by column. */
export function encodeUsageBatch(accountId: string, records: readonly UsageRecord[], first: number): UsageBatchData {
  const shapes: Shape[] = [];
  const shapeIndex = new Map<string, number>();
  const ips: string[] = [];
  const ipIndex = new Map<string, number>();
  const stems: string[] = [];
  const stemIndex = new Map<string, number>();
  const shape: number[] = [];
  const ip: number[] = [];
  const stem: number[] = [];
  const num: number[] = [];
  const member: number[] = [];
  const at: number[] = [];
  const totalMs: number[] = [];
  const upstreamMs: Array<number | null> = [];
  const odd: Record<string, OddFields> = {};
  let anyMember = false;
  let anyOdd = false;
  let previousNum = 0;
  let previousAt = 0;
  for (let i = 0; i < records.length; i++) {
    const r = records[i] as UsageRecord;
    const oddFields: OddFields = {};
    const s: Shape = [
      r.tokenId,
      r.chain,
      r.method,
      r.status,
      r.rpcErrorCode,
      r.errorMessage,
      r.upstream,
      r.retentionDays ?? null,
      r.charged ?? null,
      r.cache ?? null,
    ];
    shape.push(indexIn(shapeIndex, shapes, shapeKeyOf(s), s));
    ip.push(indexIn(ipIndex, ips, r.clientIp, r.clientIp));

    const id = REQUEST_ID.exec(r.requestId);
    const counter = id === null ? Number.NaN : Number.parseInt(id[2] as string, 36);
    if (id !== null && counter.toString(36) === id[2]) {
      stem.push(indexIn(stemIndex, stems, id[1] as string, id[1]));
      num.push(counter - previousNum);
      previousNum = counter;
      const m = id[3] === undefined ? 0 : Number(id[3]) + 1;
      if (m !== 0 && String(m - 1) !== id[3]) {
        oddFields.requestId = r.requestId;
        member.push(0);
      } else {
        member.push(m);
        if (m !== 0) anyMember = true;
      }
    } else {
      oddFields.requestId = r.requestId;
      stem.push(0);
      num.push(0);
      member.push(0);
    }

    const ms = canonicalMs(r.at);
    if (ms !== null) {
      at.push(ms - previousAt);
      previousAt = ms;
    } else {
      oddFields.at = r.at;
      at.push(0);
    }

    const total = centi(r.totalMs);
    totalMs.push(total ?? 0);
    if (total === null) oddFields.totalMs = r.totalMs;
    if (r.upstreamMs === null) upstreamMs.push(null);
    else {
      const upstream = centi(r.upstreamMs);
      upstreamMs.push(upstream ?? 0);
      if (upstream === null) oddFields.upstreamMs = r.upstreamMs;
    }
    if (oddFields.requestId !== undefined || oddFields.at !== undefined || oddFields.totalMs !== undefined || oddFields.upstreamMs !== undefined) {
      odd[i] = oddFields;
      anyOdd = true;
    }
  }
  return {
    accountId,
    first,
    calls: records.length,
    shapes,
    shape,
    ips,
    ip,
    stems,
    stem,
    num,
    ...(anyMember ? { member } : {}),
    at,
    totalMs,
    upstreamMs,
    ...(anyOdd ? { odd } : {}),
  };
}

const isArrayOf = <T>(value: unknown, length: number, item: (v: unknown) => v is T): value is T[] =>
  Array.isArray(value) && value.length === length && value.every(item);
const CACHE_USES = new Set<unknown>(['hit', 'miss', 'coalesced', 'hedged', null]);

function isShape(v: unknown): v is Shape {
  if (!Array.isArray(v) || v.length !== 10) return false;
  const [tokenId, chain, method, status, rpcErrorCode, errorMessage, upstream, retentionDays, charged, cache] = v as unknown[];
  return (
    isString(tokenId) &&
    isString(chain) &&
    isString(method) &&
    isInt(status) &&
    isIntOrNull(rpcErrorCode) &&
    isStringOrNull(errorMessage) &&
    isStringOrNull(upstream) &&
    (retentionDays === null || (isInt(retentionDays) && retentionDays > 0)) &&
    (charged === null || typeof charged === 'boolean') &&
    CACHE_USES.has(cache)
  );
}

/** The id columns of an event's data, checked: what the exactly-once appender reads back. */
function idColumns(
  data: Record<string, unknown>,
): { calls: number; stems: string[]; stem: number[]; num: number[]; member: number[] | null; odd: Record<string, unknown> } | null {
  const { calls, stems, stem, num, member, odd } = data;
  if (!isInt(calls) || calls < 0 || calls > MAX_CALLS_PER_EVENT) return null;
  if (!Array.isArray(stems) || !stems.every(isString)) return null;
  if (!isArrayOf(stem, calls, (v): v is number => isInt(v) && v >= 0 && (v < stems.length || (v === 0 && stems.length === 0)))) return null;
  if (!isArrayOf(num, calls, isInt)) return null;
  if (member !== undefined && !isArrayOf(member, calls, (v): v is number => isInt(v) && v >= 0)) return null;
  if (odd !== undefined && (odd === null || typeof odd !== 'object' || Array.isArray(odd))) return null;
  return { calls, stems, stem, num, member: (member as number[] | undefined) ?? null, odd: (odd as Record<string, unknown> | undefined) ?? {} };
}

function requestIds(columns: NonNullable<ReturnType<typeof idColumns>>): string[] | null {
  const ids: string[] = [];
  let counter = 0;
  for (let i = 0; i < columns.calls; i++) {
    counter += columns.num[i] as number;
    const odd = columns.odd[i] as OddFields | undefined;
    if (odd?.requestId !== undefined) {
      if (typeof odd.requestId !== 'string' || odd.requestId.length === 0) return null;
      ids.push(odd.requestId);
      continue;
    }
    const stem = columns.stems[columns.stem[i] as number];
    if (stem === undefined || counter < 0) return null;
    const m = columns.member?.[i] ?? 0;
    ids.push(m === 0 ? stem + counter.toString(36) : `${stem}${counter.toString(36)}:${m - 1}`);
  }
  return ids;
}

/** The request ids of a usage event's calls, in order (a `UsageRecorded`'s one, a batch's all), without decoding the rest; none for another event or a malformed one. */
export function usageEventRequestIds(event: { type: string; data: Record<string, unknown> }): string[] {
  if (event.type === USAGE_EVENT_TYPE) {
    const { requestId } = event.data;
    return typeof requestId === 'string' && requestId.length > 0 ? [requestId] : [];
  }
  if (event.type !== USAGE_BATCH_EVENT_TYPE) return [];
  // All of it checked, not the ids alone: a batch the projections cannot read holds no call, so a redelivery of its calls is not a duplicate.
  return decodeUsageBatch(event.data)?.map((r) => r.requestId) ?? [];
}

/**
 * How many calls a stream holds up to and with this usage event (a one-call event's revision
 * plus one, in a stream of such events), or null when it does not say.
 */
export function usageCallsThrough(event: { type: string; revision: number; data: Record<string, unknown> }): number | null {
  if (event.type === USAGE_EVENT_TYPE) return event.revision + 1;
  if (event.type !== USAGE_BATCH_EVENT_TYPE) return null;
  const { first, calls } = event.data;
  return isInt(first) && first >= 0 && isInt(calls) && calls >= 0 ? first + calls : null;
}

/** The largest time a Date holds (ms either side of 1970). */
const MAX_DATE_MS = 8.64e15;

/** The calls of a batch event's data, in order, or null when it is not a well-formed batch. */
export function decodeUsageBatch(data: Record<string, unknown>): UsageRecord[] | null {
  const columns = idColumns(data);
  if (columns === null) return null;
  const { calls } = columns;
  const { accountId, shapes, shape, ips, ip, at, totalMs, upstreamMs } = data;
  if (typeof accountId !== 'string') return null;
  if (!Array.isArray(shapes) || !shapes.every(isShape)) return null;
  if (!isArrayOf(shape, calls, (v): v is number => isInt(v) && v >= 0 && v < shapes.length)) return null;
  if (!Array.isArray(ips) || !ips.every(isString)) return null;
  if (!isArrayOf(ip, calls, (v): v is number => isInt(v) && v >= 0 && v < ips.length)) return null;
  if (!isArrayOf(at, calls, isInt)) return null;
  if (!isArrayOf(totalMs, calls, (v): v is number => isInt(v) && v >= 0)) return null;
  if (!isArrayOf(upstreamMs, calls, (v): v is number | null => v === null || (isInt(v) && v >= 0))) return null;
  const ids = requestIds(columns);
  if (ids === null) return null;
  const records: UsageRecord[] = [];
  let ms = 0;
  // Calls of one millisecond share its text.
  let isoMs = Number.NaN;
  let iso = '';
  for (let i = 0; i < calls; i++) {
    ms += at[i] as number;
    // Beyond what a Date holds: not a time (toISOString would throw).
    if (!(Math.abs(ms) <= MAX_DATE_MS)) return null;
    const odd = (columns.odd[i] ?? {}) as OddFields;
    if (odd.at !== undefined && typeof odd.at !== 'string') return null;
    if (odd.totalMs !== undefined && !(typeof odd.totalMs === 'number' && odd.totalMs >= 0)) return null;
    if (odd.upstreamMs !== undefined && !(typeof odd.upstreamMs === 'number' && odd.upstreamMs >= 0)) return null;
    const [tokenId, chain, method, status, rpcErrorCode, errorMessage, upstream, retentionDays, charged, cache] = shapes[shape[i] as number] as Shape;
    if (odd.at === undefined && ms !== isoMs) {
      isoMs = ms;
      iso = new Date(ms).toISOString();
    }
    const time = odd.at ?? iso;
    const up = upstreamMs[i] as number | null;
    const record: UsageRecord = {
      requestId: ids[i] as string,
      at: time,
      accountId,
      tokenId,
      chain,
      method,
      status,
      rpcErrorCode,
      errorMessage,
      totalMs: odd.totalMs ?? (totalMs[i] as number) / 100,
      upstreamMs: up === null ? null : (odd.upstreamMs ?? up / 100),
      clientIp: ips[ip[i] as number] as string,
      upstream,
    };
    if (retentionDays !== null) record.retentionDays = retentionDays;
    if (charged !== null) record.charged = charged;
    if (cache !== null) record.cache = cache;
    records.push(record);
  }
  return records;
}

/**
 * A batch event's id, deterministic so that appending the same calls again is idempotent:
 * UUIDv7-shaped, the earliest call's time first (a stream's new ids sort after its old ones:
 * docs/decisions.md, "Usage event ids in time order"), then the SHA-256 of the calls' request ids in order.
 */
export function usageBatchEventId(records: readonly Pick<UsageRecord, 'requestId' | 'at'>[]): string {
  let earliest = Number.POSITIVE_INFINITY;
  for (const r of records) {
    const ms = Date.parse(r.at);
    if (ms < earliest) earliest = ms;
  }
  return timeOrderedId(earliest, `usage-batch:${records.map((r) => r.requestId).join('\n')}`);
}
