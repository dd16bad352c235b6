import { createPublicClient, webSocket } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { usedQuota } from '../../src/domain/usage.js';
import { eventually } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

/**
 * Heartbeat calls over a WebSocket: viem's transport asks `net_version` every 30 s to keep its
 * socket open. Charged as any call, an idle socket took ~86,400 calls a month (86 % of Free's
 * quota). One per heartbeat interval (80 % of WS_PING_INTERVAL_MS: 800 ms here) is now answered
 * from the node's answer the socket already had, metered and uncharged; more often, it is an
 * ordinary call.
 */
let node: FakeWsUpstream;
let t: TestApp;
let wsBase: string;
beforeAll(async () => {
  node = await startFakeWsUpstream();
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.httpUrl, UPSTREAM_LOCAL_WS: node.wsUrl, WS_PING_INTERVAL_MS: '1000' } });
  wsBase = (await listen(t)).wsBase;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('heartbeat calls on a WebSocket', () => {
  it('answers one per interval from the node’s answer, uncharged and metered; the first and any more often are ordinary calls', async () => {
    const o = await newToken(t, { plan: 'free' });
    const client = await WsClient.open(`${wsBase}/local/${o.token}`);
    node.httpMethods.length = 0;
    const heartbeat = async (id: number | string) => {
      client.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method: 'net_version', params: [] }));
      return client.answer(id);
    };
    const answers = [];
    // The first: the node's answer (the socket has none yet). The second at once: from it, free. The third at once: within the interval, charged.
    for (const id of [1, 2, 3]) answers.push(await heartbeat(id));
    await sleep(900);
    answers.push(await heartbeat('four'));
    // The id is the caller's own, as written; the result the node's.
    expect(answers.map((a) => [a.id, a.result])).toEqual([
      [1, '1337'],
      [2, '1337'],
      [3, '1337'],
      ['four', '1337'],
    ]);
    expect(node.httpMethods.filter((m) => m === 'net_version').length).toBeLessThanOrEqual(2);

    const calls = await eventually(
      async () => (await recordedCalls(t.runtime.store, o.accountId)).filter((c) => c.method === 'net_version'),
      (recorded) => recorded.length >= 4,
    );
    const byTime = [...calls].sort((a, b) => a.at.localeCompare(b.at));
    expect(byTime.map((c) => [c.status, usedQuota(c)])).toEqual([
      [200, true],
      [200, false],
      [200, true],
      [200, false],
    ]);
    client.close();
  });

  it('charges none but the first of viem’s keep-alives when they come once an interval', async () => {
    const o = await newToken(t, { plan: 'free' });
    const viem = createPublicClient({ transport: webSocket(`${wsBase}/local/${o.token}`, { keepAlive: { interval: 850 }, reconnect: false }) });
    // Opens the socket; the keep-alives follow every 850 ms.
    expect(await viem.getChainId()).toBe(1337);
    await sleep(3_000);
    await (await viem.transport.getRpcClient()).close();
    const calls = await eventually(
      async () => (await recordedCalls(t.runtime.store, o.accountId)).filter((c) => c.method === 'net_version'),
      (recorded) => recorded.length >= 3,
    );
    // The first reaches the node and is charged; the ones after it are answered free.
    expect(calls.length).toBeGreaterThanOrEqual(3);
    expect(calls.filter((c) => usedQuota(c))).toHaveLength(1);
    expect(calls.every((c) => c.status === 200)).toBe(true);
  });
});
