import { mkdtempSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocketProvider } from 'ethers';
import { createPublicClient, webSocket } from 'viem';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { WS_CLOSE } from '../../src/gateway/ws/gateway.js';
import { eventually, until } from '../support/eventually.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { ADMIN_TOKEN, listen, newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { refusedUpgrade } from '../support/wsClient.js';

/**
 * The WebSocket surface as a dApp developer and a billing owner meet it: real clients (ethers,
 * viem, raw ws) through the real gateway, tokens, limits and metering, ganache behind. Between
 * the gateway and ganache's WebSocket a relay keeps what the gateway asks the node, so a test
 * sees the node's subscriptions end.
 */
let node: GanacheNode;
let relay: NodeRelay;
let t: TestApp;
let wsBase: string;

/** A plan's name as an operator may write it (PLANS_CONFIG): long and not ASCII, 96 bytes of UTF-8. */
const LONG_PLAN_NAME = 'Профессиональный'.repeat(3);

/**
 * Between the gateway and the node's WebSocket: the calls the gateway's subscriptions send, their
 * open connections, the node's subscriptions they hold. The gateway's head tracking has a
 * WebSocket of its own to the node while the chain has traffic (one newHeads, kept): the first
 * connection, made before the tests (`trackHeads`), is left out.
 */
interface NodeRelay {
  url: string;
  calls: Array<{ method: string; params: unknown }>;
  /** Open connections, the head tracker's left out. */
  readonly connections: number;
  /** Subscriptions the node granted and the gateway has not ended (an unsubscribe, or its connection's end). */
  readonly live: number;
  /** The first connection (the head tracker's), once it holds its subscription. */
  headTracker: Promise<void>;
  close(): Promise<void>;
}

async function startRelay(target: string): Promise<NodeRelay> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  const live = new Set<Set<string>>();
  let connections = 0;
  let first = true;
  let tracked: () => void = () => undefined;
  const relay: NodeRelay = {
    url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}`,
    calls: [],
    get connections() {
      return connections;
    },
    headTracker: new Promise<void>((resolve) => {
      tracked = resolve;
    }),
    get live() {
      let n = 0;
      for (const ids of live) n += ids.size;
      return n;
    },
    close: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
  wss.on('connection', (gateway) => {
    const isHeadTracker = first;
    first = false;
    const upstream = new WebSocket(target);
    const queued: string[] = [];
    const granted = new Set<string>();
    const subscribeCalls = new Set<unknown>();
    if (!isHeadTracker) {
      connections++;
      live.add(granted);
    }
    upstream.on('open', () => {
      for (const text of queued.splice(0)) upstream.send(text);
    });
    gateway.on('message', (data) => {
      const text = data.toString();
      const call = JSON.parse(text) as { id: unknown; method: string; params: unknown };
      if (!isHeadTracker) relay.calls.push({ method: call.method, params: call.params });
      if (call.method === 'eth_subscribe') subscribeCalls.add(call.id);
      if (call.method === 'eth_unsubscribe') granted.delete((call.params as string[])[0] as string);
      if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
      else queued.push(text);
    });
    upstream.on('message', (data) => {
      const answer = JSON.parse(data.toString()) as { id?: unknown; result?: unknown };
      if (subscribeCalls.delete(answer.id) && typeof answer.result === 'string') {
        granted.add(answer.result);
        if (isHeadTracker) tracked();
      }
      if (gateway.readyState === WebSocket.OPEN) gateway.send(data.toString());
    });
    gateway.on('close', () => {
      if (!isHeadTracker) connections--;
      live.delete(granted);
      upstream.close();
    });
    upstream.on('close', () => gateway.close());
  });
  return relay;
}

beforeAll(async () => {
  node = await startGanache();
  relay = await startRelay(node.url.replace('http', 'ws'));
  const plans = join(mkdtempSync(join(tmpdir(), 'ws-audit-plans-')), 'plans.json');
  // Free at 100 calls a second: its caps (2 sockets, 10 subscriptions) are reached without waiting for the rate.
  // Professional leaves the `local` chain, under a long non-ASCII name.
  writeFileSync(plans, JSON.stringify({ unlimited: { rps: 1_000_000 }, free: { rps: 100 }, professional: { chains: ['eth'], name: LONG_PLAN_NAME } }));
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, UPSTREAM_LOCAL_WS: relay.url, PLANS_CONFIG: plans } });
  const { url } = await listen(t);
  wsBase = url.replace('http', 'ws');
  // A first chain call starts the gateway's head tracking, with its own socket to the node.
  const { token } = await newToken();
  await fetch(`${url}/local/${token}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}',
  });
  await relay.headTracker;
});
/** Each test's sockets are closed after it, failed or not: one test's leftovers must not fail the next. */
const opened: WebSocket[] = [];
afterEach(async () => {
  for (const ws of opened.splice(0)) ws.terminate();
  await until(() => (sockets()?.connections ?? 0) === 0, 10_000);
});
afterAll(async () => {
  await t?.close();
  await relay?.close();
  await node?.close();
});

const newToken = (plan = 'unlimited', fields: Record<string, unknown> = {}) => newOwnerToken(t, { plan, fields });
const sockets = () => t.runtime.telemetry.webSockets();
const mine = () =>
  fetch(node.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"evm_mine","params":[]}' });
const setPlan = (accountId: string, plan: string) =>
  t.app.inject({ method: 'PUT', url: `/api/v1/admin/accounts/${accountId}/plan`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, payload: { plan } });
const nodeCalls = (method: string) => relay.calls.filter((c) => c.method === method).length;
const metered = async (accountId: string, method: string) => (await recordedCalls(t.runtime.store, accountId)).filter((c) => c.method === method);

/** A raw client: each frame's text as received, and how the socket closed. */
class Client {
  readonly texts: string[] = [];
  closed: { code: number; reason: string } | null = null;
  private nextId = 1;
  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => this.texts.push(data.toString()));
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
    });
  }

  static open(token: string): Promise<Client> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`${wsBase}/local/${token}`);
      opened.push(ws);
      ws.once('open', () => resolve(new Client(ws)));
      ws.once('error', reject);
    });
  }

  get frames(): unknown[] {
    return this.texts.map((text) => JSON.parse(text) as unknown);
  }

  /** Sends a frame as written; the text of the next frame received. */
  async exchange(frame: string | Buffer): Promise<string> {
    const before = this.texts.length;
    this.ws.send(frame);
    await until(() => this.texts.length > before || this.closed !== null, 10_000);
    const text = this.texts[before];
    if (text === undefined) throw new Error(`closed before answering: ${JSON.stringify(this.closed)}`);
    return text;
  }

  async call(method: string, params: unknown[] = []): Promise<Record<string, unknown>> {
    const id = this.nextId++;
    return JSON.parse(await this.exchange(JSON.stringify({ jsonrpc: '2.0', id, method, params }))) as Record<string, unknown>;
  }

  async subscribe(params: unknown[] = ['newHeads']): Promise<string> {
    const answer = await this.call('eth_subscribe', params);
    if (typeof answer.result !== 'string') throw new Error(`not subscribed: ${JSON.stringify(answer)}`);
    return answer.result;
  }

  /** The params of each eth_subscription frame for a subscription id. */
  notifications(subscription: string): Array<{ result?: unknown; error?: { code: number; message: string } }> {
    return (this.frames as Array<{ method?: string; params?: { subscription?: unknown } }>)
      .filter((f) => f.method === 'eth_subscription' && f.params?.subscription === subscription)
      .map((f) => f.params as { result?: unknown; error?: { code: number; message: string } });
  }

  async whenClosed(): Promise<{ code: number; reason: string }> {
    await until(() => this.closed !== null, 10_000);
    return this.closed as { code: number; reason: string };
  }
}

describe('ids', () => {
  it('echoes each id exactly as written on subscribe and unsubscribe calls, alone and in a batch; notifications carry the id the client got', async () => {
    const { token } = await newToken();
    const client = await Client.open(token);
    const ids = ['12345678901234567890', '1e400', '1.0', '-0', '"\\u0041"', '"sub-1"', '7', 'null'];
    const held: string[] = [];
    for (const id of ids) {
      // An ordinary call (the HTTP path) is the reference: the id comes back as written.
      expect(await client.exchange(`{"jsonrpc":"2.0","id":${id},"method":"eth_chainId","params":[]}`), id).toContain(`"id":${id},`);
      const subscribed = await client.exchange(`{"jsonrpc":"2.0","id":${id},"method":"eth_subscribe","params":["newHeads"]}`);
      expect(subscribed, id).toMatch(new RegExp(`"id":${id.replace(/[.\\+-]/g, '\\$&')},"result":"0x[0-9a-f]{32}"`));
      const subscription = (JSON.parse(subscribed) as { result: string }).result;
      held.push(subscription);
      expect(await client.exchange(`{"jsonrpc":"2.0","id":${id},"method":"eth_unsubscribe","params":["0x00"]}`), id).toBe(
        `{"jsonrpc":"2.0","id":${id},"result":false}`,
      );
    }
    const batch = await client.exchange(
      '[{"jsonrpc":"2.0","id":12345678901234567891,"method":"eth_subscribe","params":["newHeads"]},{"jsonrpc":"2.0","id":1e400,"method":"eth_chainId"}]',
    );
    expect(batch).toMatch(/^\[\{"jsonrpc":"2.0","id":12345678901234567891,"result":"0x[0-9a-f]{32}"\},\{[^}]*"id":1e400,[^}]*"result":"0x539"[^}]*\}\]$/);
    held.push((JSON.parse(batch) as Array<{ result: string }>)[0]?.result as string);
    expect(new Set(held).size).toBe(held.length);
    await until(() => relay.live === 1);
    await mine();
    await until(() => held.every((s) => client.notifications(s).length === 1));
    // The last one ends with an unsubscribe under a huge id; the others with the socket.
    const last = held.pop() as string;
    expect(await client.exchange(`{"jsonrpc":"2.0","id":98765432109876543210,"method":"eth_unsubscribe","params":["${last}"]}`)).toBe(
      '{"jsonrpc":"2.0","id":98765432109876543210,"result":true}',
    );
    client.ws.close();
    await until(() => sockets()?.connections === 0);
  });
});

describe('a plan change on an open socket', () => {
  it('an upgrade raises the subscription cap of the sockets already open', async () => {
    const o = await newToken('free');
    const client = await Client.open(o.token);
    for (let i = 0; i < 10; i++) await client.subscribe();
    expect((await client.call('eth_subscribe', ['newHeads'])).error).toMatchObject({ code: -32005, message: expect.stringContaining('at most 10') });
    await setPlan(o.accountId, 'developer');
    // Developer: 50 a connection. Before, the socket kept Free's 10 for its life.
    const answer = await eventually(
      () => client.call('eth_subscribe', ['newHeads']),
      (a) => typeof a.result === 'string',
    );
    expect(answer.result).toEqual(expect.stringMatching(/^0x[0-9a-f]{32}$/));
    client.ws.close();
    await until(() => sockets()?.connections === 0);
  });

  it('a plan without the chain closes the socket (4003) with its reason cut to what a close frame holds; the gateway serves on', async () => {
    const leaving = await newToken('developer');
    const staying = await newToken('developer');
    const client = await Client.open(leaving.token);
    const bystander = await Client.open(staying.token);
    await client.subscribe(['logs', {}]);
    await setPlan(leaving.accountId, 'professional');
    // "The <96 bytes> plan does not include the local network." is 141 bytes: ws threw, unhandled, and the socket stayed open.
    const closed = await client.whenClosed();
    expect(closed.code).toBe(WS_CLOSE.forbidden);
    expect(closed.reason.startsWith(`The ${LONG_PLAN_NAME} plan does not include`)).toBe(true);
    expect(Buffer.byteLength(closed.reason)).toBeLessThanOrEqual(123);
    await until(() => sockets()?.connections === 1 && sockets()?.upstreamSubscriptions === 0);
    expect(await bystander.call('eth_chainId')).toMatchObject({ result: '0x539' });
    bystander.ws.close();
    await until(() => sockets()?.connections === 0);
  });
});

describe('limits and metering', () => {
  it('meters each call frame, batch member and delivered notification once; over the rate limit -32005 with retryAfter, the socket open', async () => {
    const o = await newToken('developer', { rate_limit: 4 });
    const client = await Client.open(o.token);
    const batch = JSON.parse(
      await client.exchange(
        JSON.stringify([
          { jsonrpc: '2.0', id: 'a', method: 'eth_subscribe', params: ['newHeads'] },
          { jsonrpc: '2.0', id: 'b', method: 'eth_chainId' },
          { jsonrpc: '2.0', id: 'c', method: 'eth_blockNumber' },
          { jsonrpc: '2.0', method: 'eth_chainId' },
          { jsonrpc: '2.0', id: 'd', method: 'eth_chainId' },
          { jsonrpc: '2.0', id: 'e', method: 'eth_chainId' },
        ]),
      ),
    ) as Array<{ id: string; result?: string; error?: { code: number; data?: { retryAfter?: number } } }>;
    expect(batch.map((a) => a.id)).toEqual(['a', 'b', 'c', 'd', 'e']);
    const refused = batch.filter((a) => a.error !== undefined);
    expect(refused.length).toBeGreaterThan(0);
    for (const a of refused) expect(a.error).toMatchObject({ code: -32005, data: { retryAfter: expect.any(Number) } });
    const subscription = batch[0]?.result as string;
    expect(subscription).toEqual(expect.stringMatching(/^0x[0-9a-f]{32}$/));
    expect(client.closed).toBeNull();
    await until(() => relay.live === 1);
    await new Promise((r) => setTimeout(r, 1100));
    await mine();
    await mine();
    await until(() => client.notifications(subscription).length === 2);
    client.ws.close();
    await until(() => sockets()?.connections === 0);
    const calls = await eventually(
      () => recordedCalls(t.runtime.store, o.accountId),
      (c) => c.length >= 8,
    );
    await new Promise((r) => setTimeout(r, 300));
    expect((await recordedCalls(t.runtime.store, o.accountId)).length).toBe(8);
    expect(calls.filter((c) => c.method === 'eth_subscription:newHeads' && c.charged !== false)).toHaveLength(2);
    expect(calls.filter((c) => c.rpcErrorCode === -32005)).toHaveLength(refused.length);
  });

  it('the quota running out mid-connection: calls get -32005 on an open socket, an unsubscribe still works, then one error per subscription and 4029', async () => {
    // 2 subscribes + 1 head (an empty block has no logs) + 2 calls.
    const o = await newToken('developer', { monthly_limit: 5 });
    const client = await Client.open(o.token);
    const [kept, dropped] = [await client.subscribe(), await client.subscribe(['logs', {}])];
    await until(() => relay.live === 2);
    await mine();
    await until(() => client.notifications(kept).length === 1);
    // Not eth_chainId: one such heartbeat call in an interval is answered uncharged (ws-heartbeat).
    await client.call('eth_blockNumber');
    await client.call('eth_blockNumber');
    expect((await client.call('eth_blockNumber')).error).toMatchObject({ code: -32005, message: 'The monthly request limit is reached.' });
    expect(client.closed).toBeNull();
    expect(await client.call('eth_unsubscribe', [dropped])).toMatchObject({ result: true });
    await mine();
    expect(await client.whenClosed()).toMatchObject({ code: WS_CLOSE.quotaExhausted });
    // One error, not two (the refused notification's own, then the end's).
    expect(client.notifications(kept)).toEqual([
      { subscription: kept, result: expect.any(Object) },
      { subscription: kept, error: { code: -32005, message: 'The monthly request limit is reached.' } },
    ]);
    await until(() => sockets()?.connections === 0 && relay.live === 0);
    await mine();
    const heads = await eventually(
      () => metered(o.accountId, 'eth_subscription:newHeads'),
      (c) => c.length >= 2,
    );
    await new Promise((r) => setTimeout(r, 300));
    expect((await metered(o.accountId, 'eth_subscription:newHeads')).length).toBe(heads.length);
    expect(heads.map((c) => c.charged !== false)).toEqual([true, false]);
  });

  it('a disabled or revoked token: the socket closes with 4003/4001 and a clear reason; no later notification is delivered or metered; the node’s subscriptions end', async () => {
    const disabled = await newToken('developer');
    const revoked = await newToken('developer');
    const [d, r] = [await Client.open(disabled.token), await Client.open(revoked.token)];
    const [ds, rs] = [await d.subscribe(), await r.subscribe(['logs', {}])];
    await until(() => relay.live === 2);
    await t.app.inject({ method: 'PATCH', url: `/api/v1/tokens/${disabled.tokenId}`, headers: disabled.auth, payload: { status: 'disabled' } });
    await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${revoked.tokenId}`, headers: revoked.auth });
    expect(await d.whenClosed()).toEqual({ code: WS_CLOSE.forbidden, reason: 'The API token is disabled; enable it in the dashboard.' });
    expect(await r.whenClosed()).toEqual({ code: WS_CLOSE.unauthorized, reason: 'The API token is missing, invalid, revoked or expired.' });
    await until(() => sockets()?.subscriptions === 0 && sockets()?.upstreamSubscriptions === 0);
    await until(() => relay.live === 0 && relay.connections === 0);
    await mine();
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect([d.notifications(ds), r.notifications(rs)]).toEqual([[], []]);
    for (const o of [disabled, revoked]) expect(await metered(o.accountId, 'eth_subscription:newHeads')).toEqual([]);
  });
});

describe('bad input', () => {
  it('gets a JSON-RPC error on an open socket, or a documented close code; caps refuse with -32005 / 429; nothing is left subscribed at the node', async () => {
    const o = await newToken('free');
    const client = await Client.open(o.token);
    const other = await Client.open(o.token);
    const theirs = await other.subscribe();
    const errorOf = async (frame: string) => (JSON.parse(await client.exchange(frame)) as { error?: { code: number } }).error;
    expect(await errorOf('not json')).toMatchObject({ code: -32700 });
    expect(await errorOf('{"jsonrpc":"2.0","id":1}')).toMatchObject({ code: -32600 });
    expect(await errorOf('{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs",{"address":"nope"}]}')).toMatchObject({ code: -32602 });
    expect(await errorOf('{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["syncing!"]}')).toMatchObject({ code: -32602 });
    expect(await errorOf('{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":{"kind":"newHeads"}}')).toMatchObject({ code: -32602 });
    // Another socket's id, and one that never was: false, as geth; theirs goes on.
    expect(await client.call('eth_unsubscribe', [theirs])).toMatchObject({ result: false });
    expect(await client.call('eth_unsubscribe', ['0xdeadbeef'])).toMatchObject({ result: false });
    // Free: 10 subscriptions a socket, 2 sockets a token.
    for (let i = 0; i < 10; i++) await client.subscribe(['logs', { address: `0x${String(i).padStart(40, '0')}` }]);
    expect((await client.call('eth_subscribe', ['newHeads'])).error).toMatchObject({ code: -32005, message: expect.stringContaining('at most 10') });
    const third = await refusedUpgrade(`${wsBase}/local/${o.token}`);
    expect(third.status).toBe(429);
    expect(JSON.parse(third.body)).toMatchObject({ error: { code: -32005, message: expect.stringContaining('at most 2') } });
    expect(client.closed).toBeNull();
    await until(() => relay.live === 11);
    await mine();
    await until(() => other.notifications(theirs).length === 1);
    // A binary frame (1003), a frame over the 1 MiB body limit (1009).
    const binary = await Client.open((await newToken()).token);
    binary.ws.send(Buffer.from('{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}'), { binary: true });
    expect((await binary.whenClosed()).code).toBe(WS_CLOSE.unsupportedData);
    client.ws.send(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["${'x'.repeat(1024 * 1024)}"]}`);
    expect((await client.whenClosed()).code).toBe(WS_CLOSE.messageTooBig);
    await until(() => sockets()?.upstreamSubscriptions === 1 && relay.live === 1);
    other.ws.close();
    await until(() => sockets()?.connections === 0 && relay.connections === 0);
  });
});

describe('clients that leave', () => {
  it('one destroyed abruptly: a feed only it held ends at the node (eth_unsubscribe); the last one gone closes the node socket; its connection slots are free', async () => {
    const o = await newToken('free');
    const [a, b] = [await Client.open(o.token), await Client.open(o.token)];
    await a.subscribe();
    await a.subscribe(['logs', { address: `0x${'ab'.repeat(20)}` }]);
    const heads = await b.subscribe();
    await until(() => relay.live === 2 && relay.connections === 1);
    const unsubscribed = nodeCalls('eth_unsubscribe');
    (a.ws as unknown as { _socket: { destroy(): void } })._socket.destroy();
    await until(() => nodeCalls('eth_unsubscribe') === unsubscribed + 1 && relay.live === 1);
    expect(sockets()).toMatchObject({ connections: 1, subscriptions: 1, upstreamSubscriptions: 1 });
    await mine();
    await until(() => b.notifications(heads).length === 1);
    b.ws.terminate();
    await until(() => sockets()?.connections === 0 && relay.connections === 0);
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0, byToken: [] });
    const again = [await Client.open(o.token), await Client.open(o.token)];
    expect((await refusedUpgrade(`${wsBase}/local/${o.token}`)).status).toBe(429);
    for (const c of again) c.ws.close();
    await until(() => sockets()?.connections === 0);
  });

  it('ethers WebSocketProvider and viem webSocket follow heads; each delivered head is metered once; destroyed, they leave nothing at the node', async () => {
    const [e, v] = [await newToken('developer'), await newToken('developer')];
    const provider = new WebSocketProvider(`${wsBase}/local/${e.token}`);
    const viem = createPublicClient({ transport: webSocket(`${wsBase}/local/${v.token}`) });
    const [fromEthers, fromViem]: [number[], bigint[]] = [[], []];
    let stop = (): void => undefined;
    try {
      await provider.on('block', (n: number) => fromEthers.push(n));
      stop = viem.watchBlockNumber({ onBlockNumber: (n) => fromViem.push(n), emitOnBegin: false });
      await until(() => sockets()?.subscriptions === 2 && sockets()?.upstreamSubscriptions === 1);
      await until(() => relay.live === 1);
      await mine();
      await mine();
      await until(() => fromEthers.length >= 2 && fromViem.length >= 2);
      expect(fromEthers[1]).toBe((fromEthers[0] as number) + 1);
      expect(fromViem[1]).toBe((fromViem[0] as bigint) + 1n);
    } finally {
      stop();
      await provider.destroy();
      await (await viem.transport.getRpcClient()).close();
    }
    await until(() => sockets()?.connections === 0 && relay.connections === 0);
    for (const o of [e, v]) {
      const heads = await eventually(
        () => metered(o.accountId, 'eth_subscription:newHeads'),
        (c) => c.length >= 2,
      );
      expect(heads.filter((c) => c.charged !== false)).toHaveLength(2);
    }
  });
});
