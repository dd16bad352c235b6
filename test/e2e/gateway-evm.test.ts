import { FetchRequest, JsonRpcProvider } from 'ethers';
import { createPublicClient, createWalletClient, http, type Transport } from 'viem';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { UsageRecord } from '../../src/domain/usage.js';
import { GANACHE_ACCOUNT_0, GANACHE_ACCOUNT_1, GANACHE_CHAIN, type GanacheNode, startGanache } from '../support/ganache.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/** Real clients (ethers v6, viem) against a real node (ganache) through the gateway. */

// Init code that deploys a contract whose code returns 42 for any call.
const RETURNS_42_INIT = '0x600a600c600039600a6000f3602a60005260206000f3';

let node: GanacheNode;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();

beforeAll(async () => {
  node = await startGanache();
  gateway = await startGateway({ chains: [chainEntry('local', [node.url])], gatekeeper });
});
afterAll(async () => {
  await gateway?.close();
  await node?.close();
});
beforeEach(() => {
  gatekeeper.grantOnly(null);
  gateway.usage.length = 0;
});

type Auth = 'path' | 'bearer';
const endpoint = (auth: Auth): string => (auth === 'path' ? `${gateway.url}/local/${gatekeeper.token}` : `${gateway.url}/local`);
const headers = (auth: Auth): Record<string, string> => (auth === 'bearer' ? { authorization: `Bearer ${gatekeeper.token}` } : {});

function ethersProvider(auth: Auth): JsonRpcProvider {
  const request = new FetchRequest(endpoint(auth));
  for (const [k, v] of Object.entries(headers(auth))) request.setHeader(k, v);
  request.retryFunc = async () => false; // surface a 429 at once instead of backing off
  return new JsonRpcProvider(request, 1337, { staticNetwork: true, cacheTimeout: -1 });
}

function viemTransport(auth: Auth, batch: boolean): Transport {
  return http(endpoint(auth), { batch, retryCount: 0, fetchOptions: { headers: headers(auth) } });
}

describe.each(['path', 'bearer'] as const)('ethers v6 with the token in the %s', (auth) => {
  it('reads blocks, balances and calls, and sends a transaction', async () => {
    const provider = ethersProvider(auth);
    const startBlock = await provider.getBlockNumber();
    expect(startBlock).toBeGreaterThanOrEqual(0);
    expect(await provider.getBalance(GANACHE_ACCOUNT_0)).toBeGreaterThan(0n);

    const signer = await provider.getSigner(GANACHE_ACCOUNT_0);
    const deploy = await signer.sendTransaction({ data: RETURNS_42_INIT });
    const deployReceipt = await provider.getTransactionReceipt(deploy.hash);
    expect(deployReceipt?.status).toBe(1);
    const contract = deployReceipt?.contractAddress as string;
    expect(BigInt(await provider.call({ to: contract, data: '0x' }))).toBe(42n);

    const transfer = await signer.sendTransaction({ to: GANACHE_ACCOUNT_1, value: 12345n });
    const receipt = await provider.getTransactionReceipt(transfer.hash);
    expect(receipt?.status).toBe(1);
    expect(await provider.getBlockNumber()).toBeGreaterThan(startBlock);
    provider.destroy();

    const methods = gateway.usage.map((r) => r.method);
    expect(methods).toEqual(expect.arrayContaining(['eth_blockNumber', 'eth_getBalance', 'eth_sendTransaction', 'eth_getTransactionReceipt', 'eth_call']));
    for (const r of gateway.usage) {
      // A call answered from the response cache (the head had not moved) asked no upstream.
      const upstream = r.cache === 'hit' ? null : 'local-1';
      expect(UsageRecord.parse(r)).toMatchObject({ chain: 'local', tokenId: 'tok-test', accountId: 'acc-test', status: 200, upstream });
    }
  });

  it('surfaces a 429 from the gatekeeper as an error', async () => {
    const provider = ethersProvider(auth);
    gatekeeper.grantOnly(0);
    await expect(provider.getBlockNumber()).rejects.toThrow();
    provider.destroy();
    expect(gateway.usage.at(-1)).toMatchObject({ status: 429, rpcErrorCode: -32005 });
  });
});

describe.each([
  ['path', false],
  ['path', true],
  ['bearer', false],
  ['bearer', true],
] as const)('viem with the token in the %s, batch %s', (auth, batch) => {
  it('reads blocks, balances and calls, and sends a transaction', async () => {
    const transport = viemTransport(auth, batch);
    const client = createPublicClient({ chain: GANACHE_CHAIN, transport });
    const wallet = createWalletClient({ chain: GANACHE_CHAIN, transport, account: GANACHE_ACCOUNT_0 });

    const [blockNumber, balance] = await Promise.all([client.getBlockNumber({ cacheTime: 0 }), client.getBalance({ address: GANACHE_ACCOUNT_0 })]);
    expect(blockNumber).toBeGreaterThanOrEqual(0n);
    expect(balance).toBeGreaterThan(0n);

    const deployHash = await wallet.deployContract({ abi: [], bytecode: RETURNS_42_INIT });
    const deployReceipt = await client.getTransactionReceipt({ hash: deployHash });
    expect(deployReceipt.status).toBe('success');
    const { data } = await client.call({ to: deployReceipt.contractAddress as `0x${string}`, data: '0x' });
    expect(BigInt(data as string)).toBe(42n);

    const hash = await wallet.sendTransaction({ to: GANACHE_ACCOUNT_1, value: 1n });
    const receipt = await client.getTransactionReceipt({ hash });
    expect(receipt.status).toBe('success');
    expect(await client.getBlockNumber({ cacheTime: 0 })).toBeGreaterThan(blockNumber);

    const methods = gateway.usage.map((r) => r.method);
    expect(methods).toEqual(expect.arrayContaining(['eth_blockNumber', 'eth_getBalance', 'eth_sendTransaction', 'eth_getTransactionReceipt', 'eth_call']));
    if (batch) expect(gateway.usage.some((r) => /:\d+$/.test(r.requestId))).toBe(true);
  });

  it('surfaces a 429 from the gatekeeper as an error', async () => {
    const client = createPublicClient({ chain: GANACHE_CHAIN, transport: viemTransport(auth, batch) });
    gatekeeper.grantOnly(0);
    await expect(client.getBlockNumber({ cacheTime: 0 })).rejects.toThrow(/429|limit/i);
  });
});
