import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { startTestRedisServer } from '../support/redisServer.js';
import { startService } from '../support/serviceProcess.js';
import { recordedCalls } from '../support/usageLog.js';

const CLI = fileURLToPath(new URL('../../src/cli.ts', import.meta.url));
const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'gw-proc-'));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('broken configuration: says what is wrong and exits non-zero', () => {
  const badChains = () => {
    const p = join(tempDir(), 'chains.json');
    writeFileSync(p, JSON.stringify({ chains: [{ id: 'eth', protocol: 'carrier-pigeon', upstreams: [] }] }));
    return p;
  };
  const badPlans = () => {
    const p = join(tempDir(), 'plans.json');
    writeFileSync(p, JSON.stringify({ gold: { rps: 1 } }));
    return p;
  };
  const cases: Array<[string, () => Record<string, string>, RegExp]> = [
    ['a port that is not a number', () => ({ PORT: 'eighty' }), /PORT/],
    ['a role without its services', () => ({ ROLE: 'gateway' }), /ROLE=gateway .*EVENTSTORE_URL/],
    ['a bad Redis URL', () => ({ REDIS_URL: 'localhost:6379' }), /REDIS_URL/],
    ['an unknown plan name', () => ({ PLANS_CONFIG: badPlans() }), /PLANS_CONFIG.*gold/s],
    ['a broken chain config', () => ({ CHAINS_CONFIG: badChains() }), /chain/i],
    ['a bad upstream URL', () => ({ UPSTREAM_ETH: 'not a url' }), /UPSTREAM_ETH|url/i],
  ];
  it.each(cases)('%s', (_name, env, message) => {
    expect(() => loadConfig({ DATA_DIR: tempDir(), ...env() })).toThrow(message);
  });
  it('the process prints the error and exits with 2 before starting anything', async () => {
    const service = startService({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off', UPSTREAM_ETH: 'not a url' });
    expect(await service.exited).toBe(2);
    expect(service.output()).toMatch(/Configuration error: .*UPSTREAM_ETH|Configuration error: .*url/i);
    expect(service.output()).not.toMatch(/ready at/);
  });
});

describe('a production service unreachable at start: waits, says so, then gives up', () => {
  it('exits 1 naming Redis and its address (never its password) when it does not come within STARTUP_TIMEOUT_SECONDS', { timeout: 30_000 }, async () => {
    const redis = await startTestRedisServer();
    await redis.stop();
    const url = redis.url.replace('redis://', 'redis://:hunter2@');
    const service = startService({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off', REDIS_URL: url, STARTUP_TIMEOUT_SECONDS: '3' });
    expect(await service.exited).toBe(1);
    expect(service.output()).toMatch(new RegExp(`Could not start: Redis at redis://:\\*\\*\\*@127\\.0\\.0\\.1:${redis.port} was not reachable within \\d+ s`));
    expect(service.output()).not.toMatch(/hunter2|ready at/);
    // Why it was not reachable, as the connection said it: not just that it was not ready in time.
    expect(service.output()).toMatch(new RegExp(`was not reachable within \\d+ s .*ECONNREFUSED 127\\.0\\.0\\.1:${redis.port}`));
  });

  it('starts once Redis comes up within the wait', { timeout: 60_000 }, async () => {
    const redis = await startTestRedisServer();
    await redis.stop();
    const service = startService({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off', REDIS_URL: redis.url, STARTUP_TIMEOUT_SECONDS: '40' });
    try {
      // Its first attempt fails after 5 s (later on a loaded machine): wait for it to say so.
      for (let i = 0; i < 300 && !/Waiting for Redis/.test(service.output()); i++) await new Promise((r) => setTimeout(r, 100));
      expect(service.output()).toMatch(/Waiting for Redis at redis:\/\/127\.0\.0\.1:\d+/);
      expect(service.output()).not.toMatch(/ready at/);
      await redis.start();
      const base = await service.ready;
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
    } finally {
      service.child.kill('SIGTERM');
      await service.exited;
      await redis.stop();
    }
  });
});

describe('a running service', () => {
  it('finishes calls in flight on SIGTERM, records every served call, and never logs a token', { timeout: 60_000 }, async () => {
    const dataDir = tempDir();
    // debug: chain calls log their request lines at debug (management calls at info), and the
    // token in their paths must show masked there too.
    const service = startService({ DATA_DIR: dataDir, ADMIN_TOKEN: 'admin-token-for-the-process-test', LOG_LEVEL: 'debug' });
    const base = await service.ready;
    const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const signup = await post('/api/v1/auth/signup', { email: 'proc@example.com', password: 'a long password' });
    const cookie = String(signup.headers.get('set-cookie')).split(';')[0] as string;
    const accountId = (await signup.json()).id as string;
    const key = (await (await post('/api/v1/access-tokens', { name: 'k' }, { cookie })).json()).token as string;
    await fetch(`${base}/api/v1/admin/accounts/${accountId}/plan`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', authorization: 'Bearer admin-token-for-the-process-test' },
      body: '{"plan":"unlimited"}',
    });
    const created = await (await post('/api/v1/tokens', { name: 't' }, { authorization: `Bearer ${key}` })).json();
    const token = created.token as string;
    await fetch(`${base}/api/v1/tokens/${created.id}`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: '{"name":"renamed"}',
    });
    expect(token).toMatch(/^gk_/);

    let answered = 0;
    let stop = false;
    const worker = async () => {
      while (!stop) {
        try {
          const res = await post(`/local/${token}`, { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] });
          await res.arrayBuffer();
          // Every answer counts, during the drain too: each one for a known token is metered.
          answered++;
        } catch {
          return; // the server has stopped accepting
        }
      }
    };
    const workers = Array.from({ length: 8 }, worker);
    await new Promise((r) => setTimeout(r, 1500));
    service.child.kill('SIGTERM');
    const code = await Promise.race([service.exited, new Promise((r) => setTimeout(() => r('timeout'), 15_000))]);
    expect(code, service.output().slice(-3000)).toBe(0);
    stop = true;
    await Promise.all(workers);
    expect(answered).toBeGreaterThan(50);

    const store = await LevelEventStore.open(join(dataDir, 'eventstore'));
    const calls = await recordedCalls(store, accountId);
    await store.close();
    expect(new Set(calls.map((c) => c.requestId)).size).toBe(answered);
    expect(calls).toHaveLength(answered);

    const logs = service.output();
    const requestLines = logs.split('\n').filter((line) => line.includes('"msg":"incoming request"'));
    expect(requestLines.some((line) => line.includes('"level":30') && line.includes('"url":"/api/v1/'))).toBe(true);
    const chainLines = requestLines.filter((line) => line.includes('"url":"/local/'));
    expect(chainLines.length).toBeGreaterThan(0);
    expect(chainLines.every((line) => line.includes('"level":20'))).toBe(true);
    for (const secret of [token, key]) expect(logs).not.toContain(secret);
    expect(logs).toContain(`${token.slice(0, 7)}…${token.slice(-4)}`);

    // The audit CLI reads the same data directory once the service has stopped.
    const history = execFileSync(process.execPath, ['--import', 'tsx', CLI, 'history', created.id], {
      env: { ...process.env, DATA_DIR: dataDir },
      encoding: 'utf8',
    });
    const lines = history.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^\S+Z {2}#0 ApiTokenCreated\s+status=active name="t"/);
    expect(lines[1]).toMatch(/#1 ApiTokenRenamed\s+status=active name="renamed"/);
    const rebuilt = execFileSync(process.execPath, ['--import', 'tsx', CLI, 'rebuild'], { env: { ...process.env, DATA_DIR: dataDir }, encoding: 'utf8' });
    expect(rebuilt).toMatch(/^rebuilt core, .* in \d+ ms/);
  });

  it('keeps an exhausted monthly quota across kill -9 (the embedded default counts in process)', { timeout: 60_000 }, async () => {
    const dataDir = tempDir();
    const env = { DATA_DIR: dataDir, ADMIN_TOKEN: 'admin-token-for-the-process-test' };
    const first = startService(env);
    const base = await first.ready;
    const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const signup = await post(`${base}/api/v1/auth/signup`, { email: 'quota@example.com', password: 'a long password' });
    const cookie = String(signup.headers.get('set-cookie')).split(';')[0] as string;
    const accountId = (await signup.json()).id as string;
    await fetch(`${base}/api/v1/admin/accounts/${accountId}/plan`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${env.ADMIN_TOKEN}` },
      body: '{"plan":"developer"}',
    });
    const { token } = await (await post(`${base}/api/v1/tokens`, { name: 'q', monthly_limit: 2 }, { cookie })).json();
    const call = async (at: string) => (await post(`${at}/local/${token}`, { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] })).status;
    expect([await call(base), await call(base), await call(base)]).toEqual([200, 200, 429]);
    // Served calls reach the totals (the projection) before the kill: what is not yet stored is the metering issue's.
    for (let i = 0; i < 200; i++) {
      const tokens = await (await fetch(`${base}/api/v1/tokens`, { headers: { cookie } })).json();
      if (tokens[0]?.current_month_usage === 2) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    first.child.kill('SIGKILL');
    await first.exited;

    const second = startService(env);
    try {
      const again = await second.ready;
      expect(await call(again), second.output().slice(-2000)).toBe(429);
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  });

  it('stops with exit code 1, saying why, when its storage thread stops under it', { timeout: 60_000 }, async () => {
    // The embedded default's stores, ingester and projector run on that thread: without it the
    // process could answer calls but meter none, so it ends for its supervisor to restart it.
    const service = startService({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off' }, { preload: ['stopWorkersOnSignal.mjs'] });
    const base = await service.ready;
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    service.child.kill('SIGUSR2');
    const code = await Promise.race([service.exited, new Promise((r) => setTimeout(() => r('timeout'), 15_000))]);
    expect(code, service.output().slice(-3000)).toBe(1);
    expect(service.output()).toMatch(/told 1 worker thread\(s\) to exit/);
    expect(service.output()).toContain('storage thread failed: storage thread stopped (exit code 1)');
  });
});
