import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main as cli } from '../../src/cli/main.js';
import { startExpiryScheduler } from '../../src/commands/expiryScheduler.js';
import { type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { encodeUsageBatch, USAGE_BATCH_EVENT_TYPE, usageBatchEventId } from '../../src/domain/usageBatch.js';
import type { RangeOptions } from '../../src/infra/readmodels/port.js';
import { USAGE_METRICS } from '../../src/projections/usageMetrics.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { textSink } from '../support/textSink.js';
import { recordedCalls } from '../support/usageLog.js';

/**
 * An auditor's checks on the embedded default, over real HTTP and the operator CLI: a token's
 * history replays every change (API, CLI, expiry) in order with its time, both views alike; the
 * usage served (singles, a batch, refusals, invalid calls, node errors) reconciles across the CSV
 * and JSON exports, the metrics API and the token list, on both sides of a month's first
 * midnight; exports are stable and never hold part of a request.
 *
 * The whole process runs on a clock set to 2026-11-30 23:30 UTC, moving at the real rate: the
 * service gets it as its injected `now`, and the gateway (which reads Date.now) through Date.
 */

const RealDate = Date;
let shiftMs = 0;
/** From now on the process's clock reads `ms`, and runs on at the real rate. */
const setClock = (ms: number): void => {
  shiftMs = ms - RealDate.now();
};
class ShiftedDate extends RealDate {
  constructor(...args: unknown[]) {
    if (args.length === 0) super(RealDate.now() + shiftMs);
    else super(...(args as [string | number | Date]));
  }
  static override now(): number {
    return RealDate.now() + shiftMs;
  }
  static override [Symbol.hasInstance](value: unknown): boolean {
    return value instanceof RealDate;
  }
}
/** When set, what the management API and read queries take as now (a read "as of" an instant); the gateway keeps the clock. */
let apiClockPin: number | null = null;

const NOV_30_2330 = Date.parse('2026-11-30T23:30:00.000Z');
const DEC_1 = Date.parse('2026-12-01T00:00:00.000Z');
const DEC_2 = Date.parse('2026-12-02T00:00:00.000Z');
const NOV = { start: '2026-11-01T00:00:00.000Z', end: '2026-12-01T00:00:00.000Z' };
const DEC = { start: '2026-12-01T00:00:00.000Z' };

let fake: FakeUpstream;
let t: TestApp;
let base = '';
const env = (): Record<string, string> => ({ UPSTREAM_ETH: fake.url, UPSTREAM_BSC: fake.url });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function open(dataDir?: string): Promise<void> {
  t = await startTestApp({ ...(dataDir ? { dataDir } : {}), now: () => new Date(apiClockPin ?? Date.now()), env: env() });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
}

beforeAll(async () => {
  vi.stubGlobal('Date', ShiftedDate);
  setClock(NOV_30_2330);
  fake = await startEvmFake();
  await open();
});
afterAll(async () => {
  await t?.close();
  await fake?.close();
  vi.unstubAllGlobals();
});

// ── HTTP, CLI and waiting helpers ──────────────────────────────────────────────────────────

interface Owner {
  accountId: string;
  auth: Record<string, string>;
}

async function api(o: Owner, method: string, path: string, body?: unknown): Promise<{ status: number; json: () => unknown; text: string }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...o.auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) };
}

async function ownerOn(plan: string): Promise<Owner> {
  const o = await owner(t.app);
  const set = await t.app.inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${o.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan },
  });
  expect(set.statusCode).toBe(200);
  return o;
}

interface Created {
  id: string;
  token: string;
  expires_at: string | null;
}
async function createToken(o: Owner, fields: Record<string, unknown>): Promise<Created> {
  const res = await api(o, 'POST', '/api/v1/tokens', fields);
  expect(res.status, res.text).toBe(201);
  return res.json() as Created;
}

const rpc = (token: string, body: unknown, chain = 'eth') =>
  fetch(`${base}/${chain}/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const call = (id: number, method: string, params: unknown[] = []) => ({ jsonrpc: '2.0', id, method, params });

/** Everything served so far is in the log and projected. */
async function settled(): Promise<void> {
  await t.runtime.ingester?.whenDrained();
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}

async function runCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = textSink();
  const stderr = textSink();
  const code = await cli(args, { stdout: stdout.stream, stderr: stderr.stream, env: { DATA_DIR: t.dataDir, LOCAL_DEVNET: 'off', ...env() } });
  return { code, stdout: stdout.text(), stderr: stderr.text() };
}
const jsonLines = (text: string): unknown[] =>
  text
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));

/** RFC 4180 rows (CRLF records, quoted fields), header first. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') {
      row.push(field);
      field = '';
    } else if (c === '\r' && text[i + 1] === '\n') {
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
      i++;
    } else field += c;
  }
  return rows;
}

interface ExportRow {
  time: string;
  request_id: string;
  token_id: string;
  chain: string;
  method: string;
  status: number;
  outcome: string;
  rpc_error_code: number | null;
  charged: boolean;
  cache: string | null;
}
/** The CSV's rows as the JSON export types them (the columns both share). */
const csvRows = (text: string): ExportRow[] => {
  const [header = [], ...rows] = parseCsv(text);
  const at = (row: string[], name: string) => row[header.indexOf(name)] ?? '';
  return rows.map((r) => ({
    time: at(r, 'time'),
    request_id: at(r, 'request_id'),
    token_id: at(r, 'token_id'),
    chain: at(r, 'chain'),
    method: at(r, 'method'),
    status: Number(at(r, 'status')),
    outcome: at(r, 'outcome'),
    rpc_error_code: at(r, 'rpc_error_code') === '' ? null : Number(at(r, 'rpc_error_code')),
    charged: at(r, 'charged') === 'true',
    cache: at(r, 'cache') === '' ? null : at(r, 'cache'),
  }));
};
const sharedColumns = (r: ExportRow): ExportRow => ({
  time: r.time,
  request_id: r.request_id,
  token_id: r.token_id,
  chain: r.chain,
  method: r.method,
  status: r.status,
  outcome: r.outcome,
  rpc_error_code: r.rpc_error_code,
  charged: r.charged,
  cache: r.cache,
});
/** Each token's calls marked charged in an export: an auditor's "quota used" per token. */
const chargedOf = (rows: ExportRow[], tokenIds: string[]): Record<string, number> =>
  Object.fromEntries(tokenIds.map((id) => [id, rows.filter((r) => r.token_id === id && r.charged).length]));

const query = (period: { start: string; end?: string }, extra = ''): string => `?start=${period.start}${period.end ? `&end=${period.end}` : ''}${extra}`;

/** Requests, errors and (from the usage log, the only place that says it) charged calls of a set of records. */
const figures = (records: Array<Pick<UsageRecord, 'status' | 'rpcErrorCode'> & { charged?: boolean }>) => ({
  requests: records.length,
  errors: records.filter((r) => r.status >= 400 || r.rpcErrorCode !== null).length,
  charged: records.filter((r) => r.charged === true).length,
});

// ── the token's history ────────────────────────────────────────────────────────────────────

interface HistoryEvent {
  revision: number;
  type: string;
  at: string;
  recorded_at: string;
  state: Record<string, unknown>;
}

/** The history owner: three tokens, one revoked through the API, one changed by the CLI, one left to expire. */
let h: Owner;
let h1: Created;
let h2: Created;
let h3: Created;
/** For each of h1's changes: its event type and the clock before and after the call that made it. */
const h1Changes: Array<{ type: string; before: number; after: number }> = [];

/** The usage owner: A draws on the account, B has its own monthly limit of 2, C gets disabled. */
let u: Owner;
let a: Created;
let b: Created;
let c: Created;

describe('a token’s history: every change, in order, with its time', () => {
  it('API changes (create, rename, description, disable, enable, limits, revoke) each append one event with its time and the state after it', async () => {
    h = await ownerOn('professional');
    const changed = async (type: string, change: () => Promise<{ status: number; text: string }>, status = 200) => {
      const before = Date.now();
      const res = await change();
      expect(res.status, res.text).toBe(status);
      h1Changes.push({ type, before, after: Date.now() });
    };
    await changed(
      'ApiTokenCreated',
      async () => {
        const res = await api(h, 'POST', '/api/v1/tokens', { name: 'h1', description: 'first' });
        h1 = res.json() as Created;
        return res;
      },
      201,
    );
    await changed('ApiTokenRenamed', () => api(h, 'PATCH', `/api/v1/tokens/${h1.id}`, { name: 'h1 renamed' }));
    await changed('ApiTokenDescriptionChanged', () => api(h, 'PATCH', `/api/v1/tokens/${h1.id}`, { description: 'second' }));
    await changed('ApiTokenDisabled', () => api(h, 'PATCH', `/api/v1/tokens/${h1.id}`, { status: 'disabled' }));
    await changed('ApiTokenEnabled', () => api(h, 'PATCH', `/api/v1/tokens/${h1.id}`, { status: 'active' }));
    await changed('ApiTokenLimitsChanged', () => api(h, 'PATCH', `/api/v1/tokens/${h1.id}`, { monthly_limit: 1000, rate_limit: 10 }));
    // Changes that change nothing append nothing: the same name, the same limits, a second revoke.
    expect((await api(h, 'PATCH', `/api/v1/tokens/${h1.id}`, { name: 'h1 renamed', monthly_limit: 1000, rate_limit: 10 })).status).toBe(200);
    await changed('ApiTokenRevoked', () => api(h, 'DELETE', `/api/v1/tokens/${h1.id}`));
    expect((await api(h, 'DELETE', `/api/v1/tokens/${h1.id}`)).status).toBe(200);

    const history = (await api(h, 'GET', `/api/v1/tokens/${h1.id}/history`)).json() as { token_id: string; events: HistoryEvent[] };
    expect(history.token_id).toBe(h1.id);
    // The fields decisions.md promises: no actor (the events carry none, "Operator CLI"); every entry the token's own (no plan change in its life).
    for (const e of history.events) expect(Object.keys(e).sort()).toEqual(['at', 'kind', 'recorded_at', 'revision', 'state', 'type']);
    expect(history.events.map((e) => [e.revision, e.type])).toEqual(h1Changes.map((ch, i) => [i, ch.type]));
    history.events.forEach((e, i) => {
      const made = h1Changes[i] as { before: number; after: number };
      expect(Date.parse(e.at), e.type).toBeGreaterThanOrEqual(made.before);
      expect(Date.parse(e.at), e.type).toBeLessThanOrEqual(made.after);
      expect(Date.parse(e.recorded_at), e.type).toBeGreaterThanOrEqual(Date.parse(e.at));
      expect(Date.parse(e.recorded_at), e.type).toBeLessThanOrEqual(made.after);
    });
    expect(history.events.map((e) => [e.state['name'], e.state['description'], e.state['status'], e.state['monthly_limit'], e.state['rate_limit']])).toEqual([
      ['h1', 'first', 'active', null, null],
      ['h1 renamed', 'first', 'active', null, null],
      ['h1 renamed', 'second', 'active', null, null],
      ['h1 renamed', 'second', 'disabled', null, null],
      ['h1 renamed', 'second', 'active', null, null],
      ['h1 renamed', 'second', 'active', 1000, 10],
      ['h1 renamed', 'second', 'revoked', 1000, 10],
    ]);

    h2 = await createToken(h, { name: 'h2' });
    h3 = await createToken(h, { name: 'h3', expires_in_days: 1 });
    // Due a day after its creation: 23:30 on the 1st, before the clock moves past it below.
    expect(Date.parse(h3.expires_at ?? '') - Date.now()).toBeGreaterThan(86_400_000 - 60_000);
  });
});

// ── usage: a known mix, reconciled ─────────────────────────────────────────────────────────

describe('usage reconciles across the exports, the metrics and the token list', () => {
  it('a known mix of calls in November: each kind counted alike in every view, and as served', async () => {
    u = await ownerOn('professional');
    a = await createToken(u, { name: 'A' });
    b = await createToken(u, { name: 'B', monthly_limit: 2 });
    c = await createToken(u, { name: 'C' });
    expect((await api(u, 'PATCH', `/api/v1/tokens/${c.id}`, { status: 'disabled' })).status).toBe(200);

    const served: Array<[string, number]> = [];
    const serve = async (label: string, res: Promise<Response>) => {
      const r = await res;
      await r.text();
      served.push([label, r.status]);
    };
    await serve('A single', rpc(a.token, call(1, 'eth_blockNumber')));
    await serve('A single', rpc(a.token, call(2, 'eth_getBalance', ['0x90f8bf6a479f320ead074411a4b0e7944ea8c9c1', 'latest'])));
    await serve('A node error', rpc(a.token, call(3, 'eth_call', [{ to: '0x90f8bf6a479f320ead074411a4b0e7944ea8c9c1' }, 'latest'])));
    await serve('A batch', rpc(a.token, [call(4, 'eth_blockNumber'), { jsonrpc: '2.0', id: 5 }, call(6, 'eth_call', [{}, 'latest']), call(7, 'admin_peers')]));
    await serve('A invalid', rpc(a.token, { jsonrpc: '2.0', id: 8 }));
    await serve('A denied', rpc(a.token, call(9, 'admin_peers')));
    fake.mode = 'fail';
    await serve('A node failed', rpc(a.token, call(10, 'eth_sendRawTransaction', ['0x00'])));
    fake.mode = 'ok';
    await serve('A other chain', rpc(a.token, call(11, 'eth_chainId'), 'bsc'));
    await serve('B single', rpc(b.token, call(12, 'eth_blockNumber')));
    await serve('B single', rpc(b.token, call(13, 'eth_blockNumber')));
    await serve('B over its monthly limit', rpc(b.token, call(14, 'eth_blockNumber')));
    await serve('C disabled', rpc(c.token, call(15, 'eth_blockNumber')));
    // 401s are no one's usage: an unknown token, none at all, a revoked one.
    await serve('unknown token', rpc(`gk_${'x'.repeat(40)}`, call(16, 'eth_blockNumber')));
    await serve('no token', rpc('', call(17, 'eth_blockNumber')));
    await serve('revoked token', rpc(h1.token, call(18, 'eth_blockNumber')));
    expect(served.map(([, s]) => s)).toEqual([200, 200, 200, 200, 400, 403, 502, 200, 200, 200, 429, 403, 401, 401, 401]);
    await settled();

    const log = await recordedCalls(t.runtime.store, u.accountId);
    expect(await recordedCalls(t.runtime.store, h.accountId)).toEqual([]);
    // What was served, by kind: 15 calls metered (the batch is 4), 8 charged (not the call the node failed), 9 errors.
    const expected = {
      all: { requests: 15, errors: 9, charged: 8 },
      [a.id]: { requests: 11, errors: 7, charged: 6 },
      [b.id]: { requests: 3, errors: 1, charged: 2 },
      [c.id]: { requests: 1, errors: 1, charged: 0 },
    };
    expect(figures(log)).toEqual(expected.all);
    for (const id of [a.id, b.id, c.id]) expect(figures(log.filter((r) => r.tokenId === id)), id).toEqual(expected[id]);
    expect(log.filter((r) => r.requestId.includes(':')).map((r) => [r.method, r.rpcErrorCode, r.charged])).toEqual([
      ['eth_blockNumber', null, true],
      ['(invalid)', -32600, false],
      ['eth_call', 3, true],
      ['admin_peers', -32601, false],
    ]);

    const rows = await reconcileMonth({ start: NOV.start }, log, expected);
    // The token list's usage is the month's charged calls; the account's too.
    const list = (await api(u, 'GET', '/api/v1/tokens')).json() as { tokens: Array<{ id: string; current_month_usage: number }> };
    expect(Object.fromEntries(list.tokens.map((tk) => [tk.id, tk.current_month_usage]))).toEqual({ [a.id]: 6, [b.id]: 2, [c.id]: 0 });
    expect(((await api(u, 'GET', '/api/v1/account')).json() as { usage: { requests: number } }).usage.requests).toBe(8);
    // An auditor rebuilds both from the export alone: the limiter's 429 and the batch's invalid members are rows, not charged.
    expect(chargedOf(rows, [a.id, b.id, c.id])).toEqual(Object.fromEntries(list.tokens.map((tk) => [tk.id, tk.current_month_usage])));
    expect(rows.filter((r) => r.charged).length).toBe(8);
    expect(rows.filter((r) => r.token_id === b.id).map((r) => [r.status, r.charged])).toEqual([
      [200, true],
      [200, true],
      [429, false],
    ]);
  });

  it('calls just before and after 00:00 UTC on the 1st land in their month in every view, the limiter’s included', async () => {
    const port = new URL(base).port;
    // B has used its 2 for November. Its next call arrives at 23:59:59.6 and finishes sending its body after midnight.
    setClock(DEC_1 - 400);
    const slow = connect(Number(port), '127.0.0.1');
    const body = JSON.stringify(call(20, 'eth_blockNumber'));
    const answer = new Promise<string>((resolve, reject) => {
      let text = '';
      slow.on('data', (d) => {
        text += String(d);
      });
      slow.on('end', () => resolve(text));
      slow.on('error', reject);
    });
    slow.write(`POST /eth/${b.token} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`);
    const justBefore = await rpc(a.token, call(21, 'eth_blockNumber'));
    expect(justBefore.status).toBe(200);
    await justBefore.text();
    while (Date.now() < DEC_1 + 300) await sleep(20);
    slow.write(body);
    const slowAnswer = await answer;
    // It arrived in November: November's limit applies (and its record is November's).
    expect(slowAnswer.split('\r\n')[0]).toBe('HTTP/1.1 429 Too Many Requests');

    const afterA = await rpc(a.token, call(22, 'eth_blockNumber'));
    const afterB = await rpc(b.token, call(23, 'eth_blockNumber'));
    expect([afterA.status, afterB.status]).toEqual([200, 200]);
    // December's quota is whole: B's first call of the month leaves 1 of 2.
    expect(afterB.headers.get('x-monthlylimit-remaining')).toBe('1');
    await Promise.all([afterA.text(), afterB.text()]);
    await settled();

    const log = await recordedCalls(t.runtime.store, u.accountId);
    const nov = log.filter((r) => r.at < NOV.end);
    const dec = log.filter((r) => r.at >= NOV.end);
    expect(nov.slice(-2).map((r) => [r.tokenId, r.at < NOV.end, r.status, r.charged])).toEqual(
      expect.arrayContaining([
        [a.id, true, 200, true],
        [b.id, true, 429, false],
      ]),
    );
    expect(nov.every((r) => Date.parse(r.at) < DEC_1)).toBe(true);
    expect(dec.map((r) => [r.tokenId, r.status])).toEqual([
      [a.id, 200],
      [b.id, 200],
    ]);
    for (const r of [...nov.slice(-2), ...dec]) expect(Math.abs(Date.parse(r.at) - DEC_1)).toBeLessThan(2000);

    const novExpected = {
      all: { requests: 17, errors: 10, charged: 9 },
      [a.id]: { requests: 12, errors: 7, charged: 7 },
      [b.id]: { requests: 4, errors: 2, charged: 2 },
      [c.id]: { requests: 1, errors: 1, charged: 0 },
    };
    const decExpected = {
      all: { requests: 2, errors: 0, charged: 2 },
      [a.id]: { requests: 1, errors: 0, charged: 1 },
      [b.id]: { requests: 1, errors: 0, charged: 1 },
      [c.id]: { requests: 0, errors: 0, charged: 0 },
    };
    expect(figures(nov)).toEqual(novExpected.all);
    expect(figures(dec)).toEqual(decExpected.all);
    const novRows = await reconcileMonth(NOV, nov, novExpected);
    const decRows = await reconcileMonth(DEC, dec, decExpected);

    const usageNow = async () =>
      Object.fromEntries(
        ((await api(u, 'GET', '/api/v1/tokens')).json() as { tokens: Array<{ id: string; current_month_usage: number }> }).tokens.map((tk) => [
          tk.id,
          tk.current_month_usage,
        ]),
      );
    // Read as of November's last millisecond: its charged calls, the one just before midnight included.
    apiClockPin = DEC_1 - 1;
    try {
      expect(await usageNow()).toEqual({ [a.id]: 7, [b.id]: 2, [c.id]: 0 });
    } finally {
      apiClockPin = null;
    }
    expect(await usageNow()).toEqual({ [a.id]: 1, [b.id]: 1, [c.id]: 0 });
    // Each month's export says the same, the 429 that arrived at midnight included (a row, not charged).
    expect(chargedOf(novRows, [a.id, b.id, c.id])).toEqual({ [a.id]: 7, [b.id]: 2, [c.id]: 0 });
    expect(chargedOf(decRows, [a.id, b.id, c.id])).toEqual({ [a.id]: 1, [b.id]: 1, [c.id]: 0 });
    const metrics = (await api(u, 'GET', `/api/v1/metrics/user${query(DEC)}`)).json() as { limits: { used: number } };
    // The account's quota used is A's call alone: B has a monthly limit of its own, which the account's does not cover.
    expect(metrics.limits.used).toBe(1);
    expect(((await api(u, 'GET', '/api/v1/account')).json() as { usage: { requests: number } }).usage.requests).toBe(2);
  });
});

/**
 * One period's calls counted in each view: the CSV and JSON exports (the same rows, in the order
 * recorded), the metrics API's totals, per token and per chain. Returns the export's rows.
 */
async function reconcileMonth(
  period: { start: string; end?: string },
  log: UsageRecord[],
  expected: Record<string, { requests: number; errors: number; charged: number }>,
): Promise<ExportRow[]> {
  const csv = await api(u, 'GET', `/api/v1/exports/usage.csv${query(period)}`);
  const json = await api(u, 'GET', `/api/v1/exports/usage.json${query(period)}`);
  expect([csv.status, json.status]).toEqual([200, 200]);
  const rows = csvRows(csv.text);
  const jsonRows = (json.json() as { rows: ExportRow[] }).rows;
  expect(rows).toEqual(jsonRows.map(sharedColumns));
  // Exactly the calls served in the period, each once, in the order they were recorded (all in one hour here).
  expect(rows.map((r) => [r.request_id, r.time, r.status, r.rpc_error_code, r.charged, r.cache])).toEqual(
    log.map((r) => [r.requestId, r.at, r.status, r.rpcErrorCode, r.charged, r.cache ?? null]),
  );
  const exportErrors = rows.filter((r) => r.outcome === 'error').length;
  expect({ requests: rows.length, errors: exportErrors, charged: rows.filter((r) => r.charged).length }).toEqual(expected['all']);

  const metrics = (await api(u, 'GET', `/api/v1/metrics/user${query(period)}`)).json() as {
    totals: { requests: number; success: number; errors: number };
    byToken: Array<{ tokenId: string; requests: number; errors: number }>;
    byChain: Array<{ chain: string; requests: number }>;
  };
  const all = expected['all'] as { requests: number; errors: number };
  expect(metrics.totals).toMatchObject({ requests: all.requests, errors: all.errors, success: all.requests - all.errors });
  for (const [tokenId, e] of Object.entries(expected)) {
    if (tokenId === 'all' || e.requests === 0) continue;
    expect(
      metrics.byToken.find((x) => x.tokenId === tokenId),
      tokenId,
    ).toMatchObject({ requests: e.requests, errors: e.errors });
    expect(rows.filter((r) => r.token_id === tokenId).length).toBe(e.requests);
    expect(chargedOf(rows, [tokenId])[tokenId], tokenId).toBe(e.charged);
  }
  for (const chain of ['eth', 'bsc']) {
    const n = log.filter((r) => r.chain === chain).length;
    expect(metrics.byChain.find((x) => x.chain === chain)?.requests ?? 0, chain).toBe(n);
    const byChain = csvRows((await api(u, 'GET', `/api/v1/exports/usage.csv${query(period, `&chain=${chain}`)}`)).text);
    expect(byChain.map((r) => r.request_id)).toEqual(rows.filter((r) => r.chain === chain).map((r) => r.request_id));
    const chainTotals = (await api(u, 'GET', `/api/v1/metrics/user${query(period, `&chain=${chain}`)}`)).json() as { totals: { requests: number } };
    expect(chainTotals.totals.requests).toBe(n);
  }
  return rows;
}

// ── expiry, then the CLI's changes and views ───────────────────────────────────────────────

describe('expiry and the operator CLI', () => {
  it('expiry is in the history at the token’s expiry time, recorded when the scheduler saw it', async () => {
    setClock(DEC_2 + 30_000);
    const expiry = startExpiryScheduler(t.runtime.queries, t.runtime.commands, { intervalMs: 3_600_000 });
    try {
      expect(await expiry.runOnce()).toBe(1);
    } finally {
      expiry.stop();
    }
    const events = ((await api(h, 'GET', `/api/v1/tokens/${h3.id}/history`)).json() as { events: HistoryEvent[] }).events;
    expect(events.map((e) => [e.type, e.state['status']])).toEqual([
      ['ApiTokenCreated', 'active'],
      ['ApiTokenExpired', 'expired'],
    ]);
    const expired = events[1] as HistoryEvent;
    expect(expired.at).toBe(h3.expires_at);
    expect(Date.parse(expired.recorded_at)).toBeGreaterThanOrEqual(DEC_2 + 30_000);
  });

  it('CLI changes and plan set: the API’s and the CLI’s histories agree event by event; the CLI’s views agree with the API’s', async () => {
    const historyOf = async (id: string) => ((await api(h, 'GET', `/api/v1/tokens/${id}/history`)).json() as { events: HistoryEvent[] }).events;
    const before = { h1: await historyOf(h1.id), h2: await historyOf(h2.id), h3: await historyOf(h3.id) };
    const apiViews = {
      tokens: (await api(u, 'GET', '/api/v1/tokens')).json() as { tokens: Array<{ id: string; current_month_usage: number }> },
      novCsv: (await api(u, 'GET', `/api/v1/exports/usage.csv${query(NOV)}`)).text,
      novJson: (await api(u, 'GET', `/api/v1/exports/usage.json${query(NOV)}`)).json() as { period: unknown; rows: unknown[] },
      bscCsv: (await api(u, 'GET', `/api/v1/exports/usage.csv${query(NOV, '&chain=bsc')}`)).text,
    };
    const dataDir = t.dataDir;
    await t.close({ keepData: true });
    let reopened = false;
    const changes: Array<{ type: string; before: number; after: number }> = [];
    try {
      for (const [args, type] of [
        [['tokens', 'disable', h2.id], 'ApiTokenDisabled'],
        [['tokens', 'enable', h2.id], 'ApiTokenEnabled'],
        [['tokens', 'revoke', h2.id], 'ApiTokenRevoked'],
      ] as const) {
        const at = Date.now();
        expect(await runCli([...args])).toMatchObject({ code: 0 });
        changes.push({ type, before: at, after: Date.now() });
      }
      expect((await runCli(['plan', 'set', h.accountId, 'developer'])).code).toBe(0);
      // The CLI's own views of usage: the same figures as the API's.
      const listed = jsonLines((await runCli(['tokens', 'list', '--account', u.accountId, '--json'])).stdout) as Array<{
        id: string;
        current_month_usage: number;
      }>;
      expect(Object.fromEntries(listed.map((tk) => [tk.id, tk.current_month_usage]))).toEqual(
        Object.fromEntries(apiViews.tokens.tokens.map((tk) => [tk.id, tk.current_month_usage])),
      );
      expect(JSON.parse((await runCli(['accounts', 'show', u.accountId, '--json'])).stdout)).toMatchObject({ requests_this_month: 2 });
      const csv = await runCli(['usage', 'export', '--account', u.accountId, '--from', NOV.start, '--to', NOV.end]);
      expect(csv.stdout).toBe(apiViews.novCsv);
      const json = JSON.parse((await runCli(['usage', 'export', '--account', u.accountId, '--from', NOV.start, '--to', NOV.end, '--format', 'json'])).stdout);
      expect({ period: json.period, rows: json.rows }).toEqual({ period: apiViews.novJson.period, rows: apiViews.novJson.rows });
      expect((await runCli(['usage', 'export', '--account', u.accountId, '--from', NOV.start, '--to', NOV.end, '--chain', 'bsc'])).stdout).toBe(
        apiViews.bscCsv,
      );

      const cliHistory = async (id: string) => {
        const json = jsonLines((await runCli(['history', id, '--json'])).stdout) as Array<HistoryEvent & { position: unknown }>;
        const text = (await runCli(['history', id])).stdout.trim().split('\n');
        // The text lines say the same events at the same times.
        expect(text.map((line) => line.split(/\s+/).slice(0, 3))).toEqual(json.map((e) => [e.at, `#${e.revision}`, e.type]));
        return json.map(({ position: _position, ...e }) => e);
      };
      const cliViews = { h1: await cliHistory(h1.id), h2: await cliHistory(h2.id), h3: await cliHistory(h3.id) };
      await open(dataDir);
      reopened = true;
      const after = { h1: await historyOf(h1.id), h2: await historyOf(h2.id), h3: await historyOf(h3.id) };
      // The CLI's changes are in the API's history, after the API's, each with its time.
      expect(after.h2.slice(0, before.h2.length)).toEqual(before.h2);
      const added = after.h2.slice(before.h2.length);
      expect(added.map((e) => [e.type, e.state['status']])).toEqual([
        ['ApiTokenDisabled', 'disabled'],
        ['ApiTokenEnabled', 'active'],
        ['ApiTokenRevoked', 'revoked'],
      ]);
      added.forEach((e, i) => {
        const made = changes[i] as { before: number; after: number };
        expect(Date.parse(e.at)).toBeGreaterThanOrEqual(made.before);
        expect(Date.parse(e.at)).toBeLessThanOrEqual(made.after);
      });
      // A plan change after a token's end (all three are revoked or expired) is not in its history.
      expect([after.h1, after.h3]).toEqual([before.h1, before.h3]);
      expect(((await api(h, 'GET', '/api/v1/account')).json() as { plan: { id: string } }).plan.id).toBe('developer');
      // Event by event, the two views say the same: revision, type, time, recorded time and the state after it.
      expect(cliViews).toEqual(after);
      for (const events of Object.values(after)) {
        for (let i = 1; i < events.length; i++) expect((events[i] as HistoryEvent).at >= (events[i - 1] as HistoryEvent).at).toBe(true);
      }
    } finally {
      if (!reopened) await open(dataDir);
    }
  });
});

// ── exports: complete and stable ───────────────────────────────────────────────────────────

describe('exports are complete and stable', () => {
  const OLD_CALLS = 64 * 40;
  let e: Owner;
  let token: Created;

  beforeAll(async () => {
    e = await ownerOn('unlimited');
    token = await createToken(e, { name: 'exported' });
    // 2,560 calls of the last hour in 40 documents, appended as the ingester does: an export reads them in several pages.
    const start = DEC_2 + 60_000 - 3_600_000;
    const records = (from: number): UsageRecord[] =>
      Array.from({ length: 64 }, (_, j) => ({
        requestId: `old-${from + j}`,
        at: new RealDate(start + (from + j) * 1000).toISOString(),
        accountId: e.accountId,
        tokenId: token.id,
        chain: 'eth',
        method: 'eth_getBalance',
        status: 200,
        rpcErrorCode: null,
        errorMessage: null,
        totalMs: 2,
        upstreamMs: 1,
        clientIp: '192.0.2.7',
        upstream: 'eth-1',
        charged: true,
      }));
    for (let from = 0; from < OLD_CALLS; from += 64) {
      const batch = records(from);
      await t.runtime.store.append(
        usageStream(e.accountId),
        [{ id: usageBatchEventId(batch), type: USAGE_BATCH_EVENT_TYPE, data: { ...encodeUsageBatch(e.accountId, batch, from) } }],
        'any',
      );
    }
    await settled();
  });

  it('a request served during an export is in it whole or not at all; the same export twice is the same bytes', async () => {
    // Early in a minute: the export's period (to the end of this minute) holds the calls served while it runs.
    setClock(DEC_2 + 5 * 60_000 + 5_000);
    const batchOf = (first: number) => Array.from({ length: 100 }, (_, i) => call(first + i, 'eth_chainId'));
    const served = async (res: Promise<Response>): Promise<string | null> => {
      const r = await res;
      expect(r.status).toBe(200);
      await r.text();
      return r.headers.get('x-request-id');
    };
    // Between the export's reads of raw rows: after its first page a 100-call batch is served and
    // projected; during its second another one is served, not waited for.
    const rm = t.runtime.readModels;
    const range = rm.range.bind(rm);
    let reads = 0;
    // Who read, for the message of a failure (seen once in CI, never reproduced: issue notes).
    const readers: string[] = [];
    let duringId: string | null = null;
    let racing: Promise<string | null> | null = null;
    rm.range = (async (collection: string, options?: RangeOptions) => {
      const page = await range(collection, options);
      if (collection === USAGE_METRICS.requestBlocks && options?.gte?.startsWith(`${e.accountId}/`)) {
        reads++;
        readers.push(`${options.gte} ${new Error().stack?.split('\n').slice(2, 5).join(' < ')}`);
        if (reads === 1) {
          duringId = await served(rpc(token.token, batchOf(1000)));
          await settled();
        } else if (reads === 2) racing = served(rpc(token.token, batchOf(2000)));
      }
      return page;
    }) as typeof rm.range;
    let text: string;
    try {
      text = (await api(e, 'GET', `/api/v1/exports/usage.csv?start=${DEC.start}`)).text;
    } finally {
      rm.range = range;
    }
    expect(reads).toBeGreaterThan(2);
    const racingId = await racing;
    const rows = csvRows(text);
    const membersOf = (id: string | null) => rows.filter((r) => r.request_id.startsWith(`${id}:`)).length;
    if (membersOf(duringId) !== 100) {
      const logged = (await recordedCalls(t.runtime.store, e.accountId)).filter((r) => r.requestId.startsWith(`${duringId}:`));
      const first = logged[0];
      const message = { duringId, logged: logged.length, at: first?.at, exported: rows.length, readers };
      expect.fail(`the batch served during the export is not in it: ${JSON.stringify(message, null, 1)}`);
    }
    expect([0, 100]).toContain(membersOf(racingId));
    expect(rows.filter((r) => r.request_id.startsWith('old-')).length).toBe(OLD_CALLS);
    expect(new Set(rows.map((r) => r.request_id)).size).toBe(rows.length);

    await settled();
    const end = new RealDate(Math.ceil((Date.now() + 1) / 60_000) * 60_000).toISOString();
    const again = async () => (await api(e, 'GET', `/api/v1/exports/usage.csv${query({ start: DEC.start, end })}`)).text;
    const once = await again();
    expect(await again()).toBe(once);
    expect(csvRows(once).length).toBe(OLD_CALLS + 200);
    const json = async () => (await api(e, 'GET', `/api/v1/exports/usage.json${query({ start: DEC.start, end })}`)).json() as { rows: ExportRow[] };
    const [j1, j2] = [await json(), await json()];
    expect(j1.rows).toEqual(j2.rows);
    expect(j1.rows.map(sharedColumns)).toEqual(csvRows(once));
  });

  it('period bounds: the period is rounded to whole minutes (start down, end up), the JSON says which, and rows are exactly those in it', async () => {
    const log = (await recordedCalls(t.runtime.store, e.accountId)).filter((r) => r.requestId.startsWith('old-'));
    // A call in the middle of a minute: bounds at its own time.
    const target = log.find((r) => new RealDate(r.at).getUTCSeconds() === 30) as UsageRecord;
    const at = Date.parse(target.at);
    const minute = Math.floor(at / 60_000) * 60_000;
    const inMinute = log.filter((r) => Date.parse(r.at) >= minute && Date.parse(r.at) < minute + 60_000).map((r) => r.requestId);
    const exported = async (start: number, end: number) => {
      const body = (
        await api(e, 'GET', `/api/v1/exports/usage.json?start=${new RealDate(start).toISOString()}&end=${new RealDate(end).toISOString()}`)
      ).json() as {
        period: { start: string; end: string };
        rows: ExportRow[];
      };
      return { period: body.period, ids: body.rows.map((r) => r.request_id) };
    };
    // `start` at the call: the whole minute from its start; `end` at the call: up to the minute's end.
    expect(await exported(at, at + 1)).toEqual({
      period: { start: new RealDate(minute).toISOString(), end: new RealDate(minute + 60_000).toISOString() },
      ids: inMinute,
    });
    // Aligned bounds: start inclusive, end exclusive.
    expect((await exported(minute, minute + 60_000)).ids).toEqual(inMinute);
    expect((await exported(minute + 60_000, minute + 120_000)).ids).not.toContain(target.requestId);
    // The CLI says the same of the same bounds.
    const dataDir = t.dataDir;
    await t.close({ keepData: true });
    try {
      const out = await runCli([
        'usage',
        'export',
        '--account',
        e.accountId,
        '--from',
        new RealDate(at).toISOString(),
        '--to',
        new RealDate(at + 1).toISOString(),
        '--format',
        'json',
      ]);
      const body = JSON.parse(out.stdout) as { period: { start: string; end: string }; rows: ExportRow[] };
      expect(body.period).toEqual({ start: new RealDate(minute).toISOString(), end: new RealDate(minute + 60_000).toISOString() });
      expect(body.rows.map((r) => r.request_id)).toEqual(inMinute);
      const help = await runCli(['usage', 'export', '--help']);
      expect(help.stdout).toMatch(/--from <time>\s+from this time, rounded down to the minute .*; inclusive/);
      expect(help.stdout).toMatch(/--to <time>\s+until this time, rounded up to the minute .*; exclusive/);
    } finally {
      await open(dataDir);
    }
  });
});
