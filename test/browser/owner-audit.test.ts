import type { Locator, Page, Request, Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TokenList, UserMetrics } from '../../src/api/types.js';
import { fmtInt } from '../../src/web/format.js';
import { type Browser, buildDashboard, launchBrowser } from '../support/browser.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { listen, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * An owner's audit of the dashboard's unhappy paths in a real Chromium, against the whole service
 * in process (a real ganache behind `local`): every form whose request fails on the network and
 * then with a 5xx says so in the form, keeps what was typed, is not left busy, and succeeds when
 * sent again; a log-out the server did not take; a log-out in another tab; addresses naming no
 * token; panels whose data did not load; and on every page, with and without usage, no NaN,
 * undefined, null or Invalid Date, and every table with column headers. The happy paths are
 * owner-walkthrough's and dashboard's.
 */

const PASSWORD = 'correct horse battery';
const EMAIL = `audit-${Date.now().toString(36)}@example.com`;
const NETWORK_DOWN = 'Cannot reach the server. Check the connection and try again.';

let node: GanacheNode;
let t: TestApp;
let base: string;
let browser: Browser;
let page: Page;
let tokenId = '';

async function go(hash: string): Promise<void> {
  await page.goto('about:blank');
  await page.goto(`${base}/#${hash}`);
  await page.locator('main h1').first().waitFor();
}

/** The management API as the logged-in browser (its session cookie). */
async function api<T>(path: string): Promise<{ status: number; body: T }> {
  const res = await page.context().request.get(`${base}${path}`);
  return { status: res.status(), body: (await res.json().catch(() => null)) as T };
}

async function until<T>(what: string, probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 8000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * The page's next two `method` requests to `path` fail: the first on the network, the second
 * with a 500 whose body is HTML (a proxy's page, not the API's problem+json); the ones after
 * reach the server. Returns the undo.
 */
async function failTwice(method: string, path: string | RegExp): Promise<() => Promise<void>> {
  let seen = 0;
  const matches = (url: URL) => (typeof path === 'string' ? url.pathname === path : path.test(url.pathname));
  const handler = (route: Route, request: Request) => {
    if (request.method() !== method) return route.fallback();
    seen++;
    if (seen === 1) return route.abort('failed');
    if (seen === 2) return route.fulfill({ status: 500, contentType: 'text/html', body: '<h1>Internal Server Error</h1>' });
    return route.fallback();
  };
  await page.route(matches, handler);
  return () => page.unroute(matches, handler);
}

/**
 * Submits `form` three times against `failTwice`: the network failure and then the 500 are each
 * said inside the form, the fields keep what was typed and the submit button is not left busy;
 * the third submission is the server's. Returns once `done` is seen.
 */
async function refusedThenRetried(form: Locator, submit: Locator, method: string, path: string | RegExp, done: () => Promise<unknown>): Promise<void> {
  const typed = () =>
    form.locator('input:not([type=checkbox]):not([type=radio]), textarea').evaluateAll((els) => els.map((e) => (e as HTMLInputElement).value));
  const before = await typed();
  const label = (await submit.textContent()) ?? '';
  const undo = await failTwice(method, path);
  try {
    for (const message of [NETWORK_DOWN, /^The server answered 500\b/]) {
      await submit.click();
      const problem = form.getByRole('alert');
      await until(
        `the form to say ${message}`,
        () => problem.textContent().catch(() => ''),
        (v) => (typeof message === 'string' ? v === message : message.test(v ?? '')),
      );
      expect(await typed(), 'what was typed').toEqual(before);
      expect(await submit.getAttribute('aria-disabled'), 'the button is not left busy').toBeNull();
      expect(await submit.textContent()).toBe(label);
    }
    await submit.click();
    await done();
  } finally {
    await undo();
  }
}

/** What a page must never show an owner. */
const BROKEN = /\bNaN\b|\bundefined\b|Invalid Date|\bnull\b|\[object Object\]/;

/** Each page's text has nothing broken, its main heading, and every table its column headers. */
async function expectSoundPages(hashes: string[]): Promise<void> {
  for (const hash of hashes) {
    await go(hash);
    await page.waitForFunction(() => !(document.body.textContent ?? '').includes('Loading…'), undefined, { timeout: 5000 });
    const text = await page.evaluate(() => document.body.textContent ?? '');
    expect(BROKEN.exec(text)?.[0], `on ${hash}: ${text}`).toBeUndefined();
    const headerless = await page
      .locator('table:not(.u-legend)')
      .evaluateAll((tables) => tables.filter((t) => t.querySelectorAll('thead th[scope="col"]').length === 0).map((t) => t.outerHTML.slice(0, 120)));
    expect(headerless, `tables without column headers on ${hash}`).toEqual([]);
  }
}

const PAGES = ['/', '/usage', '/errors', '/tokens', '/alerts', '/exports', '/access-tokens'];

beforeAll(async () => {
  await buildDashboard();
  node = await startGanache();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url } });
  base = (await listen(t)).url;
  browser = await launchBrowser();
  page = await browser.newPage();
  page.setDefaultTimeout(8000);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await t?.close();
  await node?.close();
});

describe("an owner's audit of the dashboard", () => {
  it('signs up through a network failure and a 500, each said in the form, and sees a new account with nothing broken', async () => {
    await page.goto(`${base}/#/signup`);
    const form = page.getByRole('form', { name: 'Sign up' });
    await form.getByLabel('Email').fill(EMAIL);
    await form.getByLabel('Password').fill(PASSWORD);
    await refusedThenRetried(form, form.getByRole('button', { name: 'Create account' }), 'POST', '/api/v1/auth/signup', () =>
      page.getByRole('heading', { name: 'Overview' }).waitFor(),
    );
    await expectSoundPages(PAGES);
  });

  it('creates a token, describes it, and creates an access token, an alert and an export, each through a network failure and a 500', async () => {
    await go('/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    const create = page.getByRole('form', { name: 'New token' });
    await create.getByLabel('Name (required)').fill('audited');
    await create.getByLabel('Description').fill('typed once');
    await refusedThenRetried(create, create.getByRole('button', { name: 'Create token' }), 'POST', '/api/v1/tokens', () =>
      page.getByTestId('secret-value').waitFor(),
    );
    await page.getByRole('button', { name: 'I have stored it' }).click();
    const { body } = await api<TokenList>('/api/v1/tokens');
    expect(body.tokens.map((x) => [x.name, x.description])).toEqual([['audited', 'typed once']]);
    tokenId = body.tokens[0]?.id ?? '';

    await go(`/tokens/${tokenId}`);
    const edit = page.getByRole('form', { name: 'Edit token' });
    await edit.getByLabel('Description').fill('typed again');
    await refusedThenRetried(edit, edit.getByRole('button', { name: 'Save' }), 'PATCH', `/api/v1/tokens/${tokenId}`, () => edit.getByText('Saved.').waitFor());

    await go('/access-tokens');
    const access = page.getByRole('form', { name: 'New access token' });
    await access.getByLabel('Name').fill('nightly report');
    await refusedThenRetried(access, access.getByRole('button', { name: 'Create access token' }), 'POST', '/api/v1/access-tokens', () =>
      page.getByTestId('secret-value').waitFor(),
    );
    await page.getByRole('button', { name: 'I have stored it' }).click();

    await go('/alerts');
    await page.getByRole('button', { name: 'Create alert' }).click();
    const alert = page.getByRole('form', { name: 'New alert' });
    await alert.getByLabel('Name (required)').fill('nearly out');
    await alert.getByLabel('Threshold (%)').fill('80');
    await refusedThenRetried(alert, alert.getByRole('button', { name: 'Create alert' }), 'POST', '/api/v1/alerts', () =>
      page.locator('tr', { hasText: 'nearly out' }).waitFor(),
    );

    await go('/exports');
    const csv = page.getByRole('region', { name: 'CSV' });
    await refusedThenRetried(csv, csv.getByRole('button', { name: 'Download CSV' }), 'GET', '/api/v1/exports/usage.csv', () =>
      csv.getByText(/^Downloaded usage-.*\.csv\.$/).waitFor(),
    );
  });

  it('shows the calls on every page with nothing broken, the overview equal to the metrics API', async () => {
    const { body: list } = await api<TokenList>('/api/v1/tokens');
    expect(list.tokens).toHaveLength(1);
    await go('/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    // The token's string is shown once: make one to call with (Free allows 2).
    await page.getByRole('form', { name: 'New token' }).getByLabel('Name (required)').fill('caller');
    await page.getByRole('form', { name: 'New token' }).getByRole('button', { name: 'Create token' }).click();
    const token = await page.getByTestId('secret-value').inputValue();
    await page.getByRole('button', { name: 'I have stored it' }).click();
    for (const method of ['eth_blockNumber', 'eth_chainId', 'eth_noSuchMethod']) {
      const res = await fetch(`${base}/local/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: [] }),
      });
      await res.arrayBuffer();
    }
    await until(
      'the metrics to count the calls',
      () => api<UserMetrics>('/api/v1/metrics/user'),
      (r) => r.body.totals.requests === 3,
    );
    await go('/');
    const answer = page.waitForResponse((r) => r.url().includes('/api/v1/metrics/user') && r.url().includes('start='));
    await page.getByRole('radio', { name: '7 d' }).check();
    const metrics = (await (await answer).json()) as UserMetrics;
    await until(
      'the overview to show the calls',
      () => page.getByTestId('period-requests').textContent(),
      (v) => v === fmtInt(metrics.totals.requests),
    );
    expect(metrics.totals).toMatchObject({ requests: 3, errors: 1 });
    // The period is UTC, and says so.
    const totals = page.getByRole('region', { name: 'Requests in the selected period' });
    expect(await totals.locator('dd').nth(4).textContent()).toMatch(/ UTC$/);
    expect(await totals.locator('dd').nth(5).textContent()).toMatch(/ UTC$/);
    await expectSoundPages([...PAGES, `/tokens/${tokenId}`]);
    await page.getByRole('radio', { name: '24 h' }).check();
  });

  it('opens an address with a broken %-escape as a page not found, and a token this account lacks with a heading and a plain message', async () => {
    await go('/');
    await page.goto(`${base}/#/tokens/%E0%A4%A`);
    await page.getByRole('heading', { name: 'Page not found' }).waitFor();
    await page.goto('about:blank');
    await page.goto(`${base}/#/tokens/%E0%A4%A`);
    await page.getByRole('heading', { name: 'Page not found' }).waitFor();
    for (const id of ['not-a-token-id', 'tok_0000000000000000']) {
      await go(`/tokens/${id}`);
      await page.getByRole('heading', { name: 'Token not found' }).waitFor();
      expect(await page.locator('main').textContent()).toContain('There is no token with this address in your account.');
    }
    expect(browser.errors.filter((e) => e.startsWith('pageerror'))).toEqual([]);
  });

  it('says the analytics did not load instead of "Loading…", and the refresh button loads them', async () => {
    const matches = (url: URL) => url.pathname === '/api/v1/metrics/user';
    const down = (route: Route) => route.abort('failed');
    await page.route(matches, down);
    try {
      await go('/');
      const performance = page.getByRole('region', { name: 'Performance' });
      await performance.getByRole('alert').waitFor();
      expect(await performance.getByRole('alert').textContent()).toBe(NETWORK_DOWN);
      await until(
        'the load to end',
        () => page.getByTestId('freshness').first().textContent(),
        (v) => v === 'Not loaded',
      );
      // The billing panel reads the account on its own: its load may still be going when the analytics' failed.
      await until(
        'every panel to end its load',
        () => page.getByTestId('freshness').allTextContents(),
        (v) => !v.includes('Loading…'),
      );
      const main = ((await page.locator('main').textContent()) ?? '').replace(/\s+/g, ' ');
      expect(main).not.toContain('Loading…');
      expect(main).not.toContain('no traffic');
      expect(await page.getByRole('region', { name: 'Requests in the selected period' }).textContent()).toContain('Not loaded: see the error above.');
      expect(await page.getByTestId('metric-Success Rate').locator('.metric-value').textContent()).toBe('—');
    } finally {
      await page.unroute(matches, down);
    }
    await page.getByRole('region', { name: 'Performance' }).getByRole('button', { name: 'Refresh now' }).click();
    await until(
      'the overview to load',
      () => page.getByTestId('period-requests').textContent(),
      (v) => v === '3',
    );
  });

  it('keeps the owner logged in when the log-out does not reach the server, says so, and logs out when pressed again', async () => {
    await go('/tokens');
    const matches = (url: URL) => url.pathname === '/api/v1/auth/logout';
    const down = (route: Route) => route.abort('failed');
    await page.route(matches, down);
    const logOut = page.getByRole('button', { name: 'Log out' });
    try {
      await logOut.click();
      await page.getByText(`Not logged out: ${NETWORK_DOWN}`).waitFor();
      expect(await page.getByRole('heading', { name: 'Tokens', exact: true }).isVisible()).toBe(true);
      expect((await api('/api/v1/account')).status).toBe(200);
      expect(await logOut.getAttribute('aria-disabled')).toBeNull();
    } finally {
      await page.unroute(matches, down);
    }
    await logOut.click();
    await page.getByRole('heading', { name: 'Log in' }).waitFor();
    expect((await api('/api/v1/account')).status).toBe(401);
    expect(browser.errors.filter((e) => e.startsWith('pageerror'))).toEqual([]);
  });

  it('logs in through a network failure and a 500; logged out in another tab, the next action asks to log in again and then completes', async () => {
    const form = page.getByRole('form', { name: 'Log in' });
    await form.getByLabel('Email').fill(EMAIL);
    await form.getByLabel('Password').fill(PASSWORD);
    await refusedThenRetried(form, form.getByRole('button', { name: 'Log in' }), 'POST', '/api/v1/auth/login', () =>
      page.getByRole('heading', { name: 'Overview' }).waitFor(),
    );

    await go(`/tokens/${tokenId}`);
    const edit = page.getByRole('form', { name: 'Edit token' });
    await edit.getByLabel('Description').fill('after the other tab logged out');
    const other = await browser.newPage();
    await other.goto(`${base}/#/`);
    await other.getByRole('button', { name: 'Log out' }).click();
    await other.getByRole('heading', { name: 'Log in' }).waitFor();
    await other.close();

    await edit.getByRole('button', { name: 'Save' }).click();
    const relogin = page.getByTestId('session-lost');
    await relogin.getByRole('heading', { name: 'Your session has ended' }).waitFor();
    expect(await relogin.getByLabel('Email').inputValue()).toBe(EMAIL);
    await relogin.getByLabel('Password').fill(PASSWORD);
    await relogin.getByRole('button', { name: 'Log in' }).click();
    await relogin.waitFor({ state: 'detached' });
    await edit.getByText('Saved.').waitFor();
    expect(await edit.getByLabel('Description').inputValue()).toBe('after the other tab logged out');
    expect((await api<{ description: string }>(`/api/v1/tokens/${tokenId}`)).body.description).toBe('after the other tab logged out');
  });

  it('threw no uncaught error in the browser', () => {
    expect(browser.errors.filter((e) => e.startsWith('pageerror'))).toEqual([]);
  });
});
