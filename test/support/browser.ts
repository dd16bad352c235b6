import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type ConsoleMessage, type Page } from 'playwright-core';

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

/** Headless Chromium from the system (/usr/bin/chromium), driven by playwright-core, in a throw-away profile. */
export async function launchBrowser(): Promise<Browser> {
  const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!existsSync(executablePath)) throw new Error(`No Chromium at ${executablePath}: install it (apt-get install chromium) or set CHROMIUM_PATH.`);
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
