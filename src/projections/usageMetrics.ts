import { createHash } from 'node:crypto';
import { cutText } from '../domain/storableText.js';
import { CANONICAL_ISO, encodeRawRow, isErrorUsage, type RawRowFields, type UsageRecord } from '../domain/usage.js';
import type { StoredEvent } from '../infra/eventstore/port.js';
import type { ReadModelWrite } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';
import { bucketNameOfIso, DAY_MS, GRANULARITIES, type Granularity, MINUTE_MS, type SeriesGranularity } from './usageBuckets.js';
import { bucketExpiry, longerRetention, MINUTE_RETENTION_DAYS, usageExpiryOf, validRetention } from './usageExpiry.js';
import { HISTOGRAM_FIELDS, histogramIndex } from './usageHistogram.js';
import { methodLabel } from './usageMethod.js';
import { rawRowSlot, USAGE_EVENT_TYPES, usageRecordsOf } from './usageRecord.js';

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
  /**
   * `<accountId>/<hour>/<first slot>` → the calls of one usage event that fall in that hour,
   * RAW_ROWS_PER_DOC at most (an event of more calls gives several documents), as
   * `{ "<slot - first slot>": RawRowFields }`: the raw rows the exports stream. A slot is the
   * call's place in the account's `usage-<accountId>` stream (`rawRowSlot`), so an hour's
   * documents sort in the order the calls were recorded. Each document is written once, with
   * `put` and no read: with calls spread over many accounts an event holds one call or two,
   * and packing several events into one document read and rewrote it for every call
   * (bench/HISTORY.md). The same events give the same documents, so a rebuild equals live.
   * Documents of earlier versions (`<first slot>` was then the number of a block of 16
   * consecutive slots) sort before every later one of their hour and are read alike.
   */
  requestBlocks: 'usage_request_blocks',
  /**
   * One row per call, `<accountId>/<at>/<requestId>`, written by earlier versions: no longer
   * written, still a collection of the projection so that a rebuild drops it.
   */
  requests: 'usage_requests',
} as const;

export const ERROR_GROUP_GRANULARITIES: readonly SeriesGranularity[] = ['minute', 'hour', 'day'];
const MESSAGE_MAX = 200;

/**
 * Counts of a roll-up document besides the histogram fields. Latency sums are integer µs so
 * that sums are exact and order-independent. Successes are `requests - errors`: not stored
 * (a field less in every roll-up a call writes; documents of earlier versions still carry it,
 * and queries ignore it).
 */
export interface RollupCounts {
  requests: number;
  errors: number;
  totalUs: number;
  upstreamUs: number;
  /** Calls that reached an upstream (the denominator of node latency). */
  upstreamCalls: number;
  /**
   * Reads answered from the response cache, by sharing an identical call in flight, and with a
   * second upstream asked (usage records' `cache`). Written only when not 0: most roll-ups have none.
   */
  cacheHits?: number;
  coalesced?: number;
  hedged?: number;
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

/** Cut where no pair is split: half an emoji is text PostgreSQL's jsonb refuses (src/domain/storableText.ts). */
export const errorMessageOf = (r: Pick<UsageRecord, 'errorMessage'>): string => cutText(r.errorMessage ?? '', MESSAGE_MAX);

/** Calls of one usage event per raw-row document (see USAGE_METRICS.requestBlocks): at most a few KB each. */
export const RAW_ROWS_PER_DOC = 64;

/** Slots are zero-padded so that an hour's documents sort in slot order. */
export const requestBlockKey = (accountId: string, hour: string, firstSlot: number): string => [accountId, hour, String(firstSlot).padStart(16, '0')].join('/');

/** The canonical ISO form of a record's time, or null when it is not a time. */
export function canonicalTime(at: string): string | null {
  if (CANONICAL_ISO.test(at)) return at;
  const ms = Date.parse(at);
  return Number.isFinite(ms) ? new Date(ms).toISOString() : null;
}

/** A document being folded: what it will be written with, and the furthest expiry its calls gave it. */
interface Folded<T> {
  value: T;
  expiresAt: number | undefined;
}

/** A bucket's document being folded: what it will be written with, and its calls' longest retention (its expiry follows, see bucketExpiry). */
interface BucketFolded<T> {
  value: T;
  retention: number | undefined;
}

/** A roll-up being folded: plain numeric fields (one shape), histogram buckets in the order first seen. */
class RollupFold implements RollupCounts {
  requests = 0;
  errors = 0;
  totalUs = 0;
  upstreamUs = 0;
  upstreamCalls = 0;
  cacheHits = 0;
  coalesced = 0;
  hedged = 0;
  readonly histogram: number[] = [];
  readonly histogramCounts: number[] = [];
  /** The longest retention of its calls: the expiry is computed once, from the bucket. */
  retention: number | undefined = undefined;
  /** Known to have expired already (see UsageFold's `nowMs`): not written. */
  expired = false;

  addLatency(bucket: number): void {
    const at = this.histogram.indexOf(bucket);
    if (at >= 0) this.histogramCounts[at] = (this.histogramCounts[at] as number) + 1;
    else {
      this.histogram.push(bucket);
      this.histogramCounts.push(1);
    }
  }

  /** The `inc` of the roll-up's write: the counts, then the histogram fields (as a call's own write has them). */
  inc(): Record<string, number> {
    const inc: Record<string, number> = {
      requests: this.requests,
      errors: this.errors,
      totalUs: this.totalUs,
      upstreamUs: this.upstreamUs,
      upstreamCalls: this.upstreamCalls,
    };
    if (this.cacheHits > 0) inc.cacheHits = this.cacheHits;
    if (this.coalesced > 0) inc.coalesced = this.coalesced;
    if (this.hedged > 0) inc.hedged = this.hedged;
    for (let i = 0; i < this.histogram.length; i++) inc[HISTOGRAM_FIELDS[this.histogram[i] as number] as string] = this.histogramCounts[i] as number;
    return inc;
  }
}

interface ComboFold {
  chain: string;
  method: string;
  /** Per granularity (GRANULARITIES order), bucket name → counts. */
  buckets: Array<Map<string, RollupFold>>;
}

interface TokenFold {
  tokenId: string;
  /** chain → method label → roll-ups: nested, so that a call builds no key to find its roll-ups. */
  combos: Map<string, Map<string, ComboFold>>;
  /** day → ip → count and last time seen. */
  clientIps: Map<string, Map<string, BucketFolded<{ count: number; lastSeen: string }>>>;
}

interface AccountFold {
  accountId: string;
  tokens: Map<string, TokenFold>;
  /** hour → first slot of a raw-row document → its rows by slot less the first. */
  requestBlocks: Map<string, Map<number, BucketFolded<Record<number, RawRowFields>>>>;
}

const MINUTE = GRANULARITIES.indexOf('minute');

const maxExpiry = (a: number | undefined, b: number | undefined): number | undefined => (a === undefined ? b : b === undefined ? a : Math.max(a, b));

const newMap = <K, V>(): Map<K, V> => new Map<K, V>();

function entry<K, V>(map: Map<K, V>, key: K, create: () => V): V {
  let found = map.get(key);
  if (found === undefined) {
    found = create();
    map.set(key, found);
  }
  return found;
}

/*
 * Method labels repeat (a few dozen JSON-RPC names, REST paths with their ids replaced): the
 * label of a raw method is remembered instead of running its regular expressions per call.
 */
const METHOD_LABELS_MAX = 10_000;
let methodLabels = new Map<string, string>();
function cachedMethodLabel(method: string): string {
  let label = methodLabels.get(method);
  if (label === undefined) {
    label = methodLabel(method);
    if (methodLabels.size >= METHOD_LABELS_MAX) methodLabels = new Map();
    methodLabels.set(method, label);
  }
  return label;
}

/**
 * The writes of a run of usage records, folded as they are added: one write per document, with
 * the effect of the records' writes applied one after the other (counts add up, fields set by
 * a later call win, a document keeps its furthest expiry). A replay projects thousands of calls
 * per batch, most of them into the same hour, day and month roll-ups: folding here, with plain
 * additions and no key per call and granularity, is most of what projecting them costs.
 */
export class UsageFold {
  private readonly accounts = new Map<string, AccountFold>();
  /**
   * A call before this time (canonical ISO) metered with a retention gives its minute roll-up
   * an expiry already past at `nowMs` (MINUTE_RETENTION_DAYS at most, its minute included):
   * that roll-up is not built, as the runner would drop it. Null: every document is built.
   */
  private readonly minutesExpireBefore: string | null;
  /** Rare (failed calls): keyed directly. */
  private readonly errorGroups = new Map<string, Folded<{ inc: { count: number }; set: { code: number; message: string; lastSeen: string } }>>();
  private readonly recentErrors: ReadModelWrite[] = [];

  constructor(nowMs?: number) {
    this.minutesExpireBefore = nowMs === undefined ? null : new Date(nowMs - MINUTE_RETENTION_DAYS * DAY_MS - MINUTE_MS).toISOString();
  }

  /**
   * Adds a record at `slot` of its account's usage stream (`rawRowSlot`), whose raw row goes in
   * the document that starts at `docSlot` (its event's, see USAGE_METRICS.requestBlocks); a
   * record whose time is not a time counts nowhere.
   */
  add(record: UsageRecord, slot: number, docSlot = slot): void {
    const at = canonicalTime(record.at);
    if (at === null) return;
    const { accountId, tokenId, chain } = record;
    const retention = validRetention(record.retentionDays);
    const failed = isErrorUsage(record);
    const method = cachedMethodLabel(record.method);
    // Lookups written out rather than through `entry`: no closure per call and level.
    let account = this.accounts.get(accountId);
    if (account === undefined) {
      account = { accountId, tokens: new Map(), requestBlocks: new Map() };
      this.accounts.set(accountId, account);
    }
    let token = account.tokens.get(tokenId);
    if (token === undefined) {
      token = { tokenId, combos: new Map(), clientIps: new Map() };
      account.tokens.set(tokenId, token);
    }
    let methods = token.combos.get(chain);
    if (methods === undefined) {
      methods = new Map();
      token.combos.set(chain, methods);
    }
    let combo = methods.get(method);
    if (combo === undefined) {
      combo = { chain, method, buckets: GRANULARITIES.map(() => new Map()) };
      methods.set(method, combo);
    }
    const totalUs = Math.round(record.totalMs * 1000);
    const upstreamUs = record.upstreamMs === null ? 0 : Math.round(record.upstreamMs * 1000);
    const latencyBucket = histogramIndex(record.totalMs);
    // Only a call metered with a retention has documents that expire (older records keep theirs).
    const minutesExpired = retention !== undefined && this.minutesExpireBefore !== null && at < this.minutesExpireBefore;
    for (let g = 0; g < GRANULARITIES.length; g++) {
      const granularity = GRANULARITIES[g] as Granularity;
      const buckets = combo.buckets[g] as Map<string, RollupFold>;
      const bucket = bucketNameOfIso(at, granularity);
      let rollup = buckets.get(bucket);
      if (rollup === undefined) {
        rollup = new RollupFold();
        buckets.set(bucket, rollup);
      }
      if (g === MINUTE && minutesExpired) {
        // Its document expires with this call's expiry, already past (older records in the same minute give none).
        rollup.expired = true;
        continue;
      }
      rollup.requests++;
      if (failed) rollup.errors++;
      if (record.cache === 'hit') rollup.cacheHits++;
      else if (record.cache === 'coalesced') rollup.coalesced++;
      else if (record.cache === 'hedged') rollup.hedged++;
      rollup.totalUs += totalUs;
      if (record.upstreamMs !== null) {
        rollup.upstreamUs += upstreamUs;
        rollup.upstreamCalls++;
      }
      rollup.addLatency(latencyBucket);
      rollup.retention = longerRetention(rollup.retention, retention);
    }

    const hourBlocks = entry(account.requestBlocks, bucketNameOfIso(at, 'hour'), newMap<number, BucketFolded<Record<number, RawRowFields>>>);
    let block = hourBlocks.get(docSlot);
    if (block === undefined) {
      block = { value: {}, retention: undefined };
      hourBlocks.set(docSlot, block);
    }
    block.value[slot - docSlot] = encodeRawRow(record, at);
    block.retention = longerRetention(block.retention, retention);

    const dayIps = entry(token.clientIps, bucketNameOfIso(at, 'day'), newMap<string, BucketFolded<{ count: number; lastSeen: string }>>);
    let ip = dayIps.get(record.clientIp);
    if (ip === undefined) {
      ip = { value: { count: 0, lastSeen: at }, retention: undefined };
      dayIps.set(record.clientIp, ip);
    }
    ip.value.count++;
    ip.value.lastSeen = at;
    ip.retention = longerRetention(ip.retention, retention);

    if (failed) {
      const expiry = usageExpiryOf(at, retention);
      const code = errorCodeOf(record);
      const message = errorMessageOf(record);
      const hash = messageHash(message);
      for (const g of ERROR_GROUP_GRANULARITIES) {
        const group = entry(this.errorGroups, errorGroupKeyOfHash(accountId, g, bucketNameOfIso(at, g), chain, code, hash, method), () => ({
          value: { inc: { count: 0 }, set: { code, message, lastSeen: at } },
          expiresAt: undefined,
        }));
        group.value.inc.count++;
        group.value.set = { code, message, lastSeen: at };
        group.expiresAt = maxExpiry(group.expiresAt, expiry(g));
      }
      this.recentErrors.push({
        op: 'put',
        collection: USAGE_METRICS.recentErrors,
        key: timeKey(accountId, at, record.requestId),
        doc: { tokenId, chain, method: record.method, status: record.status, code, message },
        expiresAt: expiry(null),
      });
    }
  }

  /** One write per document touched. */
  writes(): ReadModelWrite[] {
    const writes: ReadModelWrite[] = [];
    for (const { accountId, tokens, requestBlocks } of this.accounts.values()) {
      for (const { tokenId, combos, clientIps } of tokens.values()) {
        for (const methods of combos.values()) {
          for (const { chain, method, buckets } of methods.values()) {
            for (let g = 0; g < GRANULARITIES.length; g++) {
              const granularity = GRANULARITIES[g] as Granularity;
              for (const [bucket, rollup] of buckets[g] as Map<string, RollupFold>) {
                if (rollup.expired) continue;
                writes.push({
                  op: 'inc',
                  collection: USAGE_METRICS.rollups,
                  key: rollupKey(accountId, granularity, bucket, tokenId, chain, method),
                  inc: rollup.inc(),
                  expiresAt: bucketExpiry(bucket, granularity, rollup.retention),
                });
              }
            }
          }
        }
        for (const [day, ips] of clientIps) {
          // A token's calls of a day mostly share one retention: its expiry is computed once.
          let expiryOf: number | undefined | null = null;
          let expiresAt: number | undefined;
          for (const [ip, { value, retention }] of ips) {
            if (retention !== expiryOf) {
              expiryOf = retention;
              expiresAt = bucketExpiry(day, 'day', retention);
            }
            writes.push({
              op: 'inc',
              collection: USAGE_METRICS.clientIps,
              key: clientIpKey(accountId, tokenId, day, ip),
              inc: { count: value.count },
              set: { lastSeen: value.lastSeen },
              expiresAt,
            });
          }
        }
      }
      for (const [hour, blocks] of requestBlocks) {
        for (const [docSlot, { value, retention }] of blocks) {
          writes.push({
            op: 'put',
            collection: USAGE_METRICS.requestBlocks,
            key: requestBlockKey(accountId, hour, docSlot),
            doc: value,
            expiresAt: bucketExpiry(hour, 'hour', retention),
          });
        }
      }
    }
    for (const [key, { value, expiresAt }] of this.errorGroups) {
      writes.push({ op: 'inc', collection: USAGE_METRICS.errorGroups, key, inc: value.inc, set: value.set, expiresAt });
    }
    for (const w of this.recentErrors) writes.push(w);
    return writes;
  }
}

/** The read-model writes of one usage record at `slot` of its account's usage stream (pure). */
export function usageWrites(record: UsageRecord, slot: number): ReadModelWrite[] {
  const fold = new UsageFold();
  fold.add(record, slot);
  return fold.writes();
}

/**
 * Usage roll-ups per minute, hour, day and month × account × token × chain × method, error
 * groups, the recent errors, client IPs per token and the raw rows for exports. Counting is
 * `inc` only, so the runner's checkpoint makes it exactly-once and a rebuild equals live.
 */
export const usageMetricsProjection: Projection = {
  name: 'usage_metrics',
  collections: Object.values(USAGE_METRICS),
  eventTypes: USAGE_EVENT_TYPES,
  project: (stored) => projectUsage([stored]),
  projectBatch: projectUsage,
};

function projectUsage(events: readonly StoredEvent[], nowMs?: number): ReadModelWrite[] {
  const fold = new UsageFold(nowMs);
  for (const stored of events) {
    const records = usageRecordsOf(stored);
    for (let i = 0; i < records.length; i++) fold.add(records[i] as UsageRecord, rawRowSlot(stored, i), rawRowSlot(stored, i - (i % RAW_ROWS_PER_DOC)));
  }
  return fold.writes();
}
