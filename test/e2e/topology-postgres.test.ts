import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JsonRpcProvider } from 'ethers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/infra/eventstore/postgres.js';
import { GANACHE_ACCOUNT_0, type GanacheNode, startGanache } from '../support/ganache.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';
import { recordedCalls } from '../support/usageLog.js';

/**
 * The topology as it is deployed, each role its own OS process: two gateways, the management
 * API and the projector, on PostgreSQL (event store and read models) and a real redis-server,
 * the `local` chain served by ganache. One test walks the story in order; each step names
 * what it checks.
 */
const ADMIN = 'admin-token-for-the-topology-test';
const unavailable = await postgresUnavailable();

describe.skipIf(unavailable !== null)(unavailable ? `topology on PostgreSQL (skipped: ${unavailable})` : 'topology on PostgreSQL', () => {
  let db: TestDatabase;
  let redis: TestRedisServer;
  let ganache: GanacheNode;
  const dirs: string[] = [];
  const services: ServiceProcess[] = [];

  beforeAll(async () => {
    [db, redis, ganache] = await Promise.all([createTestDatabase(), startTestRedisServer({ persistent: true }), startGanache()]);
  });
  afterAll(async () => {
    for (const service of services) service.child.kill('SIGKILL');
    await Promise.all(services.map((service) => service.exited));
    await ganache?.close();
    await redis?.stop();
    await db?.drop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  const start = (role: string): ServiceProcess => {
    const dir = mkdtempSync(join(tmpdir(), `gw-topology-${role}-`));
    dirs.push(dir);
    const service = startService({
      ROLE: role,
      DATA_DIR: dir,
      DATABASE_URL: db.url,
      REDIS_URL: redis.url,
      ADMIN_TOKEN: ADMIN,
      LOCAL_DEVNET: 'off',
      UPSTREAM_LOCAL: ganache.url,
      LOG_LEVEL: 'warn',
    });
    services.push(service);
    return service;
  };

  it('serves, meters, revokes and re-plans across separate gateway, API and projector processes', { timeout: 240_000 }, async () => {
    let projector = start('projector');
    const api = start('api');
    const gateways = [start('gateway'), start('gateway')];
    const [apiBase, gw1, gw2] = await Promise.all([api.ready, ...gateways.map((g) => g.ready)]);
    await projector.ready;
    const bases = [gw1!, gw2!];

    // Sign up and create tokens through the API.
    const json = (path: string, method: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${apiBase}${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const signup = await json('/api/v1/auth/signup', 'POST', { email: 'topology@example.com', password: 'a long password' });
    expect(signup.status).toBe(201);
    const cookie = String(signup.headers.get('set-cookie')).split(';')[0]!;
    const accountId = (await signup.json()).id as string;
    const createToken = async (name: string): Promise<{ id: string; token: string }> => {
      const res = await json('/api/v1/tokens', 'POST', { name }, { cookie });
      expect(res.status).toBe(201);
      const body = await res.json();
      return { id: body.id, token: body.token };
    };
    const main = await createToken('main');

    const call = async (base: string, token: string): Promise<{ status: number; requestId: string }> => {
      const res = await fetch(`${base}/local/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}',
      });
      await res.arrayBuffer();
      return { status: res.status, requestId: String(res.headers.get('x-request-id')) };
    };
    const burst = (base: string, token: string, n: number) => Promise.all(Array.from({ length: n }, () => call(base, token)));
    /** Polls `check` until it holds, at most `ms`; returns how long it took. */
    const within = async (ms: number, what: string, check: () => Promise<boolean>): Promise<number> => {
      const started = Date.now();
      for (;;) {
        if (await check()) return Date.now() - started;
        if (Date.now() - started > ms) throw new Error(`${what}: not within ${ms} ms`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };

    // The free plan allows 5 calls a second per token, on both gateways (the limit is in Redis).
    for (const base of bases) expect((await burst(base, main.token, 12)).some((r) => r.status === 429)).toBe(true);
    // A plan changed through the admin API: both gateways apply its limits within 1 s.
    const plan = await json(`/api/v1/admin/accounts/${accountId}/plan`, 'PUT', { plan: 'unlimited' }, { authorization: `Bearer ${ADMIN}` });
    expect(plan.status).toBe(200);
    await within(1000, 'both gateways apply the new plan', async () => {
      const results = await Promise.all(bases.map((base) => burst(base, main.token, 12)));
      return results.every((answers) => answers.every((r) => r.status === 200));
    });

    // Chain calls through both gateways with ethers, against ganache.
    for (const base of bases) {
      const provider = new JsonRpcProvider(`${base}/local/${main.token}`, undefined, { staticNetwork: true, batchMaxCount: 1 });
      expect(await provider.getBalance(GANACHE_ACCOUNT_0)).toBeGreaterThan(0n);
      expect(await provider.getBlockNumber()).toBeGreaterThanOrEqual(0);
      provider.destroy();
    }

    // Every call shows in the metrics API within 5 s: as many requests as usage events recorded.
    const store = await PostgresEventStore.open(db.url, { poolSize: 2 });
    const recordedIds = async (): Promise<Set<string>> => {
      const calls = await recordedCalls(store, accountId);
      const ids = new Set(calls.map((c) => c.requestId));
      expect(ids.size, 'no call recorded twice').toBe(calls.length);
      return ids;
    };
    const metricsTotal = async (): Promise<number> => {
      const res = await fetch(`${apiBase}/api/v1/metrics/tokens/${main.id}`, { headers: { cookie } });
      return (await res.json()).totals?.requests ?? 0;
    };
    try {
      const made = 2 * 12; // the limited bursts at least (answered 200 or 429, both metered); the rest the store counts
      await within(5000, 'the calls show in the metrics API', async () => {
        const recorded = (await recordedIds()).size;
        return recorded >= made && (await metricsTotal()) === recorded;
      });

      // kill -9 one gateway under load: every call it answered is recorded.
      const answered: string[] = [];
      let loading = true;
      const client = async (base: string): Promise<void> => {
        while (loading) {
          try {
            const answer = await call(base, main.token);
            if (base === bases[1]) answered.push(answer.requestId);
          } catch {
            if (base === bases[1]) return; // the killed gateway: this call's answer never arrived
          }
        }
      };
      const load = Promise.all([...Array(4).fill(bases[0]), ...Array(4).fill(bases[1])].map((base: string) => client(base)));
      await new Promise((r) => setTimeout(r, 800));
      gateways[1]!.child.kill('SIGKILL');
      await gateways[1]!.exited;

      // Restart the projector mid-stream (the other gateway still under load): nothing counted twice.
      projector.child.kill('SIGKILL');
      await projector.exited;
      projector = start('projector');
      await projector.ready;
      await new Promise((r) => setTimeout(r, 500));
      loading = false;
      await load;
      expect(answered.length).toBeGreaterThan(10);
      await within(15_000, 'every call the killed gateway answered is recorded, and counted once', async () => {
        const recorded = await recordedIds();
        return answered.every((id) => recorded.has(id)) && (await metricsTotal()) === recorded.size;
      });
      // Settled: the totals end equal to the events, never above them (a replay after the restart
      // would add to them); usage still in Redis may land after the check above, so wait it out.
      await new Promise((r) => setTimeout(r, 1000));
      await within(15_000, 'the totals settle at the events and never exceed them', async () => {
        const [total, recorded] = [await metricsTotal(), (await recordedIds()).size];
        expect(total).toBeLessThanOrEqual(recorded);
        return total === recorded;
      });
    } finally {
      await store.close();
    }

    // Disable and revoke through the API: both gateways refuse within 1 s.
    const other = await createToken('other');
    const restarted = start('gateway'); // in place of the killed one
    const live = [bases[0]!, await restarted.ready];
    for (const base of live) expect((await call(base, other.token)).status).toBe(200);
    const disabled = await json(`/api/v1/tokens/${other.id}`, 'PATCH', { status: 'disabled' }, { cookie });
    expect(disabled.status).toBe(200);
    await within(1000, 'both gateways refuse the disabled token', async () =>
      (await Promise.all(live.map((base) => call(base, other.token)))).every((r) => r.status === 403),
    );
    const revoked = await fetch(`${apiBase}/api/v1/tokens/${main.id}`, { method: 'DELETE', headers: { cookie } });
    expect(revoked.status).toBe(200);
    await within(1000, 'both gateways refuse the revoked token', async () =>
      (await Promise.all(live.map((base) => call(base, main.token)))).every((r) => r.status === 401),
    );
  });
});
