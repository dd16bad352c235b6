import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { INVALIDATION_TOPIC } from '../../src/projections/runner.js';
import { until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { ownerOn } from '../support/planOwner.js';
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * Rate limits, monthly quotas and plan changes as a paying customer sees them on the wire and as
 * the owner billing them counts them. Times are pinned (Date and performance faked) around each
 * burst of calls, so "the same second" and "the last tenth of a second of the month" are exact:
 * the gateway decides at the call's arrival, read from those two clocks.
 */

/** Small figures so a quota is spent in a few calls: Developer 8 a month at 4/s, Professional 20 at 10/s. */
const DEVELOPER = { rps: 4, monthly: 8 };
const PROFESSIONAL = { rps: 10, monthly: 20 };

const dir = mkdtempSync(join(tmpdir(), 'gw-limits-audit-'));
const plansFile = join(dir, 'plans.json');
writeFileSync(
  plansFile,
  JSON.stringify({
    developer: { rps: DEVELOPER.rps, monthly_requests: DEVELOPER.monthly },
    professional: { rps: PROFESSIONAL.rps, monthly_requests: PROFESSIONAL.monthly },
  }),
);

let evm: FakeUpstream;
let t: TestApp;

beforeAll(async () => {
  evm = await startEvmFake();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plansFile } });
});
afterAll(async () => {
  vi.useRealTimers();
  await t?.close();
  await evm?.close();
  rmSync(dir, { recursive: true, force: true });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Pins the clocks the gateway reads a call's arrival from (`Date.now()` and `performance.now()`). */
const pinClock = (atMs: number) => {
  vi.useRealTimers();
  vi.useFakeTimers({ toFake: ['Date', 'performance'], now: atMs });
};

const blockNumber = (id: number) => ({ jsonrpc: '2.0', id, method: 'eth_blockNumber', params: [] });

const rpc = (token: string, payload: unknown) =>
  t.app.inject({ method: 'POST', url: `/local/${token}`, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(payload) });

/** `n` single calls one after another; their answers. */
async function calls(token: string, n: number): Promise<LightMyRequestResponse[]> {
  const out: LightMyRequestResponse[] = [];
  for (let i = 0; i < n; i++) out.push(await rpc(token, blockNumber(i + 1)));
  return out;
}

/** Runs `change` and waits until the gateway heard `topic` invalidated (the change feed follows the API's answer). */
async function heard(topic: string, change: () => Promise<LightMyRequestResponse>): Promise<LightMyRequestResponse> {
  const topics: string[] = [];
  const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
  try {
    const res = await change();
    expect(res.statusCode, res.body).toBeLessThan(300);
    await until(() => topics.includes(topic));
    return res;
  } finally {
    await unsubscribe();
  }
}

const setPlan = (accountId: string, plan: string) =>
  heard(`account:${accountId}`, () =>
    t.app.inject({ method: 'PUT', url: `/api/v1/admin/accounts/${accountId}/plan`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, payload: { plan } }),
  );

/** A new owner on `plan` with one token (its own limits if given): the raw token, its id, the owner. */
async function tokenOn(plan: string, fields: Record<string, unknown> = {}) {
  const o = await ownerOn(t, plan);
  const topics: string[] = [];
  const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => topics.push(m));
  try {
    const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'audit', ...fields } });
    expect(res.statusCode, res.body).toBe(201);
    const tokenId = res.json().id as string;
    await until(() => topics.includes(`token:${tokenId}`));
    return { o, token: res.json().token as string, tokenId };
  } finally {
    await unsubscribe();
  }
}

/** A time in the middle of a second of the current month (the month the API's views count). */
const midSecond = (): number => Math.floor(Date.now() / 1000) * 1000 + 500;

describe('a stricter plan wins over a token’s own limits', () => {
  it('a token given 300/s on Unlimited is held to Developer’s rate once the account is downgraded', async () => {
    const { o, token } = await tokenOn('unlimited', { rate_limit: 300 });
    await setPlan(o.accountId, 'developer');
    pinClock(midSecond());
    const answers = await calls(token, DEVELOPER.rps + 1);
    expect(answers.map((a) => a.statusCode)).toEqual([...Array(DEVELOPER.rps).fill(200), 429]);
    expect(answers[0]?.headers['x-ratelimit-limit']).toBe(String(DEVELOPER.rps));
  });

  it('a token given its own monthly limit on Unlimited is held to Developer’s monthly total once downgraded', async () => {
    const { o, token } = await tokenOn('unlimited', { monthly_limit: 1000 });
    await setPlan(o.accountId, 'developer');
    const answers: LightMyRequestResponse[] = [];
    // Two seconds' worth, within the rate: the month refuses, not the second.
    pinClock(midSecond());
    answers.push(...(await calls(token, DEVELOPER.rps)));
    pinClock(midSecond() + 1000);
    answers.push(...(await calls(token, DEVELOPER.rps)));
    pinClock(midSecond() + 2000);
    answers.push(...(await calls(token, 1)));
    expect(answers.map((a) => a.statusCode)).toEqual([...Array(DEVELOPER.monthly).fill(200), 429]);
    expect(answers[0]?.headers['x-monthlylimit-limit']).toBe(String(DEVELOPER.monthly));
    expect(answers.at(-1)?.json().error).toMatchObject({ code: -32005 });
  });
});
