import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Upstream } from '../../src/gateway/chains.js';
import { UpstreamSocket } from '../../src/gateway/ws/upstreamSocket.js';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';

/**
 * A node that answers a subscribe after the chain's timeout. The late answer was dropped and
 * nothing asked again while the socket stayed up: the node pushed heads for a subscription the
 * gateway no longer knew, and every client of that feed got nothing until some unrelated drop.
 */
let node: FakeWsUpstream;
beforeAll(async () => {
  node = await startFakeWsUpstream();
});
afterAll(async () => {
  await node?.close();
});

it('asks again on a new connection when the node answers a subscribe after the timeout, and delivers its heads', async () => {
  const upstream: Upstream = { url: new URL(node.httpUrl), weight: 1, label: 'slow', headers: {}, ws: new URL(node.wsUrl), archive: false };
  const warnings: string[] = [];
  const socket = new UpstreamSocket([upstream], 200, { warn: (_details, message) => warnings.push(message) });
  const heads: unknown[] = [];
  const refusals: string[] = [];
  node.subscribeAnswerDelayMs = 600;
  const end = socket.subscribe(
    { method: 'eth_subscribe', params: ['newHeads'], unsubscribeMethod: 'eth_unsubscribe' },
    (result) => heads.push(result),
    (message) => refusals.push(message),
  );
  try {
    await until(() => warnings.some((w) => w.includes('eth_subscribe failed')));
    node.subscribeAnswerDelayMs = 0;
    // Asked again, on a new connection: the old one is gone before the node's late answer (a
    // subscription the fake makes only as it answers), so the node handled one subscribe.
    await until(() => node.subscribeCalls === 1, 5_000);
    expect(node.connectionsAccepted).toBe(2);
    // The second answer is in once a head mined now reaches the subscription.
    await until(() => {
      if (heads.length === 0) node.mine();
      return heads.length > 0;
    }, 5_000);
    expect(refusals).toEqual([]);
  } finally {
    end();
    socket.close();
  }
});
