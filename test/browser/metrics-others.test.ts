import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UserMetrics } from '../../src/api/types.js';
import { type Browser, buildDashboard, launchBrowser } from '../support/browser.js';
import { createToken, ownerOn } from '../support/planOwner.js';
import { startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * Where a list of the metrics was cut, the dashboard says what it left out: the overview's 10
 * busiest methods end with "N other methods" (the rest of `byMethod` and `byMethodOther`), the
 * error groups with "N other error groups" (`errorsOther`), the usage page's per-method table
 * of calls served without a node with the methods past the API's cap; the rows then add up to
 * the totals shown above them. An account whose lists are whole sees no such row.
 */

const MIN = 60_000;
const METHODS = 110;
const ERROR_METHODS = 60;
const PASSWORD = 'correct horse battery';

let t: TestApp;
let base: string;
let browser: Browser;
let page: Page;
type Owner = Awaited<ReturnType<typeof ownerOn>>;

async function professional(): Promise<{ o: Owner; tokenId: string }> {
  const o = await ownerOn(t, 'professional');
  return { o, tokenId: await createToken(t, o, { name: 'many methods' }) };
}

/** This file's calls: 5 ms, 4 of them at the node, from 127.0.0.1. */
const callsOf = (o: Owner, tokenId: string) => usageCalls('others', o, tokenId, { totalMs: 5, upstreamMs: 4, clientIp: '127.0.0.1', upstream: 'eth-1' });

async function logIn(email: string): Promise<void> {
  if (page.url().startsWith(base)) {
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('heading', { name: 'Log in' }).waitFor();
  } else await page.goto(`${base}/#/`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByTestId('period-requests').waitFor();
}

/** The metrics the dashboard's default range (the last 24 hours) shows, as the API answers them. */
async function metrics(): Promise<UserMetrics> {
  const start = new Date(Date.now() - 24 * 3_600_000).toISOString();
  const res = await page.context().request.get(`${base}/api/v1/metrics/user?${new URLSearchParams({ start })}`);
  expect(res.status()).toBe(200);
  return (await res.json()) as UserMetrics;
}

const BY_METHOD = 'Requests by method';
const ERRORS = 'Errors';
const SERVED = 'Served without a node call, by method';
/** A dashboard table, by the label of the region that holds it. */
const table = (label: string) => page.getByRole('region', { name: label, exact: true }).locator('table');
/** The text of every cell (th or td) of every body row of the table, once it has rows. */
async function rowsOf(label: string): Promise<string[][]> {
  const rows = table(label).locator('tbody tr');
  await rows.first().waitFor();
  return rows.evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => (c.textContent ?? '').trim())));
}
const othersRow = (label: string) => table(label).locator('tbody tr[data-testid="others"]');
/** "1,234" or "12 (40.0 %)": the leading figure. */
const num = (s: string | undefined): number => Number(/^[\d,]+/.exec(s ?? '')?.[0].replaceAll(',', '') ?? Number.NaN);
const sumColumn = (rows: string[][], i: number): number => rows.reduce((s, r) => s + num(r[i]), 0);

beforeAll(async () => {
  await buildDashboard();
  t = await startTestApp();
  base = (await t.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  browser = await launchBrowser();
  page = await browser.newPage();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await t?.close();
});

describe('an account with more methods and error groups than the metrics list', () => {
  let o: Owner;
  let m: UserMetrics;

  beforeAll(async () => {
    const seeded = await professional();
    o = seeded.o;
    const at = Math.floor(Date.now() / MIN) * MIN - 30 * MIN;
    // 110 methods on two chains, (i % 4) + 1 successes each, the first from the cache and for
    // every fifth method one more shared with an identical call in flight; the first 60 methods
    // with (i % 3) + 1 errors of a message of their own (60 groups). Figures differ, so a wrong
    // sum shows.
    const calls = callsOf(o, seeded.tokenId);
    for (let i = 0; i < METHODS; i++) {
      const fields = { method: `eth_method${String(i).padStart(3, '0')}`, chain: i % 2 === 0 ? 'eth' : 'bsc' };
      const when = at + (i % 20) * MIN + i;
      for (let k = 0; k <= i % 4; k++) calls.add(when, { ...fields, ...(k === 0 ? { cache: 'hit' as const } : {}) });
      if (i % 5 === 0) calls.add(when, { ...fields, cache: 'coalesced' });
      if (i < ERROR_METHODS) for (let k = 0; k <= i % 3; k++) calls.add(when + 1, { ...fields, rpcErrorCode: -32000, errorMessage: `failure number ${i}` });
    }
    await recordUsage(t.runtime, calls.records);
    await logIn(o.email);
    m = await metrics();
    expect(m.totals.requests).toBe(calls.records.length);
    expect([m.byMethod.length, m.byMethodOther?.methods, m.errors.length, m.errorsOther?.groups]).toEqual([100, METHODS - 100, 50, ERROR_METHODS - 50]);
  });

  it('overview: the 10 busiest methods, then "100 other methods", adding up to the period totals', async () => {
    await page.goto(`${base}/#/`);
    const rows = await rowsOf(BY_METHOD);
    expect(rows).toHaveLength(11);
    expect(rows.slice(0, 10).map((r) => r[0])).toEqual(m.byMethod.slice(0, 10).map((x) => `${x.method} ${x.chain}`));
    expect(rows[10]?.[0]).toBe(`${METHODS - 10} other methods`);
    const total = num((await page.getByTestId('period-requests').textContent()) ?? '');
    expect(total).toBe(m.totals.requests);
    // Requests, then Share, then Errors "n (x %)".
    expect(sumColumn(rows, 1)).toBe(total);
    expect(sumColumn(rows, 3)).toBe(m.totals.errors);
    const shares = rows.reduce((s, r) => s + Number.parseFloat(r[2] ?? ''), 0);
    expect(Math.abs(shares - 100)).toBeLessThan(0.5);
  });

  it('errors: the 50 groups, then "10 other error groups" with their count, adding up to the errors', async () => {
    await page.goto(`${base}/#/errors`);
    const rows = await rowsOf(ERRORS);
    expect(rows).toHaveLength(51);
    const last = rows[50] ?? [];
    expect(last[1]).toBe(`${ERROR_METHODS - 50} other error groups`);
    expect(num(last[4])).toBe(m.errorsOther?.count);
    const shownErrors = num((await page.locator('.chart-total strong').first().textContent()) ?? '');
    expect(shownErrors).toBe(m.totals.errors);
    expect(sumColumn(rows, 4)).toBe(shownErrors);
    // Sorted by last seen, the summed row stays last.
    await page.getByRole('button', { name: 'Last seen' }).click();
    await expect.poll(() => page.getByRole('columnheader', { name: 'Last seen' }).getAttribute('aria-sort')).toBe('descending');
    expect((await rowsOf(ERRORS))[50]?.[1]).toBe(`${ERROR_METHODS - 50} other error groups`);
  });

  it('usage: calls served without a node, per method, with the methods past the cap summed', async () => {
    await page.goto(`${base}/#/usage`);
    const rows = await rowsOf(SERVED);
    expect(rows).toHaveLength(101);
    expect(rows[100]?.[1]).toBe(`${METHODS - 100} other methods`);
    // Network, Method, Requests, Cache hits, Coalesced, Hedged.
    expect(sumColumn(rows, 2)).toBe(m.totals.requests);
    expect(sumColumn(rows, 3)).toBe(num((await page.getByTestId('cache-hits').textContent()) ?? ''));
    expect(sumColumn(rows, 3)).toBe(METHODS);
    expect(sumColumn(rows, 4)).toBe(num((await page.getByTestId('coalesced').textContent()) ?? ''));
  });
});

describe('an account whose lists are whole', () => {
  it('sees no "other" rows: byMethodOther and errorsOther are null and nothing was cut', async () => {
    const { o, tokenId } = await professional();
    const at = Date.now() - 20 * MIN;
    const calls = callsOf(o, tokenId);
    for (let i = 0; i < 5; i++) {
      const fields = { method: `eth_few${i}` };
      calls.add(at + i, { ...fields, cache: 'hit' });
      calls.add(at + i, { ...fields, rpcErrorCode: -32000, errorMessage: `failure ${i}` });
    }
    await recordUsage(t.runtime, calls.records);
    await logIn(o.email);
    const m = await metrics();
    expect([m.byMethod.length, m.byMethodOther, m.errors.length, m.errorsOther]).toEqual([5, null, 5, null]);

    expect(await rowsOf(BY_METHOD)).toHaveLength(5);
    expect(await othersRow(BY_METHOD).count()).toBe(0);
    await page.goto(`${base}/#/errors`);
    expect(await rowsOf(ERRORS)).toHaveLength(5);
    expect(await othersRow(ERRORS).count()).toBe(0);
    await page.goto(`${base}/#/usage`);
    expect(await rowsOf(SERVED)).toHaveLength(5);
    expect(await othersRow(SERVED).count()).toBe(0);
    // Nothing thrown while rendering (Chromium's "Failed to load resource" lines are the 401s of a page opened logged out).
    expect(browser.errors.filter((e) => e.startsWith('pageerror'))).toEqual([]);
  });
});
