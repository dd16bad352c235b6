import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../clients/typescript/schema.js';
import { EXPORT_COLUMNS } from '../../src/commands/api/exports/rows.js';
import { pdfText } from '../support/pdfText.js';
import { createToken, ownerOn } from '../support/planOwner.js';
import { type ServedDocument, servedOpenApi } from '../support/servedOpenApi.js';
import { startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { countsOf, sumCounts, sumOf } from '../support/usageFigures.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * What the metrics and the exports say about what they left out: `byMethod` (100 entries) and
 * `errors` (50 groups) are capped, and past their caps `byMethodOther` and `errorsOther` sum the
 * rest, so an integrator's sums add up to the totals again; an export says which filters it
 * was made with (JSON header, file name, PDF); a period wholly before the retention is the
 * documented empty period. Every answer is checked against the served openapi.json (ajv), as in
 * metrics-consistency.test.ts.
 */

type Schemas = components['schemas'];
type UserMetrics = Schemas['UserMetrics'];
type TokenMetrics = Schemas['TokenMetrics'];
type Figures = Schemas['UsageFigures'];
type Auth = { auth: Record<string, string> };
type Owner = Awaited<ReturnType<typeof ownerOn>>;

const MIN = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

let t: TestApp;
let doc: ServedDocument;
let conforms: ReturnType<typeof servedOpenApi>['conforms'];

beforeAll(async () => {
  t = await startTestApp();
  const served = await t.app.inject({ method: 'GET', url: '/api/v1/openapi.json' });
  ({ doc, conforms } = servedOpenApi(served.body));
});
afterAll(async () => {
  await t?.close();
});

const get = (o: Auth, url: string) => t.app.inject({ method: 'GET', url, headers: o.auth });
const q = (query: Record<string, string>) => `?${new URLSearchParams(query)}`;

async function userMetrics(o: Auth, query: Record<string, string>): Promise<UserMetrics> {
  const res = await get(o, `/api/v1/metrics/user${q(query)}`);
  expect(res.statusCode, res.body).toBe(200);
  conforms('/api/v1/metrics/user', 200, 'application/json', res.json());
  return res.json();
}

async function tokenMetrics(o: Auth, id: string, query: Record<string, string>): Promise<TokenMetrics> {
  const res = await get(o, `/api/v1/metrics/tokens/${id}${q(query)}`);
  expect(res.statusCode, res.body).toBe(200);
  conforms('/api/v1/metrics/tokens/{id}', 200, 'application/json', res.json());
  return res.json();
}

describe('byMethod and errors past their caps: the rest summed, so the sums add up to the totals', () => {
  const METHODS = 105;
  let o: Owner;
  let tokenId: string;
  let period: Record<string, string>;
  let lastError: string;

  beforeAll(async () => {
    o = await ownerOn(t, 'professional');
    tokenId = await createToken(t, o, { name: 'many methods' });
    const at = Math.floor(Date.now() / MIN) * MIN - 30 * MIN;
    period = { start: iso(at), end: iso(at + 20 * MIN) };
    // 105 methods (two chains), each with a success and an error of its own message (105 error
    // groups); the first 100 with one success more, so the 5 left out of byMethod are known.
    const calls = usageCalls('caps', o, tokenId);
    for (let i = 0; i < METHODS; i++) {
      const method = `eth_method${String(i).padStart(3, '0')}`;
      const chain = i % 2 === 0 ? 'eth' : 'bsc';
      const when = at + (i % 10) * MIN + i;
      calls.add(when, { method, chain });
      if (i < 100) calls.add(when, { method, chain, totalMs: 40 });
      calls.add(when + 1, { method, chain, rpcErrorCode: -32000, errorMessage: `failure number ${i}`, totalMs: 9 });
    }
    lastError = calls.records
      .filter((r) => r.errorMessage !== null)
      .map((r) => r.at)
      .sort()
      .pop() as string;
    await recordUsage(t.runtime, calls.records);
  });

  it('the account: 100 methods and the 5 others summed; 50 error groups and the 55 others summed', async () => {
    const m = await userMetrics(o, period);
    expect(m.totals.requests).toBe(2 * METHODS + 100);
    expect(m.totals.errors).toBe(METHODS);
    expect(m.byMethod).toHaveLength(100);
    expect(m.byMethodOther).toMatchObject({ methods: 5, requests: 10, errors: 5, success: 5 });
    expect(m.byMethod.every((x) => x.requests === 3)).toBe(true);
    const other = m.byMethodOther as Schemas['OtherMethods'];
    expect(sumCounts([...m.byMethod, other])).toEqual(countsOf(m.totals));
    // Its derived figures are those of the calls summed: 5 of 3 ms and 5 of 9 ms.
    expect([other.errorRate, other.avgResponseMs]).toEqual([50, 6]);

    expect(m.errors).toHaveLength(50);
    expect(m.errorsOther).toEqual({ groups: METHODS - 50, count: METHODS - 50, lastSeen: expect.any(String) });
    expect(sumOf(m.errors, (e) => e.count) + (m.errorsOther?.count ?? 0)).toBe(m.totals.errors);
    const latest = [...m.errors.map((e) => e.lastSeen), m.errorsOther?.lastSeen ?? ''].sort().pop();
    expect(latest).toBe(lastError);
  });

  it("the token's analytics cap byMethod the same way", async () => {
    const tm = await tokenMetrics(o, tokenId, period);
    expect(tm.byMethod).toHaveLength(100);
    expect(tm.byMethodOther?.methods).toBe(5);
    expect(sumCounts([...tm.byMethod, tm.byMethodOther as Figures])).toEqual(countsOf(tm.totals));
  });

  it('nothing left out: byMethodOther and errorsOther are null', async () => {
    const one = await userMetrics(o, { ...period, method: 'eth_method004' });
    expect([one.byMethod.length, one.byMethodOther, one.errors.length, one.errorsOther]).toEqual([1, null, 1, null]);
    const chain = await userMetrics(o, { ...period, chain: 'bsc' });
    expect([chain.byMethod.length, chain.byMethodOther, chain.errorsOther]).toEqual([52, null, expect.objectContaining({ groups: 2 })]);
  });

  it('the document says the caps and where the rest is', () => {
    const user = doc.components.schemas['UserMetrics']?.properties ?? {};
    expect(user['byMethod']?.description).toMatch(/at most 100 .*`byMethodOther`/);
    expect(user['byMethodOther']?.description).toMatch(/null when/);
    expect(user['errors']?.description).toMatch(/at most 50 .*`errorsOther`/);
    expect(user['errorsOther']?.description).toMatch(/null when/);
    expect(doc.components.schemas['TokenMetrics']?.properties?.['byMethod']?.description).toMatch(/at most 100/);
  });
});

describe('an export says the filters it was made with', () => {
  let o: Owner;
  let period: Record<string, string>;
  const REST = 'cosmos/bank/v1beta1/balances/cosmos1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5lzv7xu';
  const REST_LABEL = 'cosmos/bank/v1beta1/balances/{id}';

  beforeAll(async () => {
    o = await ownerOn(t, 'professional');
    const tokenId = await createToken(t, o, { name: 'exports' });
    const at = Math.floor(Date.now() / MIN) * MIN - 10 * MIN;
    period = { start: iso(at), end: iso(at + 2 * MIN) };
    const calls = usageCalls('caps', o, tokenId);
    calls.add(at + 1000, { method: 'eth_blockNumber' });
    calls.add(at + 2000, { method: 'eth_chainId' });
    calls.add(at + 3000, { method: REST, chain: 'atom' });
    await recordUsage(t.runtime, calls.records);
  });

  const disposition = (res: { headers: Record<string, unknown> }) => String(res.headers['content-disposition']);

  it('JSON: the header holds the method filter, null without one; the file name names it', async () => {
    const filtered = await get(o, `/api/v1/exports/usage.json${q({ ...period, method: 'eth_blockNumber' })}`);
    expect(filtered.statusCode).toBe(200);
    const body = filtered.json();
    expect(body).toMatchObject({ chain: null, method: 'eth_blockNumber' });
    expect(body.rows.map((r: { method: string }) => r.method)).toEqual(['eth_blockNumber']);
    expect(disposition(filtered)).toMatch(/^attachment; filename="usage-[0-9T-]+-method-eth_blockNumber\.json"$/);

    const whole = await get(o, `/api/v1/exports/usage.json${q(period)}`);
    expect(whole.json()).toMatchObject({ chain: null, method: null });
    expect(whole.json().rows).toHaveLength(3);
    expect(disposition(whole)).not.toMatch(/method/);

    const both = await get(o, `/api/v1/exports/usage.json${q({ ...period, chain: 'eth', method: 'eth_chainId' })}`);
    expect(both.json()).toMatchObject({ chain: 'eth', method: 'eth_chainId' });
    expect(disposition(both)).toMatch(/-eth-method-eth_chainId\.json"$/);
  });

  it('CSV: the file name names the filter; the columns are unchanged', async () => {
    const res = await get(o, `/api/v1/exports/usage.csv${q({ ...period, method: 'eth_blockNumber' })}`);
    expect(res.statusCode).toBe(200);
    expect(disposition(res)).toMatch(/-method-eth_blockNumber\.csv"$/);
    const lines = res.body.split('\r\n');
    expect(lines[0]).toBe(EXPORT_COLUMNS.join(','));
    expect(lines.filter((l) => l !== '')).toHaveLength(2);
  });

  it('a label with characters a file name cannot hold is written with _ in the name, and exactly in the JSON header', async () => {
    const rest = await get(o, `/api/v1/exports/usage.json${q({ ...period, method: REST_LABEL })}`);
    expect(rest.json()).toMatchObject({ method: REST_LABEL, rows: [expect.objectContaining({ method: REST })] });
    expect(disposition(rest)).toMatch(/-method-cosmos_bank_v1beta1_balances_id_\.json"$/);
    // Quotes, a backslash, Unicode and control-free oddities: never a broken header or a 500.
    const odd = 'a"b\\c é/ü\u{1F600};=x';
    const res = await get(o, `/api/v1/exports/usage.csv${q({ ...period, method: odd })}`);
    expect(res.statusCode, res.body).toBe(200);
    expect(disposition(res)).toMatch(/^attachment; filename="usage-[0-9T-]+-method-a_b_c_x\.csv"$/);
    const long = await get(o, `/api/v1/exports/usage.csv${q({ ...period, method: 'm'.repeat(200) })}`);
    expect(disposition(long)).toMatch(new RegExp(`-method-${'m'.repeat(64)}\\.csv"$`));
  });

  it('PDF: the snapshot says the method it is limited to', async () => {
    const res = await t.app.inject({ method: 'GET', url: `/api/v1/exports/usage.pdf${q({ ...period, method: 'eth_blockNumber' })}`, headers: o.auth });
    expect(res.statusCode).toBe(200);
    expect(disposition(res)).toMatch(/-method-eth_blockNumber\.pdf"$/);
    expect(pdfText(res.rawPayload)).toMatch(/method eth_blockNumber/);
  });
});

describe('a period wholly before the retention', () => {
  it('is the documented empty period: start equals end, clamped, nothing counted', async () => {
    const o = await ownerOn(t, 'developer');
    const m = await userMetrics(o, { start: '2001-01-01T00:00:00Z', end: '2001-02-01T00:00:00Z' });
    expect(m.period.start).toBe(m.period.end);
    expect([m.retention.clamped, m.totals.requests, m.series, m.byMethodOther, m.errorsOther]).toEqual([true, 0, [], null, null]);
    const props = doc.components.schemas['UserMetrics']?.properties ?? {};
    expect(props['retention']?.description).toMatch(/empty period, `period.start` equal to `period.end`/);
    expect(props['period']?.description).toMatch(/wholly before the retention is empty/);
  });
});
