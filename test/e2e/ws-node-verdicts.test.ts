import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '../support/eventually.js';
import { type FakeWsUpstream, startFakeWsUpstream } from '../support/fakeWsUpstream.js';
import { evmServiceConfig } from '../support/serviceOnEvmNodes.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { WsClient } from '../support/wsClient.js';

/**
 * The chain's WebSocket feeds and head tracking's verdicts: a node that takes no call (here, one
 * on another network than the chain's `chainId`) carries no client subscription, whether it was
 * found so before the first subscribe or while a feed was on it. The whole service in front of
 * two fake nodes over HTTP and WebSocket.
 */

const opened: Array<{ close(): Promise<void> }> = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const o of opened.splice(0).reverse()) await o.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function serviceOn(nodes: FakeWsUpstream[]) {
  const dir = mkdtempSync(join(tmpdir(), 'gw-ws-verdicts-'));
  dirs.push(dir);
  const config = evmServiceConfig(dir, { chainId: 1337, headPollMs: 100, upstreams: nodes.map((n) => ({ url: n.httpUrl, ws: n.wsUrl })) });
  const t: TestApp = await startTestApp({ env: config });
  opened.push(t);
  const { url, wsBase } = await listen(t);
  const { token } = await newToken(t, { plan: 'unlimited' });
  const heads = t.runtime.gateway!.pools.get('evm')!.heads!;
  return { t, http: `${url}/evm/${token}`, ws: `${wsBase}/evm/${token}`, heads };
}

const blockNumber = (http: string) =>
  fetch(http, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' });
const headNumbers = (client: WsClient, id: unknown) => client.notifications(id).map((n) => Number.parseInt((n.result as { number: string }).number, 16));

describe('WebSocket feeds and nodes that take no call', () => {
  it('subscribes on the node of the chain’s network, not the first one in turn that is on another', async () => {
    const [other, good] = [await startFakeWsUpstream(), await startFakeWsUpstream()];
    opened.push(other, good);
    other.chainId = '0x38';
    const { http, ws, heads } = await serviceOn([other, good]);
    await blockNumber(http);
    await until(() => heads.upstreams[0]?.status === 'wrong_network' && heads.upstreams[1]?.status === 'ok', 5_000);
    // Each node holds the head tracker's own subscription.
    await until(() => other.liveSubscriptions() === 1 && good.liveSubscriptions() === 1, 5_000);

    const client = await WsClient.open(ws);
    opened.push({ close: async () => client.close() });
    const id = (await client.call('eth_subscribe', ['newHeads'])).result;
    await until(() => good.liveSubscriptions() === 2, 5_000);
    // Before: the first node in turn, on BNB Smart Chain, carried the client's heads.
    expect(other.liveSubscriptions()).toBe(1);
    const mined = Number.parseInt(good.mine().number, 16);
    await until(() => headNumbers(client, id).length === 1, 5_000);
    expect(headNumbers(client, id)).toEqual([mined]);
  });

  it('leaves a node found on another network while a feed is on it: nothing of it reaches the client, the feed goes on on the other', async () => {
    const [first, second] = [await startFakeWsUpstream(), await startFakeWsUpstream()];
    opened.push(first, second);
    // Apart by height, to tell whose heads the client gets.
    for (let i = 0; i < 10; i++) first.mine({ quiet: true });
    const { http, ws, heads } = await serviceOn([first, second]);
    await blockNumber(http);
    await until(() => heads.upstreams.every((u) => u.status !== 'unknown'), 5_000);
    const client = await WsClient.open(ws);
    opened.push({ close: async () => client.close() });
    const id = (await client.call('eth_subscribe', ['newHeads'])).result;
    // The feed is on the first node in turn.
    await until(() => first.liveSubscriptions() === 2, 5_000);

    // Its URL now reaches another network's node, found at the poll after a failed one.
    first.chainId = '0x38';
    first.httpDown = true;
    await until(() => heads.upstreams[0]?.status === 'unknown', 5_000);
    first.httpDown = false;
    await blockNumber(http);
    await until(() => heads.upstreams[0]?.status === 'wrong_network', 5_000);

    const fromFirst = Number.parseInt(first.mine().number, 16);
    await until(() => second.liveSubscriptions() === 2, 5_000);
    const fromSecond = Number.parseInt(second.mine().number, 16);
    await until(() => headNumbers(client, id).includes(fromSecond), 5_000);
    // Before: the first node's head 11 was delivered, and the feed stayed on it.
    expect(headNumbers(client, id)).not.toContain(fromFirst);
    expect(headNumbers(client, id).at(-1)).toBe(fromSecond);
  });
});
