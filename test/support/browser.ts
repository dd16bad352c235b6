import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type BrowserContext,
  type Browser as ChromiumBrowser,
  type ConsoleMessage,
  chromium,
  type Locator,
  type Page,
  type Request,
  type Route,
} from 'playwright-core';

const PROJECT = new URL('../../', import.meta.url).pathname;
export const WEB_SOURCE = join(PROJECT, 'src/web');
export const WEB_BUILD = join(PROJECT, 'dist/web');

function newestMtime(dir: string): number {
  return Math.max(
    0,
    ...readdirSync(dir, { withFileTypes: true }).map((e) => (e.isDirectory() ? newestMtime(join(dir, e.name)) : statSync(join(dir, e.name)).mtimeMs)),
  );
}

/** Builds the dashboard with Vite's JS API when dist/web is missing or older than src/web. */
export async function buildDashboard(): Promise<void> {
  const index = join(WEB_BUILD, 'index.html');
  if (existsSync(index) && statSync(index).mtimeMs >= newestMtime(WEB_SOURCE)) return;
  const { build } = await import('vite');
  await build({ configFile: join(WEB_SOURCE, 'vite.config.ts'), logLevel: 'warn' });
}

export interface Browser {
  context: BrowserContext;
  /** Console errors and uncaught exceptions of every page, as text. */
  errors: string[];
  newPage(width?: number): Promise<Page>;
  close(): Promise<void>;
}

export const DESKTOP = { width: 1280, height: 860 };
export const PHONE = { width: 390, height: 844 };

/** The system's Chromium (/usr/bin/chromium, or CHROMIUM_PATH); an error saying how to get one when it is missing. */
function chromiumPath(): string {
  const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!existsSync(executablePath)) throw new Error(`No Chromium at ${executablePath}: install it (apt-get install chromium) or set CHROMIUM_PATH.`);
  return executablePath;
}

/** Headless Chromium whose contexts each get their own zone and language (`newContext({ timezoneId, locale })`). */
export function launchChromium(): Promise<ChromiumBrowser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
}

/** Headless Chromium from the system (/usr/bin/chromium), driven by playwright-core, in a throw-away profile. */
export async function launchBrowser(): Promise<Browser> {
  const executablePath = chromiumPath();
  const userDataDir = mkdtempSync(join(tmpdir(), 'gw-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
    ],
    viewport: DESKTOP,
    acceptDownloads: true,
    timezoneId: 'UTC',
    locale: 'en-GB',
  });
  const errors: string[] = [];
  const watch = (page: Page) => {
    page.on('console', (m: ConsoleMessage) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()} (${m.location().url})`);
    });
    page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  };
  context.pages().forEach(watch);
  context.on('page', watch);
  return {
    context,
    errors,
    async newPage(width = DESKTOP.width) {
      const page = await context.newPage();
      await page.setViewportSize(width === DESKTOP.width ? DESKTOP : { ...PHONE, width });
      return page;
    },
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

export interface HeldRequests {
  /** Resolves once the first held request has reached the page's route. */
  arrived: Promise<void>;
  /** How many requests were held so far. */
  count(): number;
  /** Stops holding, lets the held requests go on to the server, and waits for its answers. */
  release(): Promise<void>;
}

/**
 * Holds the page's `method` requests to `path` (a pathname, or a pattern on it) until released:
 * the page is seen while its action is on its way, however fast the server. Released, they
 * reach the real server unchanged.
 */
export async function holdRequests(page: Page, method: string, path: string | RegExp): Promise<HeldRequests> {
  const held: { route: Route; request: Request }[] = [];
  let arrive = () => {};
  const arrived = new Promise<void>((resolve) => {
    arrive = resolve;
  });
  const matches = (url: URL) => (typeof path === 'string' ? url.pathname === path : path.test(url.pathname));
  const handler = (route: Route, request: Request) => {
    if (request.method() !== method) return route.fallback();
    held.push({ route, request });
    arrive();
  };
  await page.route(matches, handler);
  return {
    arrived,
    count: () => held.length,
    async release() {
      await Promise.all(held.map(({ route }) => route.continue()));
      await page.unroute(matches, handler);
      await Promise.all(held.map(({ request }) => request.response()));
    },
  };
}

/** Lets the page render what it has queued: two animation frames (Chromium moves a lost focus at a frame). */
export async function nextFrames(page: Page): Promise<void> {
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
}

/** An element as `tag#id.class "name"`, for messages that say where the focus is. */
function describeElement(el: Element | null): string {
  if (!el) return 'nothing';
  const id = el.id ? `#${el.id}` : '';
  const classes = [...el.classList].map((c) => `.${c}`).join('');
  const name = (el.getAttribute('aria-label') ?? el.textContent ?? '').trim().replace(/\s+/g, ' ').slice(0, 40);
  return `${el.tagName.toLowerCase()}${id}${classes}${name ? ` "${name}"` : ''}`;
}

/** What has the keyboard focus, described (`body` when the page dropped it). */
export async function focusedElement(page: Page): Promise<string> {
  const focused = await page.evaluateHandle(() => document.activeElement);
  try {
    return await focused.evaluate(describeElement);
  } finally {
    await focused.dispose();
  }
}

/** Whether the element `locator` finds has the keyboard focus. */
export function hasFocus(locator: Locator): Promise<boolean> {
  return locator.evaluate((el) => el === document.activeElement);
}
