import { describe, expect, it } from 'vitest';
import { csvField } from '../../src/commands/api/exports/csv.js';
import type { UsageRecord } from '../../src/domain/usage.js';
import { decodeUsageCall, type UsageCallFields } from '../../src/domain/usage.js';
import type { ReadModelWrite } from '../../src/infra/readmodels/port.js';
import { bucketName, bucketStart, coverRange, DAY_MS, HOUR_MS, MINUTE_MS, seriesBuckets, seriesGranularity } from '../../src/projections/usageBuckets.js';
import { HISTOGRAM_FIELDS, histogramIndex, LATENCY_BOUNDS_MS, quantile } from '../../src/projections/usageHistogram.js';
import { methodLabel } from '../../src/projections/usageMethod.js';
import { canonicalTime, parseRollupKey, USAGE_METRICS, usageWrites } from '../../src/projections/usageMetrics.js';

const t = (iso: string): number => Date.parse(iso);

describe('method labels', () => {
  it('keeps JSON-RPC method names', () => {
    for (const m of ['eth_blockNumber', 'getBlockHeight', 'sui_getLatestCheckpointSequenceNumber', 'net_version']) expect(methodLabel(m)).toBe(m);
  });

  it('replaces what identifies an item in REST paths with {id}', () => {
    expect(methodLabel('cosmos/bank/v1beta1/balances/cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu')).toBe('cosmos/bank/v1beta1/balances/{id}');
    expect(methodLabel('cosmos/base/tendermint/v1beta1/blocks/19876543')).toBe('cosmos/base/tendermint/v1beta1/blocks/{id}');
    expect(methodLabel('cosmos/tx/v1beta1/txs/9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08')).toBe('cosmos/tx/v1beta1/txs/{id}');
    expect(methodLabel('cosmos/staking/v1beta1/validators/seivaloper1x2y3z4w5v6u7t8s9r0q1p2o3n4m5l6k7j8h9g0/delegations')).toBe(
      'cosmos/staking/v1beta1/validators/{id}/delegations',
    );
    expect(methodLabel('addresses/kaspa:qqkqkzjvr7zwxxmjxjkmxxdwju9kjs6e9u82uh59z07vgaks6gg62v8707g73/balance')).toBe('addresses/{id}/balance');
    expect(methodLabel('wallet/getaccount')).toBe('wallet/getaccount');
    expect(methodLabel('walletsolidity/gettransactionbyid')).toBe('walletsolidity/gettransactionbyid');
    expect(methodLabel('info/blocks/0xabcdef0123456789abcdef')).toBe('info/blocks/{id}');
    expect(methodLabel('objects/3f2504e0-4f89-11d3-9a0c-0305e82c3301')).toBe('objects/{id}');
  });

  it('is bounded: 1,000 distinct addresses give one label, long paths are cut', () => {
    const labels = new Set(Array.from({ length: 1000 }, (_, i) => methodLabel(`cosmos/bank/v1beta1/balances/cosmos1${String(i).padStart(38, 'q')}`)));
    expect([...labels]).toEqual(['cosmos/bank/v1beta1/balances/{id}']);
    const long = methodLabel(Array.from({ length: 40 }, (_, i) => `seg${i}`).join('/'));
    expect(long.split('/')).toHaveLength(13);
    expect(long.endsWith('/…')).toBe(true);
    expect(methodLabel('x'.repeat(500)).length).toBeLessThanOrEqual(120);
    expect(methodLabel('')).toBe('(none)');
  });
});

describe('time buckets', () => {
  it('names buckets by the ISO prefix of their start and parses them back', () => {
    const at = t('2024-05-07T13:45:12.345Z');
    expect(bucketName(at, 'minute')).toBe('2024-05-07T13:45');
    expect(bucketName(at, 'hour')).toBe('2024-05-07T13');
    expect(bucketName(at, 'day')).toBe('2024-05-07');
    expect(bucketName(at, 'month')).toBe('2024-05');
    for (const name of ['2024-05-07T13:45', '2024-05-07T13', '2024-05-07', '2024-05'])
      expect(bucketName(bucketStart(name), 'minute').startsWith(name)).toBe(true);
  });

  it('picks a minute series up to 6 hours, an hour up to 14 days, a day beyond', () => {
    expect(seriesGranularity(6 * HOUR_MS)).toBe('minute');
    expect(seriesGranularity(6 * HOUR_MS + MINUTE_MS)).toBe('hour');
    expect(seriesGranularity(14 * DAY_MS)).toBe('hour');
    expect(seriesGranularity(30 * DAY_MS)).toBe('day');
  });

  it('covers a range exactly: days inside, hours and minutes at the edges, nothing twice', () => {
    const start = t('2024-05-01T22:37:00Z');
    const end = t('2024-05-05T03:12:00Z');
    const spans = coverRange(start, end, 'day');
    expect(spans.map((s) => [s.granularity, new Date(s.from).toISOString(), new Date(s.to).toISOString()])).toEqual([
      ['minute', '2024-05-01T22:37:00.000Z', '2024-05-01T23:00:00.000Z'],
      ['hour', '2024-05-01T23:00:00.000Z', '2024-05-02T00:00:00.000Z'],
      ['day', '2024-05-02T00:00:00.000Z', '2024-05-05T00:00:00.000Z'],
      ['hour', '2024-05-05T00:00:00.000Z', '2024-05-05T03:00:00.000Z'],
      ['minute', '2024-05-05T03:00:00.000Z', '2024-05-05T03:12:00.000Z'],
    ]);
    // Contiguous, so every minute is counted once.
    for (let i = 1; i < spans.length; i++) expect(spans[i]?.from).toBe(spans[i - 1]?.to);
    expect(coverRange(start, start + 20 * MINUTE_MS, 'day')).toEqual([{ granularity: 'minute', from: start, to: start + 20 * MINUTE_MS }]);
    expect(coverRange(start, start, 'hour')).toEqual([]);
    expect(coverRange(t('2024-05-01T00:00:00Z'), t('2024-05-31T00:00:00Z'), 'day')).toHaveLength(1);
  });

  it('gives one series point per bucket the range touches', () => {
    expect(seriesBuckets(t('2024-05-01T22:37:00Z'), t('2024-05-02T01:00:00Z'), 'hour').map((b) => new Date(b).toISOString())).toEqual([
      '2024-05-01T22:00:00.000Z',
      '2024-05-01T23:00:00.000Z',
      '2024-05-02T00:00:00.000Z',
    ]);
  });
});

describe('latency histogram', () => {
  it('puts each latency in the first bucket whose bound holds it', () => {
    expect(histogramIndex(0)).toBe(0);
    expect(histogramIndex(1)).toBe(0);
    expect(histogramIndex(1.01)).toBe(1);
    expect(histogramIndex(100)).toBe(LATENCY_BOUNDS_MS.indexOf(100));
    expect(histogramIndex(120_000)).toBe(HISTOGRAM_FIELDS.length - 1);
  });

  it('estimates percentiles within their bucket, interpolating', () => {
    const counts = HISTOGRAM_FIELDS.map(() => 0);
    // 90 calls in (7, 10] ms, 10 calls in (200, 300] ms.
    counts[histogramIndex(9)] = 90;
    counts[histogramIndex(250)] = 10;
    expect(quantile(counts, 0.5)).toBeCloseTo(7 + 3 * (50 / 90), 6);
    expect(quantile(counts, 0.95)).toBeCloseTo(200 + 100 * 0.5, 6);
    expect(quantile(counts, 0.99)).toBeCloseTo(290, 6);
    expect(
      quantile(
        HISTOGRAM_FIELDS.map(() => 0),
        0.95,
      ),
    ).toBeNull();
  });
});

describe('the usage projection', () => {
  const record: UsageRecord = {
    requestId: 'req-1',
    at: '2024-05-07T13:45:12.345Z',
    accountId: 'acc_A',
    tokenId: 'tok_T',
    chain: 'atom',
    method: 'cosmos/bank/v1beta1/balances/cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu',
    status: 200,
    rpcErrorCode: -32000,
    errorMessage: 'account not found',
    totalMs: 12.34,
    upstreamMs: 10.01,
    clientIp: '203.0.113.9',
    upstream: 'atom-1',
  };

  it('counts one call into every granularity, with integer µs latency sums and one histogram bucket', () => {
    const writes = usageWrites(record, 0);
    const rollups = writes.filter((w): w is Extract<ReadModelWrite, { op: 'inc' }> => w.collection === USAGE_METRICS.rollups && w.op === 'inc');
    expect(rollups.map((w) => w.key)).toEqual([
      'acc_A/minute/2024-05-07T13:45/tok_T/atom/cosmos/bank/v1beta1/balances/{id}',
      'acc_A/hour/2024-05-07T13/tok_T/atom/cosmos/bank/v1beta1/balances/{id}',
      'acc_A/day/2024-05-07/tok_T/atom/cosmos/bank/v1beta1/balances/{id}',
      'acc_A/month/2024-05/tok_T/atom/cosmos/bank/v1beta1/balances/{id}',
    ]);
    expect(rollups[0]?.inc).toEqual({ requests: 1, errors: 1, totalUs: 12_340, upstreamUs: 10_010, upstreamCalls: 1, h15: 1 });
    expect(parseRollupKey(rollups[0]?.key ?? '')).toMatchObject({
      accountId: 'acc_A',
      granularity: 'minute',
      tokenId: 'tok_T',
      chain: 'atom',
      method: 'cosmos/bank/v1beta1/balances/{id}',
    });
  });

  it('records an error in three error-group granularities and the recent list, keyed by the JSON-RPC code', () => {
    const writes = usageWrites(record, 0);
    const groups = writes.filter((w) => w.collection === USAGE_METRICS.errorGroups);
    expect(groups).toHaveLength(3);
    expect(groups[0]).toMatchObject({ op: 'inc', inc: { count: 1 }, set: { code: -32000, message: 'account not found', lastSeen: record.at } });
    expect(writes.find((w) => w.collection === USAGE_METRICS.recentErrors)).toMatchObject({ key: 'acc_A/2024-05-07T13:45:12.345Z/req-1' });
    const ok = usageWrites({ ...record, rpcErrorCode: null, errorMessage: null }, 0);
    expect(ok.some((w) => w.collection === USAGE_METRICS.errorGroups || w.collection === USAGE_METRICS.recentErrors)).toBe(false);
  });

  it('keeps the raw row (raw method) for exports, in a document of its hour keyed by its slot in the stream, and decodes it back', () => {
    const revision = 53;
    const rows = usageWrites(record, revision).filter((w) => w.collection === USAGE_METRICS.requestBlocks);
    expect(rows).toHaveLength(1);
    const row = rows[0];
    expect(row).toMatchObject({ op: 'put', key: 'acc_A/2024-05-07T13/0000000000000053' });
    if (row?.op !== 'put') return;
    expect(Object.keys(row.doc)).toEqual(['0']);
    const { accountId: _, ...rest } = record;
    expect(decodeUsageCall(row.doc['0'] as UsageCallFields)).toEqual(rest);
    expect(usageWrites(record, revision).some((w) => w.collection === USAGE_METRICS.requests)).toBe(false);
  });

  it('normalises a time with an offset and ignores one that is not a time', () => {
    const shifted = usageWrites({ ...record, at: '2024-05-07T15:45:12.345+02:00' }, 0);
    expect(shifted.find((w) => w.collection === USAGE_METRICS.recentErrors)?.key).toBe('acc_A/2024-05-07T13:45:12.345Z/req-1');
    const row = shifted.find((w) => w.collection === USAGE_METRICS.requestBlocks);
    expect(row?.op === 'put' && (row.doc['0'] as UsageCallFields)[1]).toBe('2024-05-07T13:45:12.345Z');
    expect(usageWrites({ ...record, at: 'yesterday' }, 0)).toEqual([]);
  });

  it('takes a time in toISOString() form as it is, and makes every other form canonical as Date does', () => {
    const viaDate = (at: string): string | null => (Number.isFinite(Date.parse(at)) ? new Date(Date.parse(at)).toISOString() : null);
    for (const at of [
      '2024-05-07T13:45:12.345Z',
      '2024-02-28T23:59:59.999Z',
      '2024-02-29T00:00:00.000Z',
      '2023-02-29T00:00:00.000Z',
      '2024-04-31T10:00:00.000Z',
      '2024-01-31T00:00:00.000Z',
      '2024-01-01T24:00:00.000Z',
      '2024-01-01T23:60:00.000Z',
      '2024-05-07T13:45:12Z',
      '2024-05-07T13:45:12.345+02:00',
      '+002024-01-01T00:00:00.000Z',
      '2024-05-07',
      'yesterday',
      '',
    ]) {
      expect([at, canonicalTime(at)]).toEqual([at, viaDate(at)]);
    }
  });
});

describe('CSV fields (RFC 4180)', () => {
  it('quotes commas, quotes and line breaks, doubles quotes, and defuses formulas', () => {
    expect(csvField('plain')).toBe('plain');
    expect(csvField('a,b')).toBe('"a,b"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
    expect(csvField('two\r\nlines')).toBe('"two\r\nlines"');
    expect(csvField('=HYPERLINK("x")')).toBe(`"'=HYPERLINK(""x"")"`);
    expect(csvField('-1+1')).toBe("'-1+1");
    expect(csvField(-32601)).toBe('-32601');
    expect(csvField(null)).toBe('');
  });

  it('quotes semicolons and tabs: a spreadsheet that splits on them must not see a cell starting a formula', () => {
    // Excel in a locale whose list separator is ";" (most of Europe), or an import split on tabs, opens `a;=1+1` as two cells.
    expect(csvField('a;=1+1')).toBe('"a;=1+1"');
    expect(csvField('a\t=1+1')).toBe('"a\t=1+1"');
    expect(csvField('\t=1+1')).toBe(`"'\t=1+1"`);
  });

  it('defuses a formula behind leading blanks, which an import that trims cells would run', () => {
    expect(csvField(' =1+1')).toBe("' =1+1");
    expect(csvField('\n@SUM(1)')).toBe(`"'\n@SUM(1)"`);
    expect(csvField('\r+cmd')).toBe(`"'\r+cmd"`);
    // A sign inside the text, or a blank not followed by one, is data as it is.
    expect(csvField('eth_call -1')).toBe('eth_call -1');
    expect(csvField(' eth_call')).toBe(' eth_call');
  });
});
