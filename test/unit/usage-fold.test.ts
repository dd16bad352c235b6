import { describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageCallFields, type UsageRecord } from '../../src/domain/usage.js';
import { encodeUsageBatch, USAGE_BATCH_EVENT_TYPE } from '../../src/domain/usageBatch.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { applyChange, composeWrites } from '../../src/infra/readmodels/compose.js';
import type { Doc, ReadModelWrite } from '../../src/infra/readmodels/port.js';
import { unexpired } from '../../src/projections/runner.js';
import { DAY_MS, type Granularity } from '../../src/projections/usageBuckets.js';
import { usageExpiryOf } from '../../src/projections/usageExpiry.js';
import { canonicalTime, parseRollupKey, RAW_ROWS_PER_DOC, USAGE_METRICS, usageMetricsProjection, usageWrites } from '../../src/projections/usageMetrics.js';
import { usageTotalsProjection } from '../../src/projections/usageTotals.js';

/** What a list of writes leaves in an empty store (documents by collection and key), and each document's furthest expiry. */
function outcome(writes: ReadModelWrite[]): { docs: Record<string, Doc | null>; expiries: Record<string, number> } {
  const docs: Record<string, Doc | null> = {};
  for (const { collection, key, change } of composeWrites(writes)) docs[`${collection} ${key}`] = applyChange(null, change);
  const expiries: Record<string, number> = {};
  for (const w of writes) {
    if (w.op === 'delete' || w.expiresAt === undefined) continue;
    const id = `${w.collection} ${w.key}`;
    expiries[id] = Math.max(w.expiresAt, expiries[id] ?? Number.NEGATIVE_INFINITY);
  }
  return { docs, expiries };
}

/** A deterministic pseudo-random sequence (no flaky inputs). */
function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) | 0;
    return ((s >>> 0) % 1_000_000) / 1_000_000;
  };
}

function events(count: number, seed: number): StoredEvent[] {
  const next = random(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
  const start = Date.parse('2024-05-31T22:50:00.000Z');
  const revisions = new Map<string, number>();
  return Array.from({ length: count }, (_, i) => {
    const accountId = pick(['acc_A', 'acc_B']);
    const failed = next() < 0.2;
    const record: UsageRecord = {
      requestId: `req-${i}`,
      // Across minutes, hours, days and a month boundary, sometimes out of order, sometimes with an offset.
      at: next() < 0.05 ? '2024-06-01T02:15:00.000+02:00' : new Date(start + Math.floor(next() * 3 * 3_600_000)).toISOString(),
      accountId,
      tokenId: pick(['tok_1', 'tok_2', 'tok_3']),
      chain: pick(['eth', 'sol']),
      method: pick(['eth_call', 'getBalance', 'cosmos/bank/v1beta1/balances/cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu']),
      status: failed && next() < 0.5 ? 502 : 200,
      rpcErrorCode: failed ? pick([-32000, 3]) : null,
      errorMessage: failed ? pick(['reverted', 'upstream unavailable']) : null,
      totalMs: Math.round(next() * 3000 * 100) / 100,
      upstreamMs: next() < 0.1 ? null : Math.round(next() * 2000 * 100) / 100,
      clientIp: pick(['192.0.2.1', '2001:db8::1']),
      upstream: pick(['eth-1', null]),
      ...(next() < 0.5 ? { retentionDays: pick([7, 30, 365]) } : {}),
    };
    const revision = revisions.get(accountId) ?? 0;
    revisions.set(accountId, revision + 1);
    return {
      streamId: `usage-${accountId}`,
      revision,
      position: String(i + 1).padStart(20, '0'),
      id: `e${i}`,
      type: USAGE_EVENT_TYPE,
      data: { ...record },
      metadata: {},
      created: '',
    };
  });
}

describe('projecting a batch of usage events', () => {
  it.each([usageMetricsProjection, usageTotalsProjection])('$name: one batch has the effect of its events projected one by one, in order', (projection) => {
    const batch = events(2000, 7);
    const oneByOne = batch.flatMap((e) => projection.project(e));
    const folded = projection.projectBatch?.(batch) ?? [];
    expect(outcome(folded)).toEqual(outcome(oneByOne));
    // Folded: one write per document.
    expect(folded.length).toBe(new Set(folded.map((w) => `${w.collection} ${w.key}`)).size);
    expect(folded.length).toBeLessThan(oneByOne.length / 2);
  });

  it('usage_metrics: raw rows are written once each, a document per event and hour of at most RAW_ROWS_PER_DOC rows, however the events are batched', () => {
    // Batch events of 1 to 200 calls (an account's stream numbers its calls densely, `first`), over three hours.
    const records = events(3000, 17).map((e) => e.data as UsageRecord);
    const byAccount = new Map<string, UsageRecord[]>();
    for (const r of records) byAccount.set(r.accountId, [...(byAccount.get(r.accountId) ?? []), r]);
    const next = random(5);
    const batches: StoredEvent[] = [];
    for (const [accountId, calls] of byAccount) {
      let revision = 0;
      for (let from = 0; from < calls.length; revision++) {
        const size = 1 + Math.floor(next() * 200);
        const data = encodeUsageBatch(accountId, calls.slice(from, from + size), from);
        batches.push({
          streamId: `usage-${accountId}`,
          revision,
          position: String(batches.length).padStart(20, '0'),
          id: `e${batches.length}`,
          type: USAGE_BATCH_EVENT_TYPE,
          data,
          metadata: {},
          created: '2024-06-01T00:00:00.000Z',
        });
        from += size;
      }
    }
    const rowWrites = (batchSize: number): ReadModelWrite[] => {
      const out: ReadModelWrite[] = [];
      for (let from = 0; from < batches.length; from += batchSize) {
        for (const w of usageMetricsProjection.projectBatch?.(batches.slice(from, from + batchSize)) ?? [])
          if (w.collection === USAGE_METRICS.requestBlocks) out.push(w);
      }
      return out;
    };
    const live = rowWrites(7);
    // Each document once, as a put: nothing to read back.
    expect(new Set(live.map((w) => w.key)).size).toBe(live.length);
    expect(live.every((w) => w.op === 'put')).toBe(true);
    // Every call once, in documents of one hour, each at most RAW_ROWS_PER_DOC rows.
    let rows = 0;
    for (const w of live) {
      if (w.op !== 'put') continue;
      const hours = new Set(Object.values(w.doc).map((row) => (row as UsageCallFields)[1].slice(0, 13)));
      expect(hours.size, w.key).toBe(1);
      expect(w.key.split('/')[1]).toBe([...hours][0]);
      expect(Object.keys(w.doc).length).toBeLessThanOrEqual(RAW_ROWS_PER_DOC);
      rows += Object.keys(w.doc).length;
    }
    expect(rows).toBe(records.length);
    expect(live.length).toBeLessThan(records.length / 10);
    // A rebuild, batched otherwise, writes the same documents.
    const byKey = (writes: ReadModelWrite[]) => Object.fromEntries(writes.map((w) => [w.key, w]));
    expect(byKey(rowWrites(batches.length))).toEqual(byKey(live));
    expect(byKey(rowWrites(1))).toEqual(byKey(live));
  });

  it('usage_metrics: told the time, a batch leaves out only documents that have expired by then', () => {
    const batch = events(2000, 13);
    const start = Date.parse('2024-05-31T22:50:00.000Z');
    // Around the minute documents' expiry (7 days for some calls, MINUTE_RETENTION_DAYS for the others) and the plans'.
    for (const days of [0, 6.9, 7.05, 8.01, 8.1, 8.2, 9, 31, 366]) {
      const nowMs = start + days * DAY_MS;
      const told = usageMetricsProjection.projectBatch?.(batch, nowMs) ?? [];
      const all = usageMetricsProjection.projectBatch?.(batch) ?? [];
      expect(outcome(unexpired(told, nowMs)), `${days} days later`).toEqual(outcome(unexpired(all, nowMs)));
      if (days >= 9) expect(told.length, `${days} days later`).toBeLessThan(all.length);
    }
  });

  it('usage_metrics: a call gives each of its documents the expiry of its bucket (or of the call) and its retention', () => {
    // With the batch test above, this pins the expiries of folded documents (computed once per document) to the per-call rule.
    const granularityOf = (w: ReadModelWrite): Granularity | null => {
      if (w.collection === USAGE_METRICS.rollups) return parseRollupKey(w.key).granularity;
      if (w.collection === USAGE_METRICS.errorGroups) return w.key.split('/')[1] as Granularity;
      if (w.collection === USAGE_METRICS.clientIps) return 'day';
      if (w.collection === USAGE_METRICS.requestBlocks) return 'hour';
      return null;
    };
    let withExpiry = 0;
    for (const event of events(300, 11)) {
      const record = event.data as UsageRecord;
      const expiry = usageExpiryOf(canonicalTime(record.at) as string, record.retentionDays);
      for (const w of usageWrites(record, event.revision)) {
        if (w.op === 'delete') continue;
        expect(w.expiresAt, `${w.collection} ${w.key}`).toBe(expiry(granularityOf(w)));
        if (w.expiresAt !== undefined) withExpiry++;
      }
    }
    expect(withExpiry).toBeGreaterThan(500);
  });

  it('usage_metrics: one event’s writes are those of its record', () => {
    const [event] = events(1, 3);
    if (!event) throw new Error('no event');
    expect(usageMetricsProjection.project(event)).toEqual(usageWrites(event.data as UsageRecord, event.revision));
    expect(usageMetricsProjection.project({ ...event, data: { ...event.data, status: 'ok' } })).toEqual([]);
  });
});
