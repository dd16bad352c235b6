import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main as cliMain } from '../../src/cli/main.js';
import { PostgresEventStore } from '../../src/infra/eventstore/postgres.js';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';
import { type PrivatePostgres, privatePostgresUnavailable, startPrivatePostgres } from '../support/privatePostgres.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';
import { textSink } from '../support/textSink.js';
import { expectEachRecordedOnce } from '../support/usageLog.js';

/**
 * PostgreSQL (DATABASE_URL: event store and read models) going away and coming back, under the
 * production roles as separate processes, on a cluster of the test's own: crashed under load
 * (every connection dropped, open transactions lost), then silent (a listener that accepts
 * connections and never answers), and unreachable at start.
 */
const ADMIN = 'admin-token-for-the-postgres-outage-test';
const unavailable = privatePostgresUnavailable();
const BLOCK_NUMBER = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}';

/** A TCP relay to PostgreSQL that can fall silent: existing connections cut, new ones accepted and never answered. */
interface Relay {
  url: string;
  silence(): void;
  resume(): void;
  close(): Promise<void>;
}

async function startRelay(targetUrl: string): Promise<Relay> {
  const target = new URL(targetUrl);
  const sockets = new Set<Socket>();
  let silent = false;
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => undefined);
    if (silent) return; // accepted, never answered
    const upstream = connect(Number(target.port), target.hostname);
    sockets.add(upstream);
    upstream.on('close', () => {
      sockets.delete(upstream);
      client.destroy();
    });
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `postgres://${target.username}@127.0.0.1:${port}${target.pathname}`,
    silence() {
      silent = true;
      for (const socket of sockets) socket.destroy();
    },
    resume() {
      silent = false;
      for (const socket of sockets) socket.destroy();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe.skipIf(unavailable !== null)(unavailable ? `PostgreSQL outages (skipped: ${unavailable})` : 'PostgreSQL outages', () => {
  let pg: PrivatePostgres;
  let relay: Relay;
  /** A listener that accepts connections and never answers, and a process started against it. */
  let silentServer: Relay;
  let startingAgainstSilence: ServiceProcess;
  let redis: TestRedisServer;
  let upstream: FakeUpstream;
  const dirs: string[] = [];
  const services: ServiceProcess[] = [];
  let apiBase: string;
  let gatewayBase: string;
  let cookie: string;
  let accountId: string;
  /** A token the gateway has cached, and one it has never seen. */
  let cachedToken: string;
  let uncachedToken: string;

  const start = (role: string, databaseUrl: string, extra: Record<string, string> = {}): ServiceProcess => {
    const dir = mkdtempSync(join(tmpdir(), `gw-pg-outage-${role}-`));
    dirs.push(dir);
    const service = startService({
      ROLE: role,
      DATA_DIR: dir,
      DATABASE_URL: databaseUrl,
      REDIS_URL: redis.url,
      ADMIN_TOKEN: ADMIN,
      LOCAL_DEVNET: 'off',
      UPSTREAM_LOCAL: upstream.url,
      LOG_LEVEL: 'warn',
      ...extra,
    });
    services.push(service);
    return service;
  };
  /** A fetch that may not hang: a call not answered in 15 s fails the test. */
  const bounded = (url: string, init: RequestInit = {}) => fetch(url, { ...init, signal: AbortSignal.timeout(15_000) });
  const api = (path: string, method = 'GET', body?: unknown) =>
    bounded(`${apiBase}${path}`, {
      method,
      headers: { 'content-type': 'application/json', cookie },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const chainCall = async (token: string): Promise<{ status: number; requestId: string; retryAfter: string | null }> => {
    const res = await bounded(`${gatewayBase}/local/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: BLOCK_NUMBER });
    await res.arrayBuffer();
    return { status: res.status, requestId: String(res.headers.get('x-request-id')), retryAfter: res.headers.get('retry-after') };
  };
  const readyz = async (base: string) => {
    const res = await bounded(`${base}/readyz`);
    return { status: res.status, body: (await res.json()) as { status: string; database?: { state: string; reason: string } } };
  };

  let projector: ServiceProcess;
  let gateway: ServiceProcess;
  /** The supervisor's part: the projector started again until it runs. */
  const restartProjector = async (): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      projector = start('projector', pg.url, { STARTUP_TIMEOUT_SECONDS: '10' });
      try {
        await projector.ready;
        return;
      } catch (error) {
        if (attempt === 10) throw error;
        await sleep(300);
      }
    }
  };

  beforeAll(async () => {
    [pg, redis, upstream] = await Promise.all([
      startPrivatePostgres(),
      startTestRedisServer({ persistent: true }),
      startFake((call) => ({ body: { jsonrpc: '2.0', id: (JSON.parse(call.body) as { id: number }).id, result: '0x10' } })),
    ]);
    relay = await startRelay(pg.url);
    silentServer = await startRelay(pg.url);
    silentServer.silence();
    // Started now, beside the others: it only waits and gives up.
    startingAgainstSilence = start('api', silentServer.url, { STARTUP_TIMEOUT_SECONDS: '7' });
    projector = start('projector', pg.url);
    await projector.ready; // it creates the tables the others read
    const apiService = start('api', relay.url);
    gateway = start('gateway', relay.url);
    [apiBase, gatewayBase] = await Promise.all([apiService.ready, gateway.ready]);
    const signup = await bounded(`${apiBase}/api/v1/auth/signup`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'outage@example.com', password: 'a long password' }),
    });
    expect(signup.status).toBe(201);
    cookie = String(signup.headers.get('set-cookie')).split(';')[0]!;
    accountId = ((await signup.json()) as { id: string }).id;
    const plan = await bounded(`${apiBase}/api/v1/admin/accounts/${accountId}/plan`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({ plan: 'unlimited' }),
    });
    expect(plan.status).toBe(200);
    const issue = async (name: string) => ((await (await api('/api/v1/tokens', 'POST', { name })).json()) as { token: string }).token;
    cachedToken = await issue('cached');
    uncachedToken = await issue('never called before the outage');
    // The plan change may take a moment to reach the gateway (the free plan allows 5 calls a second).
    await eventually(
      async () => (await Promise.all(Array.from({ length: 8 }, () => chainCall(cachedToken)))).map((c) => c.status),
      (statuses) => statuses.every((s) => s === 200),
      10_000,
    );
  }, 60_000);

  afterAll(async () => {
    for (const service of services) service.child.kill('SIGKILL');
    await Promise.all(services.map((service) => service.exited));
    await relay?.close();
    await silentServer?.close();
    await upstream?.close();
    await redis?.stop();
    await pg?.destroy();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('crashed under load: 503s with Retry-After, readiness as documented, one log line, then everything resumes and each served call is recorded once', {
    timeout: 60_000,
  }, async () => {
    const served: string[] = [];
    let loading = true;
    const client = async (): Promise<void> => {
      while (loading) {
        const answer = await chainCall(cachedToken);
        expect(answer.status, 'a cached token is served throughout').toBe(200);
        served.push(answer.requestId);
        await sleep(10);
      }
    };
    const load = Promise.all(Array.from({ length: 3 }, client));
    try {
      await outageAndBack();
    } finally {
      loading = false;
      await load;
    }

    async function outageAndBack(): Promise<void> {
      await sleep(500); // appends and projection batches under way
      const projectorExit = projector.exited;
      const gatewayLinesBefore = gateway.output().split('\n').length;
      await pg.crash();

      // The management API: a clear 503 that says when to come back, never a 500.
      const list = await api('/api/v1/tokens');
      expect(list.status).toBe(503);
      expect(list.headers.get('retry-after')).toBe('5');
      expect(((await list.json()) as { code: string }).code).toBe('store_unavailable');
      const login = await bounded(`${apiBase}/api/v1/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: 'outage@example.com', password: 'a long password' }),
      });
      expect(login.status).toBe(503);

      // Readiness: the API refuses everything (out of rotation); a gateway still serves its cached tokens (stays in).
      const apiReady = await readyz(apiBase);
      expect(apiReady.status).toBe(503);
      expect(apiReady.body).toMatchObject({ status: 'unavailable', database: { state: 'down' } });
      const gatewayReady = await readyz(gatewayBase);
      expect(gatewayReady.status).toBe(200);
      expect(gatewayReady.body).toMatchObject({ status: 'degraded', database: { state: 'down' } });
      expect((await bounded(`${apiBase}/healthz`)).status).toBe(200);
      expect((await bounded(`${gatewayBase}/healthz`)).status).toBe(200);

      // A token the gateway has not cached cannot be checked: 503 with Retry-After, and the log says so once, not once a call.
      const uncached = await Promise.all(Array.from({ length: 30 }, () => chainCall(uncachedToken)));
      expect(uncached.map((c) => [c.status, c.retryAfter])).toEqual(Array(30).fill([503, '5']));
      const outageLines = gateway
        .output()
        .split('\n')
        .slice(gatewayLinesBefore - 1)
        .filter((line) => /gatekeeper failed|token lookup failed/.test(line));
      expect(outageLines.length, outageLines.join('\n').slice(0, 2000)).toBe(1);

      expect(await projectorExit, 'the projector exits when its lock connection is lost, for its supervisor to restart it').toBe(1);

      await pg.start();
      await restartProjector();
      // Without a restart of the API or the gateway.
      expect(
        await eventually(
          async () => (await api('/api/v1/tokens')).status,
          (status) => status === 200,
          15_000,
        ),
      ).toBe(200);
      expect(
        await eventually(
          async () => (await chainCall(uncachedToken)).status,
          (status) => status === 200,
          15_000,
        ),
      ).toBe(200);
      expect((await readyz(apiBase)).body).toEqual({ status: 'ready', redis: expect.anything() });
    }

    // Every served call, before, during and after the outage, recorded exactly once.
    const store = await PostgresEventStore.open(pg.url, { poolSize: 2 });
    try {
      const ids = await expectEachRecordedOnce(store, accountId, served);
      // The read models catch up: the tokens' counts add up to the recorded calls (and verify below then compares a settled state).
      const counted = async (): Promise<number> => {
        const res = await api('/api/v1/tokens');
        const { tokens } = (await res.json()) as { tokens: Array<{ current_month_usage: number }> };
        return tokens.reduce((sum, token) => sum + token.current_month_usage, 0);
      };
      expect(await eventually(counted, (total) => total === ids.length, 20_000)).toBe(ids.length);
    } finally {
      await store.close();
    }

    // No partial state from the crash: the read models are what a replay of the log gives.
    const stdout = textSink();
    const stderr = textSink();
    const code = await cliMain(['verify'], {
      stdout: stdout.stream,
      stderr: stderr.stream,
      env: { DATABASE_URL: pg.url, LOCAL_DEVNET: 'off', DATA_DIR: dirs[0]! },
    });
    expect(`${code} ${stderr.text()}`, stdout.text()).toBe('0 ');
  });

  it('silent (accepts connections, never answers): the API answers 503 within the connect timeout, and recovers by itself', { timeout: 40_000 }, async () => {
    relay.silence();
    // More calls at once than the API's pool holds connections: those it had fail at once (cut), the
    // rest must open new ones, which the silent server never answers. Each fails the test if it hangs 15 s.
    const lists = await Promise.all(Array.from({ length: 12 }, () => api('/api/v1/tokens')));
    expect(lists.map((res) => [res.status, res.headers.get('retry-after')])).toEqual(Array(12).fill([503, '5']));
    const gatewayReady = await readyz(gatewayBase);
    expect(gatewayReady.status).toBe(200);
    expect(gatewayReady.body).toMatchObject({ status: 'degraded', database: { state: 'down', reason: 'no answer within 2000 ms' } });
    expect((await chainCall(cachedToken)).status).toBe(200);
    relay.resume();
    expect(
      await eventually(
        async () => (await api('/api/v1/tokens')).status,
        (status) => status === 200,
        15_000,
      ),
    ).toBe(200);
  });

  it('unreachable at start: waits STARTUP_TIMEOUT_SECONDS naming PostgreSQL, then exits 1 with one line', { timeout: 30_000 }, async () => {
    const service = startingAgainstSilence;
    expect(await service.exited).toBe(1);
    const lines = service.output().trim().split('\n');
    // Each attempt gives up after 5 s (a silent server), the next starts a second later.
    expect(lines[0]).toMatch(/^Waiting for PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres: .*; retrying \(giving up after 7 s\)$/);
    expect(lines.at(-1)).toMatch(
      /^Could not start: PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres was not reachable within 7 s \(STARTUP_TIMEOUT_SECONDS\): /,
    );
    expect(lines.filter((line) => !line.startsWith('Waiting for PostgreSQL'))).toHaveLength(1);
  });
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
