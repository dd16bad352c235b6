import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AlertEvaluator } from '../../src/alerts/evaluator.js';
import { main } from '../../src/cli/main.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { pdfText } from '../support/pdfText.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { textSink } from '../support/textSink.js';

/**
 * The account's quota used is one figure wherever it shows (spec: Authentication 6, a token
 * with its own monthly limit does not count against the account's): the account view, the
 * metrics, the PDF export, a usage_threshold alert and the CLI all count the calls of the
 * account's tokens without their own limit, as the limiter does. The account here: 30 calls on
 * a token with its own limit, 20 (and 2 refused) on one without, a monthly limit of 100.
 */
const LIMIT = 100;
const OWN_CALLS = 30;
const SHARED_CALLS = 20;
/** A second token without its own limit: the account's quota is both tokens' calls. */
const OTHER_SHARED_CALLS = 10;

const dir = mkdtempSync(join(tmpdir(), 'gw-quota-used-'));
const plans = join(dir, 'plans.json');
writeFileSync(plans, JSON.stringify({ professional: { monthly_requests: LIMIT } }));
const env = { PLANS_CONFIG: plans, ALERT_EVALUATION_INTERVAL_SECONDS: '0', NOTIFY_OUTBOX: join(dir, 'outbox.ndjson') };

let t: TestApp;
let appOpen = false;
let o: Awaited<ReturnType<typeof owner>>;
let alertId: string;
let tokenAlertId: string;
/** What GET /api/v1/account says: every request of the month, and what is left of the limit. */
let account: { requests: number; monthly_limit: number; remaining: number };
const inject = (options: InjectOptions) => t.app.inject(options);

beforeAll(async () => {
  t = await startTestApp({ env });
  appOpen = true;
  o = await owner(t.app);
  await inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${o.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan: 'professional' },
  });
  const token = async (payload: Record<string, unknown>) =>
    (await inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload })).json().id as string;
  const own = await token({ name: 'own limit', monthly_limit: 50 });
  const shared = await token({ name: 'account limit' });
  const otherShared = await token({ name: 'account limit too' });
  const alert = await inject({
    method: 'POST',
    url: '/api/v1/alerts',
    headers: o.auth,
    payload: { name: 'quota', type: 'usage_threshold', threshold: 40, channels: [{ type: 'email', to: 'ops@example.com' }] },
  });
  expect(alert.statusCode, alert.body).toBe(201);
  alertId = alert.json().id;
  const tokenAlert = await inject({
    method: 'POST',
    url: '/api/v1/alerts',
    headers: o.auth,
    payload: { name: 'token quota', type: 'token_usage', token_id: shared, threshold: 25, channels: [{ type: 'email', to: 'ops@example.com' }] },
  });
  expect(tokenAlert.statusCode, tokenAlert.body).toBe(201);
  tokenAlertId = tokenAlert.json().id;

  const at = new Date().toISOString();
  const call = (i: number, tokenId: string, status = 200): UsageRecord => ({
    requestId: `quota-${i}`,
    at,
    accountId: o.accountId,
    tokenId,
    chain: 'eth',
    method: 'eth_blockNumber',
    status,
    rpcErrorCode: status === 429 ? -32005 : null,
    errorMessage: status === 429 ? 'limit exceeded' : null,
    totalMs: 5,
    upstreamMs: status === 429 ? null : 4,
    clientIp: '127.0.0.1',
    upstream: status === 429 ? null : 'eth-1',
  });
  const records = [
    ...Array.from({ length: OWN_CALLS }, (_, i) => call(i, own)),
    ...Array.from({ length: SHARED_CALLS }, (_, i) => call(OWN_CALLS + i, shared)),
    ...Array.from({ length: OTHER_SHARED_CALLS }, (_, i) => call(OWN_CALLS + SHARED_CALLS + i, otherShared)),
    // Refused: no quota used anywhere.
    call(OWN_CALLS + SHARED_CALLS + OTHER_SHARED_CALLS, shared, 429),
    call(OWN_CALLS + SHARED_CALLS + OTHER_SHARED_CALLS + 1, shared, 429),
  ];
  await t.runtime.store.append(
    usageStream(o.accountId),
    records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: r })),
    'any',
  );
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
  account = (await inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json().usage;
});

afterAll(async () => {
  if (appOpen) await t?.close();
  else if (t) rmSync(t.dataDir, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
});

/** The account's quota used as the API gives it: its limit less its remaining. */
const apiUsed = () => account.monthly_limit - account.remaining;

describe("an account's quota used, with a token that has its own monthly limit", () => {
  it('the account view and the metrics: every request counted, only the shared token against the limit', async () => {
    expect(account).toMatchObject({
      requests: OWN_CALLS + SHARED_CALLS + OTHER_SHARED_CALLS,
      monthly_limit: LIMIT,
      remaining: LIMIT - SHARED_CALLS - OTHER_SHARED_CALLS,
    });
    const user = (await inject({ method: 'GET', url: '/api/v1/metrics/user', headers: o.auth })).json();
    expect(user.limits).toMatchObject({ monthlyLimit: LIMIT, used: apiUsed(), remaining: account.remaining });
  });

  it("the PDF export's quota line", async () => {
    const res = await inject({ method: 'GET', url: '/api/v1/exports/usage.pdf', headers: o.auth });
    expect(res.statusCode).toBe(200);
    expect(pdfText(res.rawPayload)).toContain(`This month's quota: ${apiUsed()} of ${LIMIT} requests used, ${account.remaining} remaining;`);
  });

  it('a usage_threshold alert measures the same share of the limit', async () => {
    const evaluator = t.runtime.alerts.evaluator as AlertEvaluator;
    const report = await evaluator.runOnce();
    expect(report.failed).toBe(0);
    const alert = (await inject({ method: 'GET', url: `/api/v1/alerts/${alertId}`, headers: o.auth })).json();
    // 30 of 100 is under the 40 % threshold; counting the own-limit token's calls too (60 %) would fire it.
    expect(alert).toMatchObject({ state: 'ok', last_evaluation: { value: (apiUsed() / LIMIT) * 100, breached: false } });
  });

  it("a token_usage alert on a token without its own limit measures the account's quota, the limit the token is refused at", async () => {
    const evaluator = t.runtime.alerts.evaluator as AlertEvaluator;
    expect((await evaluator.runOnce()).failed).toBe(0);
    const alert = (await inject({ method: 'GET', url: `/api/v1/alerts/${tokenAlertId}`, headers: o.auth })).json();
    // The token's own 20 calls are 20 %, under the 25 % threshold; the account's quota used, which
    // both shared tokens draw on and at whose limit this token's calls are refused, is 30 %.
    expect(alert).toMatchObject({ state: 'firing', last_evaluation: { value: (apiUsed() / LIMIT) * 100, breached: true } });
  });

  it("the CLI's accounts show, on the data directory once the service stopped", async () => {
    await t.close({ keepData: true });
    appOpen = false;
    const cli = async (args: string[]) => {
      const stdout = textSink();
      const stderr = textSink();
      const code = await main(args, { stdout: stdout.stream, stderr: stderr.stream, env: { DATA_DIR: t.dataDir, LOCAL_DEVNET: 'off', ...env } });
      return { code, stdout: stdout.text(), stderr: stderr.text() };
    };
    const json = await cli(['accounts', 'show', o.accountId, '--json']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({
      requests_this_month: account.requests,
      quota_used: apiUsed(),
      monthly_limit: LIMIT,
      remaining: account.remaining,
    });
    const text = await cli(['accounts', 'show', o.accountId]);
    expect(text.stdout).toMatch(new RegExp(`^requests \\d{4}-\\d{2}\\s+${account.requests}$`, 'm'));
    expect(text.stdout).toMatch(new RegExp(`^quota used\\s+${apiUsed()} of ${LIMIT}, ${account.remaining} remaining$`, 'm'));
  });
});
