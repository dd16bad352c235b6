import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Browser, buildDashboard, launchBrowser } from '../support/browser.js';
import { createToken, ownerOn } from '../support/planOwner.js';
import { startTestApp, type TestApp } from '../support/testApp.js';
import { usageCalls } from '../support/usageCall.js';
import { recordUsage } from '../support/usageLog.js';

/**
 * The overview's billing period shows the account's quota used as the API's remaining counts it
 * (spec: Authentication 6): with 30 calls on a token with its own limit and 20 on one without,
 * 20 of the limit of 100 are used, not every request of the month.
 */
const LIMIT = 100;
const dir = mkdtempSync(join(tmpdir(), 'gw-billing-'));
const plans = join(dir, 'plans.json');
writeFileSync(plans, JSON.stringify({ professional: { monthly_requests: LIMIT } }));

let t: TestApp;
let base: string;
let browser: Browser;
let page: Page;
let email: string;

beforeAll(async () => {
  await buildDashboard();
  t = await startTestApp({ env: { PLANS_CONFIG: plans } });
  base = (await t.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  const o = await ownerOn(t, 'professional');
  email = o.email;
  const own = await createToken(t, o, { name: 'own limit', monthly_limit: 50 });
  const shared = await createToken(t, o, { name: 'account limit' });
  const at = Date.now();
  const calls = usageCalls('billing', o, own, { totalMs: 5, upstreamMs: 4, clientIp: '127.0.0.1', upstream: 'eth-1' });
  for (let i = 0; i < 30; i++) calls.add(at);
  for (let i = 0; i < 20; i++) calls.add(at, { tokenId: shared });
  await recordUsage(t.runtime, calls.records);
  browser = await launchBrowser();
  page = await browser.newPage();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await t?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the billing period on the overview', () => {
  it('draws and states the share of the limit the remaining leaves, not every request', async () => {
    await page.goto(`${base}/#/`);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill('correct horse battery');
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByTestId('billing-remaining').waitFor();
    expect(await page.getByTestId('billing-used').textContent()).toBe('50');
    expect(await page.getByTestId('billing-remaining').textContent()).toBe('80');
    const bar = page.getByRole('progressbar', { name: 'Share of the monthly limit used' });
    expect(await bar.getAttribute('aria-valuenow')).toBe('20');
    expect(await page.locator('.billing p.muted').textContent()).toContain(`20.0\u00a0% of ${LIMIT} requests used.`);
  });
});
