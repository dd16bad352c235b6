import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { startTestRedisCluster, type TestRedisCluster } from '../support/redisCluster.js';
import { callChain as call, type Role, type Roles, startRoles } from '../support/roles.js';

/**
 * token-revocation.test.ts's lost-subscription case on a Redis Cluster (`redis+cluster://`): there
 * the gateway subscribes through a connection that ioredis's cluster client owns and replaces with
 * one to a node of its choosing when it drops, telling nobody. A revoke published meanwhile is
 * lost; the gateway must still drop its cached token once its new subscriber connection is in.
 */
const unavailable = await postgresUnavailable();
const WINDOW_MS = 1000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const TITLE = 'token revocation on a Redis Cluster';

describe.skipIf(unavailable !== null)(unavailable ? `${TITLE} (skipped: ${unavailable})` : TITLE, () => {
  let db: TestDatabase;
  let cluster: TestRedisCluster;
  let ganache: GanacheNode;
  let roles: Roles;
  let gateway: Role;

  beforeAll(async () => {
    [db, cluster, ganache] = await Promise.all([createTestDatabase(), startTestRedisCluster(), startGanache()]);
    roles = await startRoles({ DATABASE_URL: db.url, REDIS_URL: cluster.url, UPSTREAM_LOCAL: ganache.url, LOG_LEVEL: 'warn' }, { gateways: 1 });
    gateway = roles.gateways[0] as Role;
  }, 120_000);
  afterAll(async () => {
    await roles?.stop();
    await ganache?.close();
    await cluster?.stop();
    await db?.drop();
  });

  /** A token on the unlimited plan, called once on the gateway so it is cached there. */
  const cachedToken = () => roles.cachedToken();
  const revoke = (o: { tokenId: string; auth: Record<string, string> }) => roles.revoke(o);

  /** From `since`, calls the gateway back to back until it answers other than 200: its status and the ms it took. */
  async function untilRefused(token: string, since: number, limitMs = 5000): Promise<{ status: number; ms: number }> {
    for (;;) {
      const status = await call(gateway.base, token);
      if (status !== 200) return { status, ms: performance.now() - since };
      if (performance.now() - since > limitMs) return { status, ms: Number.POSITIVE_INFINITY };
    }
  }

  it('refuses a token revoked while the cluster subscriber was cut off, within a second of the nodes taking connections again', async () => {
    const o = await cachedToken();
    const nodes = cluster.nodes.map((n) => new Redis({ host: '127.0.0.1', port: n.port }));
    try {
      // Every node refuses a new connection (maxclients 1, ours already in), then every subscribed
      // connection (the gateway's) is cut: ioredis picks another node for it, again and again, and
      // cannot get in while the revoke is projected and published.
      await Promise.all(nodes.map((n) => n.config('SET', 'maxclients', '1')));
      let back: number;
      try {
        const killed = await Promise.all(nodes.map((n) => n.client('KILL', 'TYPE', 'pubsub')));
        expect(killed.reduce((sum: number, k) => sum + Number(k), 0)).toBeGreaterThanOrEqual(1);
        await revoke(o);
        await sleep(300);
      } finally {
        await Promise.all(nodes.map((n) => n.config('SET', 'maxclients', '10000')));
        back = performance.now();
      }
      const r = await untilRefused(o.token, back);
      expect(r.status, `still admitted ${(r.ms / 1000).toFixed(1)} s after the nodes took connections again`).toBe(401);
      expect(r.ms).toBeLessThan(WINDOW_MS);
      console.info(`cluster subscriber back → revoked token refused: ${r.ms.toFixed(0)} ms`);
    } finally {
      for (const n of nodes) n.disconnect();
    }
    // The new subscriber connection carries the feed: a later revoke reaches the gateway within the window.
    const next = await cachedToken();
    const answered = await revoke(next);
    const again = await untilRefused(next.token, answered);
    expect(again.status).toBe(401);
    expect(again.ms).toBeLessThan(WINDOW_MS);
  }, 60_000);
});
