import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { HeadTracking, Upstream } from '../../src/gateway/chains.js';
import { ChainHeads } from '../../src/gateway/upstreams/heads.js';
import { type NodeStanding, UpstreamSocket } from '../../src/gateway/ws/upstreamSocket.js';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';

/**
 * The chain's upstream socket and head tracking's verdicts (src/gateway/ws/upstreamSocket.ts):
 * which node it connects to, when it leaves one, what it says, and that it keeps the verdicts
 * current while it has subscriptions. Two fake nodes over WebSocket.
 */

const opened: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const o of opened.splice(0).reverse()) await o.close();
});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const upstreamOf = (node: FakeWsUpstream, label: string): Upstream => ({
  url: new URL(node.httpUrl),
  weight: 1,
  label,
  headers: {},
  ws: new URL(node.wsUrl),
  archive: false,
});
const NEW_HEADS = { method: 'eth_subscribe', params: ['newHeads'], unsubscribeMethod: 'eth_unsubscribe' };
const numberOf = (r: unknown) => Number.parseInt((r as { number: string }).number, 16);
const TRACKING: HeadTracking = { family: 'evm', finality: 'finalized', maxLagBlocks: 5, fullNodeHistoryBlocks: 128, pollMs: 1_000 };

/** Two fake nodes 100 blocks apart (to tell whose heads arrive), and a socket over them whose verdicts the test sets. */
async function twoNodes() {
  const [a, b] = [await startFakeWsUpstream(), await startFakeWsUpstream()];
  opened.push(a, b);
  for (let i = 0; i < 100; i++) b.mine({ quiet: true });
  const nodes = [upstreamOf(a, 'a'), upstreamOf(b, 'b')];
  const standings = new Map<Upstream, NodeStanding>();
  const warnings: string[] = [];
  let touched = 0;
  const socket = new UpstreamSocket(
    nodes,
    2_000,
    { warn: (_details, message) => warnings.push(message) },
    {
      standing: (node) => standings.get(node) ?? 'good',
      headOf: () => null,
      touch: () => {
        touched++;
      },
    },
  );
  opened.push(socket);
  const heads: number[] = [];
  return {
    a,
    b,
    nodes,
    standings,
    warnings,
    touched: () => touched,
    heads,
    subscribe: () =>
      socket.subscribe(
        NEW_HEADS,
        (r) => heads.push(numberOf(r)),
        () => undefined,
      ),
  };
}

describe('the upstream socket and head tracking’s verdicts', () => {
  it('leaves a node found taking no call at its next frames, says so once, and delivers none of them', async () => {
    const { a, b, nodes, standings, warnings, heads, subscribe } = await twoNodes();
    subscribe();
    await until(() => a.liveSubscriptions() === 1);
    standings.set(nodes[0] as Upstream, 'none');
    // A burst of frames in one chunk (a logs feed, a few blocks' heads).
    for (let i = 0; i < 50; i++) a.mine();
    await until(() => a.liveSubscriptions() === 0 && b.liveSubscriptions() === 1, 5_000);
    await sleep(200);
    expect(heads).toEqual([]);
    // Before: one line per frame already received (14 here).
    expect(warnings.filter((w) => w.includes('takes no call now'))).toHaveLength(1);
    const mined = numberOf(b.mine());
    await until(() => heads.length === 1, 5_000);
    expect(heads).toEqual([mined]);
  });

  it('leaves a node found taking no call that sends nothing more, within the second', async () => {
    const { a, b, nodes, standings, heads, subscribe } = await twoNodes();
    subscribe();
    await until(() => a.liveSubscriptions() === 1);
    standings.set(nodes[0] as Upstream, 'none');
    // Before: a quiet feed stayed on it for good.
    await until(() => b.liveSubscriptions() === 1 && a.liveSubscriptions() === 0, 3_000);
    const mined = numberOf(b.mine());
    await until(() => heads.length === 1, 5_000);
    expect(heads).toEqual([mined]);
  });

  it('connects to a node at the head before a lagging one, and leaves one lagging 3 s while another is at the head', async () => {
    const { a, b, nodes, standings, subscribe } = await twoNodes();
    standings.set(nodes[0] as Upstream, 'behind');
    subscribe();
    await until(() => b.liveSubscriptions() === 1);
    expect(a.liveSubscriptions()).toBe(0);
    // Now the one it is on falls behind: left after 3 checks, not at the first.
    standings.set(nodes[0] as Upstream, 'good');
    standings.set(nodes[1] as Upstream, 'behind');
    await sleep(1_500);
    expect(b.liveSubscriptions()).toBe(1);
    await until(() => a.liveSubscriptions() === 1 && b.liveSubscriptions() === 0, 5_000);
  });

  it('takes a lagging node when no node is at the head, and none while every node takes no call; keeps the verdicts current meanwhile', async () => {
    const { a, b, nodes, standings, touched, subscribe } = await twoNodes();
    standings.set(nodes[0] as Upstream, 'none');
    standings.set(nodes[1] as Upstream, 'none');
    subscribe();
    await sleep(600);
    expect([a.connectionsAccepted, b.connectionsAccepted]).toEqual([0, 0]);
    standings.set(nodes[1] as Upstream, 'behind');
    await until(() => b.liveSubscriptions() === 1, 5_000);
    const before = touched();
    await sleep(1_200);
    expect(touched()).toBeGreaterThan(before);
  });

  it('falls back to a lagging node when the one at the head cannot be connected to, and stays there', async () => {
    const a = await startFakeWsUpstream();
    opened.push(a);
    // A port nothing listens on: the node's WebSocket endpoint is down, its HTTP polls fine.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    const lagging = upstreamOf(a, 'a');
    const atHead: Upstream = { ...lagging, label: 'b', url: new URL(`http://127.0.0.1:${port}`), ws: new URL(`ws://127.0.0.1:${port}`) };
    const standings = new Map<Upstream, NodeStanding>([
      [lagging, 'behind'],
      [atHead, 'good'],
    ]);
    const socket = new UpstreamSocket(
      [lagging, atHead],
      2_000,
      { warn: () => undefined },
      { standing: (node) => standings.get(node) ?? 'good', headOf: () => null, touch: () => undefined },
    );
    opened.push(socket);
    socket.subscribe(
      NEW_HEADS,
      () => undefined,
      () => undefined,
    );
    // Before: the one at the head asked again and again, the lagging one never.
    await until(() => a.liveSubscriptions() === 1, 5_000);
    // Not left for the one that could not be connected to.
    await sleep(3_500);
    expect([a.liveSubscriptions(), a.connectionsAccepted]).toEqual([1, 1]);
  });

  it('sees a verdict change on a chain with only WebSocket calls: its subscriptions keep the heads polled', async () => {
    const [a] = [await startFakeWsUpstream()];
    opened.push(a);
    let now = Date.now();
    let lying = true;
    const probe = async (index: number, body: string): Promise<Buffer> => {
      const method = (JSON.parse(body) as { method: string }).method;
      const head = index === 0 && lying ? 1e9 : 1_000;
      const result = method === 'eth_syncing' ? false : method === 'eth_chainId' ? '0x1' : { number: `0x${head.toString(16)}`, hash: `0xh${head}` };
      return Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result }));
    };
    const h = new ChainHeads(TRACKING, ['a', 'b'], probe, () => now);
    opened.push({ close: () => h.stop() });
    h.touch();
    for (let i = 0; i < 3; i++) await h.poll();
    expect(h.upstreams.map((u) => u.status)).toEqual(['liar', 'ok']);
    // The chain's HTTP calls stop: a minute on its polls stop, the verdicts as they were.
    now += 61_000;
    await h.poll();
    lying = false;
    const nodes = [upstreamOf(a, 'a')];
    const socket = new UpstreamSocket(
      nodes,
      2_000,
      { warn: () => undefined },
      {
        standing: (node) => (h.takesNoCall(nodes.indexOf(node)) ? 'none' : 'good'),
        headOf: () => null,
        touch: () => h.touch(),
      },
    );
    opened.push(socket);
    socket.subscribe(
      NEW_HEADS,
      () => undefined,
      () => undefined,
    );
    // Before: the liar's verdict stayed for good, and the socket never connected.
    await until(() => a.connectionsAccepted === 1, 5_000);
    expect(h.upstreams[0]?.status).not.toBe('liar');
  });
});
