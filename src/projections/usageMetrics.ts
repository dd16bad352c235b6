import { createHash } from 'node:crypto';
import { isErrorUsage, USAGE_EVENT_TYPE, UsageRecord } from '../domain/usage.js';
import type { StoredEvent } from '../infra/eventstore/port.js';
import type { ReadModelWrite } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';
import { bucketNameOfIso, GRANULARITIES, type Granularity, type SeriesGranularity } from './usageBuckets.js';
import { histogramField } from './usageHistogram.js';
import { methodLabel } from './usageMethod.js';

/**
 * Every key starts with the account and then a time (or the token, then a time), so a metrics
 * query is one range scan per granularity and the retention job deletes by key range.
 */
export const USAGE_METRICS = {
  /** `<accountId>/<granularity>/<bucket>/<tokenId>/<chain>/<method label>` → counts, latency sums (µs), histogram. */
  rollups: 'usage_rollups',
  /** `<accountId>/<granularity>/<bucket>/<chain>/<code>/<message hash>/<method label>` → count, lastSeen, code, message. */
  errorGroups: 'usage_error_groups',
  /** `<accountId>/<at>/<requestId>` → one failed call, for the error timeline. */
  recentErrors: 'usage_recent_errors',
  /** `<accountId>/<tokenId>/<day>/<ip>` → count, lastSeen. */
  clientIps: 'usage_client_ips',
  /** `<accountId>/<at>/<requestId>` → the compact raw row the exports stream. */
  requests: 'usage_requests',
} as const;

export const ERROR_GROUP_GRANULARITIES: readonly SeriesGranularity[] = ['minute', 'hour', 'day'];
const MESSAGE_MAX = 200;

/** Counts of a roll-up document besides the histogram fields. Latency sums are integer µs so that sums are exact and order-independent. */
export interface RollupCounts {
  requests: number;
  successes: number;
  errors: number;
  totalUs: number;
  upstreamUs: number;
  /** Calls that reached an upstream (the denominator of node latency). */
  upstreamCalls: number;
}

/*
 * Keys of the writes made for every usage event are joined from an array: `join` builds a flat
 * string, where a template literal builds a tree of pieces that the read models flatten and
 * hash again (about 3× the time per key, measured on the replay).
 */
export const rollupKey = (accountId: string, g: Granularity, bucket: string, tokenId: string, chain: string, method: string): string =>
  [accountId, g, bucket, tokenId, chain, method].join('/');

export interface RollupKey {
  accountId: string;
  granularity: Granularity;
  bucket: string;
  tokenId: string;
  chain: string;
  method: string;
}

export function parseRollupKey(key: string): RollupKey {
  const [accountId = '', granularity = '', bucket = '', tokenId = '', chain = '', ...method] = key.split('/');
  return { accountId, granularity: granularity as Granularity, bucket, tokenId, chain, method: method.join('/') };
}

/** Prefix of one granularity of an account's roll-ups (or error groups). */
export const granularityPrefix = (accountId: string, g: Granularity): string => `${accountId}/${g}/`;

export const errorGroupKey = (accountId: string, g: Granularity, bucket: string, chain: string, code: number, message: string, method: string): string =>
  errorGroupKeyOfHash(accountId, g, bucket, chain, code, messageHash(message), method);

const errorGroupKeyOfHash = (accountId: string, g: Granularity, bucket: string, chain: string, code: number, hash: string, method: string): string =>
  [accountId, g, bucket, chain, code, hash, method].join('/');

const messageHash = (message: string): string => createHash('sha256').update(message).digest('hex').slice(0, 12);

export const timeKey = (accountId: string, at: string, requestId: string): string => [accountId, at, requestId].join('/');
export const clientIpKey = (accountId: string, tokenId: string, day: string, ip: string): string => [accountId, tokenId, day, ip].join('/');

/** The error code of a failed call: the JSON-RPC code when it carried one, else the HTTP status. */
export const errorCodeOf = (r: Pick<UsageRecord, 'status' | 'rpcErrorCode'>): number => r.rpcErrorCode ?? r.status;

export const errorMessageOf = (r: Pick<UsageRecord, 'errorMessage'>): string => (r.errorMessage ?? '').slice(0, MESSAGE_MAX);

/** A raw row without the parts its key holds (account, time, request id): an array, a third the size of an object. */
export type RequestRowFields = [
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

export type RequestRow = Omit<UsageRecord, 'accountId'>;

export function encodeRequestRow(r: UsageRecord): { r: RequestRowFields } {
  return { r: [r.tokenId, r.chain, r.method, r.status, r.rpcErrorCode, r.errorMessage, r.totalMs, r.upstreamMs, r.clientIp, r.upstream] };
}

export function decodeRequestRow(key: string, doc: { r: RequestRowFields }): RequestRow {
  const [, at = '', ...rest] = key.split('/');
  const [tokenId, chain, method, status, rpcErrorCode, errorMessage, totalMs, upstreamMs, clientIp, upstream] = doc.r;
  return { requestId: rest.join('/'), at, tokenId, chain, method, status, rpcErrorCode, errorMessage, totalMs, upstreamMs, clientIp, upstream };
}

/** The canonical ISO form of a record's time, or null when it is not a time. */
function canonicalTime(at: string): string | null {
  const ms = Date.parse(at);
  return Number.isFinite(ms) ? new Date(ms).toISOString() : null;
}

/** The read-model writes of one usage record (pure). Runs for every usage event replayed: no copies, one ISO string. */
export function usageWrites(record: UsageRecord): ReadModelWrite[] {
  const at = canonicalTime(record.at);
  if (at === null) return [];
  const { accountId, tokenId, chain, requestId } = record;
  const failed = isErrorUsage(record);
  const method = methodLabel(record.method);
  const inc: Record<string, number> = {
    requests: 1,
    successes: failed ? 0 : 1,
    errors: failed ? 1 : 0,
    totalUs: Math.round(record.totalMs * 1000),
    upstreamUs: record.upstreamMs === null ? 0 : Math.round(record.upstreamMs * 1000),
    upstreamCalls: record.upstreamMs === null ? 0 : 1,
    [histogramField(record.totalMs)]: 1,
  };
  const writes: ReadModelWrite[] = GRANULARITIES.map((g) => ({
    op: 'inc' as const,
    collection: USAGE_METRICS.rollups,
    key: rollupKey(accountId, g, bucketNameOfIso(at, g), tokenId, chain, method),
    inc,
  }));
  const key = timeKey(accountId, at, requestId);
  writes.push(
    { op: 'put', collection: USAGE_METRICS.requests, key, doc: encodeRequestRow(record) },
    {
      op: 'inc',
      collection: USAGE_METRICS.clientIps,
      key: clientIpKey(accountId, tokenId, bucketNameOfIso(at, 'day'), record.clientIp),
      inc: { count: 1 },
      set: { lastSeen: at },
    },
  );
  if (failed) {
    const code = errorCodeOf(record);
    const message = errorMessageOf(record);
    const hash = messageHash(message);
    const set = { code, message, lastSeen: at };
    for (const g of ERROR_GROUP_GRANULARITIES) {
      writes.push({
        op: 'inc',
        collection: USAGE_METRICS.errorGroups,
        key: errorGroupKeyOfHash(accountId, g, bucketNameOfIso(at, g), chain, code, hash, method),
        inc: { count: 1 },
        set,
      });
    }
    writes.push({
      op: 'put',
      collection: USAGE_METRICS.recentErrors,
      key,
      doc: { tokenId, chain, method: record.method, status: record.status, code, message },
    });
  }
  return writes;
}

/**
 * Usage roll-ups per minute, hour, day and month × account × token × chain × method, error
 * groups, the recent errors, client IPs per token and the raw rows for exports. Counting is
 * `inc` only, so the runner's checkpoint makes it exactly-once and a rebuild equals live.
 */
export const usageMetricsProjection: Projection = {
  name: 'usage_metrics',
  collections: Object.values(USAGE_METRICS),
  project(stored: StoredEvent): ReadModelWrite[] {
    if (stored.type !== USAGE_EVENT_TYPE) return [];
    const parsed = UsageRecord.safeParse(stored.data);
    return parsed.success ? usageWrites(parsed.data) : [];
  },
};
