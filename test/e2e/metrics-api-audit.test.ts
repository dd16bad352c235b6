import createClient from 'openapi-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components, paths } from '../../clients/typescript/schema.js';
import type { ExportRow } from '../../src/commands/api/exports/rows.js';
import { servedOpenApi } from '../support/servedOpenApi.js';
import { ADMIN_TOKEN, listen, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { countsOf, sumCounts } from '../support/usageFigures.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * The metrics API, the exports and a token's history as an integrator (a client generated from
 * the served openapi.json, polling the metrics) and an auditor (replaying a token's history,
 * reconciling the figures with the exports) use them, on a clock the test sets: 2028, so that a
 * leap day and a month's first midnight are inside every plan's retention, and each change of the
 * history has a time known to the millisecond. Every answer is checked against the served
 * document (ajv). What metrics-consistency, metrics-api, metrics-caps, audit-reconciliation and
 * token-history-plan check already is not repeated.
 */

type Schemas = components['schemas'];
type UserMetrics = Schemas['UserMetrics'];
type TokenMetrics = Schemas['TokenMetrics'];
type TokenHistory = Schemas['TokenHistory'];
type Owner = Awaited<ReturnType<typeof owner>>;

const SEC = 1000;
const MIN = 60 * SEC;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
const iso = (ms: number) => new Date(ms).toISOString();

/** The service's clock: 2028-03-01T12:30:05Z, moved only by the tests. */
const START = Date.parse('2028-03-01T12:30:05.000Z');
let clockMs = START;

let t: TestApp;
let baseUrl: string;
let client: ReturnType<typeof createClient<paths>>;
let conforms: ReturnType<typeof servedOpenApi>['conforms'];

beforeAll(async () => {
  t = await startTestApp({ now: () => new Date(clockMs) });
  baseUrl = (await listen(t)).url;
  client = createClient<paths>({ baseUrl });
  ({ conforms } = servedOpenApi(await (await fetch(`${baseUrl}/api/v1/openapi.json`)).text()));
});
afterAll(async () => {
  await t?.close();
});

async function ownerOn(plan: string): Promise<Owner> {
  const o = await owner(t.app);
  const res = await setPlan(o.accountId, plan);
  expect(res.status).toBe(200);
  return o;
}

const setPlan = (accountId: string, plan: string) =>
  fetch(`${baseUrl}/api/v1/admin/accounts/${accountId}/plan`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ plan }),
  });

async function createToken(o: Owner, name: string): Promise<string> {
  const res = await client.POST('/api/v1/tokens', { headers: o.auth, body: { name } });
  expect(res.response.status, JSON.stringify(res.error)).toBe(201);
  return (res.data as Schemas['CreatedToken']).id;
}

/** A GET as a client sends it (the raw query, so that repeated and odd parameters reach the server), checked against the document. */
async function get(o: { auth: Record<string, string> }, template: string, id: string | null, query = '') {
  const res = await fetch(`${baseUrl}${template.replace('{id}', id ?? '')}${query}`, { headers: o.auth });
  const mediaType = (res.headers.get('content-type') ?? '').split(';')[0] as string;
  const text = await res.text();
  const body = mediaType.endsWith('json') ? JSON.parse(text) : text;
  if (mediaType !== 'text/csv') conforms(template, res.status, mediaType, body);
  return { status: res.status, body };
}

async function userMetrics(o: Owner, query = ''): Promise<UserMetrics> {
  const res = await get(o, '/api/v1/metrics/user', null, query);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as UserMetrics;
}

async function tokenMetrics(o: Owner, id: string, query = ''): Promise<TokenMetrics> {
  const res = await get(o, '/api/v1/metrics/tokens/{id}', id, query);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as TokenMetrics;
}

async function exportRows(o: Owner, query = ''): Promise<ExportRow[]> {
  const res = await get(o, '/api/v1/exports/usage.json', null, query);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return (res.body as { rows: ExportRow[] }).rows;
}

async function csvRows(o: Owner, query = ''): Promise<string[]> {
  const res = await get(o, '/api/v1/exports/usage.csv', null, query);
  expect(res.status).toBe(200);
  return (res.body as string)
    .split('\r\n')
    .filter((line) => line !== '')
    .slice(1);
}

const q = (params: Record<string, string>) => `?${new URLSearchParams(params)}`;

describe('a start just inside the retention', () => {
  it('is not rounded down to before the retention: no figure or row from before `earliest`', async () => {
    // Developer keeps 30 days: `earliest` is 2028-01-31T12:30Z. A start after it, 12:45, is
    // counted in whole hours (older than the minute roll-ups' 8 days): rounded down to 12:00 it
    // showed a call of 12:10, 20 minutes past the retention, in the metrics and the exports.
    const o = await ownerOn('developer');
    const tok = await createToken(o, 'edge');
    const earliest = Date.parse('2028-01-31T12:30:00.000Z');
    const calls = usageCalls('edge', o, tok);
    calls.add(earliest - 20 * MIN);
    calls.add(earliest + 40 * MIN);
    calls.add(earliest + 2 * HOUR);
    await recordUsage(t.runtime, calls.records);

    const query = q({ start: iso(earliest + 15 * MIN) });
    for (const m of [await userMetrics(o, query), await tokenMetrics(o, tok, query)]) {
      expect(m.retention).toEqual({ retentionDays: 30, clamped: false, earliest: iso(earliest) });
      expect(Date.parse(m.period.start)).toBeGreaterThanOrEqual(earliest);
      expect(m.period.start).toBe('2028-01-31T13:00:00.000Z');
      expect(m.totals.requests).toBe(2);
      expect(m.series.reduce((n, p) => n + p.requests, 0)).toBe(2);
    }
    const rows = await exportRows(o, query);
    expect(rows.map((r) => r.time)).toEqual([iso(earliest + 40 * MIN), iso(earliest + 2 * HOUR)]);
    expect(await csvRows(o, query)).toHaveLength(2);
    // Without a start, the same (the retention's own cutoff was rounded up already).
    expect((await userMetrics(o)).totals.requests).toBe(2);
  });
});

describe('a leap day and a month’s first midnight, asked in UTC and with offsets', () => {
  let o: Owner;
  let tokA: string;
  let tokB: string;
  const at = (s: string) => Date.parse(s);

  beforeAll(async () => {
    o = await ownerOn('unlimited');
    tokA = await createToken(o, 'a');
    tokB = await createToken(o, 'b');
    const a = usageCalls('leap-a', o, tokA);
    const b = usageCalls('leap-b', o, tokB);
    a.add(at('2028-02-28T23:59:59.999Z'));
    a.add(at('2028-02-29T00:00:00.000Z'));
    a.add(at('2028-02-29T12:00:00.000Z'), { status: 502, errorMessage: 'node down', method: 'eth_call' });
    b.add(at('2028-02-29T23:59:59.999Z'), { chain: 'bsc' });
    b.add(at('2028-03-01T00:00:00.000Z'), { rpcErrorCode: -32000, errorMessage: 'execution reverted' });
    a.add(at('2028-03-01T05:29:59.999Z'), { method: 'eth_getBalance' });
    b.add(at('2028-03-01T05:30:00.000Z'));
    await recordUsage(t.runtime, [...a.records, ...b.records]);
  });

  /** Every figure of the window tells one story: the breakdowns, the series, the errors, each token's analytics and the exports' rows. */
  async function oneStory(query: string): Promise<{ m: UserMetrics; rows: ExportRow[] }> {
    const m = await userMetrics(o, query);
    const counts = countsOf(m.totals);
    expect(sumCounts(m.byToken)).toEqual(counts);
    expect(sumCounts(m.byChain)).toEqual(counts);
    expect(sumCounts([...m.byMethod, ...(m.byMethodOther ? [m.byMethodOther] : [])])).toEqual(counts);
    expect(m.series.reduce((n, p) => n + p.requests, 0)).toBe(m.totals.requests);
    expect(m.series.reduce((n, p) => n + p.errors, 0)).toBe(m.totals.errors);
    expect(m.errors.reduce((n, g) => n + g.count, 0) + (m.errorsOther?.count ?? 0)).toBe(m.totals.errors);
    for (const id of [tokA, tokB]) {
      const own = await tokenMetrics(o, id, query);
      expect(own.period).toEqual(m.period);
      const line = m.byToken.find((x) => x.tokenId === id);
      expect(countsOf(own.totals)).toEqual(
        line ? countsOf(line) : countsOf({ ...m.totals, requests: 0, success: 0, errors: 0, cacheHits: 0, coalesced: 0, hedged: 0 }),
      );
    }
    const rows = await exportRows(o, query);
    expect(rows).toHaveLength(m.totals.requests);
    expect(rows.filter((r) => r.outcome === 'error')).toHaveLength(m.totals.errors);
    for (const r of rows) {
      expect(r.time >= m.period.start && r.time < m.period.end, r.time).toBe(true);
    }
    expect(await csvRows(o, query)).toHaveLength(rows.length);
    return { m, rows };
  }

  it('a bare date is its UTC day: the leap day holds its own three calls, the 1st of March starts at its 00:00:00.000 call', async () => {
    const leap = await oneStory(q({ start: '2028-02-29', end: '2028-03-01' }));
    expect(leap.m.period).toEqual({ start: '2028-02-29T00:00:00.000Z', end: '2028-03-01T00:00:00.000Z' });
    expect(leap.rows.map((r) => r.time)).toEqual(['2028-02-29T00:00:00.000Z', '2028-02-29T12:00:00.000Z', '2028-02-29T23:59:59.999Z']);
    expect(leap.m.totals).toMatchObject({ requests: 3, errors: 1 });
    const march = await oneStory(q({ start: '2028-03-01', end: '2028-03-02' }));
    expect(march.rows.map((r) => r.time)).toEqual(['2028-03-01T00:00:00.000Z', '2028-03-01T05:29:59.999Z', '2028-03-01T05:30:00.000Z']);
    // The call at exactly 00:00:00.000 is in one hour point, the first of its day, and in no point of the day before.
    expect(march.m.series[0]).toMatchObject({ t: '2028-03-01T00:00:00.000Z', requests: 1, errors: 1 });
    expect(leap.m.series.at(-1)).toMatchObject({ t: '2028-02-29T23:00:00.000Z', requests: 1 });
  });

  it('offsets are converted to UTC: +05:30 ends its day at 18:30Z, the call at 05:30:00.000Z is after an end of 11:00+05:30', async () => {
    const india = await oneStory(q({ start: '2028-03-01T00:00:00+05:30', end: '2028-03-01T11:00:00+05:30' }));
    expect(india.m.period).toEqual({ start: '2028-02-29T18:30:00.000Z', end: '2028-03-01T05:30:00.000Z' });
    expect(india.rows.map((r) => r.time)).toEqual(['2028-02-29T23:59:59.999Z', '2028-03-01T00:00:00.000Z', '2028-03-01T05:29:59.999Z']);
    // The same instants with a negative offset and with fractional seconds.
    const same = await oneStory(q({ start: '2028-02-29T08:30:00.000-10:00', end: '2028-02-29T19:30:00.001-10:00' }));
    expect(same.m.period).toEqual({ start: '2028-02-29T18:30:00.000Z', end: '2028-03-01T05:31:00.000Z' });
    expect(same.rows).toHaveLength(4);
  });

  it('a month in days: a point for the 29th, each call in exactly one day, the period whole days', async () => {
    const month = await oneStory(q({ start: '2028-02-01', end: '2028-03-02' }));
    expect(month.m.granularity).toBe('day');
    expect(month.m.series).toHaveLength(30);
    const byDay = Object.fromEntries(month.m.series.filter((p) => p.requests > 0).map((p) => [p.t.slice(0, 10), p.requests]));
    expect(byDay).toEqual({ '2028-02-28': 1, '2028-02-29': 3, '2028-03-01': 3 });
  });

  it('dates that do not exist, times past 23:59:59 and a leap second are a 400 on their parameter, never a 500 or a shifted day', async () => {
    for (const [query, field] of [
      ['?start=2027-02-29', 'start'],
      ['?start=2100-02-29&end=2100-03-01', 'start'],
      ['?end=2028-02-30', 'end'],
      ['?start=2028-02-29T24:00:00Z', 'start'],
      ['?start=2028-02-29T23:59:60Z', 'start'],
      ['?start=2028-02-29T12:00:00%2B24:00', 'start'],
      ['?start=2028-02-29T12:00:00z', 'start'],
    ] as const) {
      for (const template of ['/api/v1/metrics/user', '/api/v1/metrics/tokens/{id}', '/api/v1/exports/usage.json']) {
        const res = await get(o, template, tokA, query);
        expect(res.status, `${template}${query}`).toBe(400);
        expect(res.body).toMatchObject({ code: 'validation_failed', errors: [expect.objectContaining({ in: 'query', path: field })] });
      }
    }
  });

  it('a repeated parameter is a 400 that says it was repeated, whatever its values; an unknown one (a cursor, a granularity, a page size) is a 400 too', async () => {
    // Two valid times were refused as "must be an ISO 8601 timestamp": a client would look for a bad time, not a second one.
    for (const [query, field] of [
      ['?start=2028-02-29&start=2028-03-01', 'start'],
      ['?start=2028-02-29&start=2028-02-29', 'start'],
      ['?end=2028-03-01&end=2028-03-01T00:00:00Z', 'end'],
      ['?chain=eth&chain=bsc', 'chain'],
      ['?method=eth_call&method=eth_call', 'method'],
    ] as const) {
      for (const template of ['/api/v1/metrics/user', '/api/v1/metrics/tokens/{id}', '/api/v1/exports/usage.csv']) {
        const res = await get(o, template, tokA, query);
        expect(res.status, `${template}${query}`).toBe(400);
        expect(res.body).toMatchObject({
          code: 'validation_failed',
          detail: `query.${field}: must be given once, not repeated`,
          errors: [{ in: 'query', path: field, message: 'must be given once, not repeated' }],
        });
      }
    }
    // The alert notifications' `limit` alike.
    const alert = await client.POST('/api/v1/alerts', {
      headers: o.auth,
      body: { name: 'errors', type: 'error_rate', threshold: 5, channels: [{ type: 'email', to: 'ops@example.com' }] },
    });
    expect(alert.response.status, JSON.stringify(alert.error)).toBe(201);
    const limit = await get(o, '/api/v1/alerts/{id}/notifications', (alert.data as Schemas['Alert']).id, '?limit=1&limit=2');
    expect(limit.body).toMatchObject({ status: 400, errors: [{ in: 'query', path: 'limit', message: 'must be given once, not repeated' }] });
    for (const query of [
      '?granularity=second',
      '?bucket=1ms',
      '?cursor=eyJhY2NvdW50IjoiYWNjX3gifQ',
      '?page=2',
      '?limit=1000000',
      '?from=2028-02-29',
      '?to=2028-03-01',
      '?token=tok_0000000000000000',
    ]) {
      for (const template of ['/api/v1/metrics/user', '/api/v1/metrics/tokens/{id}', '/api/v1/exports/usage.json']) {
        const res = await get(o, template, tokA, query);
        expect(res.status, `${template}${query}`).toBe(400);
        expect(res.body.code).toBe('validation_failed');
      }
    }
  });
});

describe('an auditor replays a token’s history', () => {
  /** The clock moved to `ms`, then `change` made: the history must say this time. */
  async function at<T>(ms: number, change: () => Promise<T>): Promise<T> {
    clockMs = ms;
    return change();
  }
  const patch = async (o: Owner, id: string, body: Record<string, unknown>) => {
    const res = await client.PATCH('/api/v1/tokens/{id}', { headers: o.auth, params: { path: { id } }, body: body as never });
    expect(res.response.status, JSON.stringify(res.error)).toBe(200);
  };
  async function history(o: Owner, id: string): Promise<TokenHistory> {
    const res = await get(o, '/api/v1/tokens/{id}/history', id);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as TokenHistory;
  }

  afterAll(() => {
    clockMs = START;
  });

  it('every change of the token and every plan change of its life, in order, each at the time it was made, with the state after it', async () => {
    const T = START + HOUR;
    const o = await at(T, () => ownerOn('professional'));
    const id = await at(T + SEC, () => createToken(o, 'replayed'));
    // Another token's changes are not in this one's history.
    const other = await at(T + 2 * SEC, () => createToken(o, 'other'));
    await at(T + 3 * SEC, () => setPlan(o.accountId, 'developer'));
    await at(T + 4 * SEC, () => patch(o, id, { name: 'renamed' }));
    await at(T + 5 * SEC, () => patch(o, other, { name: 'other renamed' }));
    await at(T + 6 * SEC, () => patch(o, id, { status: 'disabled' }));
    await at(T + 7 * SEC, () => setPlan(o.accountId, 'professional'));
    await at(T + 8 * SEC, () => patch(o, id, { status: 'active', monthly_limit: 500 }));
    await at(T + 9 * SEC, () => client.DELETE('/api/v1/tokens/{id}', { headers: o.auth, params: { path: { id } } }));
    // After its revocation: not in its life.
    await at(T + 10 * SEC, () => setPlan(o.accountId, 'unlimited'));

    const h = await history(o, id);
    expect(h.token_id).toBe(id);
    expect(
      h.events.map((e) => [
        e.kind,
        e.type,
        e.at,
        e.kind === 'account' ? `${e.plan.from}→${e.plan.to}` : e.revision,
        e.state.name,
        e.state.status,
        e.state.monthly_limit,
      ]),
    ).toEqual([
      ['token', 'ApiTokenCreated', iso(T + SEC), 0, 'replayed', 'active', null],
      ['account', 'AccountPlanChanged', iso(T + 3 * SEC), 'professional→developer', 'replayed', 'active', null],
      ['token', 'ApiTokenRenamed', iso(T + 4 * SEC), 1, 'renamed', 'active', null],
      ['token', 'ApiTokenDisabled', iso(T + 6 * SEC), 2, 'renamed', 'disabled', null],
      ['account', 'AccountPlanChanged', iso(T + 7 * SEC), 'developer→professional', 'renamed', 'disabled', null],
      // One edit, two events at one time: the limits first, then the status.
      ['token', 'ApiTokenLimitsChanged', iso(T + 8 * SEC), 3, 'renamed', 'disabled', 500],
      ['token', 'ApiTokenEnabled', iso(T + 8 * SEC), 4, 'renamed', 'active', 500],
      ['token', 'ApiTokenRevoked', iso(T + 9 * SEC), 5, 'renamed', 'revoked', 500],
    ]);
    for (const e of h.events) expect(Number.isNaN(Date.parse(e.recorded_at))).toBe(false);
    // The other token's history: its own two events and the plan changes between its creation and now.
    expect((await history(o, other)).events.map((e) => [e.type, e.at])).toEqual([
      ['ApiTokenCreated', iso(T + 2 * SEC)],
      ['AccountPlanChanged', iso(T + 3 * SEC)],
      ['ApiTokenRenamed', iso(T + 5 * SEC)],
      ['AccountPlanChanged', iso(T + 7 * SEC)],
      ['AccountPlanChanged', iso(T + 10 * SEC)],
    ]);
  });

  it('a token past its date: no plan change after its expiry, recorded or not', async () => {
    const T = START + 2 * HOUR;
    const o = await at(T, () => ownerOn('developer'));
    const res = await at(T + SEC, () => client.POST('/api/v1/tokens', { headers: o.auth, body: { name: 'short', expires_in_days: 1 } }));
    const id = (res.data as Schemas['CreatedToken']).id;
    await at(T + HOUR, () => setPlan(o.accountId, 'professional'));
    await at(T + 2 * DAY, () => setPlan(o.accountId, 'unlimited'));
    const h = await history(o, id);
    expect(h.events.slice(0, 2).map((e) => [e.type, e.at])).toEqual([
      ['ApiTokenCreated', iso(T + SEC)],
      ['AccountPlanChanged', iso(T + HOUR)],
    ]);
    expect(h.events.filter((e) => e.kind === 'account')).toHaveLength(1);
  });

  it('takes no query parameter: a filter an auditor might try (since, limit, a cursor) is a 400, not silently the whole history', async () => {
    const o = await ownerOn('developer');
    const id = await createToken(o, 'filters');
    for (const query of ['?since=2028-01-01', '?start=2028-03-01T00:00:00Z', '?limit=1', '?cursor=abc', '?type=ApiTokenRevoked']) {
      const res = await get(o, '/api/v1/tokens/{id}/history', id, query);
      expect(res.status, query).toBe(400);
      expect(res.body).toMatchObject({ code: 'validation_failed', errors: [expect.objectContaining({ in: 'query' })] });
    }
  });
});

describe('another account’s token, on every metrics, usage and history call', () => {
  it('is 404 not_found, the same answer as an id that does not exist, and none of its usage shows anywhere', async () => {
    const a = await ownerOn('unlimited');
    const b = await ownerOn('unlimited');
    const aToken = await createToken(a, 'a');
    const calls = usageCalls('iso', a, aToken);
    calls.add(START - HOUR, { status: 500, errorMessage: 'a secret error' });
    await recordUsage(t.runtime, calls.records);
    const unknown = 'tok_0000000000000000';
    for (const template of ['/api/v1/metrics/tokens/{id}', '/api/v1/tokens/{id}/history', '/api/v1/tokens/{id}']) {
      for (const query of ['', q({ start: iso(START - DAY) })]) {
        if (query && template !== '/api/v1/metrics/tokens/{id}') continue;
        const theirs = await get(b, template, aToken, query);
        const none = await get(b, template, unknown, query);
        expect(theirs.status, template).toBe(404);
        expect(theirs.body).toEqual(none.body);
      }
    }
    const mine = await userMetrics(b, q({ start: iso(START - DAY) }));
    expect([mine.totals.requests, mine.byToken, mine.recentErrors, mine.errors]).toEqual([0, [], [], []]);
    expect(await exportRows(b, q({ start: iso(START - DAY) }))).toEqual([]);
    const tokens = await client.GET('/api/v1/tokens', { headers: b.auth });
    expect((tokens.data as Schemas['TokenList']).tokens).toEqual([]);
    // A's own view has it.
    expect((await userMetrics(a, q({ start: iso(START - DAY) }))).totals.requests).toBe(1);
  });
});
