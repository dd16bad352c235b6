import { BY_METHOD_MAX, ERROR_GROUPS_MAX } from '../api/schemas.js';
import type {
  ChainFigures,
  ClientIp,
  ErrorGroup,
  MethodFigures,
  OtherErrors,
  OtherMethods,
  RecentError,
  SeriesPoint,
  TokenFigures,
  UsageFigures,
} from '../api/types.js';
import { decodeRawRow, type RawRowFields, type UsageCall } from '../domain/usage.js';
import type { Doc, ReadModelStore } from '../infra/readmodels/port.js';
import { bucketName, bucketStart, ceilTo, coverRange, floorTo, type SeriesGranularity, seriesBuckets } from './usageBuckets.js';
import { HISTOGRAM_FIELDS, quantile } from './usageHistogram.js';
import { methodLabel } from './usageMethod.js';
import { granularityPrefix, parseRollupKey, RAW_ROWS_PER_DOC, type RollupKey, USAGE_METRICS } from './usageMetrics.js';

// The PDF export reads these shapes from here.
export type { ErrorGroup, SeriesPoint, UsageFigures };

/** What a metrics query covers: the minute-aligned range [start, end) (epoch ms), optionally one chain, optionally one token. */
export interface UsageScope {
  accountId: string;
  start: number;
  end: number;
  granularity: SeriesGranularity;
  chain: string | null;
  tokenId?: string | null;
  /**
   * One method label as the roll-ups and `byMethod` name it: a JSON-RPC method, or a REST path
   * with its identifiers as `{id}` (the dashboard's method filter). Rows and recent errors keep
   * the raw method and are matched by its label, so every figure of a filtered scope counts the
   * same calls.
   */
  method?: string | null;
}

/** Counts that add up across documents. */
interface Tally {
  requests: number;
  errors: number;
  totalUs: number;
  upstreamUs: number;
  upstreamCalls: number;
  cacheHits: number;
  coalesced: number;
  hedged: number;
  histogram: number[];
}

const emptyTally = (): Tally => ({
  requests: 0,
  errors: 0,
  totalUs: 0,
  upstreamUs: 0,
  upstreamCalls: 0,
  cacheHits: 0,
  coalesced: 0,
  hedged: 0,
  histogram: HISTOGRAM_FIELDS.map(() => 0),
});
const num = (v: unknown): number => (typeof v === 'number' ? v : 0);
const HISTOGRAM_INDEX = new Map(HISTOGRAM_FIELDS.map((field, i) => [field, i]));

/** Adds a roll-up document (only the fields it has: most hold one or two histogram buckets). */
function addDoc(t: Tally, doc: Doc): void {
  for (const field in doc) {
    const v = doc[field];
    if (typeof v !== 'number') continue;
    switch (field) {
      case 'requests':
        t.requests += v;
        break;
      case 'errors':
        t.errors += v;
        break;
      case 'totalUs':
        t.totalUs += v;
        break;
      case 'upstreamUs':
        t.upstreamUs += v;
        break;
      case 'upstreamCalls':
        t.upstreamCalls += v;
        break;
      case 'cacheHits':
        t.cacheHits += v;
        break;
      case 'coalesced':
        t.coalesced += v;
        break;
      case 'hedged':
        t.hedged += v;
        break;
      default: {
        const i = HISTOGRAM_INDEX.get(field);
        if (i !== undefined) t.histogram[i] = (t.histogram[i] as number) + v;
      }
    }
  }
}

function addTally(into: Tally, t: Tally): void {
  into.requests += t.requests;
  into.errors += t.errors;
  into.totalUs += t.totalUs;
  into.upstreamUs += t.upstreamUs;
  into.upstreamCalls += t.upstreamCalls;
  into.cacheHits += t.cacheHits;
  into.coalesced += t.coalesced;
  into.hedged += t.hedged;
  for (let i = 0; i < t.histogram.length; i++) into.histogram[i] = (into.histogram[i] as number) + (t.histogram[i] as number);
}

/** What a series point needs. */
interface SeriesTally {
  requests: number;
  errors: number;
  totalUs: number;
}

const round = (v: number, places: number): number => Math.round(v * 10 ** places) / 10 ** places;
const percent = (part: number, whole: number): number | null => (whole === 0 ? null : round((100 * part) / whole, 4));
const ms = (v: number | null): number | null => (v === null ? null : round(v, 2));

function figures(t: Tally): UsageFigures {
  return {
    requests: t.requests,
    success: t.requests - t.errors,
    errors: t.errors,
    successRate: percent(t.requests - t.errors, t.requests),
    errorRate: percent(t.errors, t.requests),
    avgResponseMs: t.requests === 0 ? null : ms(t.totalUs / 1000 / t.requests),
    p50ResponseMs: ms(quantile(t.histogram, 0.5)),
    p95ResponseMs: ms(quantile(t.histogram, 0.95)),
    p99ResponseMs: ms(quantile(t.histogram, 0.99)),
    avgNodeLatencyMs: t.upstreamCalls === 0 ? null : ms(t.upstreamUs / 1000 / t.upstreamCalls),
    cacheHits: t.cacheHits,
    coalesced: t.coalesced,
    hedged: t.hedged,
  };
}

/** The figures of a scope, in the API's shapes; the metrics calls pick from it. */
export interface UsageReport {
  totals: UsageFigures;
  byChain: ChainFigures[];
  /** The busiest BY_METHOD_MAX (chain, method) entries; the rest summed in byMethodOther (null when none are left out). */
  byMethod: MethodFigures[];
  byMethodOther: OtherMethods | null;
  byToken: TokenFigures[];
  series: SeriesPoint[];
}

/** The error groups of a scope: the ERROR_GROUPS_MAX most frequent, the rest summed in errorsOther (null when none are left out). */
export interface ErrorReport {
  errors: ErrorGroup[];
  errorsOther: OtherErrors | null;
}

const CLIENT_IPS_MAX = 100;
/**
 * Rows per read when streaming an export, at most about: bounds memory whatever the export's
 * size. Raw-row documents hold 1 to RAW_ROWS_PER_DOC rows (one event's calls of an hour), so the
 * number of documents a read asks for follows the rows per document of the read before, up to
 * EXPORT_PAGE_MAX_DOCS: a document costs more than its rows (its key, its object), and 1,024
 * one-row documents a read took the export of 1,000,000 such rows to +99 MB of RSS, 256 to +69
 * (bench/export-memory.ts with EVENTS=one-call), 10 % slower.
 */
export const EXPORT_PAGE_ROWS = 1024;
export const EXPORT_PAGE_MAX_DOCS = 256;
const EXPORT_PAGE_MIN_DOCS = Math.ceil(EXPORT_PAGE_ROWS / RAW_ROWS_PER_DOC);

function entry<K, V>(map: Map<K, V>, key: K, create: () => V): V {
  const found = map.get(key);
  if (found !== undefined) return found;
  const made = create();
  map.set(key, made);
  return made;
}

const byRequestsDesc = <T extends { requests: number }>(a: T, b: T): number => b.requests - a.requests;

/** Metrics over the usage read models: every query is a handful of key-range scans. */
export class UsageQueries {
  constructor(private readonly rm: ReadModelStore) {}

  /** Range scans over the spans that cover the scope exactly (see coverRange). */
  private async scanSpans(collection: string, scope: UsageScope): Promise<Array<{ key: string; doc: Doc }>> {
    const spans = coverRange(scope.start, scope.end, scope.granularity);
    const parts = await Promise.all(
      spans.map((s) => {
        const prefix = granularityPrefix(scope.accountId, s.granularity);
        return this.rm.range(collection, { gte: prefix + bucketName(s.from, s.granularity), lt: prefix + bucketName(s.to, s.granularity) });
      }),
    );
    return parts.flat();
  }

  /** Totals, breakdowns by chain, (chain, method) and token, and the series at the scope's granularity. */
  async usage(scope: UsageScope): Promise<UsageReport> {
    const docs = await this.scanSpans(USAGE_METRICS.rollups, scope);
    // Documents are tallied per (token, chain, method) and per series bucket only; the totals and
    // the breakdowns are sums of those few tallies. Key parts are cut with indexOf and cached: a
    // 30-day query reads thousands of documents over a handful of combinations and buckets.
    const combos = new Map<string, { key: RollupKey; tally: Tally } | null>();
    const buckets = new Map<string, SeriesTally>();
    const series = new Map<number, SeriesTally>();
    for (const { key, doc } of docs) {
      const afterGranularity = key.indexOf('/', key.indexOf('/') + 1);
      const afterBucket = key.indexOf('/', afterGranularity + 1);
      const comboId = key.slice(afterBucket + 1);
      let combo = combos.get(comboId);
      if (combo === undefined) {
        const parsed = parseRollupKey(key);
        const included =
          (!scope.chain || parsed.chain === scope.chain) &&
          (!scope.tokenId || parsed.tokenId === scope.tokenId) &&
          (!scope.method || parsed.method === scope.method);
        combo = included ? { key: parsed, tally: emptyTally() } : null;
        combos.set(comboId, combo);
      }
      if (combo === null) continue;
      addDoc(combo.tally, doc);
      const bucket = key.slice(afterGranularity + 1, afterBucket);
      let point = buckets.get(bucket);
      if (point === undefined) {
        point = entry(series, floorTo(bucketStart(bucket), scope.granularity), () => ({ requests: 0, errors: 0, totalUs: 0 }));
        buckets.set(bucket, point);
      }
      point.requests += num(doc['requests']);
      point.errors += num(doc['errors']);
      point.totalUs += num(doc['totalUs']);
    }
    const totals = emptyTally();
    const chains = new Map<string, Tally>();
    const tokens = new Map<string, Tally>();
    const methods = new Map<string, { chain: string; method: string; tally: Tally }>();
    for (const combo of combos.values()) {
      if (combo === null) continue;
      const { chain, tokenId, method } = combo.key;
      addTally(totals, combo.tally);
      addTally(entry(chains, chain, emptyTally), combo.tally);
      addTally(entry(tokens, tokenId, emptyTally), combo.tally);
      addTally(entry(methods, `${chain}\0${method}`, () => ({ chain, method, tally: emptyTally() })).tally, combo.tally);
    }
    const byMethod = [...methods.values()].sort((a, b) => b.tally.requests - a.tally.requests);
    // Past the cap, the rest are summed: byMethod and byMethodOther add up to the totals.
    const left = byMethod.slice(BY_METHOD_MAX);
    const other = emptyTally();
    for (const m of left) addTally(other, m.tally);
    return {
      totals: figures(totals),
      byChain: [...chains].map(([chain, t]) => ({ chain, ...figures(t) })).sort(byRequestsDesc),
      byMethod: byMethod.slice(0, BY_METHOD_MAX).map((m) => ({ chain: m.chain, method: m.method, ...figures(m.tally) })),
      byMethodOther: left.length === 0 ? null : { methods: left.length, ...figures(other) },
      byToken: [...tokens].map(([tokenId, t]) => ({ tokenId, ...figures(t) })).sort(byRequestsDesc),
      series: seriesBuckets(scope.start, scope.end, scope.granularity).map((t) => {
        const p = series.get(t);
        return {
          t: new Date(t).toISOString(),
          requests: p?.requests ?? 0,
          errors: p?.errors ?? 0,
          avgResponseMs: p && p.requests > 0 ? ms(p.totalUs / 1000 / p.requests) : null,
        };
      }),
    };
  }

  /** Errors grouped by (code, message, chain, method) with counts and the last time seen, most frequent first; past ERROR_GROUPS_MAX, the rest summed. */
  async errorGroups(scope: UsageScope): Promise<ErrorReport> {
    const docs = await this.scanSpans(USAGE_METRICS.errorGroups, scope);
    const groups = new Map<string, ErrorGroup>();
    for (const { key, doc } of docs) {
      // `<account>/<g>/<bucket>/<chain>/<code>/<hash>/<method>`
      const [, , , chain = '', , hash = '', ...method] = key.split('/');
      if (scope.chain && chain !== scope.chain) continue;
      if (scope.method && method.join('/') !== scope.method) continue;
      const id = `${chain}\0${hash}\0${doc['code']}\0${method.join('/')}`;
      const lastSeen = String(doc['lastSeen'] ?? '');
      const g = groups.get(id);
      if (g) {
        g.count += num(doc['count']);
        if (lastSeen > g.lastSeen) g.lastSeen = lastSeen;
      } else {
        groups.set(id, { code: num(doc['code']), message: String(doc['message'] ?? ''), chain, method: method.join('/'), count: num(doc['count']), lastSeen });
      }
    }
    const sorted = [...groups.values()].sort((a, b) => b.count - a.count || b.lastSeen.localeCompare(a.lastSeen));
    const left = sorted.slice(ERROR_GROUPS_MAX);
    const errorsOther =
      left.length === 0
        ? null
        : {
            groups: left.length,
            count: left.reduce((n, g) => n + g.count, 0),
            // ISO times: the greatest string is the latest.
            lastSeen: left.map((g) => g.lastSeen).sort()[left.length - 1] ?? '',
          };
    return { errors: sorted.slice(0, ERROR_GROUPS_MAX), errorsOther };
  }

  /** The latest failed calls in the scope, newest first. */
  async recentErrors(scope: UsageScope, limit = 20): Promise<RecentError[]> {
    const prefix = `${scope.accountId}/`;
    const out: RecentError[] = [];
    let lt = prefix + new Date(scope.end).toISOString();
    const gte = prefix + new Date(scope.start).toISOString();
    // Newest first, page by page, until enough match the chain filter.
    for (;;) {
      const page = await this.rm.range(USAGE_METRICS.recentErrors, { gte, lt, reverse: true, limit: 200 });
      for (const { key, doc } of page) {
        const [, at = '', ...requestId] = key.split('/');
        if (scope.chain && doc['chain'] !== scope.chain) continue;
        if (scope.tokenId && doc['tokenId'] !== scope.tokenId) continue;
        if (scope.method && methodLabel(String(doc['method'])) !== scope.method) continue;
        out.push({
          at,
          requestId: requestId.join('/'),
          tokenId: String(doc['tokenId']),
          chain: String(doc['chain']),
          method: String(doc['method']),
          status: num(doc['status']),
          code: num(doc['code']),
          message: String(doc['message'] ?? ''),
        });
        if (out.length >= limit) return out;
      }
      const last = page[page.length - 1];
      if (page.length < 200 || !last) return out;
      lt = last.key;
    }
  }

  /** A token's client IPs over the days the scope touches, busiest first. */
  async clientIps(scope: UsageScope & { tokenId: string }): Promise<ClientIp[]> {
    const prefix = `${scope.accountId}/${scope.tokenId}/`;
    const docs = await this.rm.range(USAGE_METRICS.clientIps, {
      gte: prefix + bucketName(scope.start, 'day'),
      lt: `${prefix}${bucketName(scope.end - 1, 'day')}\uffff`,
    });
    const ips = new Map<string, ClientIp>();
    for (const { key, doc } of docs) {
      const ip = key.slice(prefix.length + 11);
      const lastSeen = String(doc['lastSeen'] ?? '');
      const seen = ips.get(ip);
      if (seen) {
        seen.count += num(doc['count']);
        if (lastSeen > seen.lastSeen) seen.lastSeen = lastSeen;
      } else ips.set(ip, { ip, count: num(doc['count']), lastSeen });
    }
    return [...ips.values()].sort((a, b) => b.count - a.count || a.ip.localeCompare(b.ip)).slice(0, CLIENT_IPS_MAX);
  }

  /**
   * The raw rows of the scope, a page at a time (an export never holds more than one page):
   * hour by hour, and within an hour in the order they were recorded (their stream revision).
   */
  async *requestRows(scope: UsageScope): AsyncGenerator<UsageCall[]> {
    const prefix = `${scope.accountId}/`;
    let gte = prefix + bucketName(scope.start, 'hour');
    const lt = prefix + bucketName(ceilTo(scope.end, 'hour'), 'hour');
    const startIso = new Date(scope.start).toISOString();
    const endIso = new Date(scope.end).toISOString();
    let limit = EXPORT_PAGE_MIN_DOCS;
    for (;;) {
      const page = await this.rm.range<Record<string, RawRowFields>>(USAGE_METRICS.requestBlocks, { gte, lt, limit });
      const rows: UsageCall[] = [];
      let rowsRead = 0;
      for (const { doc } of page) {
        // Integer-like fields enumerate in ascending order: the document's calls in the order recorded.
        for (const slot in doc) {
          rowsRead++;
          const row = doc[slot] as RawRowFields;
          const at = row[1];
          if (at < startIso || at >= endIso || (scope.chain && row[3] !== scope.chain) || (scope.method && methodLabel(row[4]) !== scope.method)) continue;
          rows.push(decodeRawRow(row));
        }
      }
      if (rows.length > 0) yield rows;
      const last = page[page.length - 1];
      if (page.length < limit || !last) return;
      limit = Math.min(EXPORT_PAGE_MAX_DOCS, Math.max(EXPORT_PAGE_MIN_DOCS, Math.floor((EXPORT_PAGE_ROWS * page.length) / Math.max(1, rowsRead))));
      // Just past the last key: keys never contain \0.
      gte = `${last.key}\0`;
    }
  }
}
