import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { WS_CLOSE } from '../../src/gateway/ws/gateway.js';
import { until } from '../support/eventually.js';
import { type FakeUpstream, startFake } from '../support/fakeUpstreams.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { listen, newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * The WebSocket side under a hostile or careless client and a flaky node: a subscriber that never
 * reads, answers larger than the send buffer's bound, frames that are not calls, subscribe calls
 * refused by the hundred, another client's subscription ids, the node's socket dropping while
 * notifications are metered, the quota running out with many notifications at once, clients
 * leaving with calls in flight, and the gateway's drain with sockets open. Real gateway, tokens
 * and metering; a fake node the test drives (HTTP and WebSocket).
 */
let node: FakeWsUpstream;
/** The node's HTTP side for calls with big answers: eth_getLogs answers ~3.5 MB. */
let bigNode: FakeUpstream;
let plansFile: string;

const LOG = {
  address: `0x${'11'.repeat(20)}`,
  topics: [`0x${'22'.repeat(32)}`],
  data: `0x${'33'.repeat(400)}`,
  blockNumber: '0x10',
  blockHash: `0x${'44'.repeat(32)}`,
  transactionHash: `0x${'55'.repeat(32)}`,
  transactionIndex: '0x0',
  logIndex: '0x0',
  removed: false,
};

beforeAll(async () => {
  node = await startFakeWsUpstream();
  // An HTTP node whose eth_getLogs answers 3,000 logs (~3.5 MB): more than a socket's send buffer bound (1 MiB).
  bigNode = await startFake((call) => {
    const req = JSON.parse(call.body) as { id: unknown; method: string };
    if (req.method === 'eth_getLogs') return { body: { jsonrpc: '2.0', id: req.id, result: Array.from({ length: 3000 }, () => LOG) } };
    return otherCall(req);
  });
  plansFile = join(mkdtempSync(join(tmpdir(), 'ws-robust-plans-')), 'plans.json');
  // Unlimited's rate high enough for a thousand subscribe calls at once.
  writeFileSync(plansFile, JSON.stringify({ unlimited: { rps: 1_000_000 } }));
});
afterAll(async () => {
  await node?.close();
  await bigNode?.close();
});

/** Everything else on the big node: a chain id, a block number, null. */
function otherCall(req: { id: unknown; method: string }): { body: unknown } {
  const result = req.method === 'eth_chainId' ? '0x539' : req.method === 'eth_blockNumber' ? '0x10' : null;
  return { body: { jsonrpc: '2.0', id: req.id, result } };
}

interface Gateway {
  t: TestApp;
  wsBase: string;
}

async function startGateway(env: Record<string, string> = {}): Promise<Gateway> {
  const t = await startTestApp({ env: { UPSTREAM_LOCAL: node.httpUrl, UPSTREAM_LOCAL_WS: node.wsUrl, PLANS_CONFIG: plansFile, ...env } });
  return { t, wsBase: (await listen(t)).wsBase };
}

const newToken = ({ t }: Gateway, plan: string, fields: Record<string, unknown> = {}) => newOwnerToken(t, { plan, fields });

/** The client's own socket: paused, it reads nothing more (TCP's window fills, then the gateway's buffer). */
const rawSocket = (client: WsClient) => (client.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;

/** The heap after full collections (a second one for what the first only unlinked). */
function liveHeap(): number {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

describe('with the fake node', () => {
  let g: Gateway;
  beforeAll(async () => {
    g = await startGateway({ MAX_BATCH_CALLS: '5' });
  });
  afterAll(async () => {
    await g?.t.close();
  });
  const sockets = () => g.t.runtime.telemetry.webSockets();

  it('closes a subscriber that never reads once its buffer passes the bound, without slowing the clients of the same upstream subscription', async () => {
    const bystander = await WsClient.open(`${g.wsBase}/local/${(await newToken(g, 'unlimited')).token}`);
    const other = (await bystander.call('eth_subscribe', ['newHeads'])).result;
    const reader = await WsClient.open(`${g.wsBase}/local/${(await newToken(g, 'unlimited')).token}`);
    // A thousand subscriptions to the same heads: ~1 MB of notifications per head.
    const sent = Array.from({ length: 1000 }, () => reader.send('eth_subscribe', ['newHeads']));
    await until(() => reader.frames.length >= sent.length, 30_000);
    expect(sockets()?.upstreamSubscriptions).toBe(1);
    rawSocket(reader).pause();
    const lags: number[] = [];
    let mined = 0;
    while (sockets()?.connections === 2 && mined < 300) {
      const want = bystander.notifications(other).length + 1;
      const start = performance.now();
      node.mine();
      mined++;
      await until(() => bystander.notifications(other).length >= want, 5000);
      lags.push(performance.now() - start);
    }
    // Closed after the kernel's buffers and the 1 MiB bound filled: tens of heads, not hundreds.
    expect(sockets()?.connections).toBe(1);
    expect(mined).toBeLessThan(300);
    // The bystander got every head, each well within a second, while the reader's buffer filled and it was cut off.
    expect(bystander.notifications(other)).toHaveLength(mined);
    expect(Math.max(...lags)).toBeLessThan(1000);
    expect(sockets()).toMatchObject({ subscriptions: 1, upstreamSubscriptions: 1 });
    node.mine();
    await until(() => bystander.notifications(other).length === mined + 1);
    rawSocket(reader).resume();
    await reader.whenClosed();
    bystander.close();
    await until(() => sockets()?.connections === 0);
  }, 60_000);

  it('answers frames that are not calls with -32600/-32700 and keeps the socket open, subscribing to nothing', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const overBatch = JSON.stringify(Array.from({ length: 6 }, (_, id) => ({ jsonrpc: '2.0', id, method: 'eth_chainId' })));
    const frames: Array<[string, number, string]> = [
      ['42', -32600, 'a call must be a JSON object'],
      ['"eth_subscribe"', -32600, 'a call must be a JSON object'],
      ['null', -32600, 'a call must be a JSON object'],
      ['[]', -32600, 'empty batch'],
      ['{}', -32600, 'jsonrpc must be "2.0"'],
      ['', -32700, 'not valid JSON'],
      ['{"jsonrpc":"2.0","id":"x1","method":"eth_subscribe","params":["newHeads"]', -32700, 'not valid JSON'],
      [overBatch, -32600, 'a batch of 6 calls exceeds the limit of 5'],
      ['{"jsonrpc":"2.0","id":{"a":1},"method":"eth_subscribe","params":["newHeads"]}', -32600, 'id must be'],
      ['{"jsonrpc":"1.0","id":"x2","method":"eth_subscribe","params":["newHeads"]}', -32600, 'jsonrpc must be "2.0"'],
    ];
    for (const [frame, code, message] of frames) {
      const before = client.frames.length;
      client.ws.send(frame);
      await until(() => client.frames.length > before);
      expect(client.frames[before], frame.slice(0, 60)).toMatchObject({ jsonrpc: '2.0', error: { code, message: expect.stringContaining(message) } });
    }
    // eth_subscribe without params, and eth_unsubscribe of nothing: -32602, and false as geth.
    expect((await client.call('eth_subscribe')).error).toMatchObject({ code: -32602 });
    expect(await client.call('eth_unsubscribe')).toMatchObject({ result: false });
    expect(await client.call('eth_chainId')).toMatchObject({ result: '0x539' });
    expect(client.closed).toBeNull();
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('holds no memory for subscribe calls it refused: a Free client sending hundreds of distinct logs filters over its cap', async () => {
    const { token } = await newToken(g, 'free');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    let held = 0;
    while (held < 10) {
      const answer = await client.call('eth_subscribe', ['newHeads']);
      if (typeof answer.result === 'string') held++;
      else await new Promise((r) => setTimeout(r, 200));
    }
    // Each refused call names a filter of its own, ~320 KB of addresses and topics: refused by the cap before the rate limit.
    const hex = (n: number, digits: number) => `0x${n.toString(16).padStart(digits, '0')}`;
    const address = Array.from({ length: 999 }, (_, i) => hex(i, 40));
    const topics = Array.from({ length: 4 }, (_, p) => Array.from({ length: 1000 }, (_, i) => hex(p * 1000 + i, 64)));
    const before = liveHeap();
    const ids: number[] = [];
    for (let i = 0; i < 150; i++) {
      ids.push(client.send('eth_subscribe', ['logs', { address: [...address, hex(10_000 + i, 40)], topics }]));
      if (i % 25 === 24) await until(() => client.frames.length >= 10 + ids.length, 20_000);
    }
    await until(() => client.frames.length >= 10 + ids.length, 20_000);
    const refused = ids.map((id) => client.frames.find((f) => f.id === id));
    expect(refused.every((f) => (f?.error as { code?: number } | undefined)?.code === -32005)).toBe(true);
    client.close();
    await until(() => sockets()?.connections === 0);
    // Before: every refused filter stayed in the chain's feeds for the process's life (~115 MB here).
    expect((liveHeap() - before) / 1e6).toBeLessThan(20);
  }, 60_000);

  it("cannot end another token's subscription by its id; an id unsubscribed twice answers false", async () => {
    const victim = await WsClient.open(`${g.wsBase}/local/${(await newToken(g, 'unlimited')).token}`);
    const attacker = await WsClient.open(`${g.wsBase}/local/${(await newToken(g, 'unlimited')).token}`);
    const id = (await victim.call('eth_subscribe', ['newHeads'])).result;
    const own = (await attacker.call('eth_subscribe', ['newHeads'])).result;
    expect(await attacker.call('eth_unsubscribe', [id])).toMatchObject({ result: false });
    // In a batch the call goes to the node, which never saw the gateway's ids: nothing of the victim's ends either.
    attacker.ws.send(JSON.stringify([{ jsonrpc: '2.0', id: 'b', method: 'eth_unsubscribe', params: [id] }]));
    await until(() => attacker.frames.some((f) => Array.isArray(f)));
    node.mine();
    await until(() => victim.notifications(id).length === 1 && attacker.notifications(own).length === 1);
    expect(await attacker.call('eth_unsubscribe', [own])).toMatchObject({ result: true });
    expect(await attacker.call('eth_unsubscribe', [own])).toMatchObject({ result: false });
    expect(sockets()).toMatchObject({ subscriptions: 1, upstreamSubscriptions: 1 });
    victim.close();
    attacker.close();
    await until(() => sockets()?.connections === 0);
  });

  it('keeps every subscription across the node dropping its socket twice, and meters each head once per client', async () => {
    const o = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${o.token}`);
    const ids = [(await client.call('eth_subscribe', ['newHeads'])).result, (await client.call('eth_subscribe', ['newHeads'])).result];
    node.mine();
    await until(() => ids.every((id) => client.notifications(id).length === 1));
    // The node sends its latest head again on each new subscription; the gateway drops it (delivered already).
    node.replayLatestOnSubscribe = true;
    // Each drop ends every subscription the node holds: all of them (the head tracker's and the feed's) are back before the next head.
    const held = node.liveSubscriptions();
    for (let i = 0; i < 2; i++) {
      node.drop();
      node.mine({ quiet: true });
      await until(() => node.liveSubscriptions() === held);
    }
    node.replayLatestOnSubscribe = false;
    node.mine();
    await until(() => ids.every((id) => client.notifications(id).length === 4));
    await new Promise((r) => setTimeout(r, 200));
    expect(ids.map((id) => client.notifications(id).length)).toEqual([4, 4]);
    expect(client.closed).toBeNull();
    client.close();
    await until(() => sockets()?.connections === 0);
    const metered = async () => (await recordedCalls(g.t.runtime.store, o.accountId)).filter((c) => c.method === 'eth_subscription:newHeads');
    await until(async () => (await metered()).length >= 8);
    await new Promise((r) => setTimeout(r, 300));
    const heads = await metered();
    expect(heads).toHaveLength(8);
    expect(heads.every((c) => c.charged !== false)).toBe(true);
  });

  it('ends a subscription the node refuses with an error notification and frees it; the same filter later asks the node again', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const filter = { address: `0x${'ab'.repeat(20)}` };
    // The fake node serves newHeads only: it answers eth_subscribe("logs") with -32601, as a node without it would.
    for (let attempt = 0; attempt < 2; attempt++) {
      const id = (await client.call('eth_subscribe', ['logs', filter])).result;
      expect(id).toEqual(expect.stringMatching(/^0x[0-9a-f]{32}$/));
      await until(() => client.notifications(id).length === 1);
      expect(client.notifications(id)[0]?.error).toMatchObject({ code: -32010, message: expect.stringContaining('does not exist') });
      await until(() => sockets()?.subscriptions === 0);
      expect(sockets()?.upstreamSubscriptions).toBe(0);
      expect(await client.call('eth_unsubscribe', [id])).toMatchObject({ result: false });
    }
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result;
    node.mine();
    await until(() => client.notifications(heads).length === 1);
    expect(client.closed).toBeNull();
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('meters no notification beyond the monthly quota when many arrive at once, and closes with 4029', async () => {
    // Developer: 50 subscriptions per connection; the token's own monthly limit: 50 subscribes + 20 notifications.
    const o = await newToken(g, 'developer', { monthly_limit: 70 });
    const client = await WsClient.open(`${g.wsBase}/local/${o.token}`);
    const ids: unknown[] = [];
    while (ids.length < 50) {
      const answer = await client.call('eth_subscribe', ['newHeads']);
      if (typeof answer.result === 'string') ids.push(answer.result);
      else await new Promise((r) => setTimeout(r, 250));
    }
    // A fresh rate window (25 a second): a notification refused by the rate alone would be delivered uncharged (a push cannot be retried).
    await new Promise((r) => setTimeout(r, 1100));
    node.mine();
    expect(await client.whenClosed()).toMatchObject({ code: WS_CLOSE.quotaExhausted });
    const delivered = ids.reduce<number>((n, id) => n + client.notifications(id).filter((p) => p.result !== undefined).length, 0);
    expect(delivered).toBe(20);
    // Every subscription's last frame is the error, the delivered ones included.
    for (const id of ids) expect(client.notifications(id).at(-1)?.error).toMatchObject({ code: -32005 });
    await until(() => sockets()?.connections === 0);
    const notifications = async () => (await recordedCalls(g.t.runtime.store, o.accountId)).filter((c) => c.method === 'eth_subscription:newHeads');
    await until(async () => (await notifications()).length >= 50);
    const charged = (await notifications()).filter((c) => c.charged !== false);
    expect(charged).toHaveLength(20);
  }, 30_000);

  it('frees everything of a client that leaves with subscribe calls and other calls in flight', async () => {
    const { token } = await newToken(g, 'unlimited');
    const stays = await WsClient.open(`${g.wsBase}/local/${token}`);
    const kept = (await stays.call('eth_subscribe', ['newHeads'])).result;
    for (let round = 0; round < 5; round++) {
      const client = await WsClient.open(`${g.wsBase}/local/${token}`);
      for (let i = 0; i < 200; i++) {
        client.send('eth_subscribe', ['newHeads']);
        client.send('eth_subscribe', ['logs', { address: `0x${(round * 1000 + i).toString(16).padStart(40, '0')}` }]);
        client.send('eth_blockNumber');
      }
      if (round % 2 === 0) client.ws.terminate();
      else client.close();
    }
    await until(() => sockets()?.connections === 1);
    // Answers still under way meet a closed socket: give them a moment, then only the stayer's subscription is left, here and on the node.
    await new Promise((r) => setTimeout(r, 500));
    expect(sockets()).toMatchObject({ connections: 1, subscriptions: 1, upstreamSubscriptions: 1 });
    node.mine();
    await until(() => stays.notifications(kept).length === 1);
    stays.close();
    await until(() => sockets()?.connections === 0);
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
  });
});

describe('answers larger than the send buffer bound', () => {
  let g: Gateway;
  beforeAll(async () => {
    const t = await startTestApp({ env: { UPSTREAM_LOCAL: bigNode.url, UPSTREAM_LOCAL_WS: node.wsUrl, PLANS_CONFIG: plansFile } });
    g = { t, wsBase: (await listen(t)).wsBase };
  });
  afterAll(async () => {
    await g?.t.close();
  });

  it('are sent to a client that reads, as over HTTP: the socket stays open and its subscription goes on', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const id = (await client.call('eth_subscribe', ['newHeads'])).result;
    const logs = await client.call('eth_getLogs', [{ fromBlock: '0x1', toBlock: '0x10' }]);
    expect(logs.result).toHaveLength(3000);
    expect(JSON.stringify(logs).length).toBeGreaterThan(3 * 1024 * 1024);
    // Two at once: the second is queued while the first is still unread, which a reading client drains.
    const [a, b] = [client.send('eth_getLogs', [{ fromBlock: '0x1', toBlock: '0x10' }]), client.send('eth_getLogs', [{ fromBlock: '0x1', toBlock: '0x10' }])];
    expect((await client.answer(a)).result).toHaveLength(3000);
    expect((await client.answer(b)).result).toHaveLength(3000);
    node.mine();
    await until(() => client.notifications(id).length === 1);
    expect(client.closed).toBeNull();
    client.close();
  });
});

describe('the drain (SIGTERM) with sockets open', () => {
  it('closes every socket with 1001, a subscriber that does not read within about a second, and ends the server', async () => {
    const g = await startGateway();
    const { token } = await newToken(g, 'unlimited');
    const subscriber = await WsClient.open(`${g.wsBase}/local/${token}`);
    const id = (await subscriber.call('eth_subscribe', ['newHeads'])).result;
    const busy = await WsClient.open(`${g.wsBase}/local/${token}`);
    const stuck = await WsClient.open(`${g.wsBase}/local/${token}`);
    await stuck.call('eth_subscribe', ['newHeads']);
    rawSocket(stuck).pause();
    for (let i = 0; i < 50; i++) busy.send('eth_blockNumber');
    node.mine();
    await until(() => subscriber.notifications(id).length === 1);
    const started = performance.now();
    await g.t.close();
    const took = performance.now() - started;
    expect(await subscriber.whenClosed()).toMatchObject({ code: WS_CLOSE.goingAway });
    expect(await busy.whenClosed()).toMatchObject({ code: WS_CLOSE.goingAway });
    // The one that does not read never sees the close frame: cut off (its socket ends) rather than awaited for ws's 30 s.
    expect(took).toBeLessThan(5000);
    rawSocket(stuck).resume();
    await stuck.whenClosed();
    // An upgrade after the drain began is refused, not served.
    await expect(WsClient.open(`${g.wsBase}/local/${token}`)).rejects.toThrow();
    expect(stuck.ws.readyState).toBe(WebSocket.CLOSED);
  }, 30_000);
});
