import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { evmServiceConfig } from '../support/serviceOnEvmNodes.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';
import { newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * A node's `maxRps` shared among the gateways of a deployment (docs/decisions.md, "A node's
 * calls-per-second budget"): gateway A in this process (the whole service), gateway B a process
 * of its own (ROLE=gateway) on the same PostgreSQL and Redis, both in front of one node capped
 * at 10 calls a second. Each takes 5; when B dies, A takes the whole 10 once B's time is up.
 */
const TTL_MS = 1_500;
const unavailable = await postgresUnavailable();

const budgetOf = async (base: string): Promise<number | null> => {
  const metrics = await (await fetch(`${base}/metrics`)).text();
  const line = /gateway_upstream_budget_rps\{chain="evm",upstream="capped"\} (\d+)/.exec(metrics);
  return line ? Number(line[1]) : null;
};

describe.skipIf(unavailable !== null)(unavailable ? `maxRps across gateways (skipped: ${unavailable})` : 'maxRps across gateways', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-budget-instances-'));
  let db: TestDatabase;
  let redis: TestRedisServer;
  let node: FakeUpstream;
  let spare: FakeUpstream;
  let a: TestApp;
  let b: ServiceProcess;
  let onA: string;
  let onB: string;

  beforeAll(async () => {
    [db, redis, node, spare] = await Promise.all([createTestDatabase(), startTestRedisServer(), startEvmFake(), startEvmFake()]);
    const config = evmServiceConfig(dir, {
      upstreams: [
        { url: node.url, label: 'capped', maxRps: 10 },
        { url: spare.url, label: 'spare' },
      ],
    });
    const env = { DATABASE_URL: db.url, REDIS_URL: redis.url, ...config, WS_INSTANCE_TTL_MS: String(TTL_MS) };
    b = startService({ ...env, ROLE: 'gateway', LOCAL_DEVNET: 'off', LOG_LEVEL: 'warn' });
    a = await startTestApp({ env });
    await a.app.listen({ port: 0, host: '127.0.0.1' });
    const address = a.app.server.address();
    onA = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    onB = await b.ready;
  }, 120_000);
  afterAll(async () => {
    b?.child.kill('SIGKILL');
    await b?.exited;
    await a?.close();
    await Promise.all([node?.close(), spare?.close()]);
    await redis?.stop();
    await db?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('gives each of two gateways half the cap, and the whole of it back to the one left when the other dies', async () => {
    // Before: each gateway held the node to the whole 10, so two sent it up to 20 a second.
    await until(async () => (await budgetOf(onA)) === 5 && (await budgetOf(onB)) === 5, 10_000);
    const { token } = await newToken(a, { plan: 'unlimited' });
    const read = (base: string, id: number) =>
      fetch(`${base}/evm/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        // eth_accounts: no head or cache involved; a param of its own each, so no two share one node call.
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'eth_accounts', params: [id] }),
      }).then((r) => r.status);
    node.reset();
    // From the start of a clock second (the gateways' budget windows): on a slow machine the calls may run into the next.
    while (Date.now() % 1000 > 50) await new Promise((resolve) => setTimeout(resolve, 5));
    const firstSecond = Math.floor(Date.now() / 1000);
    const statuses = await Promise.all(Array.from({ length: 40 }, (_, i) => read(i % 2 === 0 ? onA : onB, i)));
    const seconds = Math.floor(Date.now() / 1000) - firstSecond + 1;
    expect(statuses.every((s) => s === 200)).toBe(true);
    // 5 a second from each gateway. Without the share each sent it up to 10 a second (about 20 of these 40).
    expect(node.calls.filter((c) => c.body.includes('eth_accounts')).length).toBeLessThanOrEqual(10 * seconds);

    b.child.kill('SIGKILL');
    await b.exited;
    await until(async () => (await budgetOf(onA)) === 10, 3 * TTL_MS + 5_000);
  });
});
