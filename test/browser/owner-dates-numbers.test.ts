import type { Browser as Chromium, Locator, Page, Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TokenList } from '../../src/api/types.js';
import { buildDashboard, launchChromium } from '../support/browser.js';
import { ownerOn } from '../support/planOwner.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/**
 * What an owner away from UTC or from English picks, types and reads back (docs/decisions.md,
 * Dashboard, "A token's expiry date is the owner's own day…"): a real Chromium in the owner's zone and
 * language against the whole service in process, both clocks at 2026-12-01 07:50 UTC, which is
 * 23:50 on 30 November in Los Angeles and 21:50 on 1 December in Kiritimati (+14).
 *
 * - The expiry date picked is the last day the token works in the owner's own time zone: "31 Dec"
 *   in Los Angeles is sent as the fewest whole days (the API's `expires_in_days`) that keep the
 *   token valid through the end of that day there, and the list and the token's page show that day
 *   and the instant it stops, in the viewer's zone, named.
 * - The date picker's today is the owner's today: its `min`, and "through today" accepted.
 * - Figures are shown in the owner's locale, and what is shown reads back as the same number when
 *   typed: a German owner sees "1.000.000" and "1,125 ms" and gets them back by typing them.
 */

const PASSWORD = 'correct horse battery';
const NOW = Date.parse('2026-12-01T07:50:00Z');
const SHIFT = NOW - Date.now();
const now = (): number => Date.now() + SHIFT;

let t: TestApp;
let base: string;
let chromiumBrowser: Chromium;
let email = '';

async function ownerPage(timezoneId: string, locale: string): Promise<Page> {
  const context = await chromiumBrowser.newContext({ timezoneId, locale, viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  await page.clock.install({ time: now() });
  await page.goto(`${base}/#/`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByTestId('period-requests').waitFor();
  expect(await page.evaluate(() => Intl.DateTimeFormat().resolvedOptions().timeZone)).toBe(timezoneId);
  expect(await page.evaluate(() => navigator.language)).toBe(locale);
  return page;
}

async function go(page: Page, hash: string): Promise<void> {
  await page.goto(`${base}/#${hash}`);
  await page.locator('main h1').first().waitFor();
}

/** The hint and error texts under the field holding `control`. */
const fieldText = async (control: Locator): Promise<string> =>
  (await control.locator('xpath=ancestor::div[contains(@class,"field")][1]').locator('.hint, .field-error').allTextContents()).join(' | ');

beforeAll(async () => {
  await buildDashboard();
  t = await startTestApp({ now: () => new Date(now()) });
  base = (await t.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  email = (await ownerOn(t, 'unlimited')).email;
  chromiumBrowser = await launchChromium();
}, 120_000);

afterAll(async () => {
  await chromiumBrowser?.close();
  await t?.close();
});

describe("an owner's own day and own way of writing numbers", () => {
  it('in Los Angeles at 23:50, "31 Dec" is valid through the end of 31 December there; the list and the token page say so', async () => {
    const page = await ownerPage('America/Los_Angeles', 'en-US');
    await go(page, '/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    const form = page.getByRole('form', { name: 'New token' });
    await form.getByLabel('Name (required)').fill('contractor');
    const expiry = form.locator('input[type="date"]');
    expect(await fieldText(expiry)).toBe('The last day it works, in your time zone (America/Los_Angeles). Empty: never expires.');
    // Its today is the owner's: 30 November, not UTC's 1 December (nor its tomorrow).
    expect(await expiry.getAttribute('min')).toBe('2026-11-30');
    await expiry.fill('2026-11-30');
    expect(await fieldText(expiry)).toMatch(
      /^Works through 30 Nov 2026 in your time zone; stops 1 Dec 2026, 23:5\d GMT-8 \(in 1 day: the API counts whole days from now\)\.$/,
    );

    await expiry.fill('2026-12-31');
    expect(await fieldText(expiry)).toMatch(
      /^Works through 31 Dec 2026 in your time zone; stops 1 Jan 2027, 23:5\d GMT-8 \(in 32 days: the API counts whole days from now\)\.$/,
    );
    const [created] = await Promise.all([
      page.waitForRequest((r) => r.url().endsWith('/api/v1/tokens') && r.method() === 'POST'),
      form.getByRole('button', { name: 'Create token' }).click(),
    ]);
    expect(created.postDataJSON()).toEqual({ name: 'contractor', expires_in_days: 32 });
    await page.getByRole('button', { name: 'I have stored it' }).click();

    // Stored: after the end of 31 December in Los Angeles (08:00 UTC on 1 January), less than a day after it.
    const list = (await (await page.context().request.get(`${base}/api/v1/tokens`)).json()) as TokenList;
    const record = list.tokens.find((x) => x.name === 'contractor');
    const stops = Date.parse(record?.expires_at ?? '');
    const endOfDay = Date.parse('2027-01-01T08:00:00Z');
    expect(new Date(stops).toLocaleString('en-GB', { timeZone: 'America/Los_Angeles' }), 'stops, in Los Angeles').toMatch(/^01\/01\/2027, 23:5\d/);
    expect(stops >= endOfDay && stops < endOfDay + 86_400_000, String(record?.expires_at)).toBe(true);

    const row = page.locator('tr', { hasText: 'contractor' });
    await row.waitFor();
    expect(await row.locator('td[data-label="Expires"]').textContent()).toMatch(/^Through 31 Dec 2026stops 1 Jan 2027, 23:5\d GMT-8$/);
    await row.getByRole('link', { name: 'contractor' }).click();
    const expires = page.locator('dt', { hasText: 'Expires' }).locator('xpath=following-sibling::dd[1]');
    expect(await expires.textContent()).toMatch(/^Through 31 Dec 2026 in your time zone \(America\/Los_Angeles\); stops 1 Jan 2027, 23:5\d GMT-8$/);
    await page.context().close();
  });

  it("in Kiritimati at 21:50, the picker's today is 1 December; the custom range stays UTC, as its fields say", async () => {
    const page = await ownerPage('Pacific/Kiritimati', 'en-GB');
    await go(page, '/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    const expiry = page.getByRole('form', { name: 'New token' }).locator('input[type="date"]');
    expect(await expiry.getAttribute('min')).toBe('2026-12-01');
    await expiry.fill('2026-12-01');
    expect(await fieldText(expiry)).toMatch(
      /^Works through 1 Dec 2026 in your time zone; stops 2 Dec 2026, 21:5\d GMT\+14 \(in 1 day: the API counts whole days from now\)\.$/,
    );

    await go(page, '/usage');
    await page.getByText('Custom', { exact: true }).click();
    expect([await page.getByLabel('From (UTC)').inputValue(), await page.getByLabel('To (UTC)').inputValue()]).toEqual([
      '2026-11-29T07:50',
      '2026-12-01T07:50',
    ]);
    await page.context().close();
  });

  it('a German owner sees figures written the German way, and typing what is shown gives the same number back', async () => {
    const page = await ownerPage('Europe/Berlin', 'de-DE');
    const sent: Record<string, unknown>[] = [];
    page.on('request', (r: Request) => {
      if (/\/api\/v1\/(alerts|tokens)/.test(r.url()) && ['POST', 'PATCH'].includes(r.method())) sent.push(r.postDataJSON() as Record<string, unknown>);
    });
    expect(await page.getByTestId('metric-Success Rate').locator('.metric-target').textContent()).toBe('Target > 99,9 % · no traffic');

    await go(page, '/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    const token = page.getByRole('form', { name: 'New token' });
    await token.getByLabel('Name (required)').fill('limited');
    await token.getByLabel('Custom monthly limit').pressSequentially('1.000.000');
    await token.getByRole('button', { name: 'Create token' }).click();
    await page.getByRole('button', { name: 'I have stored it' }).click();
    const usage = page.locator('tr', { hasText: 'limited' }).getByTestId('token-usage');
    await usage.waitFor();
    expect(await usage.textContent()).toBe('0of 1.000.000');

    await go(page, '/alerts');
    await page.getByRole('button', { name: 'Create alert' }).click();
    const create = page.getByRole('form', { name: 'New alert' });
    await create.getByLabel('Name (required)').fill('slow');
    await create.getByLabel('Type').selectOption('response_time');
    await create.getByLabel('Threshold (ms)').fill('');
    await create.getByLabel('Threshold (ms)').pressSequentially('1,125');
    await create.getByRole('button', { name: 'Create alert' }).click();
    const rule = page.locator('tr', { hasText: 'slow' }).locator('td[data-label="Rule"]');
    await rule.waitFor();
    const shown = /≥ (\S+) ms/.exec((await rule.textContent()) ?? '')?.[1] ?? '';
    expect(shown).toBe('1,125');

    // The threshold as the table shows it, typed into the edit form: the same 1.125 ms.
    await page.getByRole('button', { name: 'Edit slow' }).click();
    const edit = page.getByRole('form', { name: 'Edit alert' });
    await edit.getByLabel('Threshold (ms)').fill('');
    await edit.getByLabel('Threshold (ms)').pressSequentially(shown);
    await edit.getByRole('button', { name: 'Save alert' }).click();
    await expect.poll(() => sent.length).toBe(3);
    expect(sent.map((b) => [b.monthly_limit, b.threshold])).toEqual([
      [1_000_000, undefined],
      [undefined, 1.125],
      [undefined, 1.125],
    ]);
    await page.context().close();
  });
});
