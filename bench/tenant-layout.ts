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
 *   (its minute documents and its calls in its shard's tail) are timed.
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
 *   CURRENT_LOG_ONLY=1 LAYOUTS=current,shardlog RAW_ROWS=none npx tsx bench/tenant-layout.ts   (the per-account log alone)
 */
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { UsageRecord } from '../src/domain/usage.js';
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
  const layout = name === 'current' ? await currentLayout(dir) : name === 'shardlog' ? await shardLogLayout(dir) : await tenantLayout(dir);
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
    `RATE=${RATE} BATCH_MS=${BATCH_MS} MINUTES=${MINUTES} SHARDS=${SHARDS} FOLD_CALLS=${FOLD_CALLS} RAW_ROWS=${RAW_ROWS} CURRENT_SECONDS=${CURRENT_SECONDS} ROUNDS=${ROUNDS}`,
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
