import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { encodeUsageBatch, USAGE_BATCH_EVENT_TYPE, usageBatchEventId } from '../../src/domain/usageBatch.js';
import type { RangeOptions } from '../../src/infra/readmodels/port.js';
import { EXPORT_PAGE_ROWS } from '../../src/projections/metricsQueries.js';
import { USAGE_METRICS } from '../../src/projections/usageMetrics.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { pdfText } from '../support/pdfText.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

const inject = (options: InjectOptions) => t.app.inject(options);
const MIN = 60_000;
const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();

async function ownerOn(plan: string) {
  const o = await owner(t.app);
  if (plan !== 'free')
    await inject({ method: 'PUT', url: `/api/v1/admin/accounts/${o.accountId}/plan`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, payload: { plan } });
  const tokenId = (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'exported' } })).json().id as string;
  return { ...o, tokenId };
}

async function appendUsage(records: UsageRecord[]): Promise<void> {
  const accountId = records[0]?.accountId as string;
  await t.runtime.store.append(
    usageStream(accountId),
    records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } })),
    'any',
  );
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}

/** Appends the records as the ingester does: one batch event, its calls numbered after the `first` calls already there. */
async function appendBatch(records: UsageRecord[], first: number): Promise<void> {
  const accountId = records[0]?.accountId as string;
  await t.runtime.store.append(
    usageStream(accountId),
    [{ id: usageBatchEventId(records), type: USAGE_BATCH_EVENT_TYPE, data: { ...encodeUsageBatch(accountId, records, first) } }],
    'any',
  );
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}

/** RFC 4180 reader: quoted fields with doubled quotes and line breaks, CRLF records. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let i = 0;
  let quoted = false;
  while (i < text.length) {
    const c = text[i] as string;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i += 2;
        continue;
      }
      if (c === '"') {
        quoted = false;
        i++;
        continue;
      }
      field += c;
      i++;
      continue;
    }
    if (c === '"') {
      quoted = true;
      i++;
      continue;
    }
    if (c === ',') {
      row.push(field);
      field = '';
      i++;
      continue;
    }
    if (c === '\r' && text[i + 1] === '\n') {
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
      i += 2;
      continue;
    }
    field += c;
    i++;
  }
  if (field !== '' || row.length > 0) throw new Error('CSV does not end with CRLF');
  return rows;
}

describe('exports by plan', () => {
  it.each([
    ['free', { csv: 200, json: 403, pdf: 403 }],
    ['developer', { csv: 200, json: 200, pdf: 403 }],
    ['professional', { csv: 200, json: 200, pdf: 200 }],
    ['unlimited', { csv: 200, json: 200, pdf: 200 }],
  ] as const)('%s gets only its formats; a refusal names the plan that has the format', async (plan, expected) => {
    const o = await ownerOn(plan);
    for (const format of ['csv', 'json', 'pdf'] as const) {
      const res = await inject({ method: 'GET', url: `/api/v1/exports/usage.${format}`, headers: o.auth });
      expect([format, res.statusCode]).toEqual([format, expected[format]]);
      if (res.statusCode === 403) {
        expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
        const needed = format === 'json' ? 'developer' : 'professional';
        expect(res.json()).toMatchObject({ code: 'plan_feature_unavailable', plan, required_plan: needed });
        expect(res.json().detail).toContain(needed === 'developer' ? 'Developer' : 'Professional');
      }
    }
  });

  it('needs an access token or a session; an API token or nothing is 401', async () => {
    const o = await ownerOn('free');
    expect((await inject({ method: 'GET', url: '/api/v1/exports/usage.csv' })).statusCode).toBe(401);
    expect((await inject({ method: 'GET', url: '/api/v1/exports/usage.csv', headers: { cookie: o.cookie } })).statusCode).toBe(200);
    expect((await inject({ method: 'GET', url: '/api/v1/exports/usage.xml', headers: o.auth })).statusCode).toBe(404);
  });
});

describe('export contents', () => {
  let o: Awaited<ReturnType<typeof ownerOn>>;
  let records: UsageRecord[];
  const base = Math.floor(Date.now() / MIN) * MIN - 60 * MIN;

  beforeAll(async () => {
    o = await ownerOn('professional');
    const rec = (i: number, r: Partial<UsageRecord>): UsageRecord => ({
      requestId: `exp-${o.accountId}-${i}`,
      at: iso(base + i * MIN),
      accountId: o.accountId,
      tokenId: o.tokenId,
      chain: 'eth',
      method: 'eth_blockNumber',
      status: 200,
      rpcErrorCode: null,
      errorMessage: null,
      totalMs: 12.5,
      upstreamMs: 10.25,
      clientIp: '192.0.2.10',
      upstream: 'eth-1',
      ...r,
    });
    records = [
      rec(0, {}),
      rec(1, {
        method: 'eth_call',
        rpcErrorCode: 3,
        errorMessage: 'execution reverted: "Ownable, caller",\r\nnot owner',
        totalMs: 30,
        upstreamMs: 28,
        charged: true,
        cache: 'hedged',
      }),
      rec(2, { chain: 'atom', method: 'cosmos/bank/v1beta1/balances/cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu', upstream: 'atom-1' }),
      rec(3, { method: '=cmd|calc', status: 400, rpcErrorCode: -32601, errorMessage: 'Method not found', upstreamMs: null, upstream: null, charged: false }),
      rec(4, { clientIp: '2001:db8::1' }),
      // Older than Professional's 90 days: never exported, even before the retention job runs.
      { ...rec(5, {}), at: iso(Date.now() - 100 * DAY) },
    ];
    await appendUsage(records);
  });

  it('CSV: a header row, one RFC 4180 row per call in time order, formulas defused, retention applied', async () => {
    const res = await inject({ method: 'GET', url: '/api/v1/exports/usage.csv', headers: o.auth });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8; header=present');
    expect(res.headers['content-disposition']).toMatch(/^attachment; filename="usage-.+\.csv"$/);
    const rows = parseCsv(res.body);
    expect(rows[0]).toEqual([
      'time',
      'request_id',
      'token_id',
      'chain',
      'method',
      'status',
      'outcome',
      'rpc_error_code',
      'error_message',
      'total_ms',
      'upstream_ms',
      'client_ip',
      'upstream',
      'charged',
      'cache',
    ]);
    expect(rows).toHaveLength(6);
    expect(rows[1]).toEqual([
      iso(base),
      `exp-${o.accountId}-0`,
      o.tokenId,
      'eth',
      'eth_blockNumber',
      '200',
      'success',
      '',
      '',
      '12.5',
      '10.25',
      '192.0.2.10',
      'eth-1',
      // Recorded without saying whether it used quota: charged as usedQuota tells from its status.
      'true',
      '',
    ]);
    expect(rows[2]?.slice(4, 9)).toEqual(['eth_call', '200', 'error', '3', 'execution reverted: "Ownable, caller",\r\nnot owner']);
    expect(rows[3]?.[4]).toBe('cosmos/bank/v1beta1/balances/cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu');
    expect(rows[4]?.slice(4, 8)).toEqual(["'=cmd|calc", '400', 'error', '-32601']);
    expect(rows.slice(1).map((r) => r.slice(13))).toEqual([
      ['true', ''],
      ['true', 'hedged'],
      ['true', ''],
      ['false', ''],
      ['true', ''],
    ]);
    expect(rows[5]?.[11]).toBe('2001:db8::1');
  });

  it('CSV and JSON filter by chain and period', async () => {
    const atom = parseCsv((await inject({ method: 'GET', url: '/api/v1/exports/usage.csv?chain=atom', headers: o.auth })).body);
    expect(atom.slice(1).map((r) => r[3])).toEqual(['atom']);
    const window = parseCsv(
      (await inject({ method: 'GET', url: `/api/v1/exports/usage.csv?start=${iso(base + MIN)}&end=${iso(base + 3 * MIN)}`, headers: o.auth })).body,
    );
    expect(window.slice(1).map((r) => r[1])).toEqual([`exp-${o.accountId}-1`, `exp-${o.accountId}-2`]);
    const bad = await inject({ method: 'GET', url: '/api/v1/exports/usage.json?chain=doge', headers: o.auth });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().code).toBe('validation_failed');
  });

  it('JSON: one document with the period and every row typed', async () => {
    const res = await inject({ method: 'GET', url: '/api/v1/exports/usage.json', headers: o.auth });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    const body = res.json();
    expect(body.retention).toMatchObject({ retentionDays: 90, clamped: false });
    expect(body.chain).toBeNull();
    expect(body.rows).toHaveLength(5);
    expect(body.rows[1]).toEqual({
      time: iso(base + MIN),
      request_id: `exp-${o.accountId}-1`,
      token_id: o.tokenId,
      chain: 'eth',
      method: 'eth_call',
      status: 200,
      outcome: 'error',
      rpc_error_code: 3,
      error_message: 'execution reverted: "Ownable, caller",\r\nnot owner',
      total_ms: 30,
      upstream_ms: 28,
      client_ip: '192.0.2.10',
      upstream: 'eth-1',
      charged: true,
      cache: 'hedged',
    });
    const empty = (await inject({ method: 'GET', url: '/api/v1/exports/usage.json?chain=sol', headers: o.auth })).json();
    expect(empty.rows).toEqual([]);
  });

  it('PDF: a real document with the summary figures and a drawn usage chart', async () => {
    const res = await inject({ method: 'GET', url: `/api/v1/exports/usage.pdf?start=${iso(base - 30 * MIN)}&end=${iso(base + 30 * MIN)}`, headers: o.auth });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/pdf');
    const pdf = res.rawPayload;
    expect(pdf.subarray(0, 5).toString()).toBe('%PDF-');
    expect(pdf.subarray(-6).toString()).toMatch(/%%EOF/);
    const text = pdfText(pdf);
    for (const s of ['Usage report', 'Requests', 'Error rate', 'Requests over time', 'By chain', 'Most used methods', 'execution reverted'])
      expect(text).toContain(s);
    // 5 calls, 2 errors → 40.00 % error rate.
    expect(text).toContain('40.00 %');
    expect(text).toMatch(/Period .*to/);
    // The chart is vector drawing: filled rectangles (bars) in the content stream.
    const content = inflateSync(pdf.subarray(pdf.indexOf('stream\n') + 7, pdf.indexOf('\nendstream'))).toString('latin1');
    expect(content.match(/ re\n/g)?.length ?? 0).toBeGreaterThanOrEqual(5);
  });
});

describe('calls recorded late', () => {
  it('are exported in their hour, after that hour’s calls recorded before them; the period still bounds them', async () => {
    const o = await ownerOn('developer');
    const hour = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3 * 3_600_000;
    const rec = (id: string, ms: number): UsageRecord => ({
      requestId: `${id}-${o.accountId}`,
      at: iso(ms),
      accountId: o.accountId,
      tokenId: o.tokenId,
      chain: 'eth',
      method: 'eth_chainId',
      status: 200,
      rpcErrorCode: null,
      errorMessage: null,
      totalMs: 1,
      upstreamMs: 1,
      clientIp: '192.0.2.1',
      upstream: 'eth-1',
    });
    // Recorded in this order: the second hour's calls first, then a call of the first hour that arrived late.
    await appendUsage([rec('b1', hour + 3_600_000 + 5 * MIN), rec('a1', hour + 10 * MIN), rec('b2', hour + 3_600_000 + MIN)]);
    await appendUsage([rec('a0-late', hour + 5 * MIN)]);
    const ids = async (query: string) =>
      parseCsv((await inject({ method: 'GET', url: `/api/v1/exports/usage.csv${query}`, headers: o.auth })).body)
        .slice(1)
        .map((r) => r[1]?.split('-')[0]);
    expect(await ids('')).toEqual(['a1', 'a0', 'b1', 'b2']);
    expect(await ids(`?start=${iso(hour + 6 * MIN)}&end=${iso(hour + 3_600_000 + 2 * MIN)}`)).toEqual(['a1', 'b2']);
  });
});

describe('a large CSV export streams', () => {
  const ROWS = 50_000;

  it('sends the first bytes long before the last row is read, holds back when the client does not read, and ends complete', async () => {
    const o = await ownerOn('free');
    const start = Date.now() - 2 * DAY;
    // Appended as the ingester does: in batches well under the store's 1 MiB per append.
    for (let from = 0; from < ROWS; from += 1000) {
      const records = Array.from({ length: 1000 }, (_, j): UsageRecord => {
        const i = from + j;
        return {
          requestId: `bulk-${i}`,
          at: iso(start + i * 1000),
          accountId: o.accountId,
          tokenId: o.tokenId,
          chain: 'eth',
          method: 'eth_getBalance',
          status: 200,
          rpcErrorCode: null,
          errorMessage: null,
          totalMs: 3.5,
          upstreamMs: 2.5,
          clientIp: '192.0.2.77',
          upstream: 'eth-1',
        };
      });
      await appendBatch(records, from);
    }
    // Count the pages the export reads from the read models.
    const rm = t.runtime.readModels;
    const range = rm.range.bind(rm);
    let pagesRead = 0;
    rm.range = ((collection: string, options?: RangeOptions) => {
      if (collection === USAGE_METRICS.requestBlocks && options?.gte?.startsWith(`${o.accountId}/`)) pagesRead++;
      return range(collection, options);
    }) as typeof rm.range;
    // A Unix socket: its small fixed buffers (no TCP window autotuning) make the read-ahead of a paused client deterministic.
    const socketPath = join(t.dataDir, 'http.sock');
    await t.app.listen({ path: socketPath });
    let response: import('node:http').IncomingMessage | null = null;
    try {
      response = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
        const req = httpRequest({ socketPath, path: '/api/v1/exports/usage.csv', headers: o.auth }, resolve);
        req.on('error', reject);
        req.end();
      });
      expect(response.statusCode).toBe(200);
      const body = response;
      const first: Buffer = await new Promise((resolve) => body.once('data', resolve));
      body.pause();
      expect(first.toString().startsWith('time,request_id')).toBe(true);
      const atFirstByte = pagesRead;
      // The client reads nothing for a while: the server must stop reading rows (backpressure), not buffer the whole export.
      await new Promise((r) => setTimeout(r, 400));
      const whilePaused = pagesRead;
      // Read ahead of the client: the page being sent, one buffered, and what the socket holds (~200 KB).
      expect(atFirstByte).toBeLessThanOrEqual(3);
      expect(whilePaused).toBeLessThanOrEqual(6);
      const heapBefore = process.memoryUsage().heapUsed;
      let peakHeap = heapBefore;
      let lines = 0;
      let tail = '';
      body.resume();
      for await (const chunk of body) {
        const text = tail + (chunk as Buffer).toString();
        const parts = text.split('\r\n');
        tail = parts.pop() ?? '';
        lines += parts.length;
        peakHeap = Math.max(peakHeap, process.memoryUsage().heapUsed);
      }
      expect(tail).toBe('');
      // The header and the line ahead of the first chunk's split, plus every row.
      expect(lines + first.toString().split('\r\n').length - 1).toBe(ROWS + 1);
      // Pages of about EXPORT_PAGE_ROWS rows, and maybe one more read that finds the end.
      expect(pagesRead).toBeGreaterThanOrEqual(Math.ceil(ROWS / EXPORT_PAGE_ROWS));
      expect(pagesRead).toBeLessThanOrEqual(Math.ceil(ROWS / EXPORT_PAGE_ROWS) + 3);
      // The export is ~7 MB of text; a buffered one would hold all of it and its rows at once.
      expect(peakHeap - heapBefore).toBeLessThan(64 * 1024 * 1024);
    } finally {
      response?.destroy();
      rm.range = range;
    }
  });
});
