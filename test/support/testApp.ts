import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../../src/config.js';
import { INVALIDATION_TOPIC } from '../../src/projections/runner.js';
import { openRuntime, type Runtime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { until } from './eventually.js';
import { TEST_TIMERS } from './testTimers.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestApp {
  app: FastifyInstance;
  runtime: Runtime;
  dataDir: string;
  /** Stops everything; `keepData` leaves the data directory for a restart. */
  close(options?: { keepData?: boolean }): Promise<void>;
}

/** The whole service in process on the embedded default, in a fresh data directory. */
export async function startTestApp(options: { dataDir?: string; env?: Record<string, string>; now?: () => Date } = {}): Promise<TestApp> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'gw-test-'));
  // Test files sign up many owners from one address: the sign-up limit is tested on its own (login-limits).
  const config = loadConfig({ DATA_DIR: dataDir, ADMIN_TOKEN, LOCAL_DEVNET: 'off', SIGNUP_MAX_PER_ADDRESS: '100000', ...TEST_TIMERS, ...options.env });
  const runtime = await openRuntime(config, options.now);
  await runtime.projector?.start();
  runtime.ingester?.start();
  await runtime.projector?.caughtUp;
  const app = await buildServer(runtime);
  await app.ready();
  return {
    app,
    runtime,
    dataDir,
    async close(closeOptions = {}) {
      await app.close();
      await runtime.close();
      if (!closeOptions.keepData) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * A new owner's API token, on `plan` if given (through the admin API), with the token's other
 * fields if given; resolves once its creation reached the gateway as an invalidation, so the
 * first call does not find it missing from a cache read made before.
 */
/** Listens on a free loopback port: its number, and the base URLs for HTTP and WebSocket calls. */
export async function listen(t: TestApp): Promise<{ port: number; url: string; wsBase: string }> {
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return { port, url: `http://127.0.0.1:${port}`, wsBase: `ws://127.0.0.1:${port}` };
}

export async function newToken(t: TestApp, options: { plan?: string; fields?: Record<string, unknown> } = {}) {
  const o = await owner(t.app);
  const heard: string[] = [];
  const unsubscribe = await t.runtime.feed.subscribe(INVALIDATION_TOPIC, (m) => heard.push(m));
  try {
    if (options.plan) {
      await t.app.inject({
        method: 'PUT',
        url: `/api/v1/admin/accounts/${o.accountId}/plan`,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        payload: { plan: options.plan },
      });
    }
    const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'test', ...options.fields } });
    if (res.statusCode !== 201) throw new Error(`token not created: ${res.body}`);
    const tokenId = res.json().id as string;
    await until(() => heard.includes(`token:${tokenId}`));
    return { ...o, token: res.json().token as string, tokenId };
  } finally {
    await unsubscribe();
  }
}

/** Signs up and returns the session cookie and account id. */
export async function signUp(app: FastifyInstance, email = `owner-${Math.random().toString(36).slice(2)}@example.com`) {
  const res = await app.inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email, password: 'correct horse battery' } });
  if (res.statusCode !== 201) throw new Error(`signup failed: ${res.statusCode} ${res.body}`);
  const cookie = String(res.headers['set-cookie']).split(';')[0] as string;
  return { cookie, accountId: res.json().id as string, email };
}

/** Signs up and creates an access token; returns headers that authenticate as the owner. */
export async function owner(app: FastifyInstance) {
  const account = await signUp(app);
  const res = await app.inject({ method: 'POST', url: '/api/v1/access-tokens', headers: { cookie: account.cookie }, payload: { name: 'tests' } });
  if (res.statusCode !== 201) throw new Error(`access token failed: ${res.statusCode} ${res.body}`);
  return { ...account, accessToken: res.json().token as string, auth: { authorization: `Bearer ${res.json().token}` } };
}
