import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Browser, launchBrowser } from '../support/browser.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/** /api/docs in a real Chromium: the OpenAPI document rendered under the dashboard's strict policy. */

let t: TestApp;
let base: string;
let browser: Browser;

beforeAll(async () => {
  t = await startTestApp();
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

describe('/api/docs', () => {
  it('renders every operation of the document with no policy violation, from this origin only', async () => {
    const page = await browser.newPage();
    const violations: string[] = [];
    const origins = new Set<string>();
    page.on('request', (request) => origins.add(new URL(request.url()).origin));
    await page.exposeFunction('reportViolation', (v: string) => violations.push(v));
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => {
        (window as unknown as { reportViolation(v: string): void }).reportViolation(
          `${e.violatedDirective} ${e.blockedURI} ${e.sample} ${e.sourceFile}:${e.lineNumber}`,
        );
      });
    });
    const answer = await page.goto(`${base}/api/docs`);
    expect(answer?.headers()['content-security-policy']).toMatch(/script-src 'self'; style-src 'self';/);
    await page.locator('.opblock').first().waitFor({ timeout: 15_000 });

    const operations = Object.values((await (await fetch(`${base}/api/v1/openapi.json`)).json()).paths as Record<string, object>).reduce(
      (n: number, ops) => n + Object.keys(ops).length,
      0,
    );
    expect(await page.locator('.opblock').count()).toBe(operations);
    // An operation opens with its parameters and answers, problem+json among them.
    await page.locator('.opblock-summary-path', { hasText: '/api/v1/tokens/{id}/history' }).first().click();
    await page.getByText('application/problem+json').first().waitFor({ timeout: 5_000 });

    expect(violations).toEqual([]);
    expect(browser.errors).toEqual([]);
    expect([...origins]).toEqual([base]);
  });
});
