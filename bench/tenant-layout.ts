/**
 * Issue 33 item 5, prototypes of a usage layout for many tenants, measured before anyone builds
 * one: storage CPU per call with one hot token against 10,000 accounts × 10 tokens called
 * round-robin, for three ways of keeping the same calls on the real embedded stores (LevelDB, in
 * this process; docs/decisions.md, "Flat cost per tenant needs usage kept across accounts"):
 *
 * - `current`: what runs today, simplified: each account's calls of a batch as one compact event
 *   on its `usage-<account>` stream (plain appends, no exactly-once window), then the real usage
 *   metrics and usage totals projections over the batch's events, committed per batch. It
 *   calibrates this harness against bench/storage-cpu.ts.
 * - `tenant`: the calls of a batch as ONE compact event for every account (a shared log stream);
 *   per batch, one delta document per shard of accounts (SHARDS) with each account's increments
 *   by token × chain × method and client IP, column by column, written blind (`put`, no read);
 *   when a minute has closed, each shard's deltas of it folded into one roll-up document per
 *   account and minute, and the minute's calls (read back from the log) into one raw-row
 *   document per account and minute; the deltas deleted.
 * - `shardlog`: no deltas; the log itself is sharded by account (`usageshard-<n>`), and each
 *   shard's tail is folded per account and minute when it reaches FOLD_CALLS calls or its oldest
 *   minute has closed (see shardLogLayout). After the run, 50 queries of an account's last hour
 *   (its minute documents and its calls in its shard's tail) are timed. With INTERN=1 its ids are
 *   interned to numbers (internedShardLogLayout): an in-memory dictionary whose new ids are
 *   appended to `usagedict` as events, integer account and token columns in the shard events,
 *   the fold reading the columns into builders keyed by numbers (RAW_ROWS=fold or none).
 *
 * In the last two, hour, day and month documents would be folded the same way from minute
 * documents when their bucket closes (a read per account and minute, a write per account and
 * hour): not run here, a sixtieth of the minute fold's work. The prototype's codec has no account
 * column: the bench's token ids carry the account. Not modelled: exactly-once windows,
 * retention, expiry, error groups.
 *
 * Calls carry a simulated time, RATE a second, in batches of BATCH_MS: the run goes as fast as
 * the stores allow and spans MINUTES simulated minutes (so that minutes close inside it). CPU is
 * the whole process's (every thread: LevelDB's compaction included) per call, less the
 * generator's own, measured alone after. Calls of the first WARMUP_SECONDS simulated seconds are
 * not counted.
 *
 *   npx tsx bench/tenant-layout.ts                      (~12 min: every layout, 1×1 and 10,000×10, 2 rounds)
 *   LAYOUTS=shardlog RAW_ROWS=none ROUNDS=3 npx tsx bench/tenant-layout.ts
 *   INTERN=1 LAYOUTS=shardlog RAW_ROWS=none ROUNDS=3 npx tsx bench/tenant-layout.ts     (ids interned to numbers)
 *   CURRENT_LOG_ONLY=1 LAYOUTS=current,shardlog RAW_ROWS=none npx tsx bench/tenant-layout.ts   (the per-account log alone)
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isInt, isIntOrNull, isString, isStringOrNull } from '../src/domain/guards.js';
import { CANONICAL_ISO, type UsageRecord } from '../src/domain/usage.js';
import { decodeUsageBatch, encodeUsageBatch, MAX_CALLS_PER_EVENT, USAGE_BATCH_EVENT_TYPE, usageBatchEventId } from '../src/domain/usageBatch.js';
import { LevelEventStore } from '../src/infra/eventstore/level.js';
import type { StoredEvent } from '../src/infra/eventstore/port.js';
import { LevelReadModelStore } from '../src/infra/readmodels/level.js';
import type { Doc, ReadModelWrite } from '../src/infra/readmodels/port.js';
import { histogramIndex } from '../src/projections/usageHistogram.js';
import { usageMetricsProjection } from '../src/projections/usageMetrics.js';
import { usageTotalsProjection } from '../src/projections/usageTotals.js';
import { log, median } from './lib/report.js';

const RATE = Number(process.env.RATE ?? 10_000);
const BATCH_MS = Number(process.env.BATCH_MS ?? 250);
const MINUTES = Number(process.env.MINUTES ?? 2);
const WARMUP_SECONDS = Number(process.env.WARMUP_SECONDS ?? 15);
const SHARDS = Number(process.env.SHARDS ?? 64);
/** `current` over fewer calls: at 10,000 accounts it costs ~10× the others. */
const CURRENT_SECONDS = Number(process.env.CURRENT_SECONDS ?? 30);
const LAYOUTS = (process.env.LAYOUTS ?? 'current,tenant,shardlog').split(',');
/** `current` without its projections: what the per-account usage streams alone cost (CURRENT_LOG_ONLY=1). */
const CURRENT_LOG_ONLY = process.env.CURRENT_LOG_ONLY === '1';
/** Rounds of every case, each case in a process of its own (alternated: layout by layout, hot then many). */
const ROUNDS = Number(process.env.ROUNDS ?? 2);
/** Set by the parent for the case a child runs. */
const TENANTS = process.env.TENANTS ?? 'hot';
const START_MS = Date.parse('2027-01-15T10:00:00.000Z');

interface Tenants {
  accounts: number;
  tokens: number;
}

/** Call `i` as the gateway meters it (the mix of bench/storage-cpu.ts), at its simulated time. */
function call(i: number, { accounts, tokens }: Tenants): UsageRecord {
  const account = i % accounts;
  const failed = i % 100 === 0;
  return {
    requestId: `Ab3dEf7hIj9kLm1n${i.toString(36).padStart(8, '0')}`,
    at: new Date(START_MS + Math.floor((i * 1000) / RATE)).toISOString(),
    accountId: `acc-bench-${account}`,
    tokenId: `tok-bench-${account}-${Math.floor(i / accounts) % tokens}`,
    chain: 'eth',
    method: ['eth_blockNumber', 'eth_call', 'eth_getBalance'][i % 3] as string,
    status: failed ? 429 : 200,
    rpcErrorCode: failed ? -32005 : null,
    errorMessage: failed ? 'rate limit exceeded' : null,
    totalMs: 0.41 + (i % 7) / 10,
    upstreamMs: failed ? null : 0.2,
    clientIp: `10.0.${i % 5}.1`,
    upstream: failed ? null : 'eth-1',
    retentionDays: 30,
  };
}

interface Layout {
  batch(records: UsageRecord[]): Promise<void>;
  /** Writes anything still folded in memory (the tenant layout's last minute). */
  finish(): Promise<void>;
  close(): Promise<void>;
}

const stored = (streamId: string, revision: number, position: string, id: string, data: Record<string, unknown>): StoredEvent => ({
  streamId,
  revision,
  position,
  id,
  type: USAGE_BATCH_EVENT_TYPE,
  data,
  metadata: {},
  created: new Date().toISOString(),
});

/** Today's layout, simplified (see the header). */
async function currentLayout(dir: string): Promise<Layout> {
  const events = await LevelEventStore.open(join(dir, 'events'));
  const readModels = await LevelReadModelStore.open(join(dir, 'readmodels'));
  const calls = new Map<string, number>();
  return {
    async batch(records) {
      const byAccount = new Map<string, UsageRecord[]>();
      for (const r of records) {
        const list = byAccount.get(r.accountId);
        if (list === undefined) byAccount.set(r.accountId, [r]);
        else list.push(r);
      }
      const appended = await Promise.all(
        [...byAccount].map(async ([accountId, list]) => {
          const first = calls.get(accountId) ?? 0;
          calls.set(accountId, first + list.length);
          const data = encodeUsageBatch(accountId, list, first) as unknown as Record<string, unknown>;
          const id = usageBatchEventId(list);
          const result = await events.append(`usage-${accountId}`, [{ id, type: USAGE_BATCH_EVENT_TYPE, data }], 'any');
          return stored(`usage-${accountId}`, result.nextExpectedRevision, result.position, id, data);
        }),
      );
      appended.sort((a, b) => (a.position < b.position ? -1 : 1));
      const position = (appended[appended.length - 1] as StoredEvent).position;
      if (CURRENT_LOG_ONLY) return;
      await readModels.commit('usage_metrics', position, usageMetricsProjection.projectBatch?.(appended) ?? []);
      await readModels.commit('usage_totals', position, usageTotalsProjection.projectBatch?.(appended) ?? []);
    },
    finish: async () => undefined,
    async close() {
      await events.close();
      await readModels.close();
    },
  };
}

/** Columns of one delta entry in `ShardDelta.v`: account, series, requests, errors, total µs, upstream µs, upstream calls. */
const DELTA_WIDTH = 7;

/**
 * One shard's increments of one batch, column by column (no object per account or call, so
 * that 10,000 accounts cost a batch no more objects than one): dictionaries of accounts and
 * series, then DELTA_WIDTH numbers per (account, series); histogram counts and client IPs as
 * triples (entry, bucket, count) and (account, ip key, count).
 */
interface ShardDelta {
  acc: string[];
  ser: string[];
  v: number[];
  h: number[];
  ipk: string[];
  ip: number[];
}

class ShardDeltaBuilder {
  readonly delta: ShardDelta = { acc: [], ser: [], v: [], h: [], ipk: [], ip: [] };
  private readonly accounts = new Map<string, number>();
  /** token → chain → method → series index: no key string built per call. */
  private readonly series = new Map<string, Map<string, Map<string, number>>>();
  /** account index × series count + series index → entry index. */
  private readonly entries = new Map<number, number>();
  private readonly histogram = new Map<number, number>();
  private readonly ipKeys = new Map<string, number>();
  private readonly ips = new Map<number, number>();

  private seriesIndex(token: string, chain: string, method: string): number {
    let chains = this.series.get(token);
    if (chains === undefined) {
      chains = new Map();
      this.series.set(token, chains);
    }
    let methods = chains.get(chain);
    if (methods === undefined) {
      methods = new Map();
      chains.set(chain, methods);
    }
    let index = methods.get(method);
    if (index === undefined) {
      index = this.delta.ser.length;
      this.delta.ser.push(`${token}/${chain}/${method}`);
      methods.set(method, index);
    }
    return index;
  }

  add(r: UsageRecord): void {
    let account = this.accounts.get(r.accountId);
    if (account === undefined) {
      account = this.delta.acc.length;
      this.delta.acc.push(r.accountId);
      this.accounts.set(r.accountId, account);
    }
    const series = this.seriesIndex(r.tokenId, r.chain, r.method);
    const key = account * 1_000_000 + series;
    let entry = this.entries.get(key);
    const v = this.delta.v;
    if (entry === undefined) {
      entry = v.length / DELTA_WIDTH;
      v.push(account, series, 0, 0, 0, 0, 0);
      this.entries.set(key, entry);
    }
    const at = entry * DELTA_WIDTH;
    const add = (column: number, n: number): void => {
      v[at + column] = (v[at + column] as number) + n;
    };
    add(2, 1);
    if (r.status >= 400 || r.rpcErrorCode !== null) add(3, 1);
    add(4, Math.round(r.totalMs * 1000));
    if (r.upstreamMs !== null) {
      add(5, Math.round(r.upstreamMs * 1000));
      add(6, 1);
    }
    const hKey = entry * 64 + histogramIndex(r.totalMs);
    const h = this.histogram.get(hKey);
    if (h === undefined) {
      this.histogram.set(hKey, this.delta.h.length);
      this.delta.h.push(entry, hKey % 64, 1);
    } else this.delta.h[h + 2] = (this.delta.h[h + 2] as number) + 1;
    const ipName = `${r.tokenId}/${r.clientIp}`;
    let ipKey = this.ipKeys.get(ipName);
    if (ipKey === undefined) {
      ipKey = this.delta.ipk.length;
      this.delta.ipk.push(ipName);
      this.ipKeys.set(ipName, ipKey);
    }
    const ipEntryKey = account * 1_000_000 + ipKey;
    const ipAt = this.ips.get(ipEntryKey);
    if (ipAt === undefined) {
      this.ips.set(ipEntryKey, this.delta.ip.length);
      this.delta.ip.push(account, ipKey, 1);
    } else this.delta.ip[ipAt + 2] = (this.delta.ip[ipAt + 2] as number) + 1;
  }
}

/**
 * One account's minute, column by column as the deltas are: its series, SERIES_WIDTH counts per
 * series, histogram triples (series, bucket, count), client IPs and their counts.
 */
interface AccountMinute {
  ser: string[];
  v: number[];
  h: number[];
  ipk: string[];
  ip: number[];
}

/** requests, errors, total µs, upstream µs, upstream calls. */
const SERIES_WIDTH = 5;

class AccountMinuteBuilder {
  readonly doc: AccountMinute = { ser: [], v: [], h: [], ipk: [], ip: [] };
  private readonly series = new Map<string, number>();
  private readonly histogram = new Map<number, number>();
  private readonly ips = new Map<string, number>();

  /** Adds entry `at` of a shard delta; returns the series index it went to. */
  addEntry(name: string, values: readonly number[], at: number): number {
    let index = this.series.get(name);
    const v = this.doc.v;
    if (index === undefined) {
      index = this.doc.ser.length;
      this.doc.ser.push(name);
      this.series.set(name, index);
      for (let k = 0; k < SERIES_WIDTH; k++) v.push(values[at + 2 + k] as number);
    } else {
      const base = index * SERIES_WIDTH;
      for (let k = 0; k < SERIES_WIDTH; k++) v[base + k] = (v[base + k] as number) + (values[at + 2 + k] as number);
    }
    return index;
  }

  addLatency(series: number, bucket: number, count: number): void {
    const key = series * 64 + bucket;
    const at = this.histogram.get(key);
    if (at === undefined) {
      this.histogram.set(key, this.doc.h.length);
      this.doc.h.push(series, bucket, count);
    } else this.doc.h[at + 2] = (this.doc.h[at + 2] as number) + count;
  }

  addIp(name: string, count: number): void {
    const at = this.ips.get(name);
    if (at === undefined) {
      this.ips.set(name, this.doc.ip.length);
      this.doc.ipk.push(name);
      this.doc.ip.push(count);
    } else this.doc.ip[at] = (this.doc.ip[at] as number) + count;
  }
}

/** Folds a shard's delta into per-account minute documents. */
function foldDelta(into: Map<string, AccountMinuteBuilder>, d: ShardDelta): void {
  const builders = d.acc.map((accountId) => {
    let builder = into.get(accountId);
    if (builder === undefined) {
      builder = new AccountMinuteBuilder();
      into.set(accountId, builder);
    }
    return builder;
  });
  const seriesOfEntry: number[] = [];
  for (let at = 0; at < d.v.length; at += DELTA_WIDTH) {
    const builder = builders[d.v[at] as number] as AccountMinuteBuilder;
    seriesOfEntry.push(builder.addEntry(d.ser[d.v[at + 1] as number] as string, d.v, at));
  }
  for (let at = 0; at < d.h.length; at += 3) {
    const entry = d.h[at] as number;
    const builder = builders[d.v[entry * DELTA_WIDTH] as number] as AccountMinuteBuilder;
    builder.addLatency(seriesOfEntry[entry] as number, d.h[at + 1] as number, d.h[at + 2] as number);
  }
  for (let at = 0; at < d.ip.length; at += 3) {
    const builder = builders[d.ip[at] as number] as AccountMinuteBuilder;
    builder.addIp(d.ipk[d.ip[at + 1] as number] as string, d.ip[at + 2] as number);
  }
}

/** Shard of an account: a string hash, so that any account id spreads. */
function shardOf(accountId: string): number {
  let h = 0;
  for (let i = 0; i < accountId.length; i++) h = (Math.imul(h, 31) + accountId.charCodeAt(i)) | 0;
  return (h >>> 0) % SHARDS;
}

/** The account a decoded call of the shared log belongs to: the prototype's codec has no account column, the bench's token ids carry it. */
const accountOfToken = (tokenId: string): string => `acc-bench-${tokenId.split('-')[2]}`;

/** The layout for many tenants (see the header). */
async function tenantLayout(dir: string): Promise<Layout> {
  const events = await LevelEventStore.open(join(dir, 'events'));
  const readModels = await LevelReadModelStore.open(join(dir, 'readmodels'));
  const LOG = 'usagelog-0';
  let calls = 0;
  let batches = 0;
  /** The log revisions of each open minute's events, to read its calls back at the fold. */
  const minuteEvents = new Map<string, number[]>();
  let position = '';

  async function foldMinute(minute: string): Promise<void> {
    const writes: ReadModelWrite[] = [];
    for (let shard = 0; shard < SHARDS; shard++) {
      const deltas = await readModels.range<Doc>('usage_deltas', { prefix: `${shard}/${minute}/` });
      const folded = new Map<string, AccountMinuteBuilder>();
      for (const { key, doc } of deltas) {
        foldDelta(folded, doc as unknown as ShardDelta);
        writes.push({ op: 'delete', collection: 'usage_deltas', key });
      }
      for (const [accountId, builder] of folded) {
        writes.push({ op: 'put', collection: 'usage_minutes', key: `${accountId}/${minute}`, doc: builder.doc as unknown as Doc });
      }
    }
    const revisions = minuteEvents.get(minute) ?? [];
    minuteEvents.delete(minute);
    const rows = new Map<string, UsageRecord[]>();
    if (revisions.length > 0) {
      const read = await events.readStream(LOG, { fromRevision: revisions[0], maxCount: revisions.length });
      for (const event of read) {
        for (const r of decodeUsageBatch(event.data) ?? []) {
          if (r.at.slice(0, 16) !== minute) continue;
          const accountId = accountOfToken(r.tokenId);
          const list = rows.get(accountId);
          if (list === undefined) rows.set(accountId, [r]);
          else list.push(r);
        }
      }
    }
    // Raw rows in the log's own compact form, one document per account and minute (MAX_CALLS_PER_EVENT rows at most).
    for (const [accountId, list] of rows) {
      for (let from = 0; from < list.length; from += MAX_CALLS_PER_EVENT) {
        const doc = encodeUsageBatch(accountId, list.slice(from, from + MAX_CALLS_PER_EVENT), from) as unknown as Doc;
        writes.push({ op: 'put', collection: 'usage_rows', key: `${accountId}/${minute}/${from}`, doc });
      }
    }
    await readModels.commit('tenant_minutes', position, writes);
  }

  let openMinute: string | null = null;
  return {
    async batch(records) {
      const data = encodeUsageBatch('*', records, calls) as unknown as Record<string, unknown>;
      calls += records.length;
      const result = await events.append(LOG, [{ id: usageBatchEventId(records), type: USAGE_BATCH_EVENT_TYPE, data }], 'any');
      position = result.position;
      const byShard = new Map<number, ShardDeltaBuilder>();
      const minute = (records[0] as UsageRecord).at.slice(0, 16);
      for (const r of records) {
        const shard = shardOf(r.accountId);
        let builder = byShard.get(shard);
        if (builder === undefined) {
          builder = new ShardDeltaBuilder();
          byShard.set(shard, builder);
        }
        builder.add(r);
      }
      const seq = String(batches++).padStart(10, '0');
      const writes: ReadModelWrite[] = [];
      for (const [shard, builder] of byShard) {
        writes.push({ op: 'put', collection: 'usage_deltas', key: `${shard}/${minute}/${seq}`, doc: builder.delta as unknown as Doc });
      }
      await readModels.commit('tenant_deltas', position, writes);
      const list = minuteEvents.get(minute);
      if (list === undefined) minuteEvents.set(minute, [result.nextExpectedRevision]);
      else list.push(result.nextExpectedRevision);
      if (openMinute !== null && minute > openMinute) await foldMinute(openMinute);
      openMinute = minute;
    },
    async finish() {
      if (openMinute !== null) await foldMinute(openMinute);
    },
    async close() {
      await events.close();
      await readModels.close();
    },
  };
}

/**
 * `shardlog`: no delta documents; the log itself is sharded, one event per shard of accounts per
 * batch (`usageshard-<n>`), and a shard's calls not folded yet (its tail) are folded into one
 * roll-up document per account and minute and one raw-row document per account, minute and fold
 * when the tail reaches FOLD_CALLS or its oldest minute has closed. A minute's document is
 * written again at each fold that adds to it (the builders of open minutes stay in memory).
 * Queries read the account's minute documents and the decoded tail of its shard (≤ FOLD_CALLS
 * calls): `query` below, timed after the run.
 */
const FOLD_CALLS = Number(process.env.FOLD_CALLS ?? 5000);
/**
 * `fold`: raw rows written per account at each fold; `minute`: per account once its minute has
 * closed, from the minute's events read back again (as rows per hour would be, at a sixtieth of
 * the documents); `none`: not written (what they cost, taken out).
 */
const RAW_ROWS = process.env.RAW_ROWS ?? 'fold';

interface ShardTail {
  revisions: number[];
  calls: number;
  oldestMinute: string | null;
  /** minute → account → its roll-up so far. */
  minutes: Map<string, Map<string, ShardDeltaBuilder>>;
  /** minute → revisions of the shard's events with calls in it (RAW_ROWS=minute). */
  rowMinutes: Map<string, number[]>;
}

async function shardLogLayout(dir: string): Promise<Layout & { query(accountId: string): Promise<number> }> {
  const events = await LevelEventStore.open(join(dir, 'events'));
  const readModels = await LevelReadModelStore.open(join(dir, 'readmodels'));
  const calls = new Map<number, number>();
  const tails = new Map<number, ShardTail>();
  let position = '';

  const tailOf = (shard: number): ShardTail => {
    let tail = tails.get(shard);
    if (tail === undefined) {
      tail = { revisions: [], calls: 0, oldestMinute: null, minutes: new Map(), rowMinutes: new Map() };
      tails.set(shard, tail);
    }
    return tail;
  };

  async function fold(shard: number, tail: ShardTail, openMinute: string): Promise<void> {
    const writes: ReadModelWrite[] = [];
    const read = await events.readStream(`usageshard-${shard}`, { fromRevision: tail.revisions[0], maxCount: tail.revisions.length });
    const touched = new Set<ShardDeltaBuilder>();
    const rows = new Map<string, UsageRecord[]>();
    for (const event of read) {
      for (const r of decodeUsageBatch(event.data) ?? []) {
        const minute = r.at.slice(0, 16);
        const accountId = accountOfToken(r.tokenId);
        let accounts = tail.minutes.get(minute);
        if (accounts === undefined) {
          accounts = new Map();
          tail.minutes.set(minute, accounts);
        }
        let builder = accounts.get(accountId);
        if (builder === undefined) {
          builder = new ShardDeltaBuilder();
          accounts.set(accountId, builder);
        }
        builder.add(r);
        touched.add(builder);
        if (RAW_ROWS !== 'fold') continue;
        const rowKey = `${accountId}/${minute}`;
        const list = rows.get(rowKey);
        if (list === undefined) rows.set(rowKey, [r]);
        else list.push(r);
      }
    }
    for (const [minute, accounts] of tail.minutes) {
      for (const [accountId, builder] of accounts) {
        if (touched.has(builder)) writes.push({ op: 'put', collection: 'usage_minutes', key: `${accountId}/${minute}`, doc: builder.delta as unknown as Doc });
      }
      if (minute < openMinute) tail.minutes.delete(minute);
    }
    const first = String(tail.revisions[0]).padStart(10, '0');
    for (const [rowKey, list] of rows) {
      for (let from = 0; from < list.length; from += MAX_CALLS_PER_EVENT) {
        const doc = encodeUsageBatch('*', list.slice(from, from + MAX_CALLS_PER_EVENT), from) as unknown as Doc;
        writes.push({ op: 'put', collection: 'usage_rows', key: `${rowKey}/${first}/${from}`, doc });
      }
    }
    if (RAW_ROWS === 'minute') {
      for (const [minute, revisions] of tail.rowMinutes) {
        if (minute >= openMinute) continue;
        tail.rowMinutes.delete(minute);
        const byAccount = new Map<string, UsageRecord[]>();
        const stream = `usageshard-${shard}`;
        for (const event of await events.readStream(stream, {
          fromRevision: revisions[0],
          maxCount: (revisions.at(-1) as number) - (revisions[0] as number) + 1,
        })) {
          for (const r of decodeUsageBatch(event.data) ?? []) {
            if (r.at.slice(0, 16) !== minute) continue;
            const accountId = accountOfToken(r.tokenId);
            const list = byAccount.get(accountId);
            if (list === undefined) byAccount.set(accountId, [r]);
            else list.push(r);
          }
        }
        for (const [accountId, list] of byAccount) {
          for (let from = 0; from < list.length; from += MAX_CALLS_PER_EVENT) {
            const doc = encodeUsageBatch('*', list.slice(from, from + MAX_CALLS_PER_EVENT), from) as unknown as Doc;
            writes.push({ op: 'put', collection: 'usage_rows', key: `${accountId}/${minute}/${from}`, doc });
          }
        }
      }
    }
    tail.revisions = [];
    tail.calls = 0;
    tail.oldestMinute = null;
    await readModels.commit(`tenant_fold_${shard}`, position, writes);
  }

  return {
    async batch(records) {
      const byShard = new Map<number, UsageRecord[]>();
      for (const r of records) {
        const shard = shardOf(r.accountId);
        const list = byShard.get(shard);
        if (list === undefined) byShard.set(shard, [r]);
        else list.push(r);
      }
      const minute = (records[0] as UsageRecord).at.slice(0, 16);
      const results = await Promise.all(
        [...byShard].map(async ([shard, list]) => {
          const first = calls.get(shard) ?? 0;
          calls.set(shard, first + list.length);
          const data = encodeUsageBatch('*', list, first) as unknown as Record<string, unknown>;
          const result = await events.append(`usageshard-${shard}`, [{ id: usageBatchEventId(list), type: USAGE_BATCH_EVENT_TYPE, data }], 'any');
          return [shard, result, list.length] as const;
        }),
      );
      for (const [shard, result, count] of results) {
        if (result.position > position) position = result.position;
        const tail = tailOf(shard);
        tail.revisions.push(result.nextExpectedRevision);
        const rowRevisions = tail.rowMinutes.get(minute);
        if (rowRevisions === undefined) tail.rowMinutes.set(minute, [result.nextExpectedRevision]);
        else rowRevisions.push(result.nextExpectedRevision);
        tail.calls += count;
        tail.oldestMinute ??= minute;
      }
      for (const [shard, tail] of tails) {
        if (tail.calls > 0 && (tail.calls >= FOLD_CALLS || (tail.oldestMinute !== null && tail.oldestMinute < minute))) await fold(shard, tail, minute);
      }
    },
    async finish() {
      for (const [shard, tail] of tails) if (tail.calls > 0) await fold(shard, tail, '9999');
    },
    /** An account's last hour: its minute documents, plus its calls in its shard's tail. Returns the calls counted. */
    async query(accountId) {
      let counted = 0;
      const minutes = await readModels.range<Doc>('usage_minutes', { prefix: `${accountId}/` });
      for (const { doc } of minutes.slice(-60)) {
        const v = (doc as unknown as ShardDelta).v;
        for (let at = 2; at < v.length; at += DELTA_WIDTH) counted += v[at] as number;
      }
      const tail = tails.get(shardOf(accountId));
      if (tail !== undefined && tail.revisions.length > 0) {
        const shard = shardOf(accountId);
        for (const event of await events.readStream(`usageshard-${shard}`, { fromRevision: tail.revisions[0], maxCount: tail.revisions.length })) {
          for (const r of decodeUsageBatch(event.data) ?? []) if (accountOfToken(r.tokenId) === accountId) counted++;
        }
      }
      return counted;
    },
    async close() {
      await events.close();
      await readModels.close();
    },
  };
}

/**
 * INTERN=1 (`shardlog` only): token, account and (chain, method) ids interned to numbers. The
 * dictionary lives in memory, as a real build would keep it, and each new id is persisted as a
 * small event of its own on `usagedict` (appended before the calls that use it: none at steady
 * state, every one of them inside the warm-up here). The shard event carries integer `acc` and
 * `tok` columns, so its shapes (chain, method, status…) repeat across tokens; the fold reads the
 * columns straight into builders keyed by numbers (per-shard arrays indexed by the account's slot,
 * integer-keyed series and client IPs), with no record object per call. Same shards, events, fold
 * triggers and documents as `shardlog`, ids as numbers in them.
 */
const INTERN = process.env.INTERN === '1';
/** (chain, method) numbers stay below this, so that token × method is one integer key. */
const METHOD_LIMIT = 4096;
/** Dictionary events per append. */
const DICTIONARY_APPEND = 1000;

class IdDictionary {
  private readonly accounts = new Map<string, number>();
  /** Shard of each account number, and its slot among its shard's accounts (dense per shard). */
  readonly accountShard: number[] = [];
  readonly accountSlot: number[] = [];
  private readonly slotsPerShard: number[] = new Array<number>(SHARDS).fill(0);
  private readonly tokens = new Map<string, number>();
  private readonly methods = new Map<string, Map<string, number>>();
  private methodCount = 0;
  /** Client IPs, for the fold's keys only (documents keep the text): not persisted. */
  private readonly ips = new Map<string, number>();
  /** Ids new since the last `takeNew`, one dictionary event each. */
  private pending: Array<{ kind: 'account' | 'token' | 'method'; id: string; n: number }> = [];

  account(id: string): number {
    let n = this.accounts.get(id);
    if (n === undefined) {
      n = this.accountShard.length;
      const shard = shardOf(id);
      this.accountShard.push(shard);
      this.accountSlot.push(this.slotsPerShard[shard] as number);
      this.slotsPerShard[shard] = (this.slotsPerShard[shard] as number) + 1;
      this.accounts.set(id, n);
      this.pending.push({ kind: 'account', id, n });
    }
    return n;
  }

  accountOrNull(id: string): number | null {
    return this.accounts.get(id) ?? null;
  }

  token(id: string): number {
    let n = this.tokens.get(id);
    if (n === undefined) {
      n = this.tokens.size;
      this.tokens.set(id, n);
      this.pending.push({ kind: 'token', id, n });
    }
    return n;
  }

  method(chain: string, method: string): number {
    let byMethod = this.methods.get(chain);
    if (byMethod === undefined) {
      byMethod = new Map();
      this.methods.set(chain, byMethod);
    }
    let n = byMethod.get(method);
    if (n === undefined) {
      n = this.methodCount++;
      if (n >= METHOD_LIMIT) throw new Error('more (chain, method) pairs than METHOD_LIMIT');
      byMethod.set(method, n);
      this.pending.push({ kind: 'method', id: `${chain}/${method}`, n });
    }
    return n;
  }

  ip(text: string): number {
    let n = this.ips.get(text);
    if (n === undefined) {
      n = this.ips.size;
      this.ips.set(text, n);
    }
    return n;
  }

  takeNew(): Array<{ kind: 'account' | 'token' | 'method'; id: string; n: number }> {
    const taken = this.pending;
    this.pending = [];
    return taken;
  }
}

/** A call's shape in the interned event: encodeUsageBatch's without the token (a column of its own). */
type CallShape = [
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

interface OddCall {
  requestId?: string;
  at?: string;
  totalMs?: number;
  upstreamMs?: number;
}

/** encodeUsageBatch's columns, with `acc` and `tok` (account and token numbers) per call. */
interface InternedBatch {
  first: number;
  calls: number;
  acc: number[];
  tok: number[];
  shapes: CallShape[];
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
  odd?: Record<string, OddCall>;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: they are what it looks for
const SHAPE_KEY_MARKS = /[\u0000-\u0004]/;
const shapeKeyPart = (v: string | number | boolean | null): string =>
  v === null ? '\u0001' : typeof v === 'string' ? v : typeof v === 'number' ? `\u0002${v}` : v ? '\u0003' : '\u0004';
/** As src/domain/usageBatch.ts keys its shapes. */
function callShapeKey(s: CallShape): string {
  for (const v of s) if (typeof v === 'string' && SHAPE_KEY_MARKS.test(v)) return JSON.stringify(s);
  return s.map(shapeKeyPart).join('\u0000');
}
const REQUEST_ID = /^(.*-)([0-9a-z]{1,10})(?::(\d{1,6}))?$/;
/** As src/domain/usageBatch.ts reads a time: ms when `toISOString()` gives the text back exactly. */
function canonicalAt(at: string): number | null {
  if (CANONICAL_ISO.test(at)) return Date.parse(at);
  const ms = Date.parse(at);
  return Number.isFinite(ms) && new Date(ms).toISOString() === at ? ms : null;
}
const centiOf = (ms: number): number | null => {
  const c = Math.round(ms * 100);
  return c / 100 === ms ? c : null;
};
function dictIndex<K>(index: Map<K, number>, list: unknown[], key: K, value: unknown): number {
  let i = index.get(key);
  if (i === undefined) {
    i = list.length;
    list.push(value);
    index.set(key, i);
  }
  return i;
}

/** encodeUsageBatch, call for call, with the account and token as numbers (`acc[i]`, `tok[i]`). */
function encodeInterned(records: readonly UsageRecord[], acc: number[], tok: number[], first: number): InternedBatch {
  const shapes: CallShape[] = [];
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
  const odd: Record<string, OddCall> = {};
  let anyMember = false;
  let anyOdd = false;
  let previousNum = 0;
  let previousAt = 0;
  for (let i = 0; i < records.length; i++) {
    const r = records[i] as UsageRecord;
    const oddFields: OddCall = {};
    const s: CallShape = [r.chain, r.method, r.status, r.rpcErrorCode, r.errorMessage, r.upstream, r.retentionDays ?? null, r.charged ?? null, r.cache ?? null];
    shape.push(dictIndex(shapeIndex, shapes, callShapeKey(s), s));
    ip.push(dictIndex(ipIndex, ips, r.clientIp, r.clientIp));
    const id = REQUEST_ID.exec(r.requestId);
    const counter = id === null ? Number.NaN : Number.parseInt(id[2] as string, 36);
    if (id !== null && counter.toString(36) === id[2]) {
      stem.push(dictIndex(stemIndex, stems, id[1] as string, id[1]));
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
    const ms = canonicalAt(r.at);
    if (ms !== null) {
      at.push(ms - previousAt);
      previousAt = ms;
    } else {
      oddFields.at = r.at;
      at.push(0);
    }
    const total = centiOf(r.totalMs);
    totalMs.push(total ?? 0);
    if (total === null) oddFields.totalMs = r.totalMs;
    if (r.upstreamMs === null) upstreamMs.push(null);
    else {
      const upstream = centiOf(r.upstreamMs);
      upstreamMs.push(upstream ?? 0);
      if (upstream === null) oddFields.upstreamMs = r.upstreamMs;
    }
    if (oddFields.requestId !== undefined || oddFields.at !== undefined || oddFields.totalMs !== undefined || oddFields.upstreamMs !== undefined) {
      odd[i] = oddFields;
      anyOdd = true;
    }
  }
  return {
    first,
    calls: records.length,
    acc,
    tok,
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

const isIntColumn = (v: unknown, length: number, below = Number.MAX_SAFE_INTEGER, min = Number.MIN_SAFE_INTEGER): v is number[] => {
  if (!Array.isArray(v) || v.length !== length) return false;
  for (const x of v) if (!Number.isSafeInteger(x) || x < min || x >= below) return false;
  return true;
};
const isCallShape = (v: unknown): v is CallShape =>
  Array.isArray(v) &&
  v.length === 9 &&
  isString(v[0]) &&
  isString(v[1]) &&
  isInt(v[2]) &&
  isIntOrNull(v[3]) &&
  isStringOrNull(v[4]) &&
  isStringOrNull(v[5]) &&
  (v[6] === null || (isInt(v[6]) && v[6] > 0)) &&
  (v[7] === null || typeof v[7] === 'boolean');

/** An interned event's data, checked as decodeUsageBatch checks its columns (no record made), or null. */
function checkInterned(data: Record<string, unknown>): InternedBatch | null {
  const d = data as unknown as InternedBatch;
  const calls = d.calls;
  if (!isInt(calls) || calls < 0 || calls > MAX_CALLS_PER_EVENT) return null;
  if (!Array.isArray(d.shapes) || !d.shapes.every(isCallShape)) return null;
  if (!Array.isArray(d.ips) || !d.ips.every(isString) || !Array.isArray(d.stems) || !d.stems.every(isString)) return null;
  if (!isIntColumn(d.acc, calls, Number.MAX_SAFE_INTEGER, 0) || !isIntColumn(d.tok, calls, Number.MAX_SAFE_INTEGER, 0)) return null;
  if (!isIntColumn(d.shape, calls, d.shapes.length, 0) || !isIntColumn(d.ip, calls, d.ips.length, 0)) return null;
  if (!isIntColumn(d.stem, calls, Math.max(1, d.stems.length), 0) || !isIntColumn(d.num, calls) || !isIntColumn(d.at, calls)) return null;
  if (d.member !== undefined && !isIntColumn(d.member, calls, Number.MAX_SAFE_INTEGER, 0)) return null;
  if (!isIntColumn(d.totalMs, calls, Number.MAX_SAFE_INTEGER, 0)) return null;
  if (!Array.isArray(d.upstreamMs) || d.upstreamMs.length !== calls) return null;
  for (const u of d.upstreamMs) if (u !== null && !(isInt(u) && u >= 0)) return null;
  return d;
}

/** One account's minute with ids as numbers: `ShardDelta`'s columns, series as (token, method) number pairs, client IPs with their token. */
interface InternedMinute {
  acc: number[];
  ser: number[];
  v: number[];
  h: number[];
  ipt: number[];
  ipk: string[];
  ip: number[];
}

class InternedMinuteBuilder {
  readonly delta: InternedMinute;
  /** The fold that last added to it (documents are written for those a fold touched). */
  stamp = -1;
  /** token × METHOD_LIMIT + method → entry index. */
  private readonly entries = new Map<number, number>();
  private readonly histogram = new Map<number, number>();
  /** token × 2^21 + ip number → position of its triple in `ip`. */
  private readonly ips = new Map<number, number>();

  constructor(readonly account: number) {
    this.delta = { acc: [account], ser: [], v: [], h: [], ipt: [], ipk: [], ip: [] };
  }

  add(token: number, method: number, failed: boolean, totalMs: number, upstreamMs: number | null, ipNumber: number, ipText: string): void {
    const key = token * METHOD_LIMIT + method;
    let entry = this.entries.get(key);
    const v = this.delta.v;
    if (entry === undefined) {
      entry = v.length / DELTA_WIDTH;
      v.push(0, this.delta.ser.length / 2, 0, 0, 0, 0, 0);
      this.delta.ser.push(token, method);
      this.entries.set(key, entry);
    }
    const at = entry * DELTA_WIDTH;
    v[at + 2] = (v[at + 2] as number) + 1;
    if (failed) v[at + 3] = (v[at + 3] as number) + 1;
    v[at + 4] = (v[at + 4] as number) + Math.round(totalMs * 1000);
    if (upstreamMs !== null) {
      v[at + 5] = (v[at + 5] as number) + Math.round(upstreamMs * 1000);
      v[at + 6] = (v[at + 6] as number) + 1;
    }
    const hKey = entry * 64 + histogramIndex(totalMs);
    const h = this.histogram.get(hKey);
    if (h === undefined) {
      this.histogram.set(hKey, this.delta.h.length);
      this.delta.h.push(entry, hKey % 64, 1);
    } else this.delta.h[h + 2] = (this.delta.h[h + 2] as number) + 1;
    const ipKey = token * 2_097_152 + ipNumber;
    const ipAt = this.ips.get(ipKey);
    if (ipAt === undefined) {
      this.ips.set(ipKey, this.delta.ip.length);
      this.delta.ip.push(0, this.delta.ipk.length, 1);
      this.delta.ipt.push(token);
      this.delta.ipk.push(ipText);
    } else this.delta.ip[ipAt + 2] = (this.delta.ip[ipAt + 2] as number) + 1;
  }
}

/** One account's calls of a minute and fold, re-encoded in the interned form (raw rows, RAW_ROWS=fold), in documents of MAX_CALLS_PER_EVENT calls. */
class InternedRowsBuilder {
  readonly docs: InternedBatch[] = [];
  private doc!: InternedBatch;
  private shapeIndex = new Map<string, number>();
  private ipIndex = new Map<string, number>();
  private stemIndex = new Map<string, number>();
  private previousNum = 0;
  private previousAt = 0;

  /** Call `i` of `d`, whose request counter is `counter`, time `ms`, shape key `shapeKey`. */
  add(d: InternedBatch, i: number, counter: number, ms: number, shapeKey: string): void {
    if (this.docs.length === 0 || this.doc.calls === MAX_CALLS_PER_EVENT) {
      const first = this.docs.length * MAX_CALLS_PER_EVENT;
      this.doc = {
        first,
        calls: 0,
        acc: [],
        tok: [],
        shapes: [],
        shape: [],
        ips: [],
        ip: [],
        stems: [],
        stem: [],
        num: [],
        at: [],
        totalMs: [],
        upstreamMs: [],
      };
      this.docs.push(this.doc);
      this.shapeIndex = new Map();
      this.ipIndex = new Map();
      this.stemIndex = new Map();
      this.previousNum = 0;
      this.previousAt = 0;
    }
    const doc = this.doc;
    doc.calls++;
    doc.acc.push(d.acc[i] as number);
    doc.tok.push(d.tok[i] as number);
    doc.shape.push(dictIndex(this.shapeIndex, doc.shapes, shapeKey, d.shapes[d.shape[i] as number]));
    const ipText = d.ips[d.ip[i] as number] as string;
    doc.ip.push(dictIndex(this.ipIndex, doc.ips, ipText, ipText));
    const stemText = d.stems[d.stem[i] as number] ?? '';
    doc.stem.push(dictIndex(this.stemIndex, doc.stems, stemText, stemText));
    doc.num.push(counter - this.previousNum);
    this.previousNum = counter;
    const member = d.member?.[i] ?? 0;
    if (member !== 0 && doc.member === undefined) doc.member = new Array<number>(doc.calls - 1).fill(0);
    doc.member?.push(member);
    doc.at.push(ms - this.previousAt);
    this.previousAt = ms;
    doc.totalMs.push(d.totalMs[i] as number);
    doc.upstreamMs.push(d.upstreamMs[i] as number | null);
    const odd = d.odd?.[i];
    if (odd !== undefined) {
      doc.odd ??= {};
      doc.odd[doc.calls - 1] = odd;
    }
  }
}

/** A minute number (minutes since 1970) as a key part that sorts. */
const minuteKey = (minute: number): string => String(minute).padStart(9, '0');

/** One shard's open minutes: builders by the account's slot in its shard, and the list of them. */
interface InternedMinuteState {
  bySlot: Array<InternedMinuteBuilder | undefined>;
  builders: InternedMinuteBuilder[];
}

interface InternedShardTail {
  revisions: number[];
  calls: number;
  oldestMinute: string | null;
  minutes: Map<number, InternedMinuteState>;
}

/** `shardlog` with ids interned (INTERN=1, see above): same shards, events, fold triggers and documents. */
async function internedShardLogLayout(dir: string): Promise<Layout & { query(accountId: string): Promise<number> }> {
  if (RAW_ROWS === 'minute') throw new Error('INTERN=1 models RAW_ROWS=fold or none');
  const events = await LevelEventStore.open(join(dir, 'events'));
  const readModels = await LevelReadModelStore.open(join(dir, 'readmodels'));
  const dictionary = new IdDictionary();
  const calls = new Map<number, number>();
  const tails = new Map<number, InternedShardTail>();
  let position = '';
  let folds = 0;

  const tailOf = (shard: number): InternedShardTail => {
    let tail = tails.get(shard);
    if (tail === undefined) {
      tail = { revisions: [], calls: 0, oldestMinute: null, minutes: new Map() };
      tails.set(shard, tail);
    }
    return tail;
  };

  async function fold(shard: number, tail: InternedShardTail, openMinute: number): Promise<void> {
    const stamp = folds++;
    const writes: ReadModelWrite[] = [];
    const read = await events.readStream(`usageshard-${shard}`, { fromRevision: tail.revisions[0], maxCount: tail.revisions.length });
    /** minute → rows builders by account slot (RAW_ROWS=fold). */
    const rows = new Map<number, Array<InternedRowsBuilder | undefined>>();
    const rowBuilders: Array<[number, number, InternedRowsBuilder]> = [];
    for (const event of read) {
      const d = checkInterned(event.data);
      if (d === null) continue;
      // Per event, not per call: each shape's method number and failure, each IP's number.
      const shapeMethod = d.shapes.map((s) => dictionary.method(s[0], s[1]));
      const shapeFailed = d.shapes.map((s) => s[2] >= 400 || s[3] !== null);
      const ipNumbers = d.ips.map((ip) => dictionary.ip(ip));
      const shapeKeys = RAW_ROWS === 'fold' ? d.shapes.map(callShapeKey) : [];
      let ms = 0;
      let counter = 0;
      let state: InternedMinuteState | undefined;
      let stateMinute = Number.NaN;
      for (let i = 0; i < d.calls; i++) {
        ms += d.at[i] as number;
        counter += d.num[i] as number;
        const odd = d.odd?.[i];
        const callMs = odd?.at === undefined ? ms : Date.parse(odd.at);
        const minute = Math.floor(callMs / 60_000);
        const account = d.acc[i] as number;
        if (minute !== stateMinute) {
          stateMinute = minute;
          state = tail.minutes.get(minute);
          if (state === undefined) {
            state = { bySlot: [], builders: [] };
            tail.minutes.set(minute, state);
          }
        }
        const slot = dictionary.accountSlot[account] as number;
        const minuteState = state as InternedMinuteState;
        let builder = minuteState.bySlot[slot];
        if (builder === undefined) {
          builder = new InternedMinuteBuilder(account);
          while (minuteState.bySlot.length < slot) minuteState.bySlot.push(undefined);
          minuteState.bySlot[slot] = builder;
          minuteState.builders.push(builder);
        }
        builder.stamp = stamp;
        const s = d.shape[i] as number;
        const up = d.upstreamMs[i] as number | null;
        builder.add(
          d.tok[i] as number,
          shapeMethod[s] as number,
          shapeFailed[s] as boolean,
          odd?.totalMs ?? (d.totalMs[i] as number) / 100,
          up === null ? null : (odd?.upstreamMs ?? up / 100),
          ipNumbers[d.ip[i] as number] as number,
          d.ips[d.ip[i] as number] as string,
        );
        if (RAW_ROWS !== 'fold') continue;
        let bySlot = rows.get(minute);
        if (bySlot === undefined) {
          bySlot = [];
          rows.set(minute, bySlot);
        }
        let rowBuilder = bySlot[slot];
        if (rowBuilder === undefined) {
          rowBuilder = new InternedRowsBuilder();
          while (bySlot.length < slot) bySlot.push(undefined);
          bySlot[slot] = rowBuilder;
          rowBuilders.push([account, minute, rowBuilder]);
        }
        rowBuilder.add(d, i, counter, callMs, shapeKeys[s] as string);
      }
    }
    for (const [minute, state] of tail.minutes) {
      for (const builder of state.builders) {
        if (builder.stamp === stamp)
          writes.push({ op: 'put', collection: 'usage_minutes', key: `${builder.account}/${minuteKey(minute)}`, doc: builder.delta as unknown as Doc });
      }
      if (minute < openMinute) tail.minutes.delete(minute);
    }
    const first = String(tail.revisions[0]).padStart(10, '0');
    for (const [account, minute, rowBuilder] of rowBuilders) {
      for (const doc of rowBuilder.docs) {
        writes.push({ op: 'put', collection: 'usage_rows', key: `${account}/${minuteKey(minute)}/${first}/${doc.first}`, doc: doc as unknown as Doc });
      }
    }
    tail.revisions = [];
    tail.calls = 0;
    tail.oldestMinute = null;
    await readModels.commit(`tenant_fold_${shard}`, position, writes);
  }

  return {
    async batch(records) {
      const byShard = new Map<number, { list: UsageRecord[]; acc: number[]; tok: number[] }>();
      for (const r of records) {
        const account = dictionary.account(r.accountId);
        const token = dictionary.token(r.tokenId);
        dictionary.method(r.chain, r.method);
        const shard = dictionary.accountShard[account] as number;
        const of = byShard.get(shard);
        if (of === undefined) byShard.set(shard, { list: [r], acc: [account], tok: [token] });
        else {
          of.list.push(r);
          of.acc.push(account);
          of.tok.push(token);
        }
      }
      // New ids first, one small event each, so that the log never holds a number the dictionary does not.
      // In appends of DICTIONARY_APPEND events: a cold start's first batch brings thousands of ids, past an append's size limit.
      const added = dictionary.takeNew();
      for (let from = 0; from < added.length; from += DICTIONARY_APPEND) {
        const chunk = added.slice(from, from + DICTIONARY_APPEND);
        await events.append(
          'usagedict',
          chunk.map((data) => ({ id: randomUUID(), type: 'UsageIdInterned', data })),
          'any',
        );
      }
      const minute = (records[0] as UsageRecord).at.slice(0, 16);
      const results = await Promise.all(
        [...byShard].map(async ([shard, { list, acc, tok }]) => {
          const first = calls.get(shard) ?? 0;
          calls.set(shard, first + list.length);
          const data = encodeInterned(list, acc, tok, first) as unknown as Record<string, unknown>;
          const result = await events.append(`usageshard-${shard}`, [{ id: usageBatchEventId(list), type: USAGE_BATCH_EVENT_TYPE, data }], 'any');
          return [shard, result, list.length] as const;
        }),
      );
      for (const [shard, result, count] of results) {
        if (result.position > position) position = result.position;
        const tail = tailOf(shard);
        tail.revisions.push(result.nextExpectedRevision);
        tail.calls += count;
        tail.oldestMinute ??= minute;
      }
      const openMinute = Math.floor(Date.parse(`${minute}:00.000Z`) / 60_000);
      for (const [shard, tail] of tails) {
        if (tail.calls > 0 && (tail.calls >= FOLD_CALLS || (tail.oldestMinute !== null && tail.oldestMinute < minute))) await fold(shard, tail, openMinute);
      }
    },
    async finish() {
      for (const [shard, tail] of tails) if (tail.calls > 0) await fold(shard, tail, Number.POSITIVE_INFINITY);
    },
    /** As `shardlog`'s: the account's minute documents, plus its calls in its shard's tail (columns scanned, no record made). */
    async query(accountId) {
      const account = dictionary.accountOrNull(accountId);
      if (account === null) return 0;
      let counted = 0;
      const minutes = await readModels.range<Doc>('usage_minutes', { prefix: `${account}/` });
      for (const { doc } of minutes.slice(-60)) {
        const v = (doc as unknown as InternedMinute).v;
        for (let at = 2; at < v.length; at += DELTA_WIDTH) counted += v[at] as number;
      }
      const shard = dictionary.accountShard[account] as number;
      const tail = tails.get(shard);
      if (tail !== undefined && tail.revisions.length > 0) {
        for (const event of await events.readStream(`usageshard-${shard}`, { fromRevision: tail.revisions[0], maxCount: tail.revisions.length })) {
          const d = checkInterned(event.data);
          if (d !== null) for (const a of d.acc) if (a === account) counted++;
        }
      }
      return counted;
    },
    async close() {
      await events.close();
      await readModels.close();
    },
  };
}

const cpuSeconds = (): number => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
};

/** CPU per call of the generator alone, so that it can be taken out of each layout's figure. */
function generatorCost(tenants: Tenants, count: number): number {
  const before = cpuSeconds();
  let sink = 0;
  for (let i = 0; i < count; i++) sink += call(i, tenants).at.length;
  if (sink === 0) log('');
  return ((cpuSeconds() - before) * 1e6) / count;
}

async function run(name: string, tenants: Tenants, seconds: number): Promise<number> {
  const dir = join(tmpdir(), `bench-tenant-layout-${process.pid}-${name}-${tenants.accounts}`);
  rmSync(dir, { recursive: true, force: true });
  const layout =
    name === 'current'
      ? await currentLayout(dir)
      : name === 'shardlog'
        ? await (INTERN ? internedShardLogLayout(dir) : shardLogLayout(dir))
        : await tenantLayout(dir);
  const perBatch = Math.round((RATE * BATCH_MS) / 1000);
  const total = Math.round(RATE * seconds);
  const warmup = Math.round(RATE * WARMUP_SECONDS);
  let counted = 0;
  let cpuBefore = 0;
  let wallBefore = 0;
  for (let i = 0; i < total; ) {
    if (i === warmup || (i === 0 && warmup === 0)) {
      cpuBefore = cpuSeconds();
      wallBefore = performance.now();
    }
    const records: UsageRecord[] = [];
    for (const end = Math.min(total, i + perBatch); i < end; i++) records.push(call(i, tenants));
    await layout.batch(records);
    if (i > warmup) counted += records.length;
  }
  if ('query' in layout) {
    const times: number[] = [];
    for (let q = 0; q < 50; q++) {
      const started = performance.now();
      await (layout as Awaited<ReturnType<typeof shardLogLayout>>).query(`acc-bench-${q % tenants.accounts}`);
      times.push(performance.now() - started);
    }
    times.sort((a, b) => a - b);
    log(`  an account's last hour (minute documents + its shard's tail): p50 ${times[25]?.toFixed(1)} ms, p95 ${times[47]?.toFixed(1)} ms`);
  }
  await layout.finish();
  // LevelDB compacts in the background: its work for these writes is counted once it is done.
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const cpu = cpuSeconds() - cpuBefore;
  const wall = performance.now() - wallBefore - 3000;
  await layout.close();
  rmSync(dir, { recursive: true, force: true });
  const generator = generatorCost(tenants, 100_000);
  const perCall = (cpu * 1e6) / counted - generator;
  log(
    `${name.padEnd(8)} ${String(tenants.accounts).padStart(6)} accounts × ${tenants.tokens} tokens: ${perCall.toFixed(1)} µs a call (${counted} calls counted, ${(wall / 1000).toFixed(1)} s, generator ${generator.toFixed(1)} µs taken out), RSS ${Math.round(process.memoryUsage.rss() / 1e6)} MB`,
  );
  return perCall;
}

/** One (layout, tenants) case in a process of its own, so that each has its own heap and RSS: its µs a call. */
function runApart(name: string, tenants: 'hot' | 'many'): number {
  const out = execFileSync(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
    env: { ...process.env, LAYOUTS: name, TENANTS: tenants, CASE: '1' },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 1 << 20,
  });
  const result = /^RESULT (\S+)$/m.exec(out);
  if (result === null) throw new Error(`no result from ${name} ${tenants}`);
  return Number(result[1]);
}

async function main(): Promise<void> {
  if (process.env.CASE === '1') {
    const name = LAYOUTS[0] as string;
    const seconds = name === 'current' ? CURRENT_SECONDS : MINUTES * 60 + 5;
    const perCall = await run(name, TENANTS === 'many' ? { accounts: 10_000, tokens: 10 } : { accounts: 1, tokens: 1 }, seconds);
    process.stdout.write(`RESULT ${perCall}\n`);
    return;
  }
  log(
    `RATE=${RATE} BATCH_MS=${BATCH_MS} MINUTES=${MINUTES} SHARDS=${SHARDS} FOLD_CALLS=${FOLD_CALLS} RAW_ROWS=${RAW_ROWS} INTERN=${INTERN ? 1 : 0} CURRENT_SECONDS=${CURRENT_SECONDS} ROUNDS=${ROUNDS}`,
  );
  const results = new Map<string, { hot: number[]; many: number[] }>(LAYOUTS.map((name) => [name, { hot: [], many: [] }]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of LAYOUTS) {
      const figures = results.get(name) as { hot: number[]; many: number[] };
      figures.hot.push(runApart(name, 'hot'));
      figures.many.push(runApart(name, 'many'));
    }
  }
  for (const [name, { hot, many }] of results) {
    log(
      `${name}: 1 × 1 ${median(hot).toFixed(1)} µs a call, 10,000 × 10 ${median(many).toFixed(1)} µs (medians of ${ROUNDS}): ${(median(many) / median(hot)).toFixed(2)}×`,
    );
  }
}
await main();
