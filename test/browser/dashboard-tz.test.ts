import { readFile } from 'node:fs/promises';
import type { Browser as Chromium, Page, Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fmtDateTime } from '../../src/web/format.js';
import { buildDashboard, launchChromium } from '../support/browser.js';
import { createToken, ownerOn } from '../support/planOwner.js';
import { startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * The dashboard as owners outside UTC and outside English use it: a real Chromium in their zone
 * and language (Los Angeles across its daylight-saving changes, Kolkata at +05:30, Kiritimati at
 * +14; de-DE, ar-EG, ja-JP) against the whole service in process, both clocks set to
 * 2026-12-01 05:00 UTC (21:00 the day before in Los Angeles, 19:00 in Kiritimati). The dashboard
 * shows UTC and says so (docs/decisions.md, Dashboard; a token's expiry date alone is the owner's
 * own day): what an owner reads, types and gets must not depend on where the browser is.
 *
 * - The usage chart's time axis reads the same in Los Angeles as in UTC on a 25-hour and a
 *   23-hour day of Los Angeles (its ticks were found on the local clock).
 * - The exports page states the period its files cover (it said the asked period, not the whole
 *   minutes or hours the file holds, and not the one sent minutes later).
 * - A custom range ending further ahead than the API takes is refused in the form, naming now in
 *   UTC, instead of a 400 in every panel; one ending later "today" in +14 is taken as typed.
 * - Numbers typed in German or Arabic are read as meant: "99,5" is 99.5 and "10.000" ten
 *   thousand (a number field in an English page read 995 and 10); figures are shown the same way.
 * - (A token's expiry date is the owner's own day: test/browser/owner-dates-numbers.test.ts.)
 * - A call at 23:30 UTC on the last day of the month is last month's in every panel.
 */

const PASSWORD = 'correct horse battery';
const NOW = Date.parse('2026-12-01T05:00:00Z');
const SHIFT = NOW - Date.now();
const now = (): number => Date.now() + SHIFT;
const MIN = 60_000;
const HOUR = 60 * MIN;

let t: TestApp;
let base: string;
let chromiumBrowser: Chromium;
let email = '';
let tokenId = '';

/** Every API answer of 400 or more the pages received, as "status path". */
const refusals: string[] = [];

/**
 * Records the texts each canvas draws since it was last cleared: uPlot draws its axes' labels on
 * its canvas, with the x of each.
 */
function recordCanvasTexts(): void {
  const texts = new Map<HTMLCanvasElement, [string, number][]>();
  (window as unknown as { canvasTexts: typeof texts }).canvasTexts = texts;
  const proto = CanvasRenderingContext2D.prototype;
  const { clearRect, fillText } = proto;
  proto.clearRect = function (x, y, w, h) {
    if (x === 0 && y === 0 && w >= this.canvas.width && h >= this.canvas.height) texts.set(this.canvas, []);
    clearRect.call(this, x, y, w, h);
  };
  proto.fillText = function (text, x, y, maxWidth) {
    texts.get(this.canvas)?.push([String(text), Math.round(x)]);
    fillText.call(this, text, x, y, maxWidth);
  };
}

/** A logged-in page in a browser context of `timezoneId` and `locale`, its clock at the service's. */
async function ownerPage(timezoneId: string, locale: string): Promise<Page> {
  const context = await chromiumBrowser.newContext({ timezoneId, locale, viewport: { width: 1280, height: 860 }, acceptDownloads: true });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.clock.install({ time: now() });
  await page.addInitScript(recordCanvasTexts);
  page.on('response', (r) => {
    if (r.url().includes('/api/') && r.status() >= 400) refusals.push(`${r.status()} ${new URL(r.url()).pathname}${new URL(r.url()).search}`);
  });
  await page.goto(`${base}/#/`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByTestId('period-requests').waitFor();
  // The page's wall clock is the zone's (Chromium may name a zone by another of its names: Asia/Calcutta).
  const wall = await page.evaluate((at) => new Date(at).toLocaleString('en-US'), NOW);
  expect(wall, `the page's zone is ${timezoneId}`).toBe(new Date(NOW).toLocaleString('en-US', { timeZone: timezoneId }));
  expect(await page.evaluate(() => navigator.language)).toBe(locale);
  return page;
}

async function go(page: Page, hash: string): Promise<void> {
  await page.goto(`${base}/#${hash}`);
  await page.locator('main h1').first().waitFor();
}

/** The text of the page's main part, checked for figures or times that did not come out. */
async function mainText(page: Page): Promise<string> {
  const text = (await page.locator('main').textContent()) ?? '';
  expect(text).not.toMatch(/NaN|Invalid Date|undefined|Infinity/);
  return text;
}

/** Shows the custom range [from, to) (typed in the UTC fields) on the current page; resolves with its metrics answer. */
async function customRange(page: Page, from: string, to: string): Promise<void> {
  if (!(await page.getByLabel('From (UTC)').isVisible())) await page.getByText('Custom', { exact: true }).click();
  await page.getByLabel('From (UTC)').fill(from);
  await page.getByLabel('To (UTC)').fill(to);
  const answered = page.waitForResponse((r) => r.url().includes('/api/v1/metrics/user') && r.url().includes(encodeURIComponent(`${from}:00.000Z`)));
  await page.getByRole('button', { name: 'Apply' }).click();
  expect((await answered).status()).toBe(200);
}

const TICK = /^(\d\d:\d\d|\d{1,2} [A-Z][a-z]{2})$/;

/** The usage chart's time axis as drawn: its labels and where, once two frames apart draw the same with `expected` among them. */
async function timeAxis(page: Page, expected: string): Promise<[string, number][]> {
  const read = () =>
    page.evaluate((tick) => {
      const canvas = document.querySelector<HTMLCanvasElement>('[data-testid="usage-chart"] canvas');
      const texts = (window as unknown as { canvasTexts: Map<HTMLCanvasElement, [string, number][]> }).canvasTexts;
      return (canvas ? (texts.get(canvas) ?? []) : []).filter(([text]) => new RegExp(tick).test(text));
    }, TICK.source);
  let last = JSON.stringify(await read());
  for (let i = 0; i < 100; i++) {
    await page.waitForTimeout(100);
    const next = JSON.stringify(await read());
    if (next === last && next.includes(`"${expected}"`)) return JSON.parse(next) as [string, number][];
    last = next;
  }
  throw new Error(`the chart's time axis never showed ${expected} steadily; last: ${last}`);
}

beforeAll(async () => {
  await buildDashboard();
  t = await startTestApp({ now: () => new Date(now()) });
  base = (await t.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  const o = await ownerOn(t, 'unlimited');
  email = o.email;
  tokenId = await createToken(t, o, { name: 'main' });
  const calls = usageCalls('tz', o, tokenId, { totalMs: 5, upstreamMs: 4, clientIp: '127.0.0.1', upstream: 'eth-1' });
  // Three days around each daylight-saving change of Los Angeles in 2026, every hour at :10.
  for (const from of ['2026-10-31T00:00:00Z', '2026-03-07T00:00:00Z']) {
    for (let h = 0; h < 72; h++) for (let k = 0; k <= h % 3; k++) calls.add(Date.parse(from) + h * HOUR + 10 * MIN);
  }
  // Across the month's turn: 5 calls at 23:30 UTC on 30 November, 3 at 00:10 on 1 December, one failed at 04:50.
  for (let i = 0; i < 5; i++) calls.add(Date.parse('2026-11-30T23:30:00Z'));
  for (let i = 0; i < 3; i++) calls.add(Date.parse('2026-12-01T00:10:00Z'));
  calls.add(Date.parse('2026-12-01T04:50:00Z'), { rpcErrorCode: -32000, errorMessage: 'execution reverted' });
  await recordUsage(t.runtime, calls.records);
  chromiumBrowser = await launchChromium();
}, 120_000);

afterAll(async () => {
  await chromiumBrowser?.close();
  await t?.close();
});

describe('owners outside UTC and outside English', () => {
  it("the usage chart's time axis reads the same in Los Angeles as in UTC on its 25-hour and 23-hour days", async () => {
    const utc = await ownerPage('UTC', 'en-GB');
    const la = await ownerPage('America/Los_Angeles', 'ar-EG');
    for (const page of [utc, la]) await go(page, '/usage');
    // Los Angeles falls back at 09:00 UTC on 1 November and springs forward at 10:00 UTC on 8 March.
    for (const [from, to, day] of [
      ['2026-10-31T12:00', '2026-11-02T06:00', '1 Nov'],
      ['2026-03-07T00:00', '2026-03-09T12:00', '8 Mar'],
    ] as const) {
      const axes: [string, number][][] = [];
      for (const page of [utc, la]) {
        await customRange(page, from, to);
        axes.push(await timeAxis(page, day));
      }
      const [inUtc = [], inLa = []] = axes;
      // In UTC: evenly spaced, each time on the step (a date at midnight).
      const gaps = inUtc.slice(1).map(([, x], i) => x - (inUtc[i]?.[1] ?? 0));
      expect(Math.max(...gaps) - Math.min(...gaps), `ticks ${JSON.stringify(inUtc)}`).toBeLessThanOrEqual(2);
      expect(inLa, `${from} → ${to} in Los Angeles`).toEqual(inUtc);
    }
    expect(await mainText(la)).toContain('Time (UTC)');
    await utc.context().close();
    await la.context().close();
  });

  it('the exports page states the period its files cover, also minutes later', async () => {
    const page = await ownerPage('Pacific/Kiritimati', 'ja-JP');
    await go(page, '/exports');
    const stated = async () => /From (.+? UTC) to (.+? UTC),/.exec(await mainText(page))?.slice(1) ?? [];
    for (const range of ['24 h', '30 d', 'later']) {
      if (range === 'later') await page.clock.fastForward('03:10');
      else await page.getByText(range, { exact: true }).click();
      const [download, response] = await Promise.all([
        page.waitForEvent('download'),
        page.waitForResponse((r) => r.url().includes('/api/v1/exports/usage.json')),
        page.getByRole('button', { name: 'Download JSON' }).click(),
      ]);
      expect(response.status()).toBe(200);
      const file = JSON.parse(await readFile(await download.path(), 'utf8')) as { period: { start: string; end: string } };
      expect(await stated(), `${range}: ${download.suggestedFilename()}`).toEqual([fmtDateTime(file.period.start), fmtDateTime(file.period.end)]);
    }
    await page.context().close();
  });

  it('a custom range ending further ahead than the API takes is refused in the form; later today in +14 is taken as typed', async () => {
    const page = await ownerPage('Pacific/Kiritimati', 'ja-JP');
    await go(page, '/usage');
    const asked: string[] = [];
    page.on('request', (r: Request) => {
      if (r.url().includes('/api/v1/metrics/user')) asked.push(new URL(r.url()).searchParams.get('end') ?? '');
    });
    await page.getByText('Custom', { exact: true }).click();
    // The end of tomorrow, 2 December, in Kiritimati, typed as the UTC the fields ask for: 43 hours ahead.
    await page.getByLabel('From (UTC)').fill('2026-12-01T00:00');
    await page.getByLabel('To (UTC)').fill('2026-12-02T23:59');
    await page.getByRole('button', { name: 'Apply' }).click();
    await expect
      .poll(() => page.locator('.custom-range').textContent(), { timeout: 5000 })
      .toMatch(/The end must be at most a day after now, 1 Dec 2026, 05:0\d UTC\./);
    // The end of today in Kiritimati, typed so: 19 hours ahead, asked as typed.
    await customRange(page, '2026-12-01T00:00', '2026-12-01T23:59');
    expect(asked).not.toContain('2026-12-02T23:59:00.000Z');
    expect(asked.at(-1)).toBe('2026-12-01T23:59:00.000Z');
    // The answer is in; the page draws it a moment later.
    await expect.poll(() => mainText(page), { timeout: 10_000 }).toContain('4 requests in the period');
    expect(refusals).toEqual([]);
    await page.context().close();
  });

  it('numbers typed the German way are read as meant: alert thresholds, a minimum of requests, a token limit', async () => {
    const page = await ownerPage('Asia/Kolkata', 'de-DE');
    const sent: Record<string, unknown>[] = [];
    page.on('request', (r: Request) => {
      if (/\/api\/v1\/(alerts|tokens)/.test(r.url()) && ['POST', 'PATCH'].includes(r.method())) sent.push(r.postDataJSON() as Record<string, unknown>);
    });
    await go(page, '/alerts');
    const create = async (name: string, type: string, fields: [string, string][]) => {
      await page.getByRole('button', { name: 'Create alert' }).click();
      const form = page.getByRole('form', { name: 'New alert' });
      await form.getByLabel('Name (required)').fill(name);
      await form.getByLabel('Type').selectOption(type);
      // Typed key by key, as an owner does (a number field would take "2,5" as it reads it).
      for (const [label, typed] of fields) {
        await form.getByLabel(label).fill('');
        await form.getByLabel(label).pressSequentially(typed);
      }
      await form.getByRole('button', { name: 'Create alert' }).click();
      await page.getByRole('button', { name: `Edit ${name}` }).waitFor();
    };
    await create('failing', 'error_rate', [
      ['Threshold (%)', '2,5'],
      ['Minimum requests', '10.000'],
    ]);
    await create('slow', 'response_time', [['Threshold (ms)', '1.500']]);

    // Edited without a change, the threshold shows as it was typed and stays 2.5.
    await page.getByRole('button', { name: 'Edit failing' }).click();
    const edit = page.getByRole('form', { name: 'Edit alert' });
    expect(await edit.getByLabel('Threshold (%)').inputValue()).toBe('2,5');
    await edit.getByRole('button', { name: 'Save alert' }).click();
    await expect.poll(() => sent.length).toBe(3);

    await go(page, '/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    const token = page.getByRole('form', { name: 'New token' });
    await token.getByLabel('Name (required)').fill('limited');
    await token.getByLabel('Custom monthly limit').pressSequentially('1.000.000');
    await token.getByRole('button', { name: 'Create token' }).click();
    await page.getByRole('button', { name: 'I have stored it' }).click();
    expect(sent.map((b) => [b.threshold, b.min_requests, b.monthly_limit])).toEqual([
      [2.5, 10_000, undefined],
      [1500, 10, undefined],
      [2.5, 10_000, undefined],
      [undefined, undefined, 1_000_000],
    ]);
    expect(refusals).toEqual([]);
    await page.context().close();
  });

  it('a call at 23:30 UTC on 30 November is last month in every panel, in Kolkata where it was 1 December', async () => {
    const page = await ownerPage('Asia/Kolkata', 'de-DE');
    // The last 24 hours: 5 calls on 30 November and 4 on 1 December (UTC); the month counts the 4.
    expect(await page.getByTestId('billing-used').textContent()).toBe('4');
    expect(await page.getByTestId('period-requests').textContent()).toBe('9');
    expect(await mainText(page)).toContain('The count resets on 1 Jan 2027 (UTC).');
    await go(page, '/tokens');
    await page.locator(`tr[data-token-id="${tokenId}"]`).waitFor();
    expect(await page.locator(`tr[data-token-id="${tokenId}"]`).getByTestId('token-usage').textContent()).toBe('4');
    await go(page, '/errors');
    await page.getByTestId('recent-errors').waitFor();
    const errors = await mainText(page);
    expect(errors).toContain('1 error in 9 requests (11,1\u00a0%)');
    expect(errors).toContain('1 Dec 2026, 04:50 UTC');
    await go(page, '/usage');
    await expect.poll(() => page.getByTestId('usage-chart-sum').textContent()).toBe('9');
    expect(refusals).toEqual([]);
    await page.context().close();
  });
});
