import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { type Browser, buildDashboard, launchBrowser } from '../support/browser.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

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
  const o = await owner(t.app);
  email = o.email;
  await t.app.inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${o.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan: 'professional' },
  });
  const token = async (payload: Record<string, unknown>) =>
    (await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload })).json().id as string;
  const own = await token({ name: 'own limit', monthly_limit: 50 });
  const shared = await token({ name: 'account limit' });
  const at = new Date().toISOString();
  const call = (i: number, tokenId: string): UsageRecord => ({
    requestId: `billing-${i}`,
    at,
    accountId: o.accountId,
    tokenId,
    chain: 'eth',
    method: 'eth_blockNumber',
    status: 200,
    rpcErrorCode: null,
    errorMessage: null,
    totalMs: 5,
    upstreamMs: 4,
    clientIp: '127.0.0.1',
    upstream: 'eth-1',
  });
  const records = [...Array.from({ length: 30 }, (_, i) => call(i, own)), ...Array.from({ length: 20 }, (_, i) => call(30 + i, shared))];
  await t.runtime.store.append(
    usageStream(o.accountId),
    records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: r })),
    'any',
  );
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
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
