import { id as eventTopic, WebSocketProvider } from 'ethers';
import { createPublicClient, parseAbiItem, webSocket } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Web3, WebSocketProvider as Web3WebSocketProvider } from 'web3';
import { until } from '../support/eventually.js';
import { GANACHE_ACCOUNT_0, type GanacheNode, startGanache } from '../support/ganache.js';
import { newToken as newOwnerToken, startTestApp, type TestApp } from '../support/testApp.js';

/** Real WebSocket clients (ethers, viem, web3.js) through the gateway to a real ganache. */
let node: GanacheNode;
let t: TestApp;
let wsBase: string;
let contract: string;

const PING = eventTopic('Ping()');
/** Runtime code: emits Ping() (LOG1 with the topic) on any call. Init code copies it and returns it. */
const RUNTIME = `7f${PING.slice(2)}60006000a100`;
const INIT = `0x6027600c60003960276000f3${RUNTIME}`;

async function nodeCall(method: string, params: unknown[]): Promise<unknown> {
  const res = await fetch(node.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = (await res.json()) as { result?: unknown; error?: unknown };
  if (body.error) throw new Error(JSON.stringify(body.error));
  return body.result;
}

/** Each transaction is mined in a block of its own (ganache's default). */
const ping = () => nodeCall('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, to: contract }]);
const mine = () => nodeCall('evm_mine', []);

const newToken = () => newOwnerToken(t);
/** web3.js sends a burst of calls on connecting: more than Free's 5 a second. */
const newDeveloperToken = () => newOwnerToken(t, { plan: 'developer' });

beforeAll(async () => {
  node = await startGanache();
  const hash = await nodeCall('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, data: INIT, gas: '0x100000' }]);
  contract = ((await nodeCall('eth_getTransactionReceipt', [hash])) as { contractAddress: string }).contractAddress;
  t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, UPSTREAM_LOCAL_WS: node.url.replace('http', 'ws') } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  wsBase = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

describe('ethers WebSocketProvider', () => {
  it('gets the block number, follows new blocks and a contract event filter', async () => {
    const { token } = await newToken();
    const provider = new WebSocketProvider(`${wsBase}/local/${token}`);
    try {
      const start = await provider.getBlockNumber();
      const blocks: number[] = [];
      const pings: string[] = [];
      await provider.on('block', (n: number) => blocks.push(n));
      await provider.on({ address: contract, topics: [PING] }, (log: { transactionHash: string }) => pings.push(log.transactionHash));
      await until(() => t.runtime.telemetry.webSockets()?.subscriptions === 2);
      await mine();
      const tx = await ping();
      await until(() => blocks.includes(start + 2) && pings.length === 1);
      expect(blocks).toEqual([start + 1, start + 2]);
      expect(pings).toEqual([tx]);
    } finally {
      await provider.destroy();
    }
  });
});

describe('viem webSocket transport', () => {
  it('watches block numbers and a contract event', async () => {
    const { token } = await newToken();
    const client = createPublicClient({ transport: webSocket(`${wsBase}/local/${token}`) });
    const numbers: bigint[] = [];
    const events: string[] = [];
    const stopBlocks = client.watchBlockNumber({ onBlockNumber: (n) => numbers.push(n) });
    const stopEvents = client.watchContractEvent({
      address: contract as `0x${string}`,
      abi: [parseAbiItem('event Ping()')],
      eventName: 'Ping',
      onLogs: (logs) => events.push(...logs.map((l) => l.transactionHash ?? '')),
    });
    try {
      await until(() => (t.runtime.telemetry.webSockets()?.subscriptions ?? 0) >= 2);
      const tx = await ping();
      await mine();
      await until(() => numbers.length >= 2 && events.length === 1);
      expect(numbers[1]).toBe((numbers[0] as bigint) + 1n);
      expect(events).toEqual([tx]);
    } finally {
      stopBlocks();
      stopEvents();
      await (await client.transport.getRpcClient()).close();
    }
  });
});

describe('web3.js WebSocketProvider', () => {
  it('gets the block number and follows new block headers', async () => {
    const { token } = await newDeveloperToken();
    const web3 = new Web3(new Web3WebSocketProvider(`${wsBase}/local/${token}`));
    try {
      const start = await web3.eth.getBlockNumber();
      const headers: bigint[] = [];
      const subscription = await web3.eth.subscribe('newBlockHeaders');
      subscription.on('data', (header) => {
        headers.push(BigInt(header.number ?? -1));
      });
      await until(() => (t.runtime.telemetry.webSockets()?.subscriptions ?? 0) >= 1);
      await mine();
      await mine();
      await until(() => headers.length >= 2);
      expect(headers).toEqual([BigInt(start) + 1n, BigInt(start) + 2n]);
      expect(await web3.eth.getBlockNumber()).toBe(BigInt(start) + 2n);
      await subscription.unsubscribe();
      await until(() => t.runtime.telemetry.webSockets()?.subscriptions === 0);
    } finally {
      web3.currentProvider?.disconnect();
    }
  });
});

describe('revocation', () => {
  it("ends a revoked token's subscription within a second", async () => {
    const o = await newToken();
    const provider = new WebSocketProvider(`${wsBase}/local/${o.token}`);
    const socket = provider.websocket as unknown as { addEventListener(type: 'close', listener: (e: { code: number }) => void): void };
    let closed: { code: number; at: number } | null = null;
    socket.addEventListener('close', (e) => {
      closed = { code: e.code, at: Date.now() };
    });
    await provider.on('block', () => undefined);
    await until(() => (t.runtime.telemetry.webSockets()?.subscriptions ?? 0) >= 1);
    const revoked = await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth });
    const at = Date.now();
    expect(revoked.statusCode).toBeLessThan(300);
    await until(() => closed !== null, 3000);
    const c = closed as unknown as { code: number; at: number };
    expect(c.code).toBe(4001);
    expect(c.at - at).toBeLessThan(1000);
    await provider.destroy().catch(() => undefined);
    await until(() => t.runtime.telemetry.webSockets()?.connections === 0);
  });

  it("ends a revoked token's web3.js newBlockHeaders subscription within a second", async () => {
    const o = await newDeveloperToken();
    // No reconnect: the point is the close the gateway sends (a reconnect would be refused with 401 anyway).
    const provider = new Web3WebSocketProvider(`${wsBase}/local/${o.token}`, {}, { autoReconnect: false });
    const web3 = new Web3(provider);
    let closed: { code: number; at: number } | null = null;
    provider.on('disconnect', (error) => {
      closed = { code: error.code, at: Date.now() };
    });
    const headers: unknown[] = [];
    const subscription = await web3.eth.subscribe('newBlockHeaders');
    subscription.on('data', (header) => {
      headers.push(header);
    });
    await mine();
    await until(() => headers.length === 1);
    const revoked = await t.app.inject({ method: 'DELETE', url: `/api/v1/tokens/${o.tokenId}`, headers: o.auth });
    const at = Date.now();
    expect(revoked.statusCode).toBeLessThan(300);
    await until(() => closed !== null, 3000);
    const c = closed as unknown as { code: number; at: number };
    expect(c.code).toBe(4001);
    expect(c.at - at).toBeLessThan(1000);
    await until(() => t.runtime.telemetry.webSockets()?.connections === 0);
    await mine();
    await new Promise((r) => setTimeout(r, 200));
    expect(headers).toHaveLength(1);
  });
});
