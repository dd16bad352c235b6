import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ResilientLimiter } from '../../src/infra/limits/resilient.js';
import { until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { accountUsage, quotaCalls } from '../support/quotaCalls.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * The month's quota outlives Redis's counters: a Redis restarted without persistence (or a
 * failover to a replica behind) loses them, and each counter is made again by the next call,
 * starting from the usage totals (docs/decisions.md, "A month counter Redis lost starts from the
 * usage totals"). The whole service, in front of a fake EVM node.
 */

let evm: FakeUpstream;
let redis: TestRedisServer;
let dir: string;
let t: TestApp;

beforeAll(async () => {
  [evm, redis] = await Promise.all([startEvmFake(), startTestRedisServer()]);
  dir = mkdtempSync(join(tmpdir(), 'gw-quota-redis-'));
  const plans = join(dir, 'plans.json');
  writeFileSync(plans, JSON.stringify({ developer: { rps: 100, monthly_requests: 8, custom_limits: true } }));
  t = await startTestApp({ env: { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plans, REDIS_URL: redis.url } });
});
afterAll(async () => {
  await t?.close();
  await evm?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('a Redis restarted empty', () => {
  it('refuses an exhausted quota all the same, and counts an account apart from its tokens with their own limit', async () => {
    const o = await owner(t.app);
    const plan = await t.app.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'developer' },
    });
    expect(plan.statusCode).toBe(200);
    const create = async (fields: Record<string, unknown>) =>
      (await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'q', ...fields } })).json() as { token: string };
    const own = await create({ monthly_limit: 3 });
    const shared = await create({});
    const statuses = async (token: string, n: number) => (await quotaCalls(t, token, n)).map(([status]) => status);
    expect(await statuses(own.token, 4)).toEqual([200, 200, 200, 429]);
    expect(await statuses(shared.token, 5)).toEqual([200, 200, 200, 200, 200]);
    // In the usage totals, and this second's leases given back (calls served from a lease taken before the loss may pass the limit once: docs/decisions.md); then Redis restarts with nothing.
    await accountUsage(t, o.auth, { requests: 8, remaining: 3 });
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    await redis.stop();
    await redis.start();
    const limiter = t.runtime.limiter as ResilientLimiter;
    await until(() => limiter.backend === 'redis', 15_000);
    // Before: the own token got 3 calls more, the account 8.
    const [refused] = await quotaCalls(t, own.token, 1);
    expect(refused).toEqual([429, '0']);
    expect(await statuses(shared.token, 4)).toEqual([200, 200, 200, 429]);
  }, 60_000);
});
