import { describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import {
  decodeUsageBatch,
  encodeUsageBatch,
  MAX_CALLS_PER_EVENT,
  USAGE_BATCH_EVENT_TYPE,
  usageBatchEventId,
  usageCallsThrough,
  usageEventRequestIds,
} from '../../src/domain/usageBatch.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { USAGE_METRICS, usageMetricsProjection } from '../../src/projections/usageMetrics.js';
import { rawRowSlot, usageRecordsOf } from '../../src/projections/usageRecord.js';
import { USAGE_TOTALS, usageTotalsProjection } from '../../src/projections/usageTotals.js';

const base = Date.parse('2026-11-20T10:00:00.000Z');

/** Calls as the gateway meters them: ids of one process's sequence, a varied mix. */
function calls(n: number, start = 0): UsageRecord[] {
  return Array.from({ length: n }, (_, k) => {
    const i = start + k;
    const failed = i % 33 === 0;
    const record: UsageRecord = {
      requestId: `Ab3dEf7h-Ij9kLm1n-${(1000 + i * 3).toString(36)}${i % 7 === 0 ? `:${i % 4}` : ''}`,
      at: new Date(base + i * 37 - (i % 5) * 400).toISOString(),
      accountId: 'acc-1',
      tokenId: `tok-${i % 3}`,
      chain: ['eth', 'polygon', 'sol', 'base', 'arb'][i % 5] as string,
      method: ['eth_call', 'eth_getBalance', 'eth_blockNumber', 'eth_getLogs', 'eth_chainId', 'getSlot'][i % 6] as string,
      status: failed ? 502 : 200,
      rpcErrorCode: failed ? -32010 : null,
      errorMessage: failed ? 'upstream "unavailable"\n' : null,
      totalMs: Math.round(((i * 7.31) % 90) * 100) / 100,
      upstreamMs: i % 4 === 0 ? null : Math.round(((i * 5.17) % 80) * 100) / 100,
      clientIp: `10.0.${i % 3}.${i % 250}`,
      upstream: i % 4 === 0 ? null : `node-${i % 2}`,
      retentionDays: 30,
      charged: i % 50 !== 0,
    };
    if (i % 4 !== 0) record.cache = (['miss', 'hit', 'coalesced', 'hedged'] as const)[i % 4];
    return record;
  });
}

const stored = (type: string, data: Record<string, unknown>, revision: number): StoredEvent => ({
  streamId: usageStream('acc-1'),
  revision,
  position: String(revision).padStart(20, '0'),
  id: `id-${revision}`,
  type,
  data,
  metadata: {},
  created: new Date(base).toISOString(),
});

describe('compact usage batches', () => {
  it('decode to the very records that were encoded, field for field', () => {
    const records = calls(500);
    const data = encodeUsageBatch('acc-1', records, 0);
    // Through JSON, as the store keeps it.
    expect(decodeUsageBatch(JSON.parse(JSON.stringify(data)))).toEqual(records);
    expect(usageEventRequestIds({ type: USAGE_BATCH_EVENT_TYPE, data })).toEqual(records.map((r) => r.requestId));
  });

  it('keep what does not fit a column as it was: other ids, odd times, finer latencies, absent fields', () => {
    const [plain] = calls(1);
    const odd: UsageRecord[] = [
      { ...(plain as UsageRecord), requestId: '550e8400-e29b-41d4-a716-446655440000' },
      { ...(plain as UsageRecord), requestId: `no-dash-here-0${'x'.repeat(11)}` },
      { ...(plain as UsageRecord), requestId: 'p-0a' },
      { ...(plain as UsageRecord), requestId: 'p-1b:007' },
      { ...(plain as UsageRecord), requestId: 'plain' },
      { ...(plain as UsageRecord), requestId: 'p-2c', at: 'yesterday' },
      { ...(plain as UsageRecord), requestId: 'p-2d', at: '2026-11-20T10:00:00Z' },
      { ...(plain as UsageRecord), requestId: 'p-2e', totalMs: 12.3456, upstreamMs: 0.001 },
      // Shapes whose fields, joined, would read alike.
      { ...(plain as UsageRecord), requestId: 'p-30', tokenId: 'x\u0000y', chain: 'z' },
      { ...(plain as UsageRecord), requestId: 'p-31', tokenId: 'x', chain: 'y\u0000z' },
      { ...(plain as UsageRecord), requestId: 'p-32', status: 200, rpcErrorCode: null, errorMessage: '\u00012' },
    ];
    const { retentionDays: _r, charged: _c, cache: _x, ...legacy } = plain as UsageRecord;
    odd.push({ ...legacy, requestId: 'p-2f' });
    const data = JSON.parse(JSON.stringify(encodeUsageBatch('acc-1', odd, 0)));
    const decoded = decodeUsageBatch(data);
    expect(decoded).toEqual(odd);
    expect(Object.hasOwn(decoded?.at(-1) ?? {}, 'charged')).toBe(false);
  });

  it('are several times smaller than one JSON record per call', () => {
    const records = calls(400);
    const compact = JSON.stringify(encodeUsageBatch('acc-1', records, 0)).length / records.length;
    const whole = records.reduce((sum, r) => sum + JSON.stringify(r).length, 0) / records.length;
    expect(compact).toBeLessThan(whole / 4);
  });

  it('refuse data that is not a batch, call for call: null, never a wrong record', () => {
    const data = encodeUsageBatch('acc-1', calls(10), 0) as unknown as Record<string, unknown>;
    const broken: Array<Record<string, unknown>> = [
      {},
      { ...data, calls: 11 },
      { ...data, calls: MAX_CALLS_PER_EVENT + 1 },
      { ...data, shape: (data['shape'] as number[]).map(() => 99) },
      { ...data, ip: 'x' },
      { ...data, at: (data['at'] as number[]).slice(1) },
      { ...data, totalMs: (data['totalMs'] as number[]).map(() => -1) },
      { ...data, shapes: [['t', 'eth', 'm', 'ok', null, null, null, null, null, null]] },
      { ...data, stems: [] },
      { ...data, num: (data['num'] as number[]).map(() => -5) },
      { ...data, accountId: 7 },
      { ...data, odd: { 0: { at: 5 } } },
      // Times beyond what a Date holds.
      { ...data, at: (data['at'] as number[]).map(() => 9e15) },
    ];
    for (const bad of broken) expect(decodeUsageBatch(bad), JSON.stringify(bad).slice(0, 120)).toBeNull();
    expect(usageRecordsOf(stored(USAGE_BATCH_EVENT_TYPE, { calls: 'many' }, 0))).toEqual([]);
  });

  it('have an id fixed by their calls: the same calls the same id, other calls or order another', () => {
    const records = calls(20);
    const id = usageBatchEventId(records);
    expect(usageBatchEventId(calls(20))).toBe(id);
    expect(usageBatchEventId(records.slice(1))).not.toBe(id);
    expect(usageBatchEventId([...records].reverse())).not.toBe(id);
    // UUIDv7-shaped, led by the earliest call's time.
    const earliest = Math.min(...records.map((r) => Date.parse(r.at)));
    expect(id.replaceAll('-', '').slice(0, 12)).toBe(earliest.toString(16).padStart(12, '0'));
  });

  it('project exactly as their calls one event each: the same counts, totals and raw rows', () => {
    const records = calls(300);
    const batch = stored(USAGE_BATCH_EVENT_TYPE, encodeUsageBatch('acc-1', records, 0), 0);
    const singles = records.map((r, i) => stored(USAGE_EVENT_TYPE, { ...r }, i));
    const rows = (writes: ReturnType<typeof usageMetricsProjection.project>) =>
      writes
        .filter((w) => w.collection === USAGE_METRICS.requestBlocks)
        .flatMap((w) => (w.op === 'put' ? Object.values(w.doc) : []))
        .map((fields) => JSON.stringify(fields))
        .sort();
    const counts = (writes: ReturnType<typeof usageMetricsProjection.project>) =>
      writes.filter((w) => w.collection !== USAGE_METRICS.requestBlocks).sort((a, b) => `${a.collection}${a.key}`.localeCompare(`${b.collection}${b.key}`));
    const fromBatch = usageMetricsProjection.project(batch);
    const fromSingles = usageMetricsProjection.projectBatch?.(singles) ?? [];
    expect(counts(fromBatch)).toEqual(counts(fromSingles));
    expect(rows(fromBatch)).toEqual(rows(fromSingles));
    expect(rows(fromBatch)).toHaveLength(300);
    const totals = (writes: ReturnType<typeof usageTotalsProjection.project>) => writes.filter((w) => w.collection === USAGE_TOTALS.byAccount);
    expect(totals(usageTotalsProjection.project(batch))).toEqual(totals(usageTotalsProjection.projectBatch?.(singles) ?? []));
  });

  it("give each call a raw-row slot after every earlier event's, one-call events included", () => {
    // 42 one-call events (revisions 0–41), then batches numbering their calls on from there.
    const legacy = stored(USAGE_EVENT_TYPE, { ...calls(1)[0] }, 41);
    const first = stored(USAGE_BATCH_EVENT_TYPE, encodeUsageBatch('acc-1', calls(3), 42), 42);
    const second = stored(USAGE_BATCH_EVENT_TYPE, encodeUsageBatch('acc-1', calls(3, 3), 45), 43);
    const slots = [rawRowSlot(legacy, 0), ...[0, 1, 2].map((i) => rawRowSlot(first, i)), ...[0, 1, 2].map((i) => rawRowSlot(second, i))];
    expect(slots).toEqual([41, 42, 43, 44, 45, 46, 47]);
    expect(usageCallsThrough(second)).toBe(48);
    // A batch that does not say where its calls are numbers them past any other.
    const { first: _f, ...unnumbered } = encodeUsageBatch('acc-1', calls(2), 0);
    expect(rawRowSlot(stored(USAGE_BATCH_EVENT_TYPE, unnumbered, 44), 1)).toBeGreaterThan(10_000);
  });
});
