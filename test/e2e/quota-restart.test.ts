import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * The month's quota outlives the process: on the embedded default the limiter counts in
 * process, and a restart starts each bucket from the usage totals, not from zero.
 */

let evm: FakeUpstream;
let dir: string;
let env: Record<string, string>;

beforeAll(async () => {
  evm = await startEvmFake();
  dir = mkdtempSync(join(tmpdir(), 'gw-quota-'));
  const plans = join(dir, 'plans.json');
  writeFileSync(plans, JSON.stringify({ developer: { monthly_requests: 8 } }));
  env = { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plans };
});
afterAll(async () => {
  await evm?.close();
  rmSync(dir, { recursive: true, force: true });
});

const call = (t: TestApp, token: string) =>
  t.app.inject({
    method: 'POST',
    url: `/local/${token}`,
    headers: { 'content-type': 'application/json' },
    payload: { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] },
  });

describe.each(['on', 'off'])('STORAGE_THREAD=%s', (storageThread) => {
  it('refuses an exhausted quota after a restart, and counts an account apart from its tokens with their own limit', async () => {
    const dataDir = mkdtempSync(join(dir, 'data-'));
    let t = await startTestApp({ dataDir, env: { ...env, STORAGE_THREAD: storageThread } });
    const o = await owner(t.app);
    await t.app.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'developer' },
    });
    const create = async (fields: Record<string, unknown>) =>
      (await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'q', ...fields } })).json() as {
        id: string;
        token: string;
      };
    const own = await create({ monthly_limit: 3 });
    const shared = await create({});
    const statuses = async (token: string, n: number) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) out.push((await call(t, token)).statusCode);
      return out;
    };
    expect(await statuses(own.token, 4)).toEqual([200, 200, 200, 429]);
    expect(await statuses(shared.token, 5)).toEqual([200, 200, 200, 200, 200]);
    // Everything served is in the totals before the stop (a SIGTERM drains and projects it too).
    await eventually(
      async () => (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: o.auth })).json().usage.requests,
      (n) => n === 8,
      10_000,
    );
    await t.close({ keepData: true });

    t = await startTestApp({ dataDir, env: { ...env, STORAGE_THREAD: storageThread } });
    try {
      const refused = await call(t, own.token);
      expect(refused.statusCode).toBe(429);
      expect(refused.headers['x-monthlylimit-remaining']).toBe('0');
      // The account's 8 hold the shared token's 5 only: 3 more, then the limit.
      expect(await statuses(shared.token, 4)).toEqual([200, 200, 200, 429]);
    } finally {
      await t.close();
    }
  });
});
