import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WS_CLOSE } from '../../src/gateway/ws/gateway.js';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { listen, newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';
import { WsClient } from '../support/wsClient.js';

/**
 * A subscribe held until the node has the subscription (Session.join): nothing reaches the client
 * for an id it was not given, nothing the node sends after an answer is lost (a reconnect too),
 * and a batch's subscriptions are served after its frame. Found in review of 879fb17.
 */
let node: FakeWsUpstream;
let plansFile: string;
let t: TestApp;
let wsBase: string;

beforeAll(async () => {
  node = await startFakeWsUpstream();
  plansFile = join(mkdtempSync(join(tmpdir(), 'ws-review-plans-')), 'plans.json');
  writeFileSync(plansFile, JSON.stringify({ unlimited: { rps: 1_000_000 } }));
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.httpUrl, UPSTREAM_LOCAL_WS: node.wsUrl, PLANS_CONFIG: plansFile } });
  wsBase = (await listen(t)).wsBase;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});
const sockets = () => t.runtime.telemetry.webSockets();

describe('a subscribe held for the node', () => {
  it('quota exhausted while held: no notification for a subscription whose answer has not left', async () => {
    // 2 calls: the two subscribes; the first head then exhausts the quota.
    const { token } = await newOwnerToken(t, { plan: 'developer', fields: { monthly_limit: 2 } });
    const client = await WsClient.open(`${wsBase}/local/${token}`);
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result;
    node.subscribeAnswerDelayMs = 1_000;
    try {
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
    } finally {
      node.subscribeAnswerDelayMs = 0;
    }
    await until(() => sockets()?.connections === 0);
  });

  it('a client joining a feed while the upstream socket reconnects is answered once the node has it again, and misses no head', async () => {
    const { token } = await newOwnerToken(t, { plan: 'unlimited' });
    const first = await WsClient.open(`${wsBase}/local/${token}`);
    const second = await WsClient.open(`${wsBase}/local/${token}`);
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

  it('a batch: a member on a live feed gets its heads after the batch answer (and none is lost)', async () => {
    const { token } = await newOwnerToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/local/${token}`);
    await client.call('eth_subscribe', ['newHeads']);
    node.subscribeAnswerDelayMs = 800;
    try {
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
    } finally {
      node.subscribeAnswerDelayMs = 0;
    }
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('a batch, quota exhausted while its answer waits for a slow member: no notification for a member before the batch answer', async () => {
    // 3 calls: the first subscribe and the batch's two subscribes; the next head exhausts the quota.
    const { token } = await newOwnerToken(t, { plan: 'developer', fields: { monthly_limit: 3 } });
    const client = await WsClient.open(`${wsBase}/local/${token}`);
    await client.call('eth_subscribe', ['newHeads']);
    node.subscribeAnswerDelayMs = 1_000;
    try {
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
    } finally {
      node.subscribeAnswerDelayMs = 0;
    }
    await until(() => sockets()?.connections === 0);
  });
});
