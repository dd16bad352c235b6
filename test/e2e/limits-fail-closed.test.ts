import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { WsClient } from '../support/wsClient.js';

/**
 * A gateway with `LIMITS_FAIL_CLOSED=true` whose Redis goes away: it cannot check the limits, so
 * it refuses calls. The spec's 429 is for a caller over a limit, its 503 for a temporary outage:
 * this is the latter, in every shape (JSON-RPC single and batch, REST, WebSocket).
 */
let redis: TestRedisServer;
let node: FakeWsUpstream;
let t: TestApp;
let base: string;

async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  return `127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
}

beforeAll(async () => {
  redis = await startTestRedisServer();
  node = await startFakeWsUpstream();
  t = await startTestApp({ env: { REDIS_URL: redis.url, LIMITS_FAIL_CLOSED: 'true', UPSTREAM_LOCAL: node.httpUrl, UPSTREAM_LOCAL_WS: node.wsUrl } });
  base = await listen(t.app);
});
afterAll(async () => {
  await t?.close();
  await node?.close();
  await redis?.stop();
});

const call = (id: number, method = 'eth_blockNumber') => ({ jsonrpc: '2.0', id, method, params: [] });

async function post(token: string, body: unknown) {
  const res = await fetch(`http://${base}/local/${token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: (await res.json()) as unknown };
}

const limitHeaders = (headers: Headers) => [...headers.keys()].filter((k) => k.startsWith('x-ratelimit-') || k.startsWith('x-monthlylimit-'));

describe('limits checked by a slow Redis (fail-closed)', () => {
  it('waits for a lease Redis answers late (a graceful failover, a busy host) instead of refusing the call', async () => {
    const { token } = await newToken(t, { plan: 'developer' });
    const pauser = new Redis(redis.url);
    try {
      // Redis answers nothing for 150 ms: longer than fail-open's 50 ms deadline, an ordinary pause for a failover.
      for (let round = 0; round < 3; round++) {
        await pauser.client('PAUSE', 150, 'ALL');
        const answer = await post(token, call(20 + round));
        expect(answer.status).toBe(200);
        expect(answer.body).toMatchObject({ id: 20 + round, result: expect.any(String) });
      }
    } finally {
      pauser.disconnect();
    }
  });
});

describe('limits that cannot be checked (fail-closed, Redis away)', () => {
  it('answer 503 with Retry-After, not a 429 that says the caller exceeded a limit; subscriptions still get their notifications', async () => {
    const { token } = await newToken(t, { plan: 'developer' });
    const before = await post(token, call(1));
    expect(before.status).toBe(200);
    expect(limitHeaders(before.headers)).toHaveLength(6);
    const socket = await WsClient.open(`ws://${base}/local/${token}`);
    const subscription = (await socket.call('eth_subscribe', ['newHeads'])).result;
    await until(() => node.subscribeCalls >= 1);

    await redis.stop();
    // The limiter sees Redis gone within its deadline (and a lease of this second may still grant).
    let single = await post(token, call(7));
    await until(async () => {
      single = await post(token, call(7));
      return single.status !== 200;
    }, 10_000);
    expect(single.status).toBe(503);
    expect(single.headers.get('retry-after')).toBe('1');
    // Made-up figures would mislead: a spent window, a month "unlimited" on a plan with a limit.
    expect(limitHeaders(single.headers)).toEqual([]);
    expect(single.body).toEqual({
      jsonrpc: '2.0',
      id: 7,
      error: { code: -32603, message: expect.stringMatching(/temporarily unavailable/), data: { retryAfter: 1 } },
    });

    const batch = await post(token, [call(8), call(9, 'eth_chainId')]);
    expect(batch.status).toBe(503);
    expect(batch.headers.get('retry-after')).toBe('1');
    expect((batch.body as Array<{ id: number; error: { code: number } }>).map((m) => [m.id, m.error.code])).toEqual([
      [8, -32603],
      [9, -32603],
    ]);

    const rest = await fetch(`http://${base}/sol/${token}/getBlockHeight`);
    expect(rest.status).toBe(503);
    expect(rest.headers.get('retry-after')).toBe('1');
    expect(await rest.json()).toEqual({ error: { code: 'limits_unavailable', message: expect.any(String), retryAfter: 1 } });

    // On the open socket: a call gets the same error; a head is still delivered (a push cannot be asked again), the socket stays open.
    expect((await socket.call('eth_chainId')).error).toMatchObject({ code: -32603, data: { retryAfter: 1 } });
    node.mine();
    await until(() => socket.notifications(subscription).length === 1);
    expect(socket.notifications(subscription)[0]?.result).toBeDefined();
    expect(socket.closed).toBeNull();

    await redis.start();
    let after = await post(token, call(10));
    await until(async () => {
      after = await post(token, call(10));
      return after.status === 200;
    }, 15_000);
    expect(limitHeaders(after.headers)).toHaveLength(6);
    socket.close();
  });
});
