import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UserMetrics } from '../../src/api/types.js';
import { pdfText } from '../support/pdfText.js';
import { createToken, ownerOn } from '../support/planOwner.js';
import { startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * The PDF snapshot shows the 15 busiest methods and the 15 most frequent error groups; past
 * them one line says how many more there were and what they add up to (with what the metrics
 * themselves left out past their caps of 100 methods and 50 groups), so a reader can tell the
 * snapshot was cut and the rows still add up to the totals at its top. Nothing is said when
 * nothing was cut.
 */

const MIN = 60_000;
const METHODS = 120;
const iso = (ms: number) => new Date(ms).toISOString();

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

type Owner = Awaited<ReturnType<typeof ownerOn>>;

async function professional(): Promise<{ o: Owner; tokenId: string }> {
  const o = await ownerOn(t, 'professional');
  return { o, tokenId: await createToken(t, o, { name: 'pdf' }) };
}

const q = (query: Record<string, string>) => `?${new URLSearchParams(query)}`;

async function pdfOf(o: Owner, period: Record<string, string>): Promise<string> {
  const res = await t.app.inject({ method: 'GET', url: `/api/v1/exports/usage.pdf${q(period)}`, headers: o.auth });
  expect(res.statusCode, res.body).toBe(200);
  return pdfText(res.rawPayload);
}

async function metricsOf(o: Owner, period: Record<string, string>): Promise<UserMetrics> {
  const res = await t.app.inject({ method: 'GET', url: `/api/v1/metrics/user${q(period)}`, headers: o.auth });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}

const num = (s: string | undefined): number => Number(String(s).replaceAll(',', ''));
const sum = <T>(list: readonly T[], pick: (x: T) => number): number => list.reduce((s, x) => s + pick(x), 0);

describe('the PDF says how much its top-15 tables left out', () => {
  it('past the 15 shown: how many more methods and error groups, and their requests and errors, adding up to the totals', async () => {
    const { o, tokenId } = await professional();
    const at = Math.floor(Date.now() / MIN) * MIN - 30 * MIN;
    const period = { start: iso(at), end: iso(at + 20 * MIN) };
    // 120 methods on two chains: method i has (i % 4) + 1 successes and, for every third
    // method, two errors of a message of its own and one more of a message they share (groups
    // are per method too: 80 groups, 40 of 2 errors and 40 of 1), so the methods' figures
    // differ and both lists are cut by the metrics (100 methods, 50 groups) and by the PDF (15).
    const calls = usageCalls('pdf-others', o, tokenId);
    for (let i = 0; i < METHODS; i++) {
      const fields = { method: `eth_method${String(i).padStart(3, '0')}`, chain: i % 2 === 0 ? 'eth' : 'bsc' };
      const when = at + (i % 10) * MIN + i;
      for (let k = 0; k <= i % 4; k++) calls.add(when, fields);
      if (i % 3 === 0) {
        for (let k = 0; k < 2; k++) calls.add(when + 1, { ...fields, rpcErrorCode: -32000, errorMessage: `failure number ${i}` });
        calls.add(when + 2, { ...fields, rpcErrorCode: -32005, errorMessage: 'limit exceeded' });
      }
    }
    await recordUsage(t.runtime, calls.records);

    const m = await metricsOf(o, period);
    expect(m.byMethod).toHaveLength(100);
    expect(m.byMethodOther?.methods).toBe(20);
    expect(m.errors).toHaveLength(50);
    expect(m.errorsOther).toMatchObject({ groups: 30, count: 30 });
    const text = await pdfOf(o, period);

    // Methods: 15 shown, 105 more (85 of byMethod and the 20 it left out).
    const methods = text.match(/and ([\d,]+) more methods: ([\d,]+) requests, ([\d,]+) errors/);
    expect(methods, text).not.toBeNull();
    const [, more, requests, errors] = methods as RegExpMatchArray;
    expect(num(more)).toBe(METHODS - 15);
    const shown = m.byMethod.slice(0, 15);
    expect(sum(shown, (x) => x.requests) + num(requests)).toBe(m.totals.requests);
    expect(sum(shown, (x) => x.errors) + num(errors)).toBe(m.totals.errors);
    expect(m.totals.requests).toBe(calls.records.length);

    // Error groups: 15 shown, 65 more (35 of errors and the 30 it left out).
    const groups = text.match(/and ([\d,]+) more error groups: ([\d,]+) errors/);
    expect(groups, text).not.toBeNull();
    const [, moreGroups, groupErrors] = groups as RegExpMatchArray;
    expect(num(moreGroups)).toBe(80 - 15);
    expect(sum(m.errors.slice(0, 15), (e) => e.count) + num(groupErrors)).toBe(m.totals.errors);
    expect(m.totals.errors).toBe(120);
  });

  it('nothing cut, nothing said: 15 methods and 15 error groups are shown whole', async () => {
    const { o, tokenId } = await professional();
    const at = Math.floor(Date.now() / MIN) * MIN - 30 * MIN;
    const period = { start: iso(at), end: iso(at + 20 * MIN) };
    const calls = usageCalls('pdf-others', o, tokenId);
    for (let i = 0; i < 15; i++) {
      const method = `eth_few${String(i).padStart(2, '0')}`;
      calls.add(at + i * 1000, { method });
      calls.add(at + i * 1000 + 1, { method, rpcErrorCode: -32000, errorMessage: `failure ${i}` });
    }
    await recordUsage(t.runtime, calls.records);
    const m = await metricsOf(o, period);
    expect([m.byMethod.length, m.byMethodOther, m.errors.length, m.errorsOther]).toEqual([15, null, 15, null]);
    const text = await pdfOf(o, period);
    expect(text).toContain('eth_few14');
    expect(text).not.toMatch(/more (methods?|error groups?|chains?)/);
  });
});
