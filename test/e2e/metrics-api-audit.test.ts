import createClient from 'openapi-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components, paths } from '../../clients/typescript/schema.js';
import type { ExportRow } from '../../src/commands/api/exports/rows.js';
import { servedOpenApi } from '../support/servedOpenApi.js';
import { ADMIN_TOKEN, listen, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
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
type Owner = Awaited<ReturnType<typeof owner>>;

const MIN = 60_000;
const HOUR = 60 * MIN;
const iso = (ms: number) => new Date(ms).toISOString();

/** The service's clock: 2028-03-01T12:30:05Z, moved only by the tests. */
const START = Date.parse('2028-03-01T12:30:05.000Z');
const clockMs = START;

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
