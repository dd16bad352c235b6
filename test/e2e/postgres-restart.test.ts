import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/infra/eventstore/postgres.js';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';
import { type PrivatePostgres, privatePostgresUnavailable, startPrivatePostgres } from '../support/privatePostgres.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';
import { recordedCalls } from '../support/usageLog.js';

/**
 * PostgreSQL restarted under load, on a cluster of the test's own: the gateway keeps answering
 * (its token is cached, the limits are in Redis), usage waits in the Redis stream, the projector
 * exits when its lock connection dies and is started again as a supervisor would, and once
 * PostgreSQL is back every answered call is recorded exactly once.
 */
const ADMIN = 'admin-token-for-the-postgres-restart-test';
const unavailable = privatePostgresUnavailable();

describe.skipIf(unavailable !== null)(unavailable ? `PostgreSQL restart under load (skipped: ${unavailable})` : 'PostgreSQL restart under load', () => {
  let pg: PrivatePostgres;
  let redis: TestRedisServer;
  let upstream: FakeUpstream;
  const dirs: string[] = [];
  const services: ServiceProcess[] = [];

  beforeAll(async () => {
    [pg, redis, upstream] = await Promise.all([
      startPrivatePostgres(),
      startTestRedisServer({ persistent: true }),
      startFake((call) => ({ body: { jsonrpc: '2.0', id: (JSON.parse(call.body) as { id: number }).id, result: '0x10' } })),
    ]);
  });
  afterAll(async () => {
    for (const service of services) service.child.kill('SIGKILL');
    await Promise.all(services.map((service) => service.exited));
    await upstream?.close();
    await redis?.stop();
    await pg?.destroy();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  const start = (role: string): ServiceProcess => {
    const dir = mkdtempSync(join(tmpdir(), `gw-pg-restart-${role}-`));
    dirs.push(dir);
    const service = startService({
      ROLE: role,
      DATA_DIR: dir,
      DATABASE_URL: pg.url,
      REDIS_URL: redis.url,
      ADMIN_TOKEN: ADMIN,
      LOCAL_DEVNET: 'off',
      UPSTREAM_LOCAL: upstream.url,
      LOG_LEVEL: 'warn',
    });
    services.push(service);
    return service;
  };

  it('keeps serving while PostgreSQL restarts and records every answered call once it is back', { timeout: 90_000 }, async () => {
    let projector = start('projector');
    await projector.ready; // it creates the tables the others read
    const api = start('api');
    const gateway = start('gateway');
    const [apiBase, gatewayBase] = await Promise.all([api.ready, gateway.ready]);

    const json = (path: string, method: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${apiBase}${path}`, { method, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const signup = await json('/api/v1/auth/signup', 'POST', { email: 'restart@example.com', password: 'a long password' });
    expect(signup.status).toBe(201);
    const cookie = String(signup.headers.get('set-cookie')).split(';')[0]!;
    const accountId = (await signup.json()).id as string;
    expect((await json(`/api/v1/admin/accounts/${accountId}/plan`, 'PUT', { plan: 'unlimited' }, { authorization: `Bearer ${ADMIN}` })).status).toBe(200);
    const created = await json('/api/v1/tokens', 'POST', { name: 'main' }, { cookie });
    expect(created.status).toBe(201);
    const { id: tokenId, token } = (await created.json()) as { id: string; token: string };

    /** Every call's request id: each one is metered (answered 200 or refused by a limit). */
    const made: string[] = [];
    const call = async (): Promise<{ status: number; requestId: string }> => {
      const res = await fetch(`${gatewayBase}/local/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}',
      });
      await res.arrayBuffer();
      const requestId = String(res.headers.get('x-request-id'));
      made.push(requestId);
      return { status: res.status, requestId };
    };
    // Warm the gateway's token cache; the plan change may take a moment to reach it (the free plan allows 5 calls a second).
    const warm = await eventually(
      async () => (await Promise.all(Array.from({ length: 12 }, call))).map((answer) => answer.status),
      (statuses) => statuses.every((status) => status === 200),
      10_000,
    );
    expect(warm, 'the gateway serves the new token on the unlimited plan').toEqual(Array(12).fill(200));

    const answers: { status: number; requestId: string; during: boolean }[] = [];
    let outage = false;
    let loading = true;
    const client = async (): Promise<void> => {
      while (loading) {
        const answer = await call();
        answers.push({ ...answer, during: outage });
        await sleep(20); // 4 clients stay well under the unlimited plan's 500 calls a second
      }
    };
    const load = Promise.all(Array.from({ length: 4 }, client));
    await sleep(500);

    outage = true;
    await pg.stop();
    const projectorExit = await Promise.race([projector.exited, sleep(15_000).then(() => 'still running')]); // its lock went with the connection
    await sleep(2000);
    await pg.start();
    outage = false;
    // The supervisor's part: start the projector again until it runs (PostgreSQL may still be warming up).
    for (let attempt = 1; ; attempt++) {
      projector = start('projector');
      try {
        await projector.ready;
        break;
      } catch (error) {
        if (attempt === 20) throw error;
        await sleep(500);
      }
    }
    await sleep(1000);
    loading = false;
    await load;

    expect(projectorExit, 'the projector exits when its lock connection is lost').toBe(1);
    const during = answers.filter((a) => a.during);
    expect(during.length, 'calls made while PostgreSQL was down').toBeGreaterThan(10);
    const refused = answers.filter((a) => a.status !== 200);
    expect(refused.slice(0, 5), `${refused.length} of ${answers.length} calls not answered 200`).toEqual([]);
    const answered = new Set(answers.map((a) => a.requestId));
    expect(answered.size, 'request ids are unique').toBe(answers.length);

    const store = await PostgresEventStore.open(pg.url, { poolSize: 2 });
    try {
      const recorded = async (): Promise<string[]> => (await recordedCalls(store, accountId)).map((c) => c.requestId);
      const ids = await eventually(
        recorded,
        (seen) => {
          const kept = new Set(seen);
          return made.every((id) => kept.has(id));
        },
        30_000,
      );
      const kept = new Set(ids);
      expect(
        made.filter((id) => !kept.has(id)),
        'every call made is recorded',
      ).toEqual([]);
      expect(ids.length, 'no call recorded twice').toBe(new Set(ids).size);
      expect(ids.length, 'nothing recorded that was not called').toBe(made.length);
      // The API's pool reconnected too, and its totals count each recorded call once.
      const metricsTotal = async (): Promise<number> => {
        const res = await fetch(`${apiBase}/api/v1/metrics/tokens/${tokenId}`, { headers: { cookie } });
        return res.status === 200 ? ((await res.json()).totals?.requests ?? 0) : -1;
      };
      expect(await eventually(metricsTotal, (total) => total === ids.length, 30_000), 'the metrics totals count every recorded call').toBe(ids.length);
    } finally {
      await store.close();
    }
  });
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
