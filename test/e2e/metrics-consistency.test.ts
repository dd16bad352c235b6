import createClient from 'openapi-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components, paths } from '../../clients/typescript/schema.js';
import type { ExportRow } from '../../src/commands/api/exports/rows.js';
import { histogramIndex, LATENCY_BOUNDS_MS } from '../../src/projections/usageHistogram.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { ownerOn } from '../support/planOwner.js';
import { type ServedDocument, servedOpenApi } from '../support/servedOpenApi.js';
import { listen, startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { type Counts, countsOf, sumCounts, sumOf } from '../support/usageFigures.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * The metrics API as an integrator reads it, against a real service (ganache behind the
 * gateway): a known mix of calls (three tokens, three chains, successes, node errors, denied
 * and invalid calls, rate-limit and quota 429s) must tell one story in every figure: the
 * breakdowns add up to the totals, minute, hour and day series to each other, the error
 * groups to the errors, the percentiles stay within the latencies served, the quota figures
 * (token list, account, metrics limits) agree with the export's `charged` column; and every
 * edge of the parameters is a documented answer (ajv against the served openapi.json), never a 500.
 * What metrics-api.test.ts checks figure by figure is not repeated here.
 */

type Schemas = components['schemas'];
type UserMetrics = Schemas['UserMetrics'];
type TokenMetrics = Schemas['TokenMetrics'];
type Figures = Schemas['UsageFigures'];

const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
const iso = (ms: number) => new Date(ms).toISOString();

let node: GanacheNode;
let t: TestApp;
let baseUrl: string;
let client: ReturnType<typeof createClient<paths>>;
let doc: ServedDocument;
let conforms: ReturnType<typeof servedOpenApi>['conforms'];

beforeAll(async () => {
  node = await startGanache();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, UPSTREAM_ETH: node.url, UPSTREAM_BSC: node.url } });
  baseUrl = (await listen(t)).url;
  client = createClient<paths>({ baseUrl });
  // The document as the service serves it (the committed client is checked against it elsewhere).
  const served = await fetch(`${baseUrl}/api/v1/openapi.json`);
  ({ doc, conforms } = servedOpenApi(await served.text()));
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

const headersOf = (o: { auth: Record<string, string> }) => o.auth;

async function userMetrics(o: { auth: Record<string, string> }, query: Record<string, string> = {}): Promise<UserMetrics> {
  const res = await client.GET('/api/v1/metrics/user', { headers: headersOf(o), params: { query } });
  expect(res.response.status, JSON.stringify(res.error)).toBe(200);
  conforms('/api/v1/metrics/user', 200, 'application/json', res.data);
  return res.data as UserMetrics;
}

async function tokenMetrics(o: { auth: Record<string, string> }, id: string, query: Record<string, string> = {}): Promise<TokenMetrics> {
  const res = await client.GET('/api/v1/metrics/tokens/{id}', { headers: headersOf(o), params: { path: { id }, query } });
  expect(res.response.status, JSON.stringify(res.error)).toBe(200);
  conforms('/api/v1/metrics/tokens/{id}', 200, 'application/json', res.data);
  return res.data as TokenMetrics;
}

async function exportRows(o: { auth: Record<string, string> }, query: Record<string, string> = {}): Promise<ExportRow[]> {
  const res = await fetch(`${baseUrl}/api/v1/exports/usage.json?${new URLSearchParams(query)}`, { headers: o.auth });
  expect(res.status).toBe(200);
  return ((await res.json()) as { rows: ExportRow[] }).rows;
}

/** Everything served so far is in the log and projected. */
async function settled(): Promise<void> {
  await t.runtime.ingester?.whenDrained();
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}

/** The figures the export's rows give: what was served, call by call. */
function rowCounts(rows: readonly ExportRow[]): Counts {
  const errors = rows.filter((r) => r.outcome === 'error').length;
  return {
    requests: rows.length,
    success: rows.length - errors,
    errors,
    cacheHits: rows.filter((r) => r.cache === 'hit').length,
    coalesced: rows.filter((r) => r.cache === 'coalesced').length,
    hedged: rows.filter((r) => r.cache === 'hedged').length,
  };
}

/** Percentiles are estimated inside histogram buckets: they lie within the buckets of the fastest and slowest call. */
function expectPercentilesWithin(f: Figures, rows: readonly ExportRow[]): void {
  const latencies = rows.map((r) => r.total_ms);
  const lowest = histogramIndex(Math.min(...latencies));
  const highest = histogramIndex(Math.max(...latencies));
  const floor = lowest === 0 ? 0 : (LATENCY_BOUNDS_MS[lowest - 1] as number);
  const ceiling = LATENCY_BOUNDS_MS[highest] ?? (LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1] as number);
  const [p50, p95, p99] = [f.p50ResponseMs, f.p95ResponseMs, f.p99ResponseMs] as number[];
  expect(p50).toBeGreaterThanOrEqual(floor);
  expect(p50).toBeLessThanOrEqual(p95 as number);
  expect(p95).toBeLessThanOrEqual(p99 as number);
  expect(p99).toBeLessThanOrEqual(ceiling);
  // The mean is exact (latency sums are integer microseconds), then given to 2 decimals: within half a hundredth.
  const meanUs = sumOf(latencies, (ms) => Math.round(ms * 1000)) / latencies.length;
  expect(Math.abs((f.avgResponseMs as number) - meanUs / 1000)).toBeLessThanOrEqual(0.005 + 1e-9);
}

async function createToken(o: { auth: Record<string, string> }, body: Record<string, unknown>): Promise<{ id: string; token: string }> {
  const res = await client.POST('/api/v1/tokens', { headers: o.auth, body: body as Schemas['CreatedToken'] });
  expect(res.response.status, JSON.stringify(res.error)).toBe(201);
  return res.data as { id: string; token: string };
}

const rpc = (token: string, body: unknown, chain = 'local') =>
  fetch(`${baseUrl}/${chain}/${token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const call = (id: number, method: string, params: unknown[] = []) => ({ jsonrpc: '2.0', id, method, params });

describe('one story from a known mix of calls', () => {
  let o: Awaited<ReturnType<typeof ownerOn>>;
  let a: { id: string; token: string };
  let b: { id: string; token: string };
  let c: { id: string; token: string };
  let started: number;
  let rows: ExportRow[];
  const served: number[] = [];
  const window = (): Record<string, string> => ({ start: iso(Math.floor(started / MIN) * MIN), end: iso(Math.ceil((Date.now() + 1) / MIN) * MIN) });

  beforeAll(async () => {
    o = await ownerOn(t, 'professional');
    // a draws on the account; b has a rate limit of 2 per second; c its own monthly quota of 3.
    a = await createToken(o, { name: 'a' });
    b = await createToken(o, { name: 'b', rate_limit: 2 });
    c = await createToken(o, { name: 'c', monthly_limit: 3 });
    started = Date.now();
    const send = async (token: string, body: unknown, chain = 'local') => {
      const res = await rpc(token, body, chain);
      served.push(res.status);
      await res.text();
    };
    // a: successes on three chains, node errors, a denied method, a batch with an unknown method, malformed JSON.
    for (let i = 0; i < 5; i++) await send(a.token, call(i, 'eth_blockNumber'));
    for (let i = 0; i < 3; i++) await send(a.token, call(i, 'eth_chainId'));
    for (let i = 0; i < 2; i++) await send(a.token, call(i, 'eth_getBalance', ['not-an-address', 'latest']));
    await send(a.token, call(1, 'debug_traceTransaction', ['0x00']));
    await send(a.token, [call(1, 'eth_blockNumber'), call(2, 'net_version'), call(3, 'eth_noSuchMethod')]);
    await send(a.token, '{"jsonrpc":"2.0","id":1,"method":');
    for (let i = 0; i < 3; i++) await send(a.token, call(i, 'eth_blockNumber'), 'eth');
    for (let i = 0; i < 2; i++) await send(a.token, call(i, 'net_version'), 'bsc');
    // b: a burst of 8 at once against 2 per second: some are refused (429).
    await Promise.all(Array.from({ length: 8 }, (_, i) => send(b.token, call(i, 'eth_chainId'))));
    // c: 5 calls against a monthly quota of 3: the last 2 are refused (429).
    for (let i = 0; i < 5; i++) await send(c.token, call(i, 'eth_blockNumber'));
    // Not metered: an unknown token.
    await send('gk_not-a-token', call(1, 'eth_blockNumber'));
    await settled();
    rows = await exportRows(o, window());
  });

  it('the export holds every metered call as served: 429s refused and not charged', async () => {
    expect(served.filter((s) => s === 429).length).toBeGreaterThanOrEqual(4);
    const refused = rows.filter((r) => r.status === 429);
    expect(refused.length).toBe(served.filter((s) => s === 429).length);
    expect(refused.every((r) => !r.charged && r.outcome === 'error')).toBe(true);
    expect(rows.filter((r) => r.token_id === c.id).map((r) => [r.status, r.charged])).toEqual([
      [200, true],
      [200, true],
      [200, true],
      [429, false],
      [429, false],
    ]);
    expect(new Set(rows.map((r) => r.chain))).toEqual(new Set(['local', 'eth', 'bsc']));
  });

  it('breakdowns by chain, method and token and the series add up to the totals, and to the export', async () => {
    const m = await userMetrics(o, window());
    expect(countsOf(m.totals)).toEqual(rowCounts(rows));
    expect(sumCounts(m.byChain)).toEqual(countsOf(m.totals));
    expect(sumCounts(m.byMethod)).toEqual(countsOf(m.totals));
    expect(sumCounts(m.byToken)).toEqual(countsOf(m.totals));
    expect(sumOf(m.series, (p) => p.requests)).toBe(m.totals.requests);
    expect(sumOf(m.series, (p) => p.errors)).toBe(m.totals.errors);
    for (const ch of m.byChain) expect(countsOf(ch), ch.chain).toEqual(rowCounts(rows.filter((r) => r.chain === ch.chain)));
    for (const tk of m.byToken) expect(countsOf(tk), tk.tokenId).toEqual(rowCounts(rows.filter((r) => r.token_id === tk.tokenId)));
    expect(m.byToken.map((x) => x.tokenId).sort()).toEqual([a.id, b.id, c.id].sort());
    expectPercentilesWithin(m.totals, rows);
    for (const ch of m.byChain)
      expectPercentilesWithin(
        ch,
        rows.filter((r) => r.chain === ch.chain),
      );
    expect(m.totals.successRate).toBeCloseTo((100 * m.totals.success) / m.totals.requests, 3);
    expect((m.totals.successRate as number) + (m.totals.errorRate as number)).toBeCloseTo(100, 3);
  });

  it("each token's analytics equal its line in the account's, and the three add up", async () => {
    const user = await userMetrics(o, window());
    const perToken = await Promise.all([a, b, c].map((x) => tokenMetrics(o, x.id, window())));
    for (const tm of perToken) {
      const line = user.byToken.find((x) => x.tokenId === tm.token.id);
      const { tokenId: _, ...figures } = line as Schemas['TokenFigures'];
      expect(tm.totals).toEqual(figures);
      expect(sumCounts(tm.byChain)).toEqual(countsOf(tm.totals));
      expect(sumCounts(tm.byMethod)).toEqual(countsOf(tm.totals));
      expect(tm.recentErrors.every((e) => e.tokenId === tm.token.id)).toBe(true);
    }
    expect(sumCounts(perToken.map((x) => x.totals))).toEqual(countsOf(user.totals));
  });

  it('errors: the error groups add up to the errors, per method too; recent errors are the newest failed rows', async () => {
    const m = await userMetrics(o, window());
    expect(sumOf(m.errors, (e) => e.count)).toBe(m.totals.errors);
    for (const x of m.byMethod) {
      const groups = m.errors.filter((e) => e.chain === x.chain && e.method === x.method);
      expect(
        sumOf(groups, (e) => e.count),
        `${x.chain} ${x.method}`,
      ).toBe(x.errors);
    }
    const failed = rows.filter((r) => r.outcome === 'error');
    expect(m.recentErrors.length).toBe(Math.min(20, failed.length));
    const byId = new Map(failed.map((r) => [r.request_id, r]));
    for (const e of m.recentErrors) {
      const row = byId.get(e.requestId);
      expect(row, e.requestId).toBeDefined();
      expect([e.at, e.tokenId, e.chain, e.method, e.status]).toEqual([row?.time, row?.token_id, row?.chain, row?.method, row?.status]);
    }
    const times = m.recentErrors.map((e) => e.at);
    expect(times).toEqual([...times].sort().reverse());
  });

  it('minute, hour and day series count the same calls: minutes add up to their hours, hours to their days', async () => {
    const from = Math.floor(started / HOUR) * HOUR;
    const minutes = await userMetrics(o, { start: iso(from), end: iso(from + 6 * HOUR) });
    const hours = await userMetrics(o, { start: iso(from - 12 * HOUR), end: iso(from + 12 * HOUR) });
    const days = await userMetrics(o, { start: iso(from - 20 * DAY), end: iso(from + 12 * HOUR) });
    expect([minutes.granularity, hours.granularity, days.granularity]).toEqual(['minute', 'hour', 'day']);
    for (const m of [minutes, hours, days]) {
      expect(countsOf(m.totals)).toEqual(rowCounts(rows));
      expect(sumOf(m.series, (p) => p.requests)).toBe(rows.length);
    }
    const regroup = (series: UserMetrics['series'], unit: number) => {
      const out = new Map<number, number>();
      for (const p of series) {
        const at = Math.floor(Date.parse(p.t) / unit) * unit;
        if (p.requests > 0) out.set(at, (out.get(at) ?? 0) + p.requests);
      }
      return out;
    };
    const hourOf = (series: UserMetrics['series']) => new Map(series.filter((p) => p.requests > 0).map((p) => [Date.parse(p.t), p.requests]));
    expect(regroup(minutes.series, HOUR)).toEqual(hourOf(hours.series));
    expect(regroup(hours.series, DAY)).toEqual(hourOf(days.series));
    const perRow = new Map<number, number>();
    for (const r of rows) {
      const at = Math.floor(Date.parse(r.time) / MIN) * MIN;
      perRow.set(at, (perRow.get(at) ?? 0) + 1);
    }
    expect(hourOf(minutes.series)).toEqual(perRow);
  });

  it("client IPs: a token's IP counts equal its calls over the days they cover", async () => {
    const days = [...new Set(rows.map((r) => r.time.slice(0, 10)))];
    const whole = { start: days[0] as string, end: iso(Date.parse(days[days.length - 1] as string) + DAY) };
    for (const x of [a, b, c]) {
      const tm = await tokenMetrics(o, x.id, whole);
      const mine = rows.filter((r) => r.token_id === x.id);
      expect(tm.clientIps).toEqual([{ ip: '127.0.0.1', count: mine.length, lastSeen: mine[mine.length - 1]?.time }]);
      expect(sumOf(tm.clientIps, (ip) => ip.count)).toBe(tm.totals.requests);
    }
  });

  it("quota: the token list, the account, the metrics' limits and the export's charged column tell one story", async () => {
    const tokens = await client.GET('/api/v1/tokens', { headers: o.auth });
    const account = await client.GET('/api/v1/account', { headers: o.auth });
    const usage = Object.fromEntries((tokens.data?.tokens ?? []).map((x) => [x.id, x.current_month_usage]));
    const month = new Date().toISOString().slice(0, 7);
    const monthRows = await exportRows(o, { start: `${month}-01` });
    const charged = (id: string) => monthRows.filter((r) => r.token_id === id && r.charged).length;
    expect(usage).toEqual({ [a.id]: charged(a.id), [b.id]: charged(b.id), [c.id]: 3 });
    const acc = account.data as Schemas['Account'];
    expect(acc.usage.requests).toBe(monthRows.filter((r) => r.charged).length);
    // c has its own limit on a plan with custom limits: it counts apart from the account's quota.
    const accountUsed = charged(a.id) + charged(b.id);
    const m = await userMetrics(o);
    expect(m.limits).toEqual({ monthlyLimit: 50_000_000, used: accountUsed, remaining: 50_000_000 - accountUsed, resetsAt: acc.usage.resets_at });
    expect(acc.usage.remaining).toBe(m.limits.remaining);
    const la = (await tokenMetrics(o, a.id)).limits;
    expect(la).toEqual({ ...m.limits, appliesTo: 'account', tokenUsed: usage[a.id] });
    const lc = (await tokenMetrics(o, c.id)).limits;
    expect(lc).toEqual({ monthlyLimit: 3, used: 3, remaining: 0, resetsAt: m.limits.resetsAt, appliesTo: 'token' });
  });

  it('the method filter gives the same calls in the metrics and the exports', async () => {
    const m = await userMetrics(o, { ...window(), method: 'eth_blockNumber' });
    const filtered = await exportRows(o, { ...window(), method: 'eth_blockNumber' });
    expect(countsOf(m.totals)).toEqual(rowCounts(rows.filter((r) => r.method === 'eth_blockNumber')));
    expect(filtered.map((r) => r.request_id)).toEqual(rows.filter((r) => r.method === 'eth_blockNumber').map((r) => r.request_id));
    const onChain = await exportRows(o, { ...window(), method: 'eth_blockNumber', chain: 'eth' });
    expect(onChain.length).toBe((await userMetrics(o, { ...window(), method: 'eth_blockNumber', chain: 'eth' })).totals.requests);
  });
});

describe('one story after the fact', () => {
  it('a revoked token keeps its usage in every figure; an unlimited plan says null, not a number', async () => {
    const o = await ownerOn(t, 'unlimited');
    const a = await createToken(o, { name: 'kept' });
    const b = await createToken(o, { name: 'revoked' });
    for (const x of [a, a, b, b, b]) expect((await rpc(x.token, call(1, 'eth_chainId'))).status).toBe(200);
    await settled();
    const before = await userMetrics(o);
    const revoked = await client.DELETE('/api/v1/tokens/{id}', { headers: o.auth, params: { path: { id: b.id } } });
    expect(revoked.response.status).toBe(200);
    const after = await userMetrics(o);
    expect(after.byToken).toEqual(before.byToken);
    expect(after.totals).toEqual(before.totals);
    const tb = await tokenMetrics(o, b.id);
    expect([tb.token.status, tb.totals.requests]).toEqual(['revoked', 3]);
    const list = (await client.GET('/api/v1/tokens', { headers: o.auth })).data?.tokens ?? [];
    expect(Object.fromEntries(list.map((x) => [x.id, x.current_month_usage]))).toEqual({ [a.id]: 2, [b.id]: 3 });
    const account = (await client.GET('/api/v1/account', { headers: o.auth })).data as Schemas['Account'];
    expect(account.usage).toMatchObject({ requests: 5, monthly_limit: null, remaining: null });
    expect(after.limits).toMatchObject({ monthlyLimit: null, used: 5, remaining: null });
    expect(tb.limits).toMatchObject({ appliesTo: 'account', monthlyLimit: null, remaining: null, used: 5, tokenUsed: 3 });
    // The series' averages, weighted by their calls, give the total average.
    const weighted = sumOf(after.series, (p) => (p.avgResponseMs ?? 0) * p.requests) / after.totals.requests;
    // Each rounded to 2 places: at most 0.005 off each.
    expect(Math.abs(weighted - (after.totals.avgResponseMs as number))).toBeLessThanOrEqual(0.0100001);
  });
});

describe('REST paths: the method filter takes the label byMethod names', () => {
  it('recent errors and the export filter by the label, as the totals and the error groups do', async () => {
    const o = await ownerOn(t, 'developer');
    const tok = await createToken(o, { name: 'rest' });
    const at = Math.floor(Date.now() / MIN) * MIN - 10 * MIN;
    // Two failed REST calls on two addresses: one label, `…/balances/{id}`.
    const calls = usageCalls('rest', o, tok.id, {
      chain: 'atom',
      status: 502,
      errorMessage: 'upstream unavailable',
      totalMs: 12,
      upstreamMs: null,
      clientIp: '192.0.2.9',
      upstream: null,
    });
    const addresses = ['cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu', 'cosmos1zg69v7ys40x77y352eufp27daufrg4ncnjqz7u'];
    for (const [i, address] of addresses.entries()) calls.add(at + i * 1000, { method: `cosmos/bank/v1beta1/balances/${address}` });
    const records = calls.records;
    await recordUsage(t.runtime, records);
    const period = { start: iso(at), end: iso(at + 2 * MIN) };
    const all = await userMetrics(o, period);
    const label = 'cosmos/bank/v1beta1/balances/{id}';
    expect(all.byMethod.map((x) => x.method)).toEqual([label]);
    const m = await userMetrics(o, { ...period, method: label });
    expect(m.totals.errors).toBe(2);
    expect(sumOf(m.errors, (e) => e.count)).toBe(2);
    expect(m.recentErrors.map((e) => e.requestId).sort()).toEqual(records.map((r) => r.requestId));
    expect((await tokenMetrics(o, tok.id, { ...period, method: label })).recentErrors).toHaveLength(2);
    expect((await exportRows(o, { ...period, method: label })).map((r) => r.method)).toEqual(records.map((r) => r.method));
  });
});

describe('edges of the parameters: a 400 with a code and errors, or a documented answer; never a 500', () => {
  let o: Awaited<ReturnType<typeof ownerOn>>;
  let tokenId: string;
  beforeAll(async () => {
    o = await ownerOn(t, 'developer');
    tokenId = (await createToken(o, { name: 'edges' })).id;
  });

  const get = async (path: string, query: string) => {
    const res = await fetch(`${baseUrl}${path}${query}`, { headers: o.auth });
    const mediaType = (res.headers.get('content-type') ?? '').split(';')[0] as string;
    const body = await res.json();
    return { status: res.status, mediaType, body };
  };
  const now = Date.now();
  const today = iso(now).slice(0, 10);
  const yesterday = iso(now - DAY).slice(0, 10);
  const monthStart = Date.UTC(new Date(now).getUTCFullYear(), new Date(now).getUTCMonth(), 1);

  const refused: Array<[string, string, string]> = [
    ['from == to', `?start=${today}T10:00:00Z&end=${today}T10:00:00Z`, 'end'],
    ['from > to', `?start=${today}T10:00:00Z&end=${today}T09:59:59Z`, 'end'],
    // 00:00Z and 23:00Z the day before.
    ['from > to, given with offsets', `?start=${today}T02:00:00%2B02:00&end=${yesterday}T21:00:00-02:00`, 'end'],
    ['a range entirely in the future', `?start=${iso(now + 3 * DAY)}&end=${iso(now + 4 * DAY)}`, 'end'],
    ['a start in the future and no end', `?start=${iso(now + 3 * DAY)}`, 'start'],
    ['a time without a zone', '?start=2026-01-01T00:00:00', 'start'],
    ['a time without seconds', '?start=2026-01-01T00:00Z', 'start'],
    ['an offset without a colon', '?start=2026-01-01T00:00:00%2B0200', 'start'],
    ['a "+" sent unencoded (a space)', '?start=2026-01-01T00:00:00+02:00', 'start'],
    ['a day that does not exist', '?start=2026-02-30', 'start'],
    ['an epoch number', '?start=1767225600', 'start'],
    ['an empty start', '?start=', 'start'],
    // 0000-01-01T00:00+23:59 is in year -1 (UTC): no four-digit ISO time can say it in the answer.
    ['an end an offset puts before year 0000', '?end=0000-01-01T00:00:00%2B23:59', 'end'],
    ['a start an offset puts before year 0000', '?start=0000-01-01T00:00:00%2B00:01&end=2026-01-01T00:00:00Z', 'start'],
    ['an empty chain', '?chain=', 'chain'],
    ['an empty method', '?method=', 'method'],
    ['a method over 200 characters', `?method=${'m'.repeat(201)}`, 'method'],
    ['a granularity (not a parameter)', '?granularity=minute', ''],
    ['a limit (not a parameter)', '?limit=1000000000', ''],
    ['a cursor (not a parameter)', '?cursor=not-a-cursor', ''],
  ];
  for (const path of ['/api/v1/metrics/user', '/api/v1/metrics/tokens/{id}', '/api/v1/exports/usage.csv']) {
    it.each(refused)(`${path}: 400 for %s`, async (_label, query, field) => {
      const res = await get(path.replace('{id}', tokenId), query);
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.mediaType).toBe('application/problem+json');
      conforms(path, 400, 'application/problem+json', res.body);
      expect(res.body).toMatchObject({ code: 'validation_failed', errors: [expect.objectContaining({ in: 'query', path: field })] });
    });
  }

  const answered: Array<[string, string, (m: UserMetrics) => void]> = [
    [
      'offsets are converted to UTC',
      `?start=${today}T02:00:00%2B02:00&end=${yesterday}T23:30:00-02:00`,
      (m) => expect(m.period).toEqual({ start: `${today}T00:00:00.000Z`, end: `${today}T01:30:00.000Z` }),
    ],
    [
      'a bare date is its midnight UTC',
      `?start=${yesterday}&end=${today}`,
      (m) => expect(m.period).toEqual({ start: `${yesterday}T00:00:00.000Z`, end: `${today}T00:00:00.000Z` }),
    ],
    [
      'sub-millisecond digits are cut',
      `?start=${today}T00:00:00.123456789Z&end=${today}T00:00:30.5Z`,
      (m) => expect(m.period).toEqual({ start: `${today}T00:00:00.000Z`, end: `${today}T00:01:00.000Z` }),
    ],
    ['an end within a day ahead', `?end=${iso(now + 12 * HOUR)}`, (m) => expect(Date.parse(m.period.end)).toBeGreaterThan(now)],
    [
      'a range crossing midnight: one series point a minute on both sides',
      `?start=${yesterday}T23:00:00Z&end=${today}T01:00:00Z`,
      (m) => expect([m.granularity, m.series.length, m.series[60]?.t]).toEqual(['minute', 120, `${today}T00:00:00.000Z`]),
    ],
    [
      "a range crossing the month's first midnight: a point at the month's start",
      `?start=${iso(monthStart - 2 * HOUR)}&end=${iso(monthStart + 2 * HOUR)}`,
      (m) => {
        // Minute roll-ups are kept MINUTE_RETENTION_DAYS: an older range is counted in hours.
        const unit = m.granularity === 'minute' ? MIN : HOUR;
        expect(m.period).toEqual({ start: iso(monthStart - 2 * HOUR), end: iso(monthStart + 2 * HOUR) });
        expect(m.series.length).toBe((4 * HOUR) / unit);
        expect(m.series.map((p) => p.t)).toContain(iso(monthStart));
      },
    ],
    [
      'a range entirely before the retention: clamped, an empty period',
      '?start=2001-01-01T00:00:00Z&end=2001-02-01T00:00:00Z',
      (m) => {
        expect(m.retention.clamped).toBe(true);
        expect(m.series).toEqual([]);
        expect(m.totals.requests).toBe(0);
      },
    ],
    ['an end before the retention and no start', '?end=2001-02-01T00:00:00Z', (m) => expect(m.totals.requests).toBe(0)],
  ];
  it.each(answered)('200 for %s, as documented', async (_label, query, check) => {
    for (const path of ['/api/v1/metrics/user', '/api/v1/metrics/tokens/{id}']) {
      const res = await get(path.replace('{id}', tokenId), query);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      conforms(path, 200, 'application/json', res.body);
      check(res.body as UserMetrics);
      expect(Date.parse(res.body.period.start)).toBeLessThanOrEqual(Date.parse(res.body.period.end));
    }
  });
});

describe('client IPs are counted per day, as the document says', () => {
  it('a period of one minute, or one chain, still shows the whole day of every chain', async () => {
    const o = await ownerOn(t, 'developer');
    const tok = await createToken(o, { name: 'ips' });
    // Two calls an hour apart on two chains, from one address, inside one UTC day.
    const day = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate()) - DAY;
    const calls = usageCalls('ips', o, tok.id, { clientIp: '192.0.2.77' });
    calls.add(day + 10 * HOUR, { chain: 'eth' });
    calls.add(day + 11 * HOUR, { chain: 'bsc' });
    await recordUsage(t.runtime, calls.records);
    const minute = await tokenMetrics(o, tok.id, { start: iso(day + 10 * HOUR), end: iso(day + 10 * HOUR + MIN), chain: 'eth' });
    expect(minute.totals.requests).toBe(1);
    expect(minute.clientIps).toEqual([{ ip: '192.0.2.77', count: 2, lastSeen: calls.records[1]?.at }]);
    const described = doc.components.schemas['TokenMetrics']?.properties?.['clientIps']?.description;
    expect(described).toMatch(/per UTC day/);
  });
});
