import type { Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Browser, buildDashboard, focusedElement, type HeldRequests, hasFocus, holdRequests, launchBrowser, nextFrames } from '../support/browser.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/**
 * Every dashboard control that is busy while its action runs keeps the keyboard focus: activated
 * by the keyboard, its request held on its way to the (real) server, it shows it is busy, keeps
 * the focus, ignores a second activation, and once the action is done the focus is on it again,
 * or on the documented place when the control went with the action: what opened a form or dialog,
 * a new secret's text, or the page's content (#main). Never the page's body, where Chromium puts
 * the focus of a button that becomes `disabled` or leaves the page, and where a keyboard or
 * screen-reader user loses their place.
 */

const PASSWORD = 'correct horse battery';
const EMAIL = `busy-${Date.now().toString(36)}@example.com`;

let t: TestApp;
let base: string;
let browser: Browser;
let page: Page;
/** Added to the service's clock: a week on, the browser's session has expired. */
let clockSkewMs = 0;

/** Opens a dashboard page with a fresh load, logging in first if a step before left the page logged out. */
async function go(hash: string): Promise<void> {
  await page.goto('about:blank');
  await page.goto(`${base}/#${hash}`);
  const heading = page.locator('main h1').first();
  if ((await heading.textContent()) === 'Log in') {
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('heading', { name: 'Log in' }).waitFor({ state: 'detached' });
  }
  await heading.waitFor();
}

/** The id of the token the page created (the step that made it may have failed after making it). */
async function tokenIdOf(name: string): Promise<string> {
  const { tokens } = (await (await page.context().request.get(`${base}/api/v1/tokens`)).json()) as { tokens: { id: string; name: string }[] };
  const id = tokens.find((x) => x.name === name)?.id;
  if (!id) throw new Error(`no token named ${name}`);
  return id;
}

/** The focus settles on `control` (a dialog or form hands it back once Preact has unmounted it: on a busy machine, a frame or two later). */
async function expectFocusOn(control: Locator, when: string): Promise<void> {
  await expect.poll(() => hasFocus(control), { message: `${when}: the focus is not on the control`, timeout: 3000 }).toBe(true);
}

/** The focus settles (a control that leaves the page hands it on after the page has rendered) on the page's content. */
async function expectFocusOnContent(when: string): Promise<void> {
  await expect.poll(() => focusedElement(page), { message: when, timeout: 3000 }).toMatch(/^main#main/);
}

/**
 * Presses `key` on `control` while its `method` request to `path` is held: the control shows it
 * is busy (`busyText`), keeps the focus, and a second press sends nothing. Returns the held request.
 */
async function pressWhileHeld(control: Locator, key: 'Enter' | 'Space', method: string, path: string | RegExp, busyText: RegExp): Promise<HeldRequests> {
  const held = await holdRequests(page, method, path);
  // The element itself: its name changes while it is busy ("Saving…").
  const element = await control.elementHandle();
  if (!element) throw new Error('no such control');
  try {
    await element.focus();
    await page.keyboard.press(key);
    await held.arrived;
    await nextFrames(page);
    expect(await element.evaluate((el) => el === document.activeElement), `while busy: the focus is on ${await focusedElement(page)}`).toBe(true);
    expect(await element.getAttribute('aria-disabled'), 'busy, and says so').toBe('true');
    expect(await element.textContent()).toMatch(busyText);
    await page.keyboard.press(key);
    await nextFrames(page);
    expect(held.count(), 'a second press while busy').toBe(1);
    return held;
  } catch (failure) {
    // The steps after this one go on against a page that finished the action.
    await held.release();
    throw failure;
  }
}

beforeAll(async () => {
  await buildDashboard();
  t = await startTestApp({ now: () => new Date(Date.now() + clockSkewMs) });
  base = (await t.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  browser = await launchBrowser();
  page = await browser.newPage();
  page.setDefaultTimeout(8000);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await t?.close();
});

describe('a busy control keeps the keyboard focus', () => {
  it('sign-up: the submit button while the account is made, then the dashboard content', async () => {
    await page.goto(`${base}/#/signup`);
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    const submit = page.getByRole('button', { name: 'Create account' });
    const held = await pressWhileHeld(submit, 'Enter', 'POST', '/api/v1/auth/signup', /^Please wait/);
    await held.release();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await expectFocusOnContent('signed up');
  });

  it("refresh: a panel's refresh button", async () => {
    await go('/tokens');
    const panel = page.getByRole('region', { name: 'Your tokens' });
    await panel.getByText('No tokens yet. Create one to call a chain.').waitFor();
    const refresh = panel.getByRole('button', { name: 'Refresh now' });
    const held = await pressWhileHeld(refresh, 'Enter', 'GET', '/api/v1/tokens', /↻/);
    await held.release();
    await expect.poll(() => refresh.getAttribute('aria-disabled')).not.toBe('true');
    await expectFocusOn(refresh, 'refreshed');
  });

  it('create token: the submit button, then the new token shown once', async () => {
    await go('/tokens');
    await page.getByRole('button', { name: 'Create token' }).click();
    const form = page.getByRole('form', { name: 'New token' });
    await form.getByLabel('Name (required)').fill('busy');
    const submit = form.getByRole('button', { name: 'Create token' });
    const held = await pressWhileHeld(submit, 'Enter', 'POST', '/api/v1/tokens', /^Creating/);
    // Enter in a field submits the form too: not while it is busy.
    await form.getByLabel('Name (required)').press('Enter');
    await nextFrames(page);
    expect(held.count(), 'Enter in a field while busy').toBe(1);
    await held.release();
    await expectFocusOn(page.getByTestId('secret-value'), 'created');
    await page.getByRole('button', { name: 'I have stored it' }).click();
  });

  it("token switch and save: on the token's page", async () => {
    const tokenId = await tokenIdOf('busy');
    await go(`/tokens/${tokenId}`);
    const toggle = page.getByRole('switch');
    const switched = await pressWhileHeld(toggle, 'Space', 'PATCH', `/api/v1/tokens/${tokenId}`, /Enabled/);
    await switched.release();
    await expect.poll(() => toggle.getAttribute('aria-checked')).toBe('false');
    await expectFocusOn(toggle, 'switched');

    const edit = page.getByRole('form', { name: 'Edit token' });
    await edit.getByLabel('Description').fill('saved by keyboard');
    const save = edit.getByRole('button', { name: 'Save' });
    const saving = await pressWhileHeld(save, 'Enter', 'PATCH', `/api/v1/tokens/${tokenId}`, /^Saving/);
    await saving.release();
    await edit.getByText('Saved.').waitFor();
    await expectFocusOn(save, 'saved');
  });

  it('log in again: the dialog gives the focus back to the Save that was waiting for it', async () => {
    const tokenId = await tokenIdOf('busy');
    await go(`/tokens/${tokenId}`);
    const edit = page.getByRole('form', { name: 'Edit token' });
    await edit.getByLabel('Description').fill('saved after logging in again');
    const save = edit.getByRole('button', { name: 'Save' });
    clockSkewMs = 8 * 86_400_000; // sessions last 7 days
    await save.focus();
    await page.keyboard.press('Enter');
    const relogin = page.getByTestId('session-lost');
    await relogin.waitFor();
    clockSkewMs = 0;
    await relogin.getByLabel('Password').fill(PASSWORD);
    const submit = relogin.getByRole('button', { name: 'Log in' });
    const held = await pressWhileHeld(submit, 'Enter', 'POST', '/api/v1/auth/login', /^Please wait/);
    await held.release();
    await relogin.waitFor({ state: 'detached' });
    await edit.getByText('Saved.').waitFor();
    await expectFocusOn(save, 'logged in again and saved');
  });

  it('revoke a token: the confirmation while it works, then the page content', async () => {
    const tokenId = await tokenIdOf('busy');
    await go('/tokens');
    const row = page.locator(`tr[data-token-id="${tokenId}"]`);
    await row.getByRole('button', { name: 'Revoke busy' }).focus();
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Revoke “busy”?' });
    const confirm = dialog.getByRole('button', { name: 'Revoke token' });
    const held = await pressWhileHeld(confirm, 'Enter', 'DELETE', `/api/v1/tokens/${tokenId}`, /^Working/);
    expect(await dialog.getByRole('button', { name: 'Cancel' }).getAttribute('aria-disabled')).toBe('true');
    // Escape does not cancel what is under way.
    await page.keyboard.press('Escape');
    await nextFrames(page);
    expect(await dialog.isVisible()).toBe(true);
    await held.release();
    await dialog.waitFor({ state: 'detached' });
    await expect.poll(() => row.locator('.badge').textContent()).toBe('revoked');
    await expectFocusOnContent('revoked');
  });

  it('access tokens: create, then the secret; revoke, then the page content once the list has it', async () => {
    await go('/access-tokens');
    const form = page.getByRole('form', { name: 'New access token' });
    await form.getByLabel('Name').fill('script');
    const submit = form.getByRole('button', { name: 'Create access token' });
    const created = await pressWhileHeld(submit, 'Enter', 'POST', '/api/v1/access-tokens', /^Creating/);
    await created.release();
    await expectFocusOn(page.getByTestId('secret-value'), 'created');
    await page.getByRole('button', { name: 'I have stored it' }).click();

    const row = page.getByTestId('access-token-table').locator('tbody tr', { hasText: 'script' });
    await row.getByRole('button', { name: 'Revoke script' }).focus();
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Revoke “script”?' });
    const confirm = dialog.getByRole('button', { name: 'Revoke access token' });
    const revoked = await pressWhileHeld(confirm, 'Enter', 'DELETE', /^\/api\/v1\/access-tokens\/[^/]+$/, /^Working/);
    await revoked.release();
    await dialog.waitFor({ state: 'detached' });
    // The list reloads after the dialog has closed, and the Revoke button the focus went back to goes with it.
    await expect.poll(() => row.locator('.badge').textContent()).toBe('revoked');
    await expectFocusOnContent('revoked and reloaded');
  });

  it('alerts: create (the page content), edit (back to its Edit button), and a refused delete (the dialog keeps the focus)', async () => {
    await go('/alerts');
    await page.getByRole('button', { name: 'Create alert' }).click();
    const form = page.getByRole('form', { name: 'New alert' });
    await form.getByLabel('Name (required)').fill('quota');
    await form.getByLabel('Threshold (%)').fill('75');
    const create = form.getByRole('button', { name: 'Create alert' });
    const created = await pressWhileHeld(create, 'Enter', 'POST', '/api/v1/alerts', /^Saving/);
    await created.release();
    await form.waitFor({ state: 'detached' });
    const row = page.locator('tr', { hasText: 'quota' });
    await row.waitFor();
    await expectFocusOnContent('created');

    const editButton = row.getByRole('button', { name: 'Edit quota' });
    await editButton.focus();
    await page.keyboard.press('Enter');
    const edit = page.getByRole('form', { name: 'Edit alert' });
    await edit.getByLabel('Threshold (%)').fill('90');
    const save = edit.getByRole('button', { name: 'Save alert' });
    const saved = await pressWhileHeld(save, 'Enter', 'PATCH', /^\/api\/v1\/alerts\/[^/]+$/, /^Saving/);
    await saved.release();
    await edit.waitFor({ state: 'detached' });
    await expectFocusOn(editButton, 'saved');

    // Deleted meanwhile (another tab): the server refuses, the dialog says so and keeps the focus on its button.
    const alertId = (await row.getAttribute('data-alert-id')) ?? '';
    await row.getByRole('button', { name: 'Delete quota' }).focus();
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Delete “quota”?' });
    expect((await page.context().request.delete(`${base}/api/v1/alerts/${alertId}`)).status()).toBe(204);
    const confirm = dialog.getByRole('button', { name: 'Delete alert' });
    const refused = await pressWhileHeld(confirm, 'Enter', 'DELETE', `/api/v1/alerts/${alertId}`, /^Working/);
    await refused.release();
    await dialog.getByRole('alert').waitFor();
    await expect.poll(() => confirm.getAttribute('aria-disabled')).not.toBe('true');
    await expectFocusOn(confirm, 'refused');
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });
  });

  it('alerts: a form focused inside before its effects ran still gives the focus back to its Edit button', async () => {
    const created = await page.context().request.post(`${base}/api/v1/alerts`, {
      data: { name: 'quick', type: 'usage_threshold', threshold: 50, channels: [{ type: 'email', to: 'ops@example.com' }] },
    });
    expect(created.status(), await created.text()).toBe(201);
    await go('/alerts');
    const row = page.locator('tr', { hasText: 'quick' });
    await row.waitFor();
    const editButton = row.getByRole('button', { name: 'Edit quick' });
    await editButton.focus();
    // A quick user (or a busy machine): the form's first field has the focus before the form's effects have run.
    await page.evaluate(async () => {
      (document.activeElement as HTMLElement).click();
      const field = () => document.querySelector<HTMLInputElement>('form[aria-label="Edit alert"] input');
      for (let i = 0; i < 100 && !field(); i++) await Promise.resolve();
      field()?.focus();
    });
    const edit = page.getByRole('form', { name: 'Edit alert' });
    await edit.getByRole('button', { name: 'Save alert' }).focus();
    await page.keyboard.press('Enter');
    await edit.waitFor({ state: 'detached' });
    await expectFocusOn(editButton, 'saved');
  });

  it('exports: the download button while the file is prepared', async () => {
    await go('/exports');
    const download = page.getByRole('button', { name: 'Download CSV' });
    const held = await pressWhileHeld(download, 'Enter', 'GET', '/api/v1/exports/usage.csv', /^Preparing/);
    await held.release();
    await page.getByText(/^Downloaded usage-.*\.csv\.$/).waitFor();
    await expectFocusOn(download, 'downloaded');
  });

  it('log out (pressed twice while on its way: one request), then the log-in page content; a refused log-in keeps the focus on its button; logged in, the dashboard content', async () => {
    await go('/');
    const logout = page.getByRole('button', { name: 'Log out' });
    // Pressed again while the first log-out is on its way: one request only.
    const loggingOut = await pressWhileHeld(logout, 'Enter', 'POST', '/api/v1/auth/logout', /^Logging out/);
    await loggingOut.release();
    await page.getByRole('heading', { name: 'Log in' }).waitFor();
    expect(loggingOut.count(), 'log-out requests').toBe(1);
    await expectFocusOnContent('logged out');

    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill('not the password');
    const submit = page.getByRole('button', { name: 'Log in' });
    const held = await pressWhileHeld(submit, 'Enter', 'POST', '/api/v1/auth/login', /^Please wait/);
    await held.release();
    expect(await page.getByRole('alert').textContent()).toBe('Wrong email or password.');
    await expectFocusOn(submit, 'refused');

    await page.getByLabel('Password').fill(PASSWORD);
    await submit.focus();
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await expectFocusOnContent('logged in');
  });

  it('logged no error in the browser', () => {
    // The refused log-in and the expired session's calls are the only failed loads, on purpose.
    expect(browser.errors.filter((e) => !e.includes('status of 401') && !e.includes('status of 404'))).toEqual([]);
  });
});
