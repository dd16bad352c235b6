import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, until } from '../support/eventually.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { listen, newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * The WebSocket's edges: subscribe and unsubscribe calls in a batch, with `"id": null` and with no
 * id (a notification), which went to the node over HTTP and were charged for its -32601; and an
 * upgrade arriving on an open connection while the gateway drains, whose socket was destroyed
 * unanswered. Real gateway, tokens and metering; fake nodes: the WebSocket one serves newHeads,
 * the HTTP one records every call it gets and answers eth_subscribe -32601, as a real node over HTTP.
 */
let wsNode: FakeWsUpstream;
let httpNode: FakeUpstream;

interface Call {
  jsonrpc: string;
  id?: unknown;
  method: string;
}

const answerOf = (c: Call) =>
  c.method === 'eth_chainId'
    ? { jsonrpc: '2.0', id: c.id, result: '0x539' }
    : { jsonrpc: '2.0', id: c.id, error: { code: -32601, message: `the method ${c.method} does not exist/is not available` } };

beforeAll(async () => {
  wsNode = await startFakeWsUpstream();
  httpNode = await startFake((call) => {
    const body = JSON.parse(call.body) as Call | Call[];
    return { body: Array.isArray(body) ? body.map(answerOf) : answerOf(body) };
  });
});
afterAll(async () => {
  await wsNode?.close();
  await httpNode?.close();
});

/** The methods the HTTP node was asked, batches flattened. */
const httpMethods = (): string[] =>
  httpNode.calls.flatMap((c) => {
    const body = JSON.parse(c.body) as Call | Call[];
    return (Array.isArray(body) ? body : [body]).map((m) => m.method);
  });

describe('subscribe calls in a batch, with id null, or as notifications', () => {
  let t: TestApp;
  let wsBase: string;
  beforeAll(async () => {
    t = await startTestApp({ env: { UPSTREAM_LOCAL: httpNode.url, UPSTREAM_LOCAL_WS: wsNode.wsUrl } });
    wsBase = (await listen(t)).wsBase;
    // The chain's first call starts its head tracker, which holds a newHeads subscription of its own on the node:
    // started here, so that a subscription the node gets in a test is the client feed's.
    const warm = await newOwnerToken(t, { plan: 'unlimited' });
    await t.app.inject({ method: 'POST', url: `/local/${warm.token}`, payload: { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] } });
    await until(() => wsNode.liveSubscriptions() === 1, 15_000);
  });
  afterAll(async () => {
    await t?.close();
  });
  const sockets = () => t.runtime.telemetry.webSockets();

  it('serves eth_subscribe and eth_unsubscribe in a batch as single calls, with the batch’s other calls, in one answer; none goes to the node over HTTP', async () => {
    const o = await newOwnerToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/local/${o.token}`);
    httpNode.reset();
    const liveBefore = wsNode.liveSubscriptions();
    client.ws.send(
      JSON.stringify([
        { jsonrpc: '2.0', id: 'a', method: 'eth_subscribe', params: ['newHeads'] },
        { jsonrpc: '2.0', id: 'b', method: 'eth_chainId', params: [] },
        { jsonrpc: '2.0', id: 'c', method: 'eth_subscribe', params: ['nonsense'] },
      ]),
    );
    await until(() => client.frames.length >= 1);
    const batch = client.frames[0] as unknown as Array<Record<string, unknown>>;
    expect(Array.isArray(batch)).toBe(true);
    expect(batch).toHaveLength(3);
    const byId = new Map(batch.map((a) => [a.id, a]));
    const id = byId.get('a')?.result;
    expect(id).toEqual(expect.stringMatching(/^0x[0-9a-f]{32}$/));
    expect(byId.get('b')).toMatchObject({ result: '0x539' });
    expect(byId.get('c')).toMatchObject({ error: { code: -32602 } });
    // The subscription is live: a head reaches it, once the node holds the feed's own subscription (a head before it reaches no one).
    await until(() => sockets()?.subscriptions === 1);
    await until(() => wsNode.liveSubscriptions() === liveBefore + 1, 15_000);
    wsNode.mine();
    await until(() => client.notifications(id).length === 1, 15_000);

    client.ws.send(JSON.stringify([{ jsonrpc: '2.0', id: 7, method: 'eth_unsubscribe', params: [id] }]));
    await until(() => client.frames.length >= 3);
    expect(client.frames[2]).toEqual([{ jsonrpc: '2.0', id: 7, result: true }]);
    await until(() => sockets()?.subscriptions === 0);
    // Only the ordinary call reached the node over HTTP.
    expect(httpMethods().filter((m) => m.includes('subscribe'))).toEqual([]);

    const calls = await eventually(
      async () => (await recordedCalls(t.runtime.store, o.accountId)).filter((c) => c.method === 'eth_subscribe' || c.method === 'eth_unsubscribe'),
      (recorded) => recorded.length >= 3,
    );
    // The granted subscribe is charged as a single one is, with no upstream; the refused one is not charged.
    const granted = calls.filter((c) => c.method === 'eth_subscribe' && c.rpcErrorCode === null);
    expect(granted).toHaveLength(1);
    expect(granted[0]).toMatchObject({ upstream: null });
    expect(calls.filter((c) => c.upstream !== null)).toEqual([]);
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('answers an eth_subscribe with "id": null under id null; a subscribe with no id opens nothing, is not answered and not charged; an unsubscribe with no id is done, unanswered', async () => {
    const o = await newOwnerToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/local/${o.token}`);
    httpNode.reset();
    client.ws.send(JSON.stringify({ jsonrpc: '2.0', id: null, method: 'eth_subscribe', params: ['newHeads'] }));
    await until(() => client.frames.length >= 1);
    const id = client.frames[0]?.result;
    expect(client.frames[0]).toMatchObject({ id: null, result: expect.stringMatching(/^0x[0-9a-f]{32}$/) });
    await until(() => sockets()?.subscriptions === 1);

    client.ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'eth_subscribe', params: ['newHeads'] }));
    client.ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'eth_unsubscribe', params: [id] }));
    await until(() => sockets()?.subscriptions === 0);
    // A call behind them is answered: nothing was answered for the two notifications.
    expect(await client.call('eth_chainId')).toMatchObject({ result: '0x539' });
    expect(client.frames).toHaveLength(2);
    expect(sockets()?.subscriptions).toBe(0);
    expect(httpMethods().filter((m) => m.includes('subscribe'))).toEqual([]);

    const calls = await eventually(
      async () => (await recordedCalls(t.runtime.store, o.accountId)).filter((c) => c.method === 'eth_subscribe' || c.method === 'eth_unsubscribe'),
      (recorded) => recorded.length >= 3,
    );
    // The notification subscribe: metered as the gateway's -32600, not charged, no upstream.
    const refused = calls.filter((c) => c.method === 'eth_subscribe' && c.rpcErrorCode !== null);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ rpcErrorCode: -32600, charged: false, upstream: null });
    expect(calls.filter((c) => c.upstream !== null)).toEqual([]);
    client.close();
    await until(() => sockets()?.connections === 0);
  });
});

describe('the drain (SIGTERM)', () => {
  it('answers a WebSocket upgrade arriving on an open connection with 503, Retry-After and Connection: close', async () => {
    const t = await startTestApp({ env: { UPSTREAM_LOCAL: httpNode.url, UPSTREAM_LOCAL_WS: wsNode.wsUrl } });
    try {
      const o = await newOwnerToken(t, { plan: 'unlimited' });
      const { port } = await listen(t);
      // A call is at the node (held there) when the close begins, so the server stays open; the upgrade's request, begun on another connection before, ends after that.
      httpNode.reset();
      httpNode.mode = 'slow';
      httpNode.delayMs = 400;
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] });
      const held = connect(port, '127.0.0.1');
      held.on('data', () => undefined);
      held.write(`POST /local/${o.token} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      await until(() => httpNode.calls.length >= 1, 10_000);
      const socket = connect(port, '127.0.0.1');
      let received = '';
      socket.on('data', (chunk) => {
        received += chunk.toString();
      });
      const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.write(`GET /local/${o.token} HTTP/1.1\r\nHost: gw\r\n`);
      await new Promise((r) => setTimeout(r, 50));
      const closing = t.app.close();
      await new Promise((r) => setTimeout(r, 100));
      socket.write('Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n');
      await ended;
      await closing;
      held.destroy();
      const refused = received;
      expect(refused.slice(0, 12)).toBe('HTTP/1.1 503');
      expect(refused).toMatch(/\r\nconnection: close\r\n/i);
      expect(refused).toMatch(/\r\nretry-after: 1\r\n/i);
      expect(JSON.parse(refused.slice(refused.indexOf('\r\n\r\n') + 4))).toMatchObject({
        id: null,
        error: { code: -32603, message: expect.stringContaining('shutting down') },
      });
    } finally {
      httpNode.mode = 'ok';
      await t.runtime.close().catch(() => undefined);
    }
  });
});
