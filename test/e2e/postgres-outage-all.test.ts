import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main as cliMain } from '../../src/cli/main.js';
import { PostgresEventStore } from '../../src/infra/eventstore/postgres.js';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';
import { type PrivatePostgres, privatePostgresUnavailable, startPrivatePostgres } from '../support/privatePostgres.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';
import { textSink } from '../support/textSink.js';
import { expectEachRecordedOnce } from '../support/usageLog.js';

/**
 * The whole service in one process (ROLE=all) on PostgreSQL, which restarts under load: the
 * connection holding the projector lock dies with it. The process serves chain calls
 * throughout, stops projecting, takes the lock again once PostgreSQL is back and resumes, without
 * a restart: every served call recorded once, the read models equal to a replay.
 */
const ADMIN = 'admin-token-for-the-postgres-outage-all-test';
const unavailable = privatePostgresUnavailable();
const BLOCK_NUMBER = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(unavailable !== null)(
  unavailable ? `ROLE=all through a PostgreSQL restart (skipped: ${unavailable})` : 'ROLE=all through a PostgreSQL restart',
  () => {
    let pg: PrivatePostgres;
    let upstream: FakeUpstream;
    let service: ServiceProcess;
    let dir: string;
    let base: string;
    let cookie: string;
    let accountId: string;
    let token: string;

    const bounded = (path: string, init: RequestInit = {}) => fetch(`${base}${path}`, { ...init, signal: AbortSignal.timeout(15_000) });
    const api = (path: string, method = 'GET', body?: unknown, headers: Record<string, string> = { cookie }) =>
      bounded(path, { method, headers: { 'content-type': 'application/json', ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
    const chainCall = async (): Promise<{ status: number; requestId: string }> => {
      const res = await bounded(`/local/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: BLOCK_NUMBER });
      await res.arrayBuffer();
      return { status: res.status, requestId: String(res.headers.get('x-request-id')) };
    };

    beforeAll(async () => {
      [pg, upstream] = await Promise.all([
        startPrivatePostgres(),
        startFake((call) => ({ body: { jsonrpc: '2.0', id: (JSON.parse(call.body) as { id: number }).id, result: '0x10' } })),
      ]);
      dir = mkdtempSync(join(tmpdir(), 'gw-pg-outage-all-'));
      service = startService({
        ROLE: 'all',
        DATA_DIR: dir,
        DATABASE_URL: pg.url,
        ADMIN_TOKEN: ADMIN,
        LOCAL_DEVNET: 'off',
        UPSTREAM_LOCAL: upstream.url,
        LOG_LEVEL: 'warn',
      });
      base = await service.ready;
      const signup = await api('/api/v1/auth/signup', 'POST', { email: 'outage-all@example.com', password: 'a long password' }, {});
      expect(signup.status).toBe(201);
      cookie = String(signup.headers.get('set-cookie')).split(';')[0]!;
      accountId = ((await signup.json()) as { id: string }).id;
      expect((await api(`/api/v1/admin/accounts/${accountId}/plan`, 'PUT', { plan: 'unlimited' }, { authorization: `Bearer ${ADMIN}` })).status).toBe(200);
      token = ((await (await api('/api/v1/tokens', 'POST', { name: 'through the restart' })).json()) as { token: string }).token;
      await eventually(
        async () => (await Promise.all(Array.from({ length: 8 }, chainCall))).map((c) => c.status),
        (statuses) => statuses.every((s) => s === 200),
        10_000,
      );
    }, 60_000);

    afterAll(async () => {
      service?.child.kill('SIGKILL');
      await service?.exited;
      await upstream?.close();
      await pg?.destroy();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('keeps serving, resumes projecting once PostgreSQL is back, and records every served call once', { timeout: 90_000 }, async () => {
      const served: string[] = [];
      const refused: number[] = [];
      let loading = true;
      const client = async (): Promise<void> => {
        while (loading) {
          const answer = await chainCall().catch((error: unknown) => {
            throw new Error(`a chain call failed (${String(error)}); the service said: ${service.output().slice(-3000)}`);
          });
          if (answer.status === 200) served.push(answer.requestId);
          else refused.push(answer.status);
          await sleep(10);
        }
      };
      const load = Promise.all(Array.from({ length: 3 }, client));
      const linesBefore = service.output().length;
      try {
        await sleep(500);
        await pg.crash();
        const servedAtCrash = served.length;
        // Before the change the process exited 1 here, within a second of losing its lock.
        expect(await Promise.race([service.exited, sleep(4_000).then(() => 'running')]), service.output().slice(linesBefore)).toBe('running');
        expect(served.length, 'chain calls are answered while PostgreSQL is down').toBeGreaterThan(servedAtCrash + 10);
        expect((await api('/api/v1/tokens')).status).toBe(503);
        await pg.start();
        expect(
          await eventually(
            async () => (await api('/api/v1/tokens')).status,
            (status) => status === 200,
            20_000,
          ),
        ).toBe(200);
        await eventually(
          async () => service.output().slice(linesBefore),
          (log) => log.includes('projector lock taken again'),
          20_000,
        );
        await sleep(500);
      } finally {
        loading = false;
        await load;
      }
      expect(refused, 'the token is cached and the limits are in process: nothing refused').toEqual([]);
      const log = service.output().slice(linesBefore);
      expect(log).toMatch(/projector lock lost .*: projecting stops until it is taken again/);
      expect(log).toMatch(/projector lock taken again: projecting resumed/);

      // Every served call, before, during and after, recorded exactly once, and counted in the read models.
      const store = await PostgresEventStore.open(pg.url, { poolSize: 2 });
      try {
        const ids = await expectEachRecordedOnce(store, accountId, served, { describe: () => `the service said: ${service.output().slice(linesBefore)}` });
        const counted = async (): Promise<number> => {
          const { tokens } = (await (await api('/api/v1/tokens')).json()) as { tokens: Array<{ current_month_usage: number }> };
          return tokens.reduce((sum, t) => sum + t.current_month_usage, 0);
        };
        expect(await eventually(counted, (total) => total === ids.length, 20_000)).toBe(ids.length);
      } finally {
        await store.close();
      }
      // New events after the restart are projected too (a new token shows in the list at once).
      const created = await api('/api/v1/tokens', 'POST', { name: 'after the restart' });
      expect(created.status).toBe(201);
      const listed = (await (await api('/api/v1/tokens')).json()) as { tokens: Array<{ name: string }> };
      expect(listed.tokens.map((t) => t.name)).toContain('after the restart');

      const stdout = textSink();
      const stderr = textSink();
      const code = await cliMain(['verify'], {
        stdout: stdout.stream,
        stderr: stderr.stream,
        env: { DATABASE_URL: pg.url, LOCAL_DEVNET: 'off', DATA_DIR: dir },
      });
      expect(`${code} ${stderr.text()}`, stdout.text()).toBe('0 ');
    });
  },
);
