import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { WS_CLOSE } from '../../src/gateway/ws/gateway.js';
import { Session } from '../../src/gateway/ws/session.js';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { listen, newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { WsClient } from '../support/wsClient.js';

/**
 * One block's notifications to a client with many subscriptions on one socket leave at once: with
 * 10,000 newHeads subscriptions that is ~11 MB, over the 1 MiB send bound before the client has had
 * a chance to read any of it. Real gateway, tokens and metering, a fake node pushing newHeads.
 */
let node: FakeWsUpstream;
let t: TestApp;
let wsBase: string;

beforeAll(async () => {
  node = await startFakeWsUpstream();
  const plansFile = join(mkdtempSync(join(tmpdir(), 'ws-burst-plans-')), 'plans.json');
  // Unlimited's rate high enough for 10,000 subscribe calls and a block's 10,000 notifications at once.
  writeFileSync(plansFile, JSON.stringify({ unlimited: { rps: 1_000_000 } }));
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.httpUrl, UPSTREAM_LOCAL_WS: node.wsUrl, PLANS_CONFIG: plansFile } });
  wsBase = (await listen(t)).wsBase;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});
afterEach(() => {
  vi.restoreAllMocks();
});

const sockets = () => t.runtime.telemetry.webSockets();

/** Notifications received per subscription id, counted as frames arrive (10,000 ids: no scan of every frame). */
function countNotifications(client: WsClient): Map<string, number> {
  const counts = new Map<string, number>();
  client.ws.on('message', (data) => {
    const frame = JSON.parse(data.toString()) as { method?: string; params?: { subscription?: string; result?: unknown } };
    if (frame.method !== 'eth_subscription' || frame.params?.result === undefined) return;
    const id = String(frame.params.subscription);
    counts.set(id, (counts.get(id) ?? 0) + 1);
  });
  return counts;
}

/** Opens `n` newHeads subscriptions in batches of 100 (the batch limit): their ids, once the gateway's own subscription at the node is open. */
async function subscribeMany(client: WsClient, n: number): Promise<string[]> {
  const subscribedBefore = node.subscribeCalls;
  const answers = new Map<number, Record<string, unknown>>();
  client.ws.on('message', (data) => {
    const frame = JSON.parse(data.toString()) as unknown;
    if (Array.isArray(frame)) for (const a of frame as Array<Record<string, unknown>>) answers.set(a.id as number, a);
  });
  for (let from = 0; from < n; from += 100) {
    const batch = Array.from({ length: Math.min(100, n - from) }, (_, i) => ({ jsonrpc: '2.0', id: from + i, method: 'eth_subscribe', params: ['newHeads'] }));
    client.ws.send(JSON.stringify(batch));
  }
  await until(() => answers.size === n || client.closed !== null, 30_000);
  const ids = [...answers.values()].map((a) => a.result);
  expect(ids.filter((id) => typeof id === 'string')).toHaveLength(n);
  // The clients' subscriptions are answered at once; the shared one at the node may still be on its way (none was open: the tests end theirs).
  await until(() => node.subscribeCalls > subscribedBefore);
  return ids as string[];
}

describe('a socket with many subscriptions', () => {
  it('10,000 subscriptions on one socket each get every block, the socket stays open; the 10,001st is refused alone', async () => {
    const { token } = await newOwnerToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/local/${token}`);
    const bystander = await WsClient.open(`${wsBase}/local/${token}`);
    const closes: number[] = [];
    const close = Session.prototype.close;
    vi.spyOn(Session.prototype, 'close').mockImplementation(function (this: Session, code: number, reason: string) {
      closes.push(code);
      close.call(this, code, reason);
    });
    const counts = countNotifications(client);
    const ids = await subscribeMany(client, 10_000);
    const over = await client.call('eth_subscribe', ['newHeads']);
    expect(over.error).toMatchObject({ code: -32005, message: expect.stringContaining('at most 10000') });
    const otherId = (await bystander.call('eth_subscribe', ['newHeads'])).result;
    expect(sockets()?.subscriptions).toBe(10_001);

    for (let block = 1; block <= 2; block++) {
      node.mine();
      await until(() => (counts.size === 10_000 && [...counts.values()].every((c) => c >= block)) || client.closed !== null, 20_000);
      expect({ closed: client.closed, gatewayCloses: closes }).toEqual({ closed: null, gatewayCloses: [] });
      expect(ids.every((id) => counts.get(id) === block)).toBe(true);
    }
    await until(() => bystander.notifications(otherId).length === 2);
    expect(await client.call('eth_chainId')).toMatchObject({ result: '0x539' });
    client.close();
    bystander.close();
    await until(() => sockets()?.connections === 0, 20_000);
    expect(sockets()).toMatchObject({ subscriptions: 0, upstreamSubscriptions: 0 });
  }, 40_000);

  it('a client that unsubscribes everything while a block burst is still unread keeps its socket', async () => {
    const { token } = await newOwnerToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/local/${token}`);
    const closes: number[] = [];
    const close = Session.prototype.close;
    vi.spyOn(Session.prototype, 'close').mockImplementation(function (this: Session, code: number, reason: string) {
      closes.push(code);
      close.call(this, code, reason);
    });
    // The block's notifications handed to the socket: the burst is queued before the unsubscribe calls go.
    let queued = 0;
    const sessionSend = Session.prototype as unknown as { send(this: Session, frame: unknown): void };
    const send = sessionSend.send;
    vi.spyOn(sessionSend, 'send').mockImplementation(function (this: Session, frame: unknown) {
      if (this.subscriptions.size === 10_000 && String(frame).includes('"eth_subscription"')) queued++;
      send.call(this, frame);
    });
    const counts = countNotifications(client);
    const ids = await subscribeMany(client, 10_000);
    const raw = (client.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    raw.pause();
    node.mine();
    await until(() => queued === 10_000, 20_000);
    const unsubscribed = new Map<number, unknown>();
    client.ws.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as unknown;
      if (Array.isArray(frame)) for (const a of frame as Array<Record<string, unknown>>) unsubscribed.set(a.id as number, a.result);
    });
    for (let from = 0; from < ids.length; from += 100) {
      const batch = ids.slice(from, from + 100).map((id, i) => ({ jsonrpc: '2.0', id: 100_000 + from + i, method: 'eth_unsubscribe', params: [id] }));
      client.ws.send(JSON.stringify(batch));
    }
    await until(() => sockets()?.byToken.find((b) => b.subscriptions > 0 && b.connections === 1) === undefined || closes.length > 0, 20_000);
    raw.resume();
    await until(() => unsubscribed.size === 10_000 || client.closed !== null, 20_000);
    expect({ closed: client.closed, gatewayCloses: closes }).toEqual({ closed: null, gatewayCloses: [] });
    expect([...unsubscribed.values()].every((r) => r === true)).toBe(true);
    expect(ids.every((id) => counts.get(id) === 1)).toBe(true);
    expect(await client.call('eth_chainId')).toMatchObject({ result: '0x539' });
    client.close();
    await until(() => sockets()?.connections === 0, 20_000);
  }, 40_000);

  it('a client that stops reading is closed (1008) once its backlog passes its bound; a reader on the same feed is not', async () => {
    const { token, tokenId } = await newOwnerToken(t, { plan: 'unlimited' });
    const stalled = await WsClient.open(`${wsBase}/local/${token}`);
    const reader = await WsClient.open(`${wsBase}/local/${token}`);
    const closes: Array<{ code: number; reason: string; buffered: number; subscriptions: number }> = [];
    const close = Session.prototype.close;
    vi.spyOn(Session.prototype, 'close').mockImplementation(function (this: Session, code: number, reason: string) {
      closes.push({ code, reason, buffered: this.socket.bufferedAmount, subscriptions: this.subscriptions.size });
      close.call(this, code, reason);
    });
    await subscribeMany(stalled, 100);
    const readerId = (await reader.call('eth_subscribe', ['newHeads'])).result;
    // Its socket stops reading: the kernel's buffers fill, then the gateway's.
    const raw = (stalled.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    raw.pause();
    let mined = 0;
    while (closes.length === 0 && mined < 2000) {
      node.mine();
      mined++;
      await until(() => reader.notifications(readerId).length === mined || closes.length > 0);
    }
    expect(closes).toHaveLength(1);
    const [closed] = closes;
    expect(closed).toMatchObject({ code: WS_CLOSE.policyViolation, reason: expect.stringContaining('the client does not read') });
    // What the gateway held for it: the bound, 4 KiB for each of its 100 subscriptions, and the frame that found it over.
    expect(closed?.buffered).toBeLessThanOrEqual(1024 * 1024 + 100 * 4096 + 2048);
    raw.resume();
    expect((await stalled.whenClosed()).code).toBe(WS_CLOSE.policyViolation);
    node.mine();
    await until(() => reader.notifications(readerId).length === mined + 1);
    expect(reader.closed).toBeNull();
    reader.close();
    await until(() => !sockets()?.byToken.some((s) => s.tokenId === tokenId), 10_000);
  }, 40_000);
});
