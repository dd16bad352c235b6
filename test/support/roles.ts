import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { openRuntime, type Runtime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { newToken, startTestApp, type TestApp } from './testApp.js';
import { TEST_TIMERS } from './testTimers.js';

/**
 * The service split by role on shared stores, processes' worth of parts in one test process: the
 * management API (role `api`), the projector (role `projector`, which alone publishes
 * invalidations) and gateways (role `gateway`), each a runtime of its own with its own
 * connections and caches, all on the stores `env` names (DATABASE_URL, REDIS_URL, ...).
 */

export interface Role {
  runtime: Runtime;
  app: FastifyInstance;
  base: string;
  stop(): Promise<void>;
}

export interface Roles {
  api: TestApp;
  projector: Role;
  gateways: Role[];
  /** A new owner's token on `plan` (unlimited: no rate limit in the way), called once on each gateway so each has it cached. */
  cachedToken(plan?: string): Promise<Awaited<ReturnType<typeof newToken>>>;
  /** Revokes the token through the API: performance.now() once the API answered. */
  revoke(o: { tokenId: string; auth: Record<string, string> }): Promise<number>;
  /** Stops the gateways, the projector, then the API. */
  stop(): Promise<void>;
}

const blockNumber = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] });

/** eth_blockNumber on `chain` with `token` through the gateway at `base`: the HTTP status. */
export async function callChain(base: string, token: string, chain = 'local'): Promise<number> {
  const res = await fetch(`${base}/${chain}/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: blockNumber });
  await res.arrayBuffer();
  return res.status;
}

/** One role's runtime and server on a loopback port, its data directory `dataDir`; a projector is caught up when this resolves. */
export async function startRole(role: 'gateway' | 'projector', env: Record<string, string>, dataDir: string): Promise<Role> {
  const runtime = await openRuntime(loadConfig({ ...TEST_TIMERS, ...env, ROLE: role, DATA_DIR: dataDir }));
  if (role === 'projector') {
    await runtime.projector?.start();
    runtime.ingester?.start();
    await runtime.projector?.caughtUp;
  }
  const app = await buildServer(runtime);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  let stopped = false;
  return {
    runtime,
    app,
    base: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    async stop() {
      if (stopped) return;
      stopped = true;
      await app.close();
      await runtime.close();
    },
  };
}

/** The API, then the projector, then `gateways` gateways, one after the other; what started is stopped if a later one fails. */
export async function startRoles(env: Record<string, string>, options: { gateways: number }): Promise<Roles> {
  const api = await startTestApp({ env: { ...env, ROLE: 'api' } });
  let projector: Role | undefined;
  const gateways: Role[] = [];
  const stop = async () => {
    for (const g of gateways) await g.stop();
    await projector?.stop();
    await api.close();
  };
  try {
    projector = await startRole('projector', env, api.dataDir);
    for (let i = 0; i < options.gateways; i++) gateways.push(await startRole('gateway', env, api.dataDir));
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    api,
    projector,
    gateways,
    async cachedToken(plan = 'unlimited') {
      const o = await newToken(api, { plan });
      for (const g of gateways) expect(await callChain(g.base, o.token)).toBe(200);
      return o;
    },
    async revoke(o) {
      const res = await api.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth });
      expect(res.statusCode).toBeLessThan(300);
      return performance.now();
    },
    stop,
  };
}
