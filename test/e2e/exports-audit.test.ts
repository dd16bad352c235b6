import { request as httpRequest, type IncomingMessage } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXPORTS_PER_ACCOUNT } from '../../src/commands/api/exportRoutes.js';
import { encodeRawRow, type UsageRecord } from '../../src/domain/usage.js';
import type { RangeOptions, ReadModelWrite } from '../../src/infra/readmodels/port.js';
import { bucketName } from '../../src/projections/usageBuckets.js';
import { RAW_ROWS_PER_DOC, requestBlockKey, USAGE_METRICS } from '../../src/projections/usageMetrics.js';
import { pdfText } from '../support/pdfText.js';
import { createToken, ownerOn } from '../support/planOwner.js';
import { listen, startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * The usage exports audited as an owner, an auditor and an attacker would: caller-chosen text in
 * CSV cells (formula injection, quoting, getting the data back), a 200,000-call export's memory,
 * a client gone mid-export, many stalled exports at once, bad periods and parameters, file names,
 * and Unicode in the PDF. exports-usage.test.ts has the formats per plan and the basic contents.
 */

// A live-heap measure needs a collection on demand: vitest's forks are not started with --expose-gc.
setFlagsFromString('--expose-gc');

let t: TestApp;
let baseUrl: string;
beforeAll(async () => {
  t = await startTestApp();
  baseUrl = (await listen(t)).url;
});
afterAll(async () => {
  await t?.close();
});

const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();
const get = (url: string, headers: Record<string, string>) => t.app.inject({ method: 'GET', url, headers });

/**
 * A strict RFC 4180 reader: records end in CRLF, a quoted field is quoted whole (doubled quotes
 * inside), and a quote in an unquoted field, text after a closing quote or a bare CR or LF
 * outside quotes is an error, not data.
 */
function parseCsvStrict(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let i = 0;
  const fail = (why: string): never => {
    throw new Error(`not RFC 4180 at ${i}: ${why}: ${JSON.stringify(text.slice(Math.max(0, i - 20), i + 20))}`);
  };
  while (i < text.length) {
    let field = '';
    if (text[i] === '"') {
      i++;
      for (;;) {
        if (i >= text.length) fail('unterminated quoted field');
        if (text[i] === '"') {
          if (text[i + 1] === '"') {
            field += '"';
            i += 2;
            continue;
          }
          i++;
          break;
        }
        field += text[i];
        i++;
      }
    } else {
      while (i < text.length && text[i] !== ',' && text[i] !== '\r' && text[i] !== '\n') {
        if (text[i] === '"') fail('quote in an unquoted field');
        field += text[i];
        i++;
      }
    }
    row.push(field);
    if (text[i] === ',') {
      i++;
      continue;
    }
    if (text[i] === '\r' && text[i + 1] === '\n') {
      rows.push(row);
      row = [];
      i += 2;
      continue;
    }
    fail(i >= text.length ? 'no CRLF after the last record' : 'text after a field');
  }
  if (row.length > 0) fail('no CRLF after the last record');
  return rows;
}

/** What a spreadsheet would run as a formula (OWASP CSV injection), blanks first included for imports that trim. */
const RUNS = /^[\t\r]|^[ \t\r\n]*[=+\-@]/;

/** A JSON export row's value as the CSV cell must give it back once one leading `'` is dropped. */
const asCell = (value: unknown): string => (value === null ? '' : String(value));

describe('CSV: caller-chosen text cannot run in a spreadsheet, and every cell reads back as the JSON export has it', () => {
  it('formulas, quotes, separators, line breaks, U+FFFD, emoji, CJK and RTL text, and text already starting with a quote', async () => {
    const o = await ownerOn(t, 'professional');
    const tokenId = await createToken(t, o, { name: 'audited' });
    const calls = usageCalls('inj', o, tokenId, { totalMs: 4, upstreamMs: 3, upstream: 'eth-1' });
    const hostile = [
      '=1+1',
      '+SUM(1,2)',
      '-2+3',
      '@cmd',
      '\t=1+1',
      '\rcmd',
      ' =x',
      '\n@x',
      '=HYPERLINK("http://example.com","click")',
      "'=1+1",
      "'plain",
      "''",
      'a"b,c',
      'line\r\nbreak',
      'semi;=1+1',
      'tab\tinside',
      '\uFFFD',
      '🚀 eth_call',
      '调用合约',
      'مرحبا',
      '-',
      'eth_call',
    ];
    const start = Math.floor(Date.now() / MIN) * MIN - 30 * MIN;
    hostile.forEach((text, i) => {
      // The method as a caller invents it (refused methods are metered), the message as a node says it.
      calls.add(start + i * 1000, { method: text, status: 200, rpcErrorCode: -32601, errorMessage: `${text} not found` });
      calls.add(start + i * 1000 + 500, { method: 'eth_blockNumber', errorMessage: null, clientIp: '2001:db8::7' });
    });
    await recordUsage(t.runtime, calls.records);

    const csvAnswer = await get('/api/v1/exports/usage.csv', o.auth);
    const jsonAnswer = await get('/api/v1/exports/usage.json', o.auth);
    expect([csvAnswer.statusCode, jsonAnswer.statusCode]).toEqual([200, 200]);
    const [header, ...records] = parseCsvStrict(csvAnswer.body);
    const jsonRows = jsonAnswer.json().rows as Array<Record<string, unknown>>;
    expect(jsonRows).toHaveLength(calls.records.length);
    expect(records).toHaveLength(jsonRows.length);
    expect(header).toEqual(Object.keys(jsonRows[0] as object));
    // The methods reached the export as sent.
    expect(jsonRows.filter((r) => r.rpc_error_code === -32601).map((r) => r.method)).toEqual(hostile);

    records.forEach((cells, n) => {
      const json = jsonRows[n] as Record<string, unknown>;
      expect(cells).toHaveLength(header?.length ?? 0);
      header?.forEach((column, c) => {
        const cell = cells[c] as string;
        const value = json[column];
        // Nothing a spreadsheet would run; numbers (an error code of -32601) stay numbers.
        if (typeof value === 'string') expect(RUNS.test(cell), `${column} ${JSON.stringify(cell)}`).toBe(false);
        // Read back by dropping one leading ' (the export's one rule): exactly the JSON export's value.
        const readBack = typeof value === 'string' && cell.startsWith("'") ? cell.slice(1) : cell;
        expect([column, readBack]).toEqual([column, asCell(value)]);
      });
    });
  });
});

/** A reader over a real socket, for what inject cannot show: a client that reads slowly, stops or goes away. */
function openExport(path: string, headers: Record<string, string>): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${baseUrl}${path}`, { headers }, resolve);
    req.on('error', reject);
    req.end();
  });
}

describe('a 200,000-call export', () => {
  const CALLS = 200_000;
  let o: Awaited<ReturnType<typeof ownerOn>>;
  let pagesRead = 0;
  let restoreRange: () => void = () => {};

  beforeAll(async () => {
    o = await ownerOn(t, 'free');
    const tokenId = await createToken(t, o, { name: 'bulk' });
    // Seeded as the usage projection writes raw rows (64 to a document, numbered within their hour): projecting 200,000 calls would take a minute.
    const from = Date.now() - 2 * DAY;
    const message = `execution reverted: ${'x'.repeat(80)}`;
    let writes: ReadModelWrite[] = [];
    let doc: Record<number, unknown> = {};
    let docKey = '';
    let hour = '';
    let slot = 0;
    const flush = async (force: boolean) => {
      if (docKey) writes.push({ op: 'put', collection: USAGE_METRICS.requestBlocks, key: docKey, doc });
      doc = {};
      docKey = '';
      if (force || writes.length >= 200) {
        await t.runtime.readModels.write(writes);
        writes = [];
      }
    };
    for (let i = 0; i < CALLS; i++) {
      const at = from + i * 800;
      const callHour = bucketName(at, 'hour');
      if (callHour !== hour) {
        await flush(false);
        hour = callHour;
        slot = 0;
      }
      if (slot % RAW_ROWS_PER_DOC === 0) {
        await flush(false);
        docKey = requestBlockKey(o.accountId, hour, slot);
      }
      const call = { requestId: `bulk-${i}`, at: iso(at), tokenId, chain: 'eth', method: 'eth_call', status: 200, rpcErrorCode: 3 };
      doc[slot % RAW_ROWS_PER_DOC] = encodeRawRow({
        ...call,
        errorMessage: message,
        totalMs: 5.5,
        upstreamMs: 4.25,
        clientIp: '198.51.100.23',
        upstream: 'eth-1',
        charged: true,
        cache: 'miss',
      } satisfies Omit<UsageRecord, 'accountId'>);
      slot++;
    }
    await flush(true);

    const rm = t.runtime.readModels;
    const range = rm.range.bind(rm);
    rm.range = ((collection: string, options?: RangeOptions) => {
      if (collection === USAGE_METRICS.requestBlocks && options?.gte?.startsWith(`${o.accountId}/`)) pagesRead++;
      return range(collection, options);
    }) as typeof rm.range;
    restoreRange = () => {
      rm.range = range;
    };
  }, 60_000);
  afterAll(() => restoreRange());

  it('streams: the live heap while it is sent stays far below the export’s size, and every row arrives', async () => {
    const gc = runInNewContext('gc') as () => void;
    const liveHeap = () => {
      gc();
      return process.memoryUsage().heapUsed;
    };
    const heapBefore = liveHeap();
    const rssBefore = process.memoryUsage().rss;
    const res = await openExport('/api/v1/exports/usage.csv', o.auth);
    expect(res.statusCode).toBe(200);
    let bytes = 0;
    let lines = 0;
    let chunks = 0;
    let peakLiveHeap = heapBefore;
    let lastLine = '';
    for await (const chunk of res) {
      const text = (chunk as Buffer).toString('latin1');
      bytes += chunk.length;
      for (let at = text.indexOf('\n'); at >= 0; at = text.indexOf('\n', at + 1)) lines++;
      lastLine = (lastLine + text).slice(-200);
      // The heap that is live (after a collection) every so often while the rows flow.
      if (++chunks % 50 === 0) peakLiveHeap = Math.max(peakLiveHeap, liveHeap());
    }
    const rssAfter = process.memoryUsage().rss;
    const heapAfter = liveHeap();
    console.info(
      `200,000-call CSV export: ${(bytes / 1e6).toFixed(1)} MB sent in ${chunks} chunks; live heap ${(heapBefore / 1e6).toFixed(1)} → peak ${(peakLiveHeap / 1e6).toFixed(1)} → after ${(heapAfter / 1e6).toFixed(1)} MB; RSS ${(rssBefore / 1e6).toFixed(0)} → ${(rssAfter / 1e6).toFixed(0)} MB`,
    );
    expect(lines).toBe(CALLS + 1);
    expect(lastLine).toMatch(/bulk-199999,.*\r\n$/);
    expect(bytes).toBeGreaterThan(40e6);
    // Buffered, the export would hold its 40+ MB of text (and its rows) at once.
    expect(peakLiveHeap - heapBefore).toBeLessThan(16e6);
    expect(heapAfter - heapBefore).toBeLessThan(8e6);
  });

  it('a client gone after the first bytes stops the reads: the export is not finished for nobody', async () => {
    pagesRead = 0;
    const res = await openExport('/api/v1/exports/usage.json', o.auth);
    expect(res.statusCode).toBe(403); // Free has CSV only: the JSON refusal costs no read.
    res.resume();
    expect(pagesRead).toBe(0);

    const csv = await openExport('/api/v1/exports/usage.csv', o.auth);
    const first: Buffer = await new Promise((resolve) => csv.once('data', resolve));
    expect(first.toString().startsWith('time,request_id')).toBe(true);
    csv.destroy();
    // Wait for the reads to settle (the page in flight ends), then check they stay put.
    let settled = -1;
    for (let tries = 0; tries < 50 && settled !== pagesRead; tries++) {
      settled = pagesRead;
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 300));
    expect(pagesRead).toBe(settled);
    // The whole export reads ~200 pages; a page in flight and the read-ahead are all a gone client costs.
    expect(pagesRead).toBeLessThanOrEqual(8);
  });

  it('stalled exports are capped per account (429 with Retry-After past 3), each holding a page or two, none reading on', async () => {
    const gc = runInNewContext('gc') as () => void;
    const liveHeap = () => {
      gc();
      return process.memoryUsage().heapUsed;
    };
    pagesRead = 0;
    const heapBefore = liveHeap();
    // A client that reads the first bytes and stops, as many times as it likes.
    const stalled = await Promise.all(Array.from({ length: EXPORTS_PER_ACCOUNT + 3 }, () => openExport('/api/v1/exports/usage.csv', o.auth)));
    try {
      const statuses = stalled.map((a) => a.statusCode);
      expect(statuses.filter((s) => s === 200)).toHaveLength(EXPORTS_PER_ACCOUNT);
      expect(statuses.filter((s) => s === 429)).toHaveLength(3);
      const refused = stalled.find((a) => a.statusCode === 429) as IncomingMessage;
      expect(refused.headers['retry-after']).toMatch(/^\d+$/);
      const problem = JSON.parse(
        await new Promise<string>((resolve) => {
          let body = '';
          refused.on('data', (c: Buffer) => (body += c.toString())).on('end', () => resolve(body));
        }),
      );
      expect(problem).toMatchObject({ status: 429, code: 'too_many_exports' });
      const running = stalled.filter((a) => a.statusCode === 200);
      await Promise.all(running.map((a) => new Promise((resolve) => a.once('data', resolve))));
      for (const a of running) a.pause();
      let settled = -1;
      for (let tries = 0; tries < 30 && settled !== pagesRead; tries++) {
        settled = pagesRead;
        await new Promise((r) => setTimeout(r, 100));
      }
      const heapHeld = liveHeap() - heapBefore;
      console.info(`${running.length} stalled exports: ${pagesRead} pages read, ${(heapHeld / 1e6).toFixed(1)} MB of live heap held (server and client)`);
      // Over TCP the kernel's socket buffers take a few MB of each (loopback autotuning); the process holds a page or two
      // of each (~230 KB a page here), not its 45 MB.
      expect(heapHeld).toBeLessThan(EXPORTS_PER_ACCOUNT * 4e6);
      // The whole export is ~196 pages: each stopped far before it.
      expect(pagesRead).toBeLessThan(EXPORTS_PER_ACCOUNT * 50);
      // Another owner is not held back by this one's exports.
      const other = await ownerOn(t, 'free');
      expect((await get('/api/v1/exports/usage.csv', other.auth)).statusCode).toBe(200);
      // A finished or abandoned export gives its place back.
      running[0]?.destroy();
      let again = 429;
      for (let tries = 0; tries < 50 && again === 429; tries++) {
        await new Promise((r) => setTimeout(r, 50));
        again = (await get('/api/v1/exports/usage.csv?start=2000-01-01&end=2000-01-02', o.auth)).statusCode;
      }
      expect(again).toBe(200);
    } finally {
      for (const a of stalled) a.destroy();
    }
  });
});

describe('periods and parameters', () => {
  let o: Awaited<ReturnType<typeof ownerOn>>;
  let tokenId: string;
  let foreignTokenId: string;
  const midnight = Math.floor(Date.now() / DAY) * DAY - DAY;

  beforeAll(async () => {
    o = await ownerOn(t, 'professional');
    tokenId = await createToken(t, o, { name: 'periods' });
    const other = await ownerOn(t, 'professional');
    foreignTokenId = await createToken(t, other, { name: 'someone else' });
    const calls = usageCalls('edge', o, tokenId);
    // Just before, at and just after 00:00 UTC.
    for (const at of [midnight - 1, midnight, midnight + 1, midnight + DAY - 1]) calls.add(at);
    await recordUsage(t.runtime, calls.records);
  });

  it('UTC day boundaries: start is included, end is not; a bare date is midnight UTC', async () => {
    const ids = async (query: string) => ((await get(`/api/v1/exports/usage.json?${query}`, o.auth)).json().rows as Array<{ time: string }>).map((r) => r.time);
    const day = iso(midnight).slice(0, 10);
    const next = iso(midnight + DAY).slice(0, 10);
    expect(await ids(`start=${day}&end=${next}`)).toEqual([iso(midnight), iso(midnight + 1), iso(midnight + DAY - 1)]);
    expect(await ids(`start=${iso(midnight - 60_000)}&end=${iso(midnight)}`)).toEqual([iso(midnight - 1)]);
    // An offset is the same instant: 01:00+01:00 is midnight UTC.
    const plusOne = `${day}T01:00:00%2B01:00`;
    expect(await ids(`start=${plusOne}&end=${next}`)).toEqual([iso(midnight), iso(midnight + 1), iso(midnight + DAY - 1)]);
  });

  it('bad values are a 400 validation_failed naming the parameter, on every format; never a 500', async () => {
    const cases: Array<[string, string]> = [
      [`start=${iso(midnight)}&end=${iso(midnight - HOUR)}`, 'end'],
      [`start=${iso(midnight)}&end=${iso(midnight)}`, 'end'],
      ['start=yesterday', 'start'],
      ['start=2026-01-01T00:00:00', 'start'],
      ['end=10000-01-01T00:00:00Z', 'end'],
      ['end=0000-01-01T00:00:00%2B23:59', 'end'],
      [`end=${iso(Date.now() + 3 * DAY)}`, 'end'],
      [`start=${iso(Date.now() + HOUR)}`, 'start'],
      ['chain=eth%0d%0aSet-Cookie:%20x=1', 'chain'],
      ['method=', 'method'],
      [`method=${'m'.repeat(201)}`, 'method'],
      ['format=json', ''],
      [`token=${tokenId}`, ''],
      ['start=2026-01-01&start=2026-01-02', 'start'],
    ];
    for (const format of ['csv', 'json', 'pdf']) {
      for (const [query, parameter] of cases) {
        const res = await get(`/api/v1/exports/usage.${format}?${query}`, o.auth);
        expect([format, query, res.statusCode, res.headers['content-type']]).toEqual([
          format,
          query,
          400,
          expect.stringMatching(/^application\/problem\+json/),
        ]);
        expect(res.json().code).toBe('validation_failed');
        if (parameter) expect(res.json().detail).toMatch(new RegExp(`^query\\.${parameter}: `));
        expect(res.headers['content-disposition']).toBeUndefined();
      }
    }
  });

  it('exports take no token filter: another account’s token is refused exactly as one’s own, telling nothing of it', async () => {
    const own = await get(`/api/v1/exports/usage.csv?token=${tokenId}`, o.auth);
    const foreign = await get(`/api/v1/exports/usage.csv?token=${foreignTokenId}`, o.auth);
    const unknown = await get('/api/v1/exports/usage.csv?token=tok_doesnotexist', o.auth);
    expect([own.statusCode, foreign.statusCode, unknown.statusCode]).toEqual([400, 400, 400]);
    const shape = (body: string) => body.replaceAll(tokenId, 'ID').replaceAll(foreignTokenId, 'ID').replaceAll('tok_doesnotexist', 'ID');
    expect(shape(foreign.body)).toBe(shape(own.body));
    expect(shape(unknown.body)).toBe(shape(own.body));
  });

  it('huge ranges and ranges past the retention are answered, clamped or empty, not refused', async () => {
    const whole = await get('/api/v1/exports/usage.json?start=0000-01-01T00:00:00Z', o.auth);
    expect(whole.statusCode).toBe(200);
    expect(whole.json().retention).toMatchObject({ retentionDays: 90, clamped: true });
    expect(whole.json().rows).toHaveLength(4);
    const before = await get('/api/v1/exports/usage.csv?start=2000-01-01&end=2000-02-01', o.auth);
    expect(before.statusCode).toBe(200);
    expect(parseCsvStrict(before.body)).toHaveLength(1);
    const beforeJson = (await get('/api/v1/exports/usage.json?start=2000-01-01&end=2000-02-01', o.auth)).json();
    expect(beforeJson.rows).toEqual([]);
    expect(beforeJson.period.start).toBe(beforeJson.period.end);
    expect((await get('/api/v1/exports/usage.pdf?start=0000-01-01T00:00:00Z&end=9999-01-01', o.auth)).statusCode).toBe(400);
    expect((await get('/api/v1/exports/usage.pdf?start=0000-01-01T00:00:00Z', o.auth)).statusCode).toBe(200);
  });

  it('the format is the path’s: an Accept header does not change it', async () => {
    const csv = await get('/api/v1/exports/usage.csv', { ...o.auth, accept: 'application/json' });
    expect(csv.statusCode).toBe(200);
    expect(csv.headers['content-type']).toBe('text/csv; charset=utf-8; header=present');
    expect(parseCsvStrict(csv.body)[0]?.[0]).toBe('time');
    const json = await get('/api/v1/exports/usage.json', { ...o.auth, accept: 'text/csv' });
    expect(json.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(json.json().rows).toHaveLength(4);
  });

  it('file names are safe whatever the method filter or the token names hold: one ASCII attachment name, no header split', async () => {
    await createToken(t, o, { name: '"; filename="evil.exe 调用 🚀', description: 'x"\\; y' });
    for (const method of ['a"b', 'x\r\nSet-Cookie: a=1', '调用合约', '🚀', '../../etc/passwd', 'eth_call; filename=evil.exe']) {
      for (const format of ['csv', 'json', 'pdf']) {
        const res = await get(`/api/v1/exports/usage.${format}?method=${encodeURIComponent(method)}`, o.auth);
        expect([method, format, res.statusCode]).toEqual([method, format, 200]);
        expect(res.headers['content-disposition']).toMatch(/^attachment; filename="usage-[0-9T-]+-[0-9T-]+-method-[A-Za-z0-9._-]+\.(csv|json|pdf)"$/);
        expect(res.headers['set-cookie']).toBeUndefined();
        expect(res.headers['content-disposition']?.match(/filename=/g)).toHaveLength(1);
        for (const value of Object.values(res.headers)) expect(String(value)).not.toMatch(/调|🚀|[\r\n]|filename="evil/);
      }
    }
  });
});

describe('PDF: CJK, right-to-left and emoji text', () => {
  it('is written as code points the standard font can draw, never as wrong Latin glyphs', async () => {
    const o = await ownerOn(t, 'professional');
    const tokenId = await createToken(t, o, { name: 'unicode' });
    const calls = usageCalls('pdf', o, tokenId);
    const at = Math.floor(Date.now() / MIN) * MIN - 20 * MIN;
    calls.add(at, { method: '调用', status: 200, rpcErrorCode: -32601, errorMessage: 'مرحبا 🚀 failed' });
    calls.add(at + 1000, { method: 'café_ñ' });
    await recordUsage(t.runtime, calls.records);
    for (const query of ['', `?method=${encodeURIComponent('调用')}`]) {
      const res = await get(`/api/v1/exports/usage.pdf${query}`, o.auth);
      expect(res.statusCode).toBe(200);
      expect(res.rawPayload.subarray(0, 5).toString()).toBe('%PDF-');
      const text = pdfText(res.rawPayload);
      // The method in the methods and errors tables (and in the heading when filtered on it), exact.
      expect(text).toContain('[U+8C03][U+7528]');
      // One cell, drawn in more than one text run.
      expect(text.replaceAll('\n', '')).toContain('[U+0645][U+0631][U+062D][U+0628][U+0627] [U+1F680] failed');
      if (query) expect(text).toContain('method [U+8C03][U+7528]');
      else expect(text).toContain('café_ñ');
      // Nothing but what the font draws (WinAnsi bytes, read here as Latin-1): no control bytes.
      expect(text.replaceAll('\n', '')).toMatch(/^[\x20-\xff]*$/);
    }
  });
});
