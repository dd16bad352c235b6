import { rmSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { hashToken } from '../../src/domain/tokenFormat.js';
import { TokenGatekeeper } from '../../src/gateway/gatekeeper.js';
import { TokenCache } from '../../src/gateway/tokenCache.js';
import { openChangeFeed } from '../../src/infra/changefeed/index.js';
import { openLimiter } from '../../src/infra/limits/index.js';
import type { QueuedUsage } from '../../src/infra/usage/port.js';
import { RedisUsageQueue } from '../../src/infra/usage/redis.js';
import { Queries } from '../../src/projections/queries.js';
import { openRuntime } from '../../src/runtime.js';
import { buildServer } from '../../src/server.js';
import { until } from '../support/eventually.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

let node: GanacheNode;
beforeAll(async () => {
  node = await startGanache();
});
afterAll(async () => {
  await node?.close();
});

const blockNumber = { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] };

/** One eth_blockNumber through the token in the path; its status. */
async function callBlockNumber(base: string, token: string): Promise<number> {
  const res = await fetch(`${base}/local/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(blockNumber) });
  await res.arrayBuffer();
  return res.status;
}

/** `n` calls, ten at a time. */
async function inTens(n: number, call: () => Promise<void>): Promise<void> {
  for (let i = 0; i < n; i += 10) await Promise.all(Array.from({ length: 10 }, call));
}

async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  return `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
}

async function unlimitedToken(t: TestApp) {
  const o = await owner(t.app);
  await t.app.inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${o.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan: 'unlimited' },
  });
  const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'redis' } });
  return { ...o, token: res.json().token as string, tokenId: res.json().id as string };
}

describe('several gateway instances on one Redis', () => {
  it('each instance learns of a revoke within a second through Redis pub/sub', async () => {
    const t = await startTestApp({ env: { REDIS_URL: inject('redisUrl'), UPSTREAM_LOCAL: node.url } });
    // A second gateway instance: its own token cache, change-feed connection and limiter, the same read models.
    const feed = await openChangeFeed({ redisUrl: inject('redisUrl') });
    const limiter = openLimiter({ redisUrl: inject('redisUrl') });
    const cache = new TokenCache(new Queries(t.runtime.readModels));
    await cache.listen(feed);
    const second = new TokenGatekeeper(cache, limiter, t.runtime.config.plans);
    try {
      const o = await unlimitedToken(t);
      const admit = () => second.admit({ chain: 'local', token: o.token, via: 'path', cost: 1, nowMs: Date.now() });
      expect((await admit()).ok).toBe(true);
      // An invalidation of the token's creation still on its way overtakes the first read, which is then not kept: admitted again.
      await until(async () => (await admit()).ok && cache.size === 1);
      await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth });
      const started = Date.now();
      while (cache.size > 0 && Date.now() - started < 1000) await new Promise((r) => setTimeout(r, 10));
      expect(cache.size, 'the cached entry is dropped by the notification').toBe(0);
      expect(Date.now() - started).toBeLessThan(1000);
      const after = await admit();
      expect(after).toMatchObject({ ok: false, status: 401 });
      expect(await cache.get(hashToken(o.token))).toMatchObject({ status: 'revoked' });
    } finally {
      await cache.close();
      await feed.close();
      await limiter.close();
      await t.close();
    }
  });
});

describe('Redis going away under load', () => {
  let redis: TestRedisServer;
  afterAll(async () => {
    await redis?.stop();
  });

  it('keeps answering, buffers usage, and records every served call once Redis is back', async () => {
    redis = await startTestRedisServer({ persistent: true });
    const t = await startTestApp({ env: { REDIS_URL: redis.url, UPSTREAM_LOCAL: node.url } });
    try {
      const base = await listen(t.app);
      const o = await unlimitedToken(t);
      let served = 0;
      const statuses = new Map<number, number>();
      const call = async () => {
        const status = await callBlockNumber(base, o.token);
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (status === 200) served++;
      };
      const burst = (n: number) => inTens(n, call);
      await burst(100);
      await redis.stop();
      await burst(200); // Redis is away: in-process limits, usage buffered in memory
      await redis.start();
      await burst(100);
      expect(statuses.get(200), JSON.stringify([...statuses])).toBe(400);
      const deadline = Date.now() + 15_000;
      let recorded = 0;
      while (Date.now() < deadline) {
        const calls = await recordedCalls(t.runtime.store, o.accountId);
        expect(new Set(calls.map((c) => c.requestId)).size, 'no call recorded twice').toBe(calls.length);
        recorded = calls.length;
        if (recorded >= served) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(recorded).toBe(served);
    } finally {
      await t.close();
    }
  });
});

describe('the gateway role', () => {
  let redis: TestRedisServer;
  let dataDir: string;
  let o: Awaited<ReturnType<typeof unlimitedToken>>;
  beforeAll(async () => {
    redis = await startTestRedisServer();
    // Tokens made by a whole service; then, on the same read models, a process in the gateway role
    // (ROLE=gateway proper needs MongoDB and EventStoreDB, which these machines lack: per call the same code).
    const setup = await startTestApp({ env: { REDIS_URL: redis.url, UPSTREAM_LOCAL: node.url } });
    o = await unlimitedToken(setup);
    await setup.close({ keepData: true });
    dataDir = setup.dataDir;
  });
  afterAll(async () => {
    await redis?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  /** A process in the gateway role on the setup's read models, listening; `stop` may be called twice. */
  async function startRole(env: Record<string, string> = {}) {
    const config = loadConfig({ DATA_DIR: dataDir, LOCAL_DEVNET: 'off', REDIS_URL: redis.url, UPSTREAM_LOCAL: node.url, ...env });
    const runtime = await openRuntime({ ...config, role: 'gateway' });
    const app = await buildServer(runtime);
    let stopped = false;
    const stop = async () => {
      if (stopped) return;
      stopped = true;
      await app.close();
      await runtime.close();
    };
    try {
      return { base: await listen(app), stop };
    } catch (error) {
      await stop();
      throw error;
    }
  }

  it('meters each call it served as one record in the Redis stream, for a projector elsewhere', async () => {
    const role = await startRole();
    const reader = new RedisUsageQueue(redis.url, { consumer: 'reader' });
    try {
      const calls = 30;
      await inTens(calls, async () => {
        expect(await callBlockNumber(role.base, o.token)).toBe(200);
      });
      await role.stop();
      await reader.whenReady();
      const records: QueuedUsage[] = [];
      const deadline = Date.now() + 5000;
      while (records.length < calls && Date.now() < deadline) records.push(...(await reader.read(calls - records.length, 100)));
      expect(records).toHaveLength(calls);
      expect(await reader.read(10, 200), 'no record twice').toEqual([]);
      expect(new Set(records.map((q) => q.record.tokenId))).toEqual(new Set([o.tokenId]));
      expect(records.every((q) => q.record.chain === 'local' && q.record.status === 200)).toBe(true);
      await reader.ack(records.map((q) => q.ackId));
    } finally {
      await role.stop();
      await reader.close();
    }
  });

  it('answers a metered call once Redis acknowledged its record: it is in the stream when the answer arrives', async () => {
    const role = await startRole();
    const reader = new RedisUsageQueue(redis.url, { consumer: 'handover-reader' });
    try {
      await reader.whenReady();
      expect(await reader.read(10, 0), 'nothing left by the test before').toEqual([]);
      for (let i = 0; i < 5; i++) {
        expect(await callBlockNumber(role.base, o.token)).toBe(200);
        const records = await reader.read(10, 0);
        expect(records).toHaveLength(1);
        await reader.ack(records.map((q) => q.ackId));
      }
    } finally {
      await role.stop();
      await reader.close();
    }
  });
});
