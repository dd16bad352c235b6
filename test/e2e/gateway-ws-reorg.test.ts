import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { WsClient } from '../support/wsClient.js';

/**
 * What a node's WebSocket sends after a reorg, pushed frame by frame by the test (a scripted node:
 * geth's shapes, any sequence), and a node that answers a subscribe after the chain's timeout.
 * HTTP (head polls) goes to the fake EVM node.
 */

/** Client-feed subscriptions the scripted node holds, by its id (the head tracker's are left out). */
const held = new Map<string, { socket: WebSocket; kind: string }>();
/** Subscriptions of client feeds the scripted node made so far, by kind. */
const made = new Map<string, number>();
/** Subscribe kinds the scripted node answers this late (ms). */
const slowKinds = new Map<string, number>();
/** What the scripted node answers to eth_blockNumber and eth_getLogs (by block range) on the feeds' socket. */
const chain = {
  head: 0,
  logs: [] as Array<{ blockNumber: string; [field: string]: unknown }>,
  /** eth_getLogs is answered once this resolves. */
  getLogsHeld: Promise.resolve(),
};
let nextId = 1;
/** The ranges the feeds asked eth_getLogs for. */
const getLogsCalls: Array<{ fromBlock: string; toBlock: string }> = [];
const server = createServer();
const wss = new WebSocketServer({ server });
let httpNode: FakeWsUpstream;
let t: TestApp;
let wsBase: string;

/** Sends a notification of `kind` to every client feed's subscription of it. */
function push(kind: string, result: unknown): void {
  for (const [id, s] of held)
    if (s.kind === kind && s.socket.readyState === WebSocket.OPEN)
      s.socket.send(JSON.stringify({ jsonrpc: '2.0', method: 'eth_subscription', params: { subscription: id, result } }));
}

beforeAll(async () => {
  httpNode = await startFakeWsUpstream();
  wss.on('connection', (socket, request) => {
    const tracker = request.headers[HEAD_POLL_HEADER] !== undefined;
    socket.on('message', (data) => {
      const call = JSON.parse(data.toString()) as { id: number; method: string; params: unknown[] };
      const answer = (body: object) => socket.readyState === WebSocket.OPEN && socket.send(JSON.stringify({ jsonrpc: '2.0', id: call.id, ...body }));
      if (call.method === 'eth_subscribe') {
        const kind = String(call.params[0]);
        const id = `0x${(nextId++).toString(16)}`;
        const make = () => {
          if (socket.readyState !== WebSocket.OPEN) return;
          if (!tracker) {
            held.set(id, { socket, kind });
            made.set(kind, (made.get(kind) ?? 0) + 1);
          }
          answer({ result: id });
        };
        const delay = tracker ? 0 : (slowKinds.get(kind) ?? 0);
        if (delay > 0) setTimeout(make, delay);
        else make();
      } else if (call.method === 'eth_unsubscribe') answer({ result: held.delete(String(call.params[0])) });
      else if (call.method === 'eth_blockNumber' && !tracker) answer({ result: `0x${chain.head.toString(16)}` });
      else if (call.method === 'eth_getLogs' && !tracker) {
        getLogsCalls.push(call.params[0] as { fromBlock: string; toBlock: string });
        const { fromBlock, toBlock } = call.params[0] as { fromBlock: string; toBlock: string };
        const logs = chain.logs.filter((l) => Number(l.blockNumber) >= Number(fromBlock) && Number(l.blockNumber) <= Number(toBlock));
        void chain.getLogsHeld.then(() => answer({ result: logs }));
      } else answer({ result: null });
    });
    socket.on('close', () => {
      for (const [id, s] of held) if (s.socket === socket) held.delete(id);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const wsUrl = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const dir = mkdtempSync(join(tmpdir(), 'ws-reorg-'));
  writeFileSync(join(dir, 'plans.json'), JSON.stringify({ unlimited: { rps: 1_000_000 } }));
  // The chain's node timeout, 400 ms: a subscribe unanswered that long is given up.
  writeFileSync(
    join(dir, 'chains.json'),
    JSON.stringify({
      chains: [{ id: 'evm', name: 'evm', protocol: 'jsonrpc', timeoutMs: 400, upstreams: [{ url: httpNode.httpUrl, ws: wsUrl, label: 'scripted' }] }],
    }),
  );
  t = await startTestApp({ env: { CHAINS_CONFIG: join(dir, 'chains.json'), PLANS_CONFIG: join(dir, 'plans.json') } });
  wsBase = (await listen(t)).wsBase;
});
afterAll(async () => {
  await t?.close();
  for (const socket of wss.clients) socket.terminate();
  server.close();
  await httpNode?.close();
});

const sockets = () => t.runtime.telemetry.webSockets();
const hash = (c: string) => `0x${c.repeat(64)}`;
const feedHeld = (kind: string) => [...held.values()].filter((s) => s.kind === kind).length;
const madeOf = (kind: string) => made.get(kind) ?? 0;
/** A newHeads notification's header: hash and parent as one repeated character each. */
const head = (h: string, parent: string, n: number) => ({ number: `0x${n.toString(16)}`, hash: hash(h), parentHash: hash(parent) });

/** Cuts the gateway's feed sockets to the scripted node and waits until it has subscribed to `kind` again. */
async function dropFeedSockets(kind: string): Promise<void> {
  const before = madeOf(kind);
  for (const socket of new Set([...held.values()].map((h) => h.socket))) socket.terminate();
  await until(() => madeOf(kind) > before, 5_000);
}

describe('after a reorg', () => {
  it('a log reorged out and back in reaches the client all three times, as geth sends it; one sent twice alike once', async () => {
    const { token } = await newToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/evm/${token}`);
    const id = (await client.call('eth_subscribe', ['logs', {}])).result;
    await until(() => feedHeld('logs') === 1);
    const log = {
      address: `0x${'11'.repeat(20)}`,
      topics: [],
      data: '0x',
      blockNumber: '0x10',
      blockHash: hash('a'),
      transactionHash: hash('1'),
      transactionIndex: '0x0',
      logIndex: '0x0',
    };
    push('logs', { ...log, removed: false });
    push('logs', { ...log, removed: true });
    push('logs', { ...log, removed: false });
    push('logs', { ...log, removed: false });
    push('logs', { ...log, logIndex: '0x1', removed: false });
    await until(() => client.notifications(id).length >= 4);
    await new Promise((r) => setTimeout(r, 200));
    expect(
      client
        .notifications(id)
        .map((n) => n.result as { logIndex: string; removed: boolean })
        .map((l) => `${l.logIndex}:${l.removed}`),
    ).toEqual(['0x0:false', '0x0:true', '0x0:false', '0x1:false']);
    client.close();
    await until(() => sockets()?.connections === 0);
  });

  it('a head the chain goes back to (A, B, A at one height) reaches the client again; the same head twice in a row once', async () => {
    const { token } = await newToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/evm/${token}`);
    const id = (await client.call('eth_subscribe', ['newHeads'])).result;
    await until(() => feedHeld('newHeads') === 1);
    push('newHeads', head('a', '0', 16));
    push('newHeads', head('b', '0', 16));
    push('newHeads', head('a', '0', 16));
    push('newHeads', head('a', '0', 16));
    push('newHeads', head('c', 'a', 17));
    await until(() => client.notifications(id).length >= 4);
    await new Promise((r) => setTimeout(r, 200));
    expect(client.notifications(id).map((n) => (n.result as { hash: string }).hash.slice(2, 3))).toEqual(['a', 'b', 'a', 'c']);
    client.close();
    await until(() => sockets()?.connections === 0);
  });
});

describe('a subscribe the node answers after the chain’s timeout', () => {
  it('is cancelled on the node once it answers, when no client wants it any more', async () => {
    const { token } = await newToken(t, { plan: 'unlimited' });
    // Keeps the gateway's socket to the node open (a late answer on a socket since closed reaches no one).
    const keeper = await WsClient.open(`${wsBase}/evm/${token}`);
    await keeper.call('eth_subscribe', ['newHeads']);
    slowKinds.set('logs', 700);
    try {
      const client = await WsClient.open(`${wsBase}/evm/${token}`);
      client.send('eth_subscribe', ['logs', { address: `0x${'22'.repeat(20)}` }]);
      await new Promise((r) => setTimeout(r, 100));
      const madeBefore = madeOf('logs');
      client.close();
      await until(() => sockets()?.connections === 1);
      // The node makes it at 700 ms, after the gateway gave it up at 400 ms.
      await until(() => madeOf('logs') > madeBefore, 3_000);
      await until(() => feedHeld('logs') === 0, 3_000);
      expect(feedHeld('newHeads')).toBe(1);
    } finally {
      slowKinds.delete('logs');
      keeper.close();
    }
    await until(() => sockets()?.connections === 0);
  });
});

describe('across a reconnect of the socket to the node', () => {
  it('delivers the logs of the blocks made while it was down (eth_getLogs from the head known at the drop), once each and in order', async () => {
    const { token } = await newToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/evm/${token}`);
    const address = `0x${'33'.repeat(20)}`;
    const id = (await client.call('eth_subscribe', ['logs', { address }])).result;
    await until(() => feedHeld('logs') === 1);
    // Head tracking (over HTTP, the fake node) at block 3.
    for (let i = 0; i < 3; i++) httpNode.mine();
    const heads = t.runtime.gateway?.pools.get('evm')?.heads;
    await until(() => heads?.best === 3, 5_000);
    const log = (n: number) => ({
      address,
      topics: [],
      data: '0x',
      blockNumber: `0x${n.toString(16)}`,
      blockHash: hash(n.toString(16)),
      transactionHash: hash('f'),
      transactionIndex: '0x0',
      logIndex: '0x0',
      removed: false,
    });
    chain.logs = [log(3), log(4), log(5)];
    chain.head = 5;
    push('logs', log(3));
    await until(() => client.notifications(id).length === 1);
    // The node's socket drops; blocks 4 and 5 are made before the gateway is back on it. Block 6's log comes
    // on the new subscription while the gateway still waits for its eth_getLogs: it follows them.
    let answerGetLogs = () => {};
    chain.getLogsHeld = new Promise<void>((resolve) => {
      answerGetLogs = resolve;
    });
    const askedBefore = getLogsCalls.length;
    await dropFeedSockets('logs');
    push('logs', log(6));
    await until(() => getLogsCalls.length > askedBefore, 5_000);
    answerGetLogs();
    chain.getLogsHeld = Promise.resolve();
    await until(() => client.notifications(id).length >= 4, 5_000);
    await new Promise((r) => setTimeout(r, 200));
    expect(client.notifications(id).map((n) => Number((n.result as { blockNumber: string }).blockNumber))).toEqual([3, 4, 5, 6]);
    // From a little under the node's head at the drop (3), to its head.
    expect(getLogsCalls.at(-1)).toMatchObject({ address, fromBlock: '0x1', toBlock: '0x5' });
    client.close();
    await until(() => sockets()?.connections === 0);
  });
});

describe('heads across a reconnect', () => {
  it('a node that sends again heads it had sent (up to date, or a few blocks behind) gives each once', async () => {
    const { token } = await newToken(t, { plan: 'unlimited' });
    const client = await WsClient.open(`${wsBase}/evm/${token}`);
    const id = (await client.call('eth_subscribe', ['newHeads'])).result;
    await until(() => feedHeld('newHeads') === 1);
    push('newHeads', head('a', '9', 32));
    push('newHeads', head('b', 'a', 33));
    push('newHeads', head('c', 'b', 34));
    await until(() => client.notifications(id).length === 3);
    await dropFeedSockets('newHeads');
    // The node the gateway is back on was three blocks behind: it sends them again, then the next.
    for (const [h, parent, n] of [
      ['a', '9', 32],
      ['b', 'a', 33],
      ['c', 'b', 34],
      ['d', 'c', 35],
    ] as const)
      push('newHeads', head(h, parent, n));
    await until(() => client.notifications(id).length >= 4);
    await new Promise((r) => setTimeout(r, 200));
    expect(client.notifications(id).map((n) => (n.result as { hash: string }).hash.slice(2, 3))).toEqual(['a', 'b', 'c', 'd']);
    client.close();
    await until(() => sockets()?.connections === 0);
  });
});
