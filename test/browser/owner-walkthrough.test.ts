import type { CDPSession, Page, Request, Response, Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TokenMetrics, TokenRecord, UserMetrics } from '../../src/api/types.js';
import { fmtInt, fmtMs, fmtPct } from '../../src/web/format.js';
import { type Browser, buildDashboard, launchBrowser } from '../support/browser.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * An account owner's walk through the dashboard in a real Chromium, against the whole service in
 * process (a real ganache behind the `local` chain): sign-up, a wrong password, a token created
 * and copied once, renamed, described, disabled and enabled by keyboard, its limits set (invalid
 * values refused next to the field, nothing saved), the analytics empty and then matching the
 * metrics API for the same period range by range, exports, alerts, a session that expires, a
 * revoked token, log-out. On every page: each control has an accessible name and Tab reaches
 * it; and the browser logs no error and no failed request beyond the ones a step provokes.
 */

const PASSWORD = 'correct horse battery';
const EMAIL = `walker-${Date.now().toString(36)}@example.com`;

let node: GanacheNode;
let t: TestApp;
let base: string;
let browser: Browser;
let page: Page;
let cdp: CDPSession;
/** Added to the service's clock: a week on, the browser's session has expired. */
let clockSkewMs = 0;
let token = '';
let tokenId = '';
/** Chain calls made with the token, each metered once. */
let callsMade = 0;

/** Every 4xx/5xx answer and failed request the page saw, as "STATUS METHOD /path". */
const failedLoads: string[] = [];
/** The ones a step provokes on purpose, in the same form. */
const provokedLoads: string[] = [];

const rpc = (method: string, params: unknown[] = []) => ({ jsonrpc: '2.0', id: 1, method, params });
async function chainCall(method = 'eth_blockNumber', params: unknown[] = []): Promise<number> {
  const res = await fetch(`${base}/local/${token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(rpc(method, params)),
  });
  await res.arrayBuffer();
  callsMade++;
  return res.status;
}

/** The management API as the logged-in browser (its session cookie). */
async function api<T>(path: string): Promise<{ status: number; body: T }> {
  const res = await page.context().request.get(`${base}${path}`);
  return { status: res.status(), body: (await res.json().catch(() => null)) as T };
}

/** Opens a dashboard page with a fresh load (a hash-only navigation keeps the old account). */
async function go(hash: string): Promise<void> {
  await page.goto('about:blank');
  await page.goto(`${base}/#${hash}`);
  await page.locator('main h1').first().waitFor();
}

/** Opens a dashboard page and returns the answer it got from the API path `read`, and the exact path and query it asked. */
async function goAndRead<T>(hash: string, read: string): Promise<{ path: string; body: T }> {
  await page.goto('about:blank');
  const answer = page.waitForResponse((r) => new URL(r.url()).pathname === read);
  await page.goto(`${base}/#${hash}`);
  const res = await answer;
  const body = (await res.json()) as T;
  await page.locator('main h1').first().waitFor();
  return { path: pathOf(res), body };
}

async function until<T>(what: string, probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 8000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(v)}`);
    // Slower than Free's 5 calls a second, so polling the gateway is never rate limited.
    await new Promise((r) => setTimeout(r, 250));
  }
}

const pathOf = (r: Response): string => {
  const url = new URL(r.url());
  return url.pathname + url.search;
};

/** Interactive nodes of Chromium's accessibility tree that have no name. */
async function unnamedControls(): Promise<string[]> {
  const { nodes } = (await cdp.send('Accessibility.getFullAXTree')) as {
    nodes: { ignored: boolean; role?: { value: string }; name?: { value: string }; backendDOMNodeId?: number }[];
  };
  const roles = new Set(['textbox', 'combobox', 'checkbox', 'radio', 'button', 'switch', 'spinbutton', 'link', 'searchbox', 'slider', 'listbox']);
  const unnamed: string[] = [];
  for (const n of nodes) {
    if (n.ignored || !n.role || !roles.has(n.role.value) || (n.name?.value ?? '').trim() !== '') continue;
    const { object } = (await cdp.send('DOM.resolveNode', { backendNodeId: n.backendDOMNodeId })) as { object: { objectId: string } };
    const { result } = (await cdp.send('Runtime.callFunctionOn', {
      objectId: object.objectId,
      functionDeclaration: 'function () { return this.outerHTML.slice(0, 160); }',
      returnByValue: true,
    })) as { result: { value: string } };
    unnamed.push(`${n.role.value}: ${result.value}`);
  }
  return unnamed;
}

/**
 * What a mouse can use (visible, enabled controls, and anything drawn with a pointer cursor)
 * that Tab never reaches, walking the page from the top until the focus comes round again.
 */
async function unreachableByKeyboard(): Promise<string[]> {
  const candidates = await page.evaluate(() => {
    const shown = (el: HTMLElement) => {
      const r = el.getBoundingClientRect();
      const style = getComputedStyle(el);
      return style.visibility !== 'hidden' && style.display !== 'none' && (r.width > 0 || r.height > 0 || el.classList.contains('skip-link'));
    };
    // An open modal dialog makes the rest of the page inert: only its controls count.
    const scope: ParentNode = document.querySelector('dialog:modal') ?? document;
    const native = 'a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex^="-"])';
    const controls = [...scope.querySelectorAll<HTMLElement>(native)].filter(
      (el) =>
        !(el as HTMLButtonElement).disabled &&
        shown(el) &&
        // A radio group is one tab stop: Tab reaches its checked radio, the arrows the others.
        !(el instanceof HTMLInputElement && el.type === 'radio' && !el.checked),
    );
    const clickable = [...scope.querySelectorAll<HTMLElement>('*')].filter(
      (el) => getComputedStyle(el).cursor === 'pointer' && shown(el) && !el.closest(`${native}, label`),
    );
    const all = [...controls, ...clickable];
    for (const [i, el] of all.entries()) el.setAttribute('data-walk', String(i));
    return all.map((el) => el.outerHTML.slice(0, 120));
  });
  await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
  const reached = new Set<string>();
  for (let i = 0; i < candidates.length + 10; i++) {
    await page.keyboard.press('Tab');
    const at = await page.evaluate(() => document.activeElement?.getAttribute('data-walk') ?? null);
    if (at !== null && reached.has(at)) break;
    if (at !== null) reached.add(at);
  }
  return candidates.filter((_, i) => !reached.has(String(i)));
}

async function checkAccessible(where: string): Promise<void> {
  expect(await unnamedControls(), `controls without a name on ${where}`).toEqual([]);
  expect(await unreachableByKeyboard(), `what Tab does not reach on ${where}`).toEqual([]);
}

async function changePlan(plan: string): Promise<void> {
  const { body } = await api<{ id: string }>('/api/v1/account');
  const res = await fetch(`${base}/api/v1/admin/accounts/${body.id}/plan`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ plan }),
  });
  expect(res.status).toBe(200);
}

/** A table's body rows as their cells' text. */
const rowsOf = (table: ReturnType<Page['locator']>) =>
  table.locator('tbody tr').evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => (c.textContent ?? '').trim())));

/** The overview shows these figures of the metrics API, formatted as the dashboard formats them. */
async function expectOverviewShows(m: UserMetrics): Promise<void> {
  const t = m.totals;
  await until(
    'the overview to show the answer',
    () => page.getByTestId('period-requests').textContent(),
    (v) => v === fmtInt(t.requests),
  );
  const card = (name: string) => page.getByTestId(`metric-${name}`).locator('.metric-value').textContent();
  expect(await card('Response Time')).toBe(fmtMs(t.avgResponseMs));
  expect(await card('Success Rate')).toBe(fmtPct(t.successRate));
  expect(await card('Error Rate')).toBe(fmtPct(t.errorRate));
  expect(await card('Node Latency')).toBe(fmtMs(t.avgNodeLatencyMs));
  const totals = page.getByRole('region', { name: 'Requests in the selected period' });
  expect(await totals.locator('dd').nth(1).textContent()).toBe(`${fmtInt(t.success)} ${fmtPct(t.successRate)}`);
  expect(await totals.locator('dd').nth(2).textContent()).toBe(`${fmtInt(t.errors)} ${fmtPct(t.errorRate)}`);
  expect(await totals.locator('dd').nth(3).textContent()).toBe(t.p95ResponseMs === null ? '—' : `${fmtInt(t.p95ResponseMs)} ms`);
  const byChain = await rowsOf(page.getByRole('region', { name: 'By network' }));
  expect(byChain.map(([chain, requests]) => [chain, requests])).toEqual(m.byChain.map((c) => [c.chain, fmtInt(c.requests)]));
  const byMethod = await rowsOf(page.getByRole('region', { name: 'Most used methods' }));
  expect(byMethod.map(([method, requests, , errors]) => [method, requests, errors?.split(' ')[0]])).toEqual(
    m.byMethod.slice(0, 10).map((r) => [`${r.method} ${r.chain}`, fmtInt(r.requests), fmtInt(r.errors)]),
  );
}

/** Switches the time range with the arrow keys and returns the metrics answer the page then got. */
async function rangeByKeyboard(label: string): Promise<{ path: string; body: UserMetrics }> {
  const answered = page.waitForResponse((r) => r.url().includes('/api/v1/metrics/user'));
  await page.locator('input[name="range"]:checked').focus();
  await page.keyboard.press('ArrowRight');
  expect(await page.getByRole('radio', { name: label }).isChecked()).toBe(true);
  const res = await answered;
  return { path: pathOf(res), body: (await res.json()) as UserMetrics };
}

beforeAll(async () => {
  await buildDashboard();
  node = await startGanache();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url }, now: () => new Date(Date.now() + clockSkewMs) });
  base = (await t.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  browser = await launchBrowser();
  await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  page = await browser.newPage();
  // A step that cannot happen fails within the test's own time, naming what it waited for.
  page.setDefaultTimeout(8000);
  const answered = new WeakSet<Request>();
  page.on('response', (r) => {
    answered.add(r.request());
    if (r.status() >= 400) failedLoads.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
  });
  page.on('requestfailed', (r) => {
    // Answered, only its body left unread when the page moved on (a 401 before logging in again): counted above.
    if (answered.has(r)) return;
    failedLoads.push(`${r.failure()?.errorText} ${r.method()} ${new URL(r.url()).pathname}`);
  });
  cdp = await page.context().newCDPSession(page);
  await cdp.send('Accessibility.enable');
  await cdp.send('DOM.enable');
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await t?.close();
  await node?.close();
});

describe('an owner walks through the dashboard', () => {
  it('signs up, logs out, is refused a wrong password, and logs in', async () => {
    await page.goto(`${base}/#/signup`);
    await page.getByRole('heading', { name: 'Create your account' }).waitFor();
    await checkAccessible('sign-up');
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByLabel('Password').press('Enter');
    await page.getByRole('heading', { name: 'Overview' }).waitFor();

    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('heading', { name: 'Log in' }).waitFor();
    expect((await api('/api/v1/account')).status).toBe(401);
    await checkAccessible('log-in');

    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill('not the password');
    await page.getByRole('button', { name: 'Log in' }).click();
    expect(await page.getByRole('alert').textContent()).toBe('Wrong email or password.');
    provokedLoads.push('401 POST /api/v1/auth/login');
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
  });

  it('shows empty analytics before any call, on pages whose every control is named and reachable by Tab', async () => {
    await go('/');
    await until(
      'the period totals',
      () => page.getByTestId('period-requests').textContent(),
      (v) => v === '0',
    );
    for (const name of ['Response Time', 'Success Rate', 'Error Rate', 'Node Latency']) {
      expect(await page.getByTestId(`metric-${name}`).textContent(), name).toContain('—Target');
    }
    expect(await page.getByRole('region', { name: 'By network' }).getByText('No requests in this period.').isVisible()).toBe(true);
    await checkAccessible('the overview');

    await go('/usage');
    await until(
      'the usage chart',
      () => page.getByTestId('usage-chart-sum').textContent(),
      (v) => v === '0',
    );
    await page.locator('.chart-box canvas').first().waitFor();
    await checkAccessible('the usage page');

    await go('/errors');
    await page.getByRole('region', { name: 'Error analysis' }).getByText('No errors in this period.').waitFor();
    await checkAccessible('the errors page');
    await go('/tokens');
    await page.getByText('No tokens yet. Create one to call a chain.').waitFor();
    await checkAccessible('the tokens page');
    await go('/alerts');
    await page.getByText('No alerts yet.').waitFor();
    await checkAccessible('the alerts page');
    await go('/exports');
    await checkAccessible('the exports page');
    await go('/access-tokens');
    await page.getByText('No access tokens.').waitFor();
    await checkAccessible('the access tokens page');
  });

  it('creates a token shown once, and copies it', async () => {
    await go('/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    await checkAccessible('the new token form');
    const form = page.getByRole('form', { name: 'New token' });
    await form.getByLabel('Name (required)').fill('indexer');
    await form.getByRole('button', { name: 'Create token' }).click();
    const secret = page.getByTestId('secret-value');
    await secret.waitFor();
    token = await secret.inputValue();
    expect(token).toMatch(/^gk_[0-9A-Za-z]{38}$/);
    await checkAccessible('the new token');
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByText('Copied to the clipboard.').waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(token);
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await secret.waitFor({ state: 'detached' });

    const row = page.locator('tr', { hasText: 'indexer' });
    tokenId = (await row.getAttribute('data-token-id')) ?? '';
    await go('/tokens');
    await row.waitFor();
    expect(await page.content()).not.toContain(token);
    expect(JSON.stringify((await api(`/api/v1/tokens/${tokenId}`)).body)).not.toContain(token);
    await checkAccessible('the tokens page with a token');
  });

  it('renames and describes the token; an empty name is refused and nothing is saved', async () => {
    await page.locator('tr', { hasText: 'indexer' }).getByRole('link', { name: 'indexer' }).click();
    await page.getByRole('heading', { name: /^indexer/ }).waitFor();
    const edit = page.getByRole('form', { name: 'Edit token' });
    await edit.getByLabel('Name').fill('   ');
    await edit.getByLabel('Description').fill('not saved');
    await edit.getByRole('button', { name: 'Save' }).click();
    expect(await edit.getByText('A token needs a name.').isVisible()).toBe(true);
    expect(await edit.getByLabel('Name').getAttribute('aria-invalid')).toBe('true');
    expect((await api<TokenRecord>(`/api/v1/tokens/${tokenId}`)).body).toMatchObject({ name: 'indexer', description: '' });

    await edit.getByLabel('Name').fill('indexer-eu');
    await edit.getByLabel('Description').fill('reads blocks for the EU index');
    await edit.getByRole('button', { name: 'Save' }).click();
    await edit.getByText('Saved.').waitFor();
    expect(await page.locator('main h1').textContent()).toBe('indexer-eu active');
    expect((await api<TokenRecord>(`/api/v1/tokens/${tokenId}`)).body).toMatchObject({ name: 'indexer-eu', description: 'reads blocks for the EU index' });
    await checkAccessible("the token's page");
  });

  it('disables and enables the token from the keyboard, the focus staying on the switch, and the gateway follows', async () => {
    const toggle = page.getByRole('switch');
    await toggle.focus();
    await page.keyboard.press('Space');
    await until(
      'disabled',
      () => page.locator('main h1 .badge').textContent(),
      (v) => v === 'disabled',
    );
    expect(await toggle.getAttribute('aria-checked')).toBe('false');
    expect(await toggle.evaluate((el) => el === document.activeElement)).toBe(true);
    await until('the gateway to refuse', chainCall, (s) => s === 403);
    // The same key again, without finding the switch anew.
    await page.keyboard.press('Space');
    await until(
      'enabled',
      () => page.locator('main h1 .badge').textContent(),
      (v) => v === 'active',
    );
    expect(await toggle.evaluate((el) => el === document.activeElement)).toBe(true);
    await until('the gateway to serve', chainCall, (s) => s === 200);
  });

  it("shows the calls exactly as the metrics API counts them for the page's period, range by range, and on the token's page", async () => {
    await new Promise((r) => setTimeout(r, 1100)); // Free allows 5 calls a second
    for (let i = 0; i < 3; i++) expect(await chainCall()).toBe(200);
    expect(await chainCall('eth_getBalance', ['0x90f8bf6a479f320ead074411a4b0e7944ea8c9c1', 'latest'])).toBe(200);
    expect(await chainCall('eth_noSuchMethod')).toBe(200);
    await until(
      'every call in the metrics',
      () => api<UserMetrics>('/api/v1/metrics/user'),
      (r) => r.body.totals.requests === callsMade,
    );

    const { path: dayPath, body: day } = await goAndRead<UserMetrics>('/', '/api/v1/metrics/user');
    // The API asked again for the very period the page asked for answers the same.
    expect((await api<UserMetrics>(dayPath)).body).toMatchObject({
      totals: day.totals,
      byChain: day.byChain,
      byMethod: day.byMethod,
      series: day.series,
    });
    expect(day.totals.requests).toBe(callsMade);
    expect(day.totals.errors).toBeGreaterThanOrEqual(2); // the disabled token's 403 and the unknown method
    await expectOverviewShows(day);

    const week = await rangeByKeyboard('7 d');
    expect(Date.parse(new URL(week.path, base).searchParams.get('end') ?? '') - Date.parse(new URL(week.path, base).searchParams.get('start') ?? '')).toBe(
      7 * 86_400_000,
    );
    expect((await api<UserMetrics>(week.path)).body.totals).toEqual(week.body.totals);
    await expectOverviewShows(week.body);
    const month = await rangeByKeyboard('30 d');
    expect((await api<UserMetrics>(month.path)).body.totals).toEqual(month.body.totals);
    await expectOverviewShows(month.body);

    // A custom range that ends before the calls: nothing in it.
    await page.keyboard.press('ArrowRight');
    const twoDaysAgo = new Date(Date.now() - 2 * 86_400_000).toISOString().slice(0, 16);
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 16);
    await page.getByLabel('From (UTC)').fill(twoDaysAgo);
    await page.getByLabel('To (UTC)').fill(yesterday);
    const custom = page.waitForResponse((r) => r.url().includes('/api/v1/metrics/user') && r.url().includes(encodeURIComponent(`${yesterday}:00.000Z`)));
    await page.getByRole('button', { name: 'Apply' }).click();
    const answer = await custom;
    const none = (await answer.json()) as UserMetrics;
    expect(none.totals.requests).toBe(0);
    await expectOverviewShows(none);
    await page.getByRole('radio', { name: '24 h' }).check();

    // The usage and errors pages, for the same 24 hours.
    const { body: usage } = await goAndRead<UserMetrics>('/usage', '/api/v1/metrics/user');
    await until(
      'the usage chart',
      () => page.getByTestId('usage-chart-sum').textContent(),
      (v) => v === fmtInt(usage.totals.requests),
    );
    expect(await page.getByTestId('cache-hits').textContent()).toBe(fmtInt(usage.totals.cacheHits));
    await page.getByRole('radio', { name: 'Errors' }).check();
    expect(await page.getByTestId('usage-chart-sum').textContent()).toBe(fmtInt(usage.totals.errors));

    const { body: errors } = await goAndRead<UserMetrics>('/errors', '/api/v1/metrics/user');
    await page.getByTestId('error-table').waitFor();
    expect((await rowsOf(page.getByTestId('error-table'))).map((r) => [r[0], r[4]])).toEqual(
      [...errors.errors].sort((a, b) => b.count - a.count).map((e) => [String(e.code ?? '—'), fmtInt(e.count)]),
    );
    expect(await rowsOf(page.getByTestId('recent-errors'))).toHaveLength(errors.recentErrors.length);

    // The token's own page, against /metrics/tokens/{id} for its period.
    const { path: minePath, body: mine } = await goAndRead<TokenMetrics>(`/tokens/${tokenId}`, `/api/v1/metrics/tokens/${tokenId}`);
    expect((await api<TokenMetrics>(minePath)).body.totals).toEqual(mine.totals);
    expect(mine.totals.requests).toBe(callsMade);
    await until(
      "the token's chart",
      () => page.getByTestId('token-chart-sum').textContent(),
      (v) => v === fmtInt(mine.totals.requests),
    );
    expect(await page.getByTestId('metric-Success Rate').locator('.metric-value').textContent()).toBe(fmtPct(mine.totals.successRate));
    expect(await rowsOf(page.getByTestId('client-ips'))).toEqual(mine.clientIps.map((c) => [c.ip, fmtInt(c.count), expect.stringContaining('UTC')]));
  });

  it('sets limits on the token: invalid values are refused next to their field and nothing is saved', async () => {
    await changePlan('developer');
    await go(`/tokens/${tokenId}`);
    const edit = page.getByRole('form', { name: 'Edit token' });
    const monthly = edit.getByLabel('Monthly limit');
    const rate = edit.getByLabel('Rate limit (requests per second)');
    const patches: string[] = [];
    const onRequest = (r: { method(): string; url(): string }) => {
      if (r.method() === 'PATCH') patches.push(r.url());
    };
    page.on('request', onRequest);
    /** The field's error, as a screen reader reaches it: through aria-describedby. */
    const errorOf = (field: typeof monthly) =>
      field.evaluate((el) =>
        (el.getAttribute('aria-describedby') ?? '')
          .split(' ')
          .map((id) => document.getElementById(id))
          .filter((e) => e?.classList.contains('field-error'))
          .map((e) => e?.textContent)
          .join(''),
      );
    const refused: [typeof monthly, string, string][] = [
      [monthly, '1e', 'A whole number of requests, 1 or more.'],
      [monthly, '2.5', 'A whole number of requests, 1 or more.'],
      [monthly, '0', 'A whole number of requests, 1 or more.'],
      [monthly, '5000000', "Must be lower than the account's 5,000,000 requests a month."],
      [rate, '26', "At most the plan's 25 requests per second."],
      [rate, '-1', 'A whole number of requests per second, 1 or more.'],
    ];
    for (const [field, typed, message] of refused) {
      await monthly.fill('');
      await rate.fill('');
      await field.pressSequentially(typed);
      await edit.getByRole('button', { name: 'Save' }).click();
      expect(await errorOf(field), `${typed} typed`).toBe(message);
      expect(await field.getAttribute('aria-invalid')).toBe('true');
    }
    page.off('request', onRequest);
    expect(patches).toEqual([]);
    expect((await api<TokenRecord>(`/api/v1/tokens/${tokenId}`)).body).toMatchObject({ monthly_limit: null, rate_limit: null });

    await monthly.fill('1,000');
    await rate.fill('20');
    await edit.getByRole('button', { name: 'Save' }).click();
    await edit.getByText('Saved.').waitFor();
    expect((await api<TokenRecord>(`/api/v1/tokens/${tokenId}`)).body).toMatchObject({ monthly_limit: 1000, rate_limit: 20 });
    expect(await page.getByTestId('detail-usage').textContent()).toMatch(/ of 1,000$/);
    expect(await page.getByRole('region', { name: 'Details' }).getByText('20 requests per second').isVisible()).toBe(true);
    // Emptied, the token draws on the account's limits again.
    await monthly.fill('');
    await rate.fill('');
    // The page's own answer, not only the API's state: leaving the page before it came aborted the PATCH (a failed load below).
    const saved = page.waitForResponse((r) => r.request().method() === 'PATCH' && new URL(r.url()).pathname === `/api/v1/tokens/${tokenId}`);
    await edit.getByRole('button', { name: 'Save' }).click();
    expect((await saved).status()).toBe(200);
    await until(
      'the limits cleared',
      async () => (await api<TokenRecord>(`/api/v1/tokens/${tokenId}`)).body,
      (r) => r.monthly_limit === null && r.rate_limit === null,
    );

    // At creation too: a limit that is not a number is refused, and no token is made.
    await go('/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    const form = page.getByRole('form', { name: 'New token' });
    await form.getByLabel('Name (required)').fill('not made');
    await form.getByLabel('Custom monthly limit').pressSequentially('1e');
    await form.getByRole('button', { name: 'Create token' }).click();
    expect(await form.getByText('A whole number of requests, 1 or more.').isVisible()).toBe(true);
    expect((await api<{ tokens: TokenRecord[] }>('/api/v1/tokens')).body.tokens.map((x) => x.name)).toEqual(['indexer-eu']);
    await form.getByRole('button', { name: 'Cancel' }).click();
  });

  it('downloads the exports with their file name and content type, holding the rows the API exports', async () => {
    await go('/exports');
    for (const format of ['csv', 'json'] as const) {
      const [download, response] = await Promise.all([
        page.waitForEvent('download'),
        page.waitForResponse((r) => r.url().includes(`/api/v1/exports/usage.${format}`)),
        page.getByRole('button', { name: `Download ${format.toUpperCase()}` }).click(),
      ]);
      const disposition = response.headers()['content-disposition'] ?? '';
      expect(disposition).toMatch(new RegExp(`^attachment; filename="usage-\\d{4}-\\d\\d-\\d\\dT\\d{4}-\\d{4}-\\d\\d-\\d\\dT\\d{4}\\.${format}"$`));
      expect(download.suggestedFilename()).toBe(/filename="([^"]+)"/.exec(disposition)?.[1]);
      expect(response.headers()['content-type']).toBe(format === 'csv' ? 'text/csv; charset=utf-8; header=present' : 'application/json; charset=utf-8');
      const chunks: Buffer[] = [];
      for await (const chunk of await download.createReadStream()) chunks.push(chunk as Buffer);
      const file = Buffer.concat(chunks).toString('utf8');
      const direct = await page.context().request.get(`${base}${pathOf(response)}`);
      expect(file).toBe(await direct.text());
      const rows = format === 'csv' ? file.trim().split(/\r?\n/).length - 1 : (JSON.parse(file) as { rows: unknown[] }).rows.length;
      expect(rows).toBe(callsMade);
      await page.getByText(`Downloaded ${download.suggestedFilename()}.`).waitFor();
    }
    // PDF is not on Developer: the button says why it is off.
    const pdf = page.getByRole('button', { name: 'Download PDF' });
    expect(await pdf.isDisabled()).toBe(true);
    expect(await pdf.getAttribute('aria-describedby')).toBe('export-pdf-reason');
  });

  it('creates, edits and deletes an alert, refusing invalid values with nothing saved', async () => {
    await go('/alerts');
    await page.getByRole('button', { name: 'Create alert' }).click();
    const form = page.getByRole('form', { name: 'New alert' });
    await checkAccessible('the new alert form');
    await form.getByLabel('Name (required)').fill('three quarters');
    const threshold = form.getByLabel('Threshold (%)');
    for (const [typed, message] of [
      ['8e', 'Enter a number.'],
      ['150', 'A percentage above 0, at most 100.'],
    ] as const) {
      await threshold.fill('');
      await threshold.pressSequentially(typed);
      await form.getByRole('button', { name: 'Create alert' }).click();
      expect(await form.getByText(message).isVisible()).toBe(true);
    }
    expect((await api<{ alerts: unknown[] }>('/api/v1/alerts')).body.alerts).toEqual([]);
    await threshold.fill('75');
    await form.getByRole('button', { name: 'Create alert' }).click();
    const row = page.locator('tr', { hasText: 'three quarters' });
    await row.waitFor();
    await checkAccessible('the alerts page with an alert');

    await row.getByRole('button', { name: 'Edit three quarters' }).click();
    const edit = page.getByRole('form', { name: 'Edit alert' });
    await edit.getByLabel('Threshold (%)').fill('0');
    await edit.getByRole('button', { name: 'Save alert' }).click();
    expect(await edit.getByText('A percentage above 0, at most 100.').isVisible()).toBe(true);
    await edit.getByLabel('Threshold (%)').fill('90');
    await edit.getByRole('button', { name: 'Save alert' }).click();
    await until(
      'the edited rule',
      () => row.locator('td[data-label="Rule"]').textContent(),
      (v) => v?.includes('90') === true,
    );
    expect((await api<{ alerts: { threshold: number }[] }>('/api/v1/alerts')).body.alerts.map((a) => a.threshold)).toEqual([90]);

    await row.getByRole('button', { name: 'Delete three quarters' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete alert' }).click();
    await row.waitFor({ state: 'detached' });
    expect((await api<{ alerts: unknown[] }>('/api/v1/alerts')).body.alerts).toEqual([]);
  });

  it('asks to log in again when the session expires, refuses a wrong password there, then finishes the action', async () => {
    await go(`/tokens/${tokenId}`);
    const edit = page.getByRole('form', { name: 'Edit token' });
    await edit.getByLabel('Description').fill('saved after logging in again');
    // The session expires as the Save reaches the service (sessions last 7 days), not before: a
    // background request's 401 in between opened the dialog over the button (CI, once, loaded).
    const expireOnSave = async (route: Route): Promise<void> => {
      if (route.request().method() === 'PATCH') clockSkewMs = 8 * 86_400_000;
      await route.continue();
    };
    await page.route(`**/api/v1/tokens/${tokenId}`, expireOnSave);
    await edit.getByRole('button', { name: 'Save' }).click();
    const relogin = page.getByTestId('session-lost');
    await relogin.waitFor();
    await page.unroute(`**/api/v1/tokens/${tokenId}`, expireOnSave);
    provokedLoads.push(`401 PATCH /api/v1/tokens/${tokenId}`);
    clockSkewMs = 0;
    await checkAccessible('the log-in-again dialog');
    await relogin.getByLabel('Password').fill('not the password');
    await relogin.getByRole('button', { name: 'Log in' }).click();
    expect(await relogin.getByRole('alert').textContent()).toBe('Wrong email or password.');
    provokedLoads.push('401 POST /api/v1/auth/login');
    await relogin.getByLabel('Password').fill(PASSWORD);
    await relogin.getByRole('button', { name: 'Log in' }).click();
    await relogin.waitFor({ state: 'detached' });
    await edit.getByText('Saved.').waitFor();
    expect((await api<TokenRecord>(`/api/v1/tokens/${tokenId}`)).body.description).toBe('saved after logging in again');

    // Expired while away: the next visit opens on the log-in page, and logging in returns to where it was.
    clockSkewMs = 8 * 86_400_000;
    await page.reload();
    await page.getByRole('heading', { name: 'Log in' }).waitFor();
    provokedLoads.push('401 GET /api/v1/account');
    clockSkewMs = 0;
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('heading', { name: /^indexer-eu/ }).waitFor();
  });

  it('revokes the token behind a confirmation; then it shows as revoked, its actions gone, and the focus is kept', async () => {
    const revoke = page.getByRole('button', { name: 'Revoke indexer-eu' });
    await revoke.focus();
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Revoke “indexer-eu”?' });
    await dialog.waitFor();
    await checkAccessible('the revoke confirmation');
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });
    // Cancelled: the focus goes back to the button that opened it.
    expect(await revoke.evaluate((el) => el === document.activeElement)).toBe(true);
    expect((await api<TokenRecord>(`/api/v1/tokens/${tokenId}`)).body.status).toBe('active');

    await page.keyboard.press('Enter');
    await dialog.getByRole('button', { name: 'Revoke token' }).click();
    await dialog.waitFor({ state: 'detached' });
    await until(
      'revoked on its page',
      () => page.locator('main h1 .badge').textContent(),
      (v) => v === 'revoked',
    );
    expect(await page.getByRole('switch').count()).toBe(0);
    expect(await page.getByRole('button', { name: /^Revoke/ }).count()).toBe(0);
    expect(await page.getByRole('form', { name: 'Edit token' }).count()).toBe(0);
    expect(await page.getByText('A revoked token cannot change any more.').isVisible()).toBe(true);
    // The focus is not dropped on the page's body: Tab goes on from inside the page's content.
    expect(await page.evaluate(() => document.activeElement !== document.body && document.getElementById('main')?.contains(document.activeElement))).toBe(true);
    await until('the gateway to refuse it', chainCall, (s) => s === 401);
    callsMade--; // an unknown token is metered nowhere

    await go('/tokens');
    const row = page.locator(`tr[data-token-id="${tokenId}"]`);
    await row.waitFor();
    expect(await row.locator('.badge').textContent()).toBe('revoked');
    expect(await row.getByRole('button').count()).toBe(0);
    expect(await row.getByRole('switch').count()).toBe(0);
  });

  it('logs out, and the old session is refused', async () => {
    const cookies = await page.context().cookies();
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('heading', { name: 'Log in' }).waitFor();
    expect((await api('/api/v1/account')).status).toBe(401);
    const old = await fetch(`${base}/api/v1/account`, { headers: { cookie: cookies.map((c) => `${c.name}=${c.value}`).join('; ') } });
    expect(old.status).toBe(401);
    await page.reload();
    await page.getByRole('heading', { name: 'Log in' }).waitFor();
  });

  it('logged no console error and no failed request beyond the ones the steps provoked', () => {
    // A read the page itself cancels (it left the page, or asked for a newer period) is not a failure.
    const failures = failedLoads.filter((f) => !/^net::ERR_ABORTED GET \/api\/v1\//.test(f));
    expect([...failures].sort()).toEqual([...provokedLoads].sort());
    const consoleErrors = browser.errors.filter(
      (e) => !provokedLoads.some((p) => e.startsWith(`console: Failed to load resource: the server responded with a status of ${p.split(' ')[0]} `)),
    );
    expect(consoleErrors).toEqual([]);
  });
});
