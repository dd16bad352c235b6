import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { WS_CLOSE } from '../../src/gateway/ws/gateway.js';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { listen, newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { WsClient } from '../support/wsClient.js';

/**
 * WebSocket behaviour that needs a node the test controls (a fake one over HTTP and WebSocket):
 * the upstream socket dropping, keepalive and idle timeouts, the quota running out during a
 * subscription, the per-connection ceiling, and a huge frame. Real gateway, tokens and metering.
 */
let node: FakeWsUpstream;
let plansFile: string;

beforeAll(async () => {
  node = await startFakeWsUpstream();
  plansFile = join(mkdtempSync(join(tmpdir(), 'ws-upstream-plans-')), 'plans.json');
  // Unlimited's rate high enough for 10,000 subscribe calls at once.
  writeFileSync(plansFile, JSON.stringify({ unlimited: { rps: 1_000_000 } }));
});
afterAll(async () => {
  await node?.close();
});

interface Gateway {
  t: TestApp;
  wsBase: string;
}

async function startGateway(env: Record<string, string> = {}): Promise<Gateway> {
  const t = await startTestApp({ env: { UPSTREAM_LOCAL: node.httpUrl, UPSTREAM_LOCAL_WS: node.wsUrl, PLANS_CONFIG: plansFile, ...env } });
  return { t, wsBase: (await listen(t)).wsBase };
}

const newToken = ({ t }: Gateway, plan: string, fields: Record<string, unknown> = {}) => newOwnerToken(t, { plan, fields });

const headNumbers = (client: WsClient, id: unknown) => client.notifications(id).map((n) => Number.parseInt((n.result as { number: string }).number, 16));

/** Runs `body` with the node `ms` slow to answer each subscribe (it has none until it answers), then quick again. */
async function withSlowSubscribes(ms: number, body: () => Promise<void>): Promise<void> {
  node.subscribeAnswerDelayMs = ms;
  try {
    await body();
  } finally {
    node.subscribeAnswerDelayMs = 0;
  }
}

describe('with the default timeouts', () => {
  let g: Gateway;
  beforeAll(async () => {
    g = await startGateway();
  });
  afterAll(async () => {
    await g?.t.close();
  });
  const sockets = () => g.t.runtime.telemetry.webSockets();

  it('reconnects when the node drops the socket and resubscribes: newHeads has no gap and no duplicate', async () => {
    const { token } = await newToken(g, 'unlimited');
    const clients = [await WsClient.open(`${g.wsBase}/local/${token}`), await WsClient.open(`${g.wsBase}/local/${token}`)];
    const ids = await Promise.all(clients.map(async (c) => (await c.call('eth_subscribe', ['newHeads'])).result));
    // The feed's subscription (the chain's head tracker holds one of its own while the chain has subscriptions).
    await until(() => node.feedSubscribeCalls >= 1);
    const first = Number.parseInt(node.mine().number, 16);
    await until(() => clients.every((c, i) => headNumbers(c, ids[i]).length === 1));

    // A drop with nothing mined meanwhile; the node sends its latest head again on the new subscription (some do): not delivered twice.
    node.replayLatestOnSubscribe = true;
    const subscribedBefore = node.feedSubscribeCalls;
    node.drop();
    await until(() => node.feedSubscribeCalls > subscribedBefore);
    // A drop with three blocks mined while the gateway is away: fetched and delivered before the next head.
    node.drop();
    for (let i = 0; i < 3; i++) node.mine({ quiet: true });
    await until(() => node.feedSubscribeCalls > subscribedBefore + 1);
    node.replayLatestOnSubscribe = false;
    node.mine();
    const last = first + 4;
    await until(() => clients.every((c, i) => headNumbers(c, ids[i]).at(-1) === last));
    for (const [i, c] of clients.entries()) {
      expect(headNumbers(c, ids[i])).toEqual([first, first + 1, first + 2, first + 3, last]);
      const hashes = c.notifications(ids[i]).map((n) => (n.result as { hash: string }).hash);
      expect(new Set(hashes).size).toBe(hashes.length);
      // A fetched block is delivered as a header, as the node's newHeads sends it.
      expect(Object.keys(c.notifications(ids[i])[1]?.result as object).sort()).toEqual(Object.keys(c.notifications(ids[i])[0]?.result as object).sort());
    }
    expect(sockets()?.upstreamSubscriptions).toBe(1);
    for (const c of clients) c.close();
    await until(() => sockets()?.connections === 0);
  });

  it('delivers a notification the node sends right behind its answer to eth_subscribe', async () => {
    const { token } = await newToken(g, 'unlimited');
    node.replayLatestOnSubscribe = true;
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const id = (await client.call('eth_subscribe', ['newHeads'])).result;
    node.replayLatestOnSubscribe = false;
    await until(() => client.notifications(id).length === 1);
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('answers a subscribe once the node has it: a head made right after the answer reaches the client, from a slow node too', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    expect(sockets()?.upstreamSubscriptions).toBe(0);
    // The node takes 300 ms to subscribe (it has no subscription before it answers).
    await withSlowSubscribes(300, async () => {
      const id = (await client.call('eth_subscribe', ['newHeads'])).result;
      const made = node.mine();
      await until(() => client.notifications(id).length === 1);
      expect(client.notifications(id)[0]?.result).toMatchObject({ hash: made.hash });
      // A second client of the live feed is answered at once (no second subscribe at the node).
      const subscribedBefore = node.feedSubscribeCalls;
      const again = (await client.call('eth_subscribe', ['newHeads'])).result;
      expect(node.feedSubscribeCalls).toBe(subscribedBefore);
      const next = node.mine();
      await until(() => client.notifications(again).length === 1);
      expect(client.notifications(again)[0]?.result).toMatchObject({ hash: next.hash });
    });
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  // A subscribe held until the node has the subscription (Session.join), from review of 879fb17:
  // nothing for an id the client was not given, nothing lost after an answer (a reconnect too),
  // a batch's subscriptions served after its frame.
  it('quota exhausted while held: no notification for a subscription whose answer has not left', async () => {
    // 2 calls: the two subscribes; the first head then exhausts the quota.
    const { token } = await newToken(g, 'developer', { monthly_limit: 2 });
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result;
    await withSlowSubscribes(1_000, async () => {
      // A second feed the node is slow to answer (the fake refuses logs, 1 s later): held meanwhile.
      const call = client.send('eth_subscribe', ['logs', { address: `0x${'11'.repeat(20)}` }]);
      await new Promise((r) => setTimeout(r, 300));
      expect(client.frames.some((f) => f.id === call)).toBe(false);
      node.mine();
      expect(await client.whenClosed()).toMatchObject({ code: WS_CLOSE.quotaExhausted });
      const answered = client.frames.filter((f) => typeof f.result === 'string').map((f) => f.result);
      const errored = client.frames.filter((f) => f.method === 'eth_subscription').map((f) => (f.params as { subscription: unknown }).subscription);
      expect(errored).toContain(heads);
      // Every subscription that got a notification was answered to the client first; the held one's
      // call ends unanswered with the socket, as any call in flight at the 4029 close.
      for (const id of errored) expect(answered).toContain(id);
    });
    await until(() => sockets()?.connections === 0);
  });

  it('a client joining a feed while the upstream socket reconnects is answered once the node has it again, and misses no head', async () => {
    const { token } = await newToken(g, 'unlimited');
    const first = await WsClient.open(`${g.wsBase}/local/${token}`);
    const second = await WsClient.open(`${g.wsBase}/local/${token}`);
    try {
      await first.call('eth_subscribe', ['newHeads']);
      await until(() => node.feedSubscribeCalls >= 1);
      const before = node.feedSubscribeCalls;
      node.subscribeAnswerDelayMs = 1_500;
      node.drop();
      // The upstream socket reconnects (100 ms) and asks again; the node answers 1.5 s later.
      await new Promise((r) => setTimeout(r, 400));
      const started = performance.now();
      const id = (await second.call('eth_subscribe', ['newHeads'])).result;
      const waited = Math.round(performance.now() - started);
      // A block made right after the answer (the caller's transaction's block).
      const made = node.mine();
      node.subscribeAnswerDelayMs = 0;
      await until(() => node.feedSubscribeCalls > before, 5_000);
      // Later heads arrive; the one made right after the answer should have too.
      for (let i = 0; i < 3; i++) node.mine();
      await until(() => second.notifications(id).length >= 3, 5_000);
      const hashes = second.notifications(id).map((n) => (n.result as { hash: string }).hash);
      expect({ waited: waited >= 500, gotMade: hashes.includes(made.hash) }).toEqual({ waited: true, gotMade: true });
    } finally {
      node.subscribeAnswerDelayMs = 0;
      first.close();
      second.close();
    }
    await until(() => sockets()?.connections === 0);
  });

  it('a subscribe whose method name is written with a JSON escape is a subscribe, alone and in a batch', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    // "eth_s\u0075bscribe" is eth_subscribe to any JSON parser.
    client.ws.send('{"jsonrpc":"2.0","id":1,"method":"eth_s\\u0075bscribe","params":["newHeads"]}');
    client.ws.send('[{"jsonrpc":"2.0","id":2,"method":"eth_s\\u0075bscribe","params":["newHeads"]}]');
    await until(() => client.frames.some((f) => f.id === 1) && client.frames.some((f) => Array.isArray(f)));
    const single = client.frames.find((f) => f.id === 1)?.result;
    const batched = (client.frames.find((f) => Array.isArray(f)) as unknown as Array<Record<string, unknown>>)[0]?.result;
    expect([single, batched]).toEqual([expect.stringMatching(/^0x[0-9a-f]{32}$/), expect.stringMatching(/^0x[0-9a-f]{32}$/)]);
    const made = node.mine();
    await until(() => client.notifications(single).length === 1 && client.notifications(batched).length === 1);
    expect(client.notifications(single)[0]?.result).toMatchObject({ hash: made.hash });
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('a batch: a member on a live feed gets its heads after the batch answer (and none is lost)', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    await client.call('eth_subscribe', ['newHeads']);
    await withSlowSubscribes(800, async () => {
      client.ws.send(
        JSON.stringify([
          { jsonrpc: '2.0', id: 'a', method: 'eth_subscribe', params: ['newHeads'] },
          { jsonrpc: '2.0', id: 'b', method: 'eth_subscribe', params: ['logs', { address: `0x${'22'.repeat(20)}` }] },
          { jsonrpc: '2.0', id: 'c', method: 'eth_chainId', params: [] },
        ]),
      );
      await new Promise((r) => setTimeout(r, 200));
      const made = node.mine();
      await until(() => client.frames.some((f) => Array.isArray(f)), 5_000);
      const at = client.frames.findIndex((f) => Array.isArray(f));
      const batch = client.frames[at] as unknown as Array<Record<string, unknown>>;
      const a = batch.find((m) => m.id === 'a')?.result;
      await until(() => client.notifications(a).length === 1);
      const first = client.frames.findIndex((f) => f.method === 'eth_subscription' && (f.params as { subscription: unknown }).subscription === a);
      expect(first).toBeGreaterThan(at);
      expect(client.notifications(a)[0]?.result).toMatchObject({ hash: made.hash });
    });
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('a batch: a member holding more than the send bound while a slow member is awaited ends with an error, after what it held', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const single = (await client.call('eth_subscribe', ['newHeads'])).result;
    const heads = 1_500;
    await withSlowSubscribes(3_000, async () => {
      client.ws.send(
        JSON.stringify([
          { jsonrpc: '2.0', id: 'a', method: 'eth_subscribe', params: ['newHeads'] },
          { jsonrpc: '2.0', id: 'b', method: 'eth_subscribe', params: ['logs', { address: `0x${'44'.repeat(20)}` }] },
        ]),
      );
      await new Promise((r) => setTimeout(r, 200));
      // ~1.5 MB of heads while the batch waits for b: more than the 1 MiB a client's unread frames may take.
      for (let i = 0; i < heads; i++) node.mine();
      await until(() => client.notifications(single).length === heads, 20_000);
      await until(() => client.frames.some((f) => Array.isArray(f)), 10_000);
    });
    const batch = client.frames.find((f) => Array.isArray(f)) as unknown as Array<Record<string, unknown>>;
    const a = batch.find((m) => m.id === 'a')?.result;
    await until(() =>
      client.frames.some((f) => (f.params as { subscription?: unknown; error?: unknown } | undefined)?.subscription === a && 'error' in (f.params as object)),
    );
    const ofA = client.frames.filter((f) => f.method === 'eth_subscription' && (f.params as { subscription: unknown }).subscription === a);
    const held = ofA.filter((f) => 'result' in (f.params as object));
    const heldBytes = held.reduce((sum, f) => sum + JSON.stringify((f.params as { result: unknown }).result).length, 0);
    expect({
      // What it held came, in order, then the error, and nothing after it.
      last: (ofA.at(-1)?.params as { error?: { code: number } } | undefined)?.error?.code,
      errors: ofA.length - held.length,
      heldSome: held.length > 0,
      heldWithinBound: heldBytes <= 1024 * 1024,
      endedEarly: held.length < heads,
      single: client.notifications(single).length,
    }).toEqual({ last: -32005, errors: 1, heldSome: true, heldWithinBound: true, endedEarly: true, single: heads });
    // Its id is free again: unsubscribing it says so; the socket and its other subscription go on.
    expect((await client.call('eth_unsubscribe', [a])).result).toBe(false);
    node.mine();
    await until(() => client.notifications(single).length === heads + 1);
    expect(client.closed).toBeNull();
    // What the socket held was given back: the next such batch holds its member's heads again, and ends nothing.
    const framesBefore = client.frames.length;
    await withSlowSubscribes(800, async () => {
      client.ws.send(
        JSON.stringify([
          { jsonrpc: '2.0', id: 'c', method: 'eth_subscribe', params: ['newHeads'] },
          { jsonrpc: '2.0', id: 'd', method: 'eth_subscribe', params: ['logs', { address: `0x${'55'.repeat(20)}` }] },
        ]),
      );
      await new Promise((r) => setTimeout(r, 200));
      node.mine();
      await until(() => client.frames.slice(framesBefore).some((f) => Array.isArray(f)), 5_000);
    });
    const second = client.frames.slice(framesBefore).find((f) => Array.isArray(f)) as unknown as Array<Record<string, unknown>>;
    const c = second.find((m) => m.id === 'c')?.result;
    await until(() => client.notifications(c).length === 1);
    const errorsOfC = client.frames.filter((f) => (f.params as { subscription?: unknown } | undefined)?.subscription === c && 'error' in (f.params as object));
    expect(errorsOfC).toEqual([]);
    client.close();
    await until(() => sockets()?.connections === 0);
  }, 60_000);

  it('a batch, quota exhausted while its answer waits for a slow member: no notification for a member before the batch answer', async () => {
    // 3 calls: the first subscribe and the batch's two subscribes; the next head exhausts the quota.
    const { token } = await newToken(g, 'developer', { monthly_limit: 3 });
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    await client.call('eth_subscribe', ['newHeads']);
    await withSlowSubscribes(1_000, async () => {
      client.ws.send(
        JSON.stringify([
          { jsonrpc: '2.0', id: 'a', method: 'eth_subscribe', params: ['newHeads'] },
          { jsonrpc: '2.0', id: 'b', method: 'eth_subscribe', params: ['logs', { address: `0x${'33'.repeat(20)}` }] },
        ]),
      );
      await new Promise((r) => setTimeout(r, 300));
      node.mine();
      expect(await client.whenClosed()).toMatchObject({ code: WS_CLOSE.quotaExhausted });
      const ids = new Set(client.frames.filter((f) => typeof f.result === 'string').map((f) => f.result));
      for (const f of client.frames) if (Array.isArray(f)) for (const m of f as Array<Record<string, unknown>>) ids.add(m.result);
      const unknown = client.frames
        .filter((f) => f.method === 'eth_subscription')
        .map((f) => (f.params as { subscription: unknown }).subscription)
        .filter((id) => !ids.has(id));
      expect(unknown).toEqual([]);
    });
    await until(() => sockets()?.connections === 0);
  });

  it('closes with 4029 when the monthly quota runs out during a subscription, after an error notification on each subscription', async () => {
    // Developer allows a token's own limit: 4 calls, two of them the subscribes, one head to each subscription.
    const { token } = await newToken(g, 'developer', { monthly_limit: 4 });
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const bystander = await WsClient.open(`${g.wsBase}/local/${(await newToken(g, 'developer')).token}`);
    const ids = [(await client.call('eth_subscribe', ['newHeads'])).result, (await client.call('eth_subscribe', ['newHeads'])).result];
    const other = (await bystander.call('eth_subscribe', ['newHeads'])).result;
    node.mine();
    await until(() => ids.every((id) => client.notifications(id).length === 1));
    node.mine();
    expect(await client.whenClosed()).toMatchObject({ code: WS_CLOSE.quotaExhausted });
    for (const id of ids) {
      const last = client.notifications(id).at(-1);
      expect(last?.error).toMatchObject({ code: -32005 });
      expect(client.notifications(id).filter((n) => n.result !== undefined)).toHaveLength(1);
    }
    await until(() => bystander.notifications(other).length === 2);
    expect(bystander.closed).toBeNull();
    bystander.close();
    await until(() => sockets()?.connections === 0);
  });

  it('refuses subscriptions beyond 10,000 on one connection (an unlimited plan), leaving the socket and other clients working', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    const other = await WsClient.open(`${g.wsBase}/local/${token}`);
    const otherId = (await other.call('eth_subscribe', ['newHeads'])).result;
    // All sent at once: the ceiling holds even with every call in flight together.
    const sent = Array.from({ length: 10_050 }, () => client.send('eth_subscribe', ['newHeads']));
    await until(() => client.frames.length >= sent.length, 60_000);
    const answers = sent.map((id) => client.frames.find((f) => f.id === id) as Record<string, unknown>);
    expect(answers.filter((a) => typeof a.result === 'string')).toHaveLength(10_000);
    const refused = answers.filter((a) => a.error !== undefined);
    expect(refused).toHaveLength(50);
    expect(refused[0]?.error).toMatchObject({ code: -32005, message: expect.stringContaining('10000') });
    expect(sockets()?.subscriptions).toBe(10_001);
    expect(await client.call('eth_chainId')).toMatchObject({ result: '0x539' });
    expect(client.closed).toBeNull();
    // A block now sends this client 10,000 notifications (~6 MB) at once, within its send bound
    // (1 MiB + 4 KiB a subscription: ws-subscription-burst checks it stays open). The other
    // client is served either way.
    node.mine();
    await until(() => other.notifications(otherId).length === 1);
    expect(other.closed).toBeNull();
    client.close();
    other.close();
    await until(() => sockets()?.connections === 0, 20_000);
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
  }, 90_000);

  it('closes a socket announcing a 100 MB frame with 1009 as soon as the frame header arrives, and cuts off one that does not answer the close', async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/local/${token}`);
    // A masked text frame's header claiming 100 MB, then only 64 KB of it: the server must not wait for (or buffer) the rest.
    const length = 100 * 1024 * 1024;
    const header = Buffer.alloc(14);
    header[0] = 0x81;
    header[1] = 0x80 | 127;
    header.writeBigUInt64BE(BigInt(length), 2);
    header.writeUInt32BE(0x01020304, 10);
    const raw = (client.ws as unknown as { _socket: { write(b: Buffer): void; pause(): void; resume(): void } })._socket;
    raw.write(header);
    raw.write(Buffer.alloc(64 * 1024, 0x20));
    // The client does not read the close frame, so never answers it: the gateway cuts it off (ws alone would wait 30 s).
    raw.pause();
    await until(() => sockets()?.connections === 0);
    raw.resume();
    expect(await client.whenClosed()).toMatchObject({ code: WS_CLOSE.messageTooBig });
  });
});

describe('a node that does not answer the subscribe', () => {
  let g: Gateway;
  beforeAll(async () => {
    // The chain's node timeout, 400 ms: a subscribe answer waits that long for the node at most.
    const chains = join(mkdtempSync(join(tmpdir(), 'ws-upstream-chains-')), 'chains.json');
    writeFileSync(
      chains,
      JSON.stringify({
        chains: [{ id: 'slow', name: 'slow', protocol: 'jsonrpc', timeoutMs: 400, upstreams: [{ url: node.httpUrl, ws: node.wsUrl, label: 'slow' }] }],
      }),
    );
    const t = await startTestApp({ env: { CHAINS_CONFIG: chains, PLANS_CONFIG: plansFile } });
    g = { t, wsBase: (await listen(t)).wsBase };
  });
  afterAll(async () => {
    await g?.t.close();
  });
  const sockets = () => g.t.runtime.telemetry.webSockets();

  it("is answered after the chain's node timeout, and served once the node answers one", async () => {
    const { token } = await newToken(g, 'unlimited');
    const client = await WsClient.open(`${g.wsBase}/slow/${token}`);
    let id: unknown;
    await withSlowSubscribes(2_000, async () => {
      const started = performance.now();
      id = (await client.call('eth_subscribe', ['newHeads'])).result;
      expect(id).toEqual(expect.stringMatching(/^0x[0-9a-f]{32}$/));
      // Not held for the node: answered at its timeout (the upstream socket asks again on a new connection meanwhile).
      expect(performance.now() - started).toBeLessThan(1_500);
    });
    const subscribedBefore = node.feedSubscribeCalls;
    await until(() => node.feedSubscribeCalls > subscribedBefore);
    await new Promise((r) => setTimeout(r, 100));
    const made = node.mine();
    await until(() => client.notifications(id).some((n) => (n.result as { hash?: string } | undefined)?.hash === made.hash));
    client.close();
    await until(() => sockets()?.connections === 0);
  });
});

describe('keepalive and idle timeout', () => {
  let g: Gateway;
  beforeAll(async () => {
    g = await startGateway({ WS_PING_INTERVAL_MS: '200', WS_IDLE_TIMEOUT_MS: '600' });
  });
  afterAll(async () => {
    await g?.t.close();
  });

  it('cuts off a client that does not answer pings, and keeps one that does', async () => {
    const { token } = await newToken(g, 'unlimited');
    const silent = await WsClient.open(`${g.wsBase}/local/${token}`, { autoPong: false });
    const answering = await WsClient.open(`${g.wsBase}/local/${token}`);
    // Both hold a subscription, so only the pings decide.
    await silent.call('eth_subscribe', ['newHeads']);
    await answering.call('eth_subscribe', ['newHeads']);
    let pings = 0;
    answering.ws.on('ping', () => pings++);
    // Terminated, not closed: no close frame (1006).
    expect(await silent.whenClosed()).toMatchObject({ code: 1006 });
    await until(() => pings >= 3);
    expect(answering.closed).toBeNull();
    answering.close();
  });

  it('closes an idle socket without subscriptions with 4000; one with a subscription stays', async () => {
    const { token } = await newToken(g, 'unlimited');
    const idle = await WsClient.open(`${g.wsBase}/local/${token}`);
    const subscribed = await WsClient.open(`${g.wsBase}/local/${token}`);
    await subscribed.call('eth_subscribe', ['newHeads']);
    expect(await idle.whenClosed()).toMatchObject({ code: WS_CLOSE.idle });
    expect(subscribed.closed).toBeNull();
    expect(subscribed.ws.readyState).toBe(WebSocket.OPEN);
    subscribed.close();
  });
});
