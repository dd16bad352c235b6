import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WS_CLOSE } from '../../src/gateway/ws/gateway.js';
import { until } from '../support/eventually.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { refusedUpgrade, WsClient } from '../support/wsClient.js';

/** WebSocket on the chain port: real tokens from the management API, the real gatekeeper and metering, ganache behind (HTTP and WebSocket). */
let node: GanacheNode;
let t: TestApp;
let base: string;
let wsBase: string;

beforeAll(async () => {
  node = await startGanache();
  // Unlimited's rate high enough for a client that sends without reading to fill its buffer quickly.
  const plans = join(mkdtempSync(join(tmpdir(), 'ws-plans-')), 'plans.json');
  writeFileSync(plans, JSON.stringify({ unlimited: { rps: 1_000_000 } }));
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, UPSTREAM_LOCAL_WS: node.url.replace('http', 'ws'), PLANS_CONFIG: plans } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  base = `http://127.0.0.1:${port}`;
  wsBase = `ws://127.0.0.1:${port}`;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

const newToken = (plan = 'unlimited') => newOwnerToken(t, { plan });

/** A client on this file's gateway: the path after the host (chain and token). */
const Client = { open: (path: string, headers: Record<string, string> = {}) => WsClient.open(`${wsBase}${path}`, { headers }) };

const mine = () =>
  node.url &&
  fetch(node.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'evm_mine', params: [] }),
  });

const sockets = () => t.runtime.telemetry.webSockets();

describe('the upgrade', () => {
  it('is refused with the status and body an HTTP call gets: unknown chain, bad token, disabled token, chain outside the plan', async () => {
    const free = await newToken('free');
    const disabled = await newToken('developer');
    await t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${disabled.tokenId}`, headers: disabled.auth, payload: { status: 'disabled' } });
    await until(async () => {
      const r = await fetch(`${base}/local/${disabled.token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"jsonrpc":"2.0","id":null,"method":"eth_chainId"}',
      });
      return r.status === 403;
    });
    const httpOf = async (path: string) => {
      const r = await fetch(`${base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"jsonrpc":"2.0","id":null,"method":"eth_chainId"}',
      });
      return { status: r.status, body: await r.text() };
    };
    for (const path of ['/nochain/x', '/local/gk_not_a_token', `/local/${disabled.token}`, `/avax/${free.token}`]) {
      const upgrade = await refusedUpgrade(`${wsBase}${path}`);
      expect(upgrade, path).toEqual(await httpOf(path));
      expect(upgrade.status, path).toBeGreaterThanOrEqual(400);
    }
  });

  it('takes the token in the path or as a Bearer header', async () => {
    const { token } = await newToken();
    for (const client of [await Client.open(`/local/${token}`), await Client.open('/local', { authorization: `Bearer ${token}` })]) {
      expect(await client.call('eth_chainId')).toMatchObject({ result: '0x539' });
      client.close();
    }
  });
});

describe('JSON-RPC over the socket', () => {
  it('answers single and batch calls as HTTP does and meters each one', async () => {
    const o = await newToken();
    const client = await Client.open(`/local/${o.token}`);
    expect(await client.call('eth_blockNumber')).toMatchObject({ jsonrpc: '2.0', id: 1, result: expect.stringMatching(/^0x/) });
    client.ws.send(
      JSON.stringify([
        { jsonrpc: '2.0', id: 'a', method: 'eth_chainId' },
        { jsonrpc: '2.0', id: 'b', method: 'debug_traceCall' },
      ]),
    );
    await until(() => client.frames.some((f) => Array.isArray(f)));
    const batch = client.frames.find((f) => Array.isArray(f)) as unknown as Array<Record<string, unknown>>;
    expect(batch).toEqual([
      { jsonrpc: '2.0', id: 'a', result: '0x539' },
      { jsonrpc: '2.0', id: 'b', error: expect.objectContaining({ code: -32601 }) },
    ]);
    client.ws.send('not json');
    await until(() => client.frames.some((f) => (f.error as { code?: number } | undefined)?.code === -32700));
    expect(client.closed).toBeNull();
    client.close();
    const methods = await until(async () => (await usageMethods(o.accountId)).length >= 4).then(() => usageMethods(o.accountId));
    expect(methods.sort()).toEqual(['(invalid)', 'debug_traceCall', 'eth_blockNumber', 'eth_chainId']);
  });

  it('answers a call over the rate limit with -32005 and data.retryAfter, and stays open', async () => {
    const { token } = await newToken('free');
    const client = await Client.open(`/local/${token}`);
    const answers = await Promise.all(Array.from({ length: 12 }, () => client.call('eth_chainId')));
    const refused = answers.filter((a) => a.error !== undefined);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused[0]?.error).toMatchObject({ code: -32005, data: { retryAfter: expect.any(Number) } });
    expect(client.closed).toBeNull();
    client.close();
  });
});

async function usageMethods(accountId: string): Promise<string[]> {
  return (await recordedCalls(t.runtime.store, accountId)).map((c) => c.method);
}

describe('subscriptions', () => {
  it('fans one upstream newHeads subscription out to every client, with each its own id, and meters each notification', async () => {
    const a = await newToken();
    const b = await newToken();
    const clients = [await Client.open(`/local/${a.token}`), await Client.open(`/local/${a.token}`), await Client.open(`/local/${b.token}`)];
    const ids = await Promise.all(clients.map(async (c) => (await c.call('eth_subscribe', ['newHeads'])).result));
    expect(new Set(ids).size).toBe(3);
    expect(sockets()?.upstreamSubscriptions).toBe(1);
    expect(sockets()?.subscriptions).toBe(3);
    await mine();
    await mine();
    for (const [i, c] of clients.entries()) {
      await until(() => c.notifications(ids[i]).length >= 2);
      const numbers = c.notifications(ids[i]).map((n) => (n.result as { number: string }).number);
      expect(new Set(numbers).size).toBe(numbers.length);
    }
    const delivered = async () => (await usageMethods(b.accountId)).filter((m) => m === 'eth_subscription:newHeads').length;
    await until(async () => (await delivered()) >= 2);
    for (const c of clients) c.close();
    await until(() => sockets()?.connections === 0);
    expect(sockets()).toMatchObject({ connections: 0, subscriptions: 0, upstreamSubscriptions: 0 });
  });

  it('delivers logs matching a filter, refuses a malformed filter with -32602, and unsubscribes only its own ids', async () => {
    const { token } = await newToken();
    const one = await Client.open(`/local/${token}`);
    const two = await Client.open(`/local/${token}`);
    expect((await one.call('eth_subscribe', ['logs', { address: 'nope' }])).error).toMatchObject({ code: -32602 });
    expect((await one.call('eth_subscribe', ['logs', { topics: 'x' }])).error).toMatchObject({ code: -32602 });
    expect((await one.call('eth_subscribe', ['blocks'])).error).toMatchObject({ code: -32602 });
    const id = (await one.call('eth_subscribe', ['newHeads'])).result;
    expect(await two.call('eth_unsubscribe', [id])).toMatchObject({ result: false });
    expect(await one.call('eth_unsubscribe', [id])).toMatchObject({ result: true });
    expect(await one.call('eth_unsubscribe', [id])).toMatchObject({ result: false });
    one.close();
    two.close();
    await until(() => sockets()?.connections === 0);
  });

  it("shows the token's live connections and subscriptions in its analytics (this process serves both)", async () => {
    const o = await newToken();
    const live = async () => {
      const res = await t.app.inject({ method: 'GET', url: `/api/v1/metrics/tokens/${o.tokenId}`, headers: o.auth });
      expect(res.statusCode).toBe(200);
      return res.json().webSockets;
    };
    expect(await live()).toEqual({ connections: 0, subscriptions: 0 });
    const clients = [await Client.open(`/local/${o.token}`), await Client.open(`/local/${o.token}`)];
    await clients[0]?.call('eth_subscribe', ['newHeads']);
    await clients[0]?.call('eth_subscribe', ['newHeads']);
    await clients[1]?.call('eth_subscribe', ['newHeads']);
    expect(await live()).toEqual({ connections: 2, subscriptions: 3 });
    for (const c of clients) c.close();
    await until(async () => (await live()).connections === 0);
    expect(await live()).toEqual({ connections: 0, subscriptions: 0 });
  });

  it('caps subscriptions per connection and connections per token by plan', async () => {
    const { token } = await newToken('free');
    const first = await Client.open(`/local/${token}`);
    const second = await Client.open(`/local/${token}`);
    const refused = await refusedUpgrade(`${wsBase}/local/${token}`);
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body)).toMatchObject({ error: { code: -32005 } });
    // Free: 10 subscriptions per connection (5 calls a second, so in two rounds).
    const answers: Array<Record<string, unknown>> = [];
    for (let i = 0; i < 12; i++) {
      let answer = await first.call('eth_subscribe', ['newHeads']);
      while ((answer.error as { data?: { retryAfter?: number } } | undefined)?.data?.retryAfter !== undefined) {
        await new Promise((r) => setTimeout(r, 250));
        answer = await first.call('eth_subscribe', ['newHeads']);
      }
      answers.push(answer);
    }
    expect(answers.filter((a) => typeof a.result === 'string')).toHaveLength(10);
    expect(answers.slice(10).map((a) => a.error)).toEqual([expect.objectContaining({ code: -32005 }), expect.objectContaining({ code: -32005 })]);
    first.close();
    second.close();
    await until(() => sockets()?.connections === 0);
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
  });
});

describe('revocation and bad input', () => {
  it("closes a revoked token's sockets (4001) and a disabled one's (4003), leaving others open", async () => {
    const revoked = await newToken();
    const disabled = await newToken();
    const other = await newToken();
    const [r, d, o] = [await Client.open(`/local/${revoked.token}`), await Client.open(`/local/${disabled.token}`), await Client.open(`/local/${other.token}`)];
    await r.call('eth_subscribe', ['newHeads']);
    await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${revoked.tokenId}`, headers: revoked.auth });
    await t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${disabled.tokenId}`, headers: disabled.auth, payload: { status: 'disabled' } });
    expect(await r.whenClosed()).toMatchObject({ code: WS_CLOSE.unauthorized });
    expect(await d.whenClosed()).toMatchObject({ code: WS_CLOSE.forbidden });
    expect(await o.call('eth_chainId')).toMatchObject({ result: '0x539' });
    o.close();
    await until(() => sockets()?.connections === 0);
  });

  it('closes on a binary frame (1003), on a frame over the limit (1009) and a client that does not read (1008); others are unaffected', async () => {
    const { token } = await newToken();
    const bystander = await Client.open(`/local/${token}`);
    const binary = await Client.open(`/local/${token}`);
    binary.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    expect(await binary.whenClosed()).toMatchObject({ code: WS_CLOSE.unsupportedData });
    const big = await Client.open(`/local/${token}`);
    big.ws.send(`"${'x'.repeat(2 * 1024 * 1024)}"`);
    expect(await big.whenClosed()).toMatchObject({ code: WS_CLOSE.messageTooBig });
    // Another token: the reader's calls use its own rate limit, not the bystander's.
    const idle = await Client.open(`/local/${(await newToken()).token}`);
    // Never reads: its socket stops reading, the gateway's send buffer fills with answers.
    (idle.ws as unknown as { _socket: { pause(): void } })._socket.pause();
    const batch = JSON.stringify(Array.from({ length: 100 }, (_, id) => ({ jsonrpc: '2.0', id, method: 'eth_getBlockByNumber', params: ['latest', true] })));
    for (let i = 0; i < 2000 && sockets()?.connections === 2; i++) {
      idle.ws.send(batch);
      if (i % 20 === 19) await new Promise((r) => setTimeout(r, 20));
    }
    await until(() => sockets()?.connections === 1, 15_000);
    expect(await bystander.call('eth_chainId')).toMatchObject({ result: '0x539' });
    bystander.close();
    idle.ws.terminate();
    await until(() => sockets()?.connections === 0);
  });
});
