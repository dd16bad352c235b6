import { readFileSync } from 'node:fs';
import { FetchRequest, JsonRpcProvider } from 'ethers';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { defaultChainsPath } from '../../src/gateway/chains.js';
import { RpcCode } from '../../src/gateway/errors.js';
import { eventually } from '../support/eventually.js';
import { startJavaTronFake, TRON_NODE } from '../support/fakeNonEvmUpstreams.js';
import type { FakeUpstream } from '../support/fakeUpstreams.js';
import { startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * TRON as the shipped config/chains.json has it, on a java-tron fake with the node's shapes:
 * the HTTP API's errors inside a 200 are metered as errors (the caller's answer unchanged), and
 * the node's Ethereum-compatible JSON-RPC is served on `/trx/<token>/jsonrpc` through the
 * gateway's JSON-RPC handling (each batch member admitted and metered, TRON's methods only).
 */

let node: FakeUpstream;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();

const shipped: Array<Record<string, unknown>> = JSON.parse(readFileSync(defaultChainsPath(), 'utf8')).chains;
const shippedTrx = (url: string): Record<string, unknown> => {
  const entry = shipped.find((c) => c.id === 'trx');
  if (!entry) throw new Error('no trx in config/chains.json');
  return { ...entry, timeoutMs: 1_000, upstreams: [{ url, label: 'trx-1' }] };
};

beforeAll(async () => {
  node = await startJavaTronFake();
  gateway = await startGateway({ gatekeeper, pool: { hedge: false }, chains: [shippedTrx(node.url)] });
});
afterAll(async () => {
  await gateway?.close();
  await node?.close();
});
beforeEach(() => {
  gatekeeper.grantOnly(null);
  gateway.usage.length = 0;
  node.reset();
});

const T = (): string => gatekeeper.token;

async function post(path: string, body: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await fetch(`${gateway.url}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
  return { status: res.status, text: await res.text() };
}

/** What the node sent back for the call, byte for byte (java-tron ends its answers as the fake does). */
const nodeAnswerOf = async (path: string, body: string): Promise<string> => (await fetch(`${node.url}${path}`, { method: 'POST', body })).text();

const hex = (text: string): string => Buffer.from(text, 'utf8').toString('hex');

describe('java-tron errors inside a 200 are metered as errors', () => {
  it('{"Error": …}: the answer passes unchanged at 200, and its record carries the node’s message', async () => {
    const bad = '{"address":"TNotAnAddress","visible":true}';
    const good = `{"address":"${TRON_NODE.address}","visible":true}`;
    const failed = await post(`/trx/${T()}/wallet/getaccount`, bad);
    const served = await post(`/trx/${T()}/wallet/getaccount`, good);

    expect(failed).toEqual({ status: 200, text: await nodeAnswerOf('/wallet/getaccount', bad) });
    expect(JSON.parse(failed.text)).toEqual({ Error: 'class java.lang.IllegalArgumentException : Invalid address' });
    expect(served.status).toBe(200);
    expect(gateway.usage).toMatchObject([
      {
        chain: 'trx',
        method: 'wallet/getaccount',
        status: 200,
        rpcErrorCode: RpcCode.nodeError,
        errorMessage: 'class java.lang.IllegalArgumentException : Invalid address',
        charged: true,
        upstream: 'trx-1',
      },
      { chain: 'trx', method: 'wallet/getaccount', status: 200, rpcErrorCode: null, errorMessage: null, charged: true },
    ]);
  });

  it('broadcasttransaction’s failed Return (code SIGERROR, hex message): the node’s code and its message as text', async () => {
    const unsigned = JSON.stringify({ txID: TRON_NODE.txid, raw_data: { contract: [] }, raw_data_hex: '0a02' });
    const signed = JSON.stringify({ txID: TRON_NODE.txid, raw_data: { contract: [] }, raw_data_hex: '0a02', signature: ['ab'.repeat(65)] });
    const refused = await post(`/trx/${T()}/wallet/broadcasttransaction`, unsigned);
    const accepted = await post(`/trx/${T()}/wallet/broadcasttransaction`, signed);

    expect(refused).toEqual({ status: 200, text: await nodeAnswerOf('/wallet/broadcasttransaction', unsigned) });
    expect(JSON.parse(refused.text)).toEqual({ code: 'SIGERROR', txid: TRON_NODE.txid, message: hex('Validate signature error: miss sig or contract') });
    expect(JSON.parse(accepted.text)).toEqual({ result: true, txid: TRON_NODE.txid });
    expect(gateway.usage).toMatchObject([
      {
        method: 'wallet/broadcasttransaction',
        status: 200,
        rpcErrorCode: RpcCode.nodeError,
        errorMessage: 'SIGERROR: Validate signature error: miss sig or contract',
      },
      { method: 'wallet/broadcasttransaction', status: 200, rpcErrorCode: null, errorMessage: null },
    ]);
  });

  it('a TransactionExtention whose result code is not SUCCESS, its message in hex or (visible) as text; result true is a success', async () => {
    const call = (contract: string, visible: boolean): string =>
      JSON.stringify({ owner_address: TRON_NODE.address, contract_address: contract, function_selector: 'decimals()', visible });
    const hidden = await post(`/trx/${T()}/wallet/triggerconstantcontract`, call('TNoContractHere111111111111111111', false));
    const shown = await post(`/trx/${T()}/wallet/triggerconstantcontract`, call('TNoContractHere111111111111111111', true));
    const read = await post(`/trx/${T()}/wallet/triggerconstantcontract`, call(TRON_NODE.contract, true));

    expect(JSON.parse(hidden.text)).toEqual({ result: { code: 'CONTRACT_VALIDATE_ERROR', message: hex('No contract or not a valid smart contract') } });
    expect(JSON.parse(shown.text)).toEqual({ result: { code: 'CONTRACT_VALIDATE_ERROR', message: 'No contract or not a valid smart contract' } });
    expect([hidden.status, shown.status, read.status]).toEqual([200, 200, 200]);
    expect(JSON.parse(read.text)).toMatchObject({ result: { result: true }, constant_result: [expect.any(String)] });
    const message = 'CONTRACT_VALIDATE_ERROR: No contract or not a valid smart contract';
    expect(gateway.usage).toMatchObject([
      { method: 'wallet/triggerconstantcontract', rpcErrorCode: RpcCode.nodeError, errorMessage: message },
      { method: 'wallet/triggerconstantcontract', rpcErrorCode: RpcCode.nodeError, errorMessage: message },
      { method: 'wallet/triggerconstantcontract', rpcErrorCode: null, errorMessage: null },
    ]);
  });
});

/** An ethers v6 provider on the gateway's TRON JSON-RPC endpoint, without retries. */
function tronProvider(url: string): JsonRpcProvider {
  const request = new FetchRequest(url);
  request.retryFunc = async () => false;
  // The network detected once (eth_chainId), not asked again beside every call.
  return new JsonRpcProvider(request, undefined, { cacheTimeout: -1, staticNetwork: true });
}

const ADDRESS = '0xa614f803b6fd780986a42c78ec9c7f77e6ded13c';

/** What reached the node's `/jsonrpc`: each POST's body, parsed. */
const sentToJsonRpc = (): unknown[] => node.calls.filter((c) => c.url === '/jsonrpc').map((c) => JSON.parse(c.body));

describe('TRON’s JSON-RPC on /trx/<token>/jsonrpc', () => {
  it('serves ethers v6: the network, the block number, a balance and a batch, one charged record per call', async () => {
    const provider = tronProvider(`${gateway.url}/trx/${T()}/jsonrpc`);
    try {
      const network = await provider.getNetwork();
      expect(network.chainId).toBe(BigInt(TRON_NODE.chainId));
      expect(await provider.getBlockNumber()).toBe(TRON_NODE.blockNumber);
      expect(await provider.getBalance(ADDRESS)).toBe(BigInt(TRON_NODE.balance));
      // Issued together, ethers sends them as one JSON-RPC batch.
      const [height, balance, client] = await Promise.all([provider.getBlockNumber(), provider.getBalance(ADDRESS), provider.send('web3_clientVersion', [])]);
      expect([height, balance, client]).toEqual([TRON_NODE.blockNumber, BigInt(TRON_NODE.balance), TRON_NODE.clientVersion]);
    } finally {
      provider.destroy();
    }
    const sent = sentToJsonRpc();
    expect(node.calls.every((c) => c.url === '/jsonrpc' && c.method === 'POST')).toBe(true);
    const batches = sent.filter((b): b is Array<{ method: string }> => Array.isArray(b));
    expect(batches.at(-1)?.map((m) => m.method)).toEqual(['eth_blockNumber', 'eth_getBalance', 'web3_clientVersion']);
    const methods = gateway.usage.map((r) => r.method);
    expect(methods.slice(-3)).toEqual(['eth_blockNumber', 'eth_getBalance', 'web3_clientVersion']);
    expect(methods).toContain('eth_chainId');
    expect(gateway.usage.every((r) => r.chain === 'trx' && r.status === 200 && r.charged === true && r.rpcErrorCode === null)).toBe(true);
    // The batch's members each have their own record.
    expect(new Set(gateway.usage.map((r) => r.requestId)).size).toBe(gateway.usage.length);
  });

  it('admits a batch per call: past the limit, the members left get -32005 and never reach the node', async () => {
    gatekeeper.grantOnly(2);
    const body = JSON.stringify([
      { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] },
      { jsonrpc: '2.0', id: 2, method: 'eth_getBalance', params: [ADDRESS, 'latest'] },
      { jsonrpc: '2.0', id: 3, method: 'eth_chainId', params: [] },
    ]);
    const r = await post(`/trx/${T()}/jsonrpc`, body);
    expect(r.status).toBe(200);
    const answers = JSON.parse(r.text) as Array<{ id: number; result?: string; error?: { code: number } }>;
    expect(answers.map((a) => [a.id, a.result ?? a.error?.code])).toEqual([
      [1, `0x${TRON_NODE.blockNumber.toString(16)}`],
      [2, `0x${TRON_NODE.balance.toString(16)}`],
      [3, RpcCode.limitExceeded],
    ]);
    expect(gatekeeper.requests.at(-1)).toMatchObject({ chain: 'trx', cost: 3 });
    expect((sentToJsonRpc()[0] as Array<{ method: string }>).map((m) => m.method)).toEqual(['eth_blockNumber', 'eth_getBalance']);
    expect(gateway.usage.map((r) => [r.method, r.charged, r.rpcErrorCode])).toEqual([
      ['eth_blockNumber', true, null],
      ['eth_getBalance', true, null],
      ['eth_chainId', false, RpcCode.limitExceeded],
    ]);
  });

  it('answers a method outside TRON’s list itself (-32601, 403), a batch’s other members still served; the node’s own errors are metered', async () => {
    const denied = await post(`/trx/${T()}/jsonrpc`, '{"jsonrpc":"2.0","id":7,"method":"eth_sendRawTransaction","params":["0x00"]}');
    expect(denied.status).toBe(403);
    expect(JSON.parse(denied.text)).toMatchObject({ id: 7, error: { code: RpcCode.methodNotFound } });
    const mixed = await post(
      `/trx/${T()}/jsonrpc`,
      JSON.stringify([
        { jsonrpc: '2.0', id: 1, method: 'debug_traceTransaction', params: ['0x00'] },
        { jsonrpc: '2.0', id: 2, method: 'eth_getBalance', params: ['TNotHex', 'latest'] },
      ]),
    );
    expect(mixed.status).toBe(200);
    expect(JSON.parse(mixed.text)).toEqual([
      { jsonrpc: '2.0', id: 1, error: { code: RpcCode.methodNotFound, message: expect.stringContaining('debug_traceTransaction') } },
      { jsonrpc: '2.0', id: 2, error: { code: -32602, message: 'invalid address hash value', data: '{}' } },
    ]);
    // Only the allowed member went on (under an id of the gateway's choosing).
    expect(sentToJsonRpc()).toEqual([[expect.objectContaining({ method: 'eth_getBalance', params: ['TNotHex', 'latest'] })]]);
    expect(gateway.usage.map((r) => [r.method, r.charged, r.rpcErrorCode])).toEqual([
      ['eth_sendRawTransaction', false, RpcCode.methodNotFound],
      ['debug_traceTransaction', false, RpcCode.methodNotFound],
      ['eth_getBalance', true, -32602],
    ]);
  });

  it('takes the token as a Bearer header too; a GET or a non-JSON body gets a clear error and no node call', async () => {
    const viaBearer = await post('/trx/jsonrpc', '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}', { authorization: `Bearer ${T()}` });
    expect(JSON.parse(viaBearer.text)).toEqual({ jsonrpc: '2.0', id: 1, result: `0x${TRON_NODE.blockNumber.toString(16)}` });
    node.reset();

    const viaGet = await fetch(`${gateway.url}/trx/${T()}/jsonrpc`);
    expect(viaGet.status).toBe(400);
    expect(await viaGet.json()).toMatchObject({ error: { code: 'protocol_mismatch', message: expect.stringContaining('POST a JSON-RPC 2.0 body') } });
    const asText = await post(`/trx/${T()}/jsonrpc`, '{"jsonrpc":"2.0","id":4,"method":"eth_blockNumber","params":[]}', { 'content-type': 'application/xml' });
    expect(asText.status).toBe(415);
    expect(JSON.parse(asText.text)).toMatchObject({ id: 4, error: { code: RpcCode.invalidRequest } });
    expect(node.calls).toEqual([]);
  });
});

describe('the metrics API', () => {
  let t: TestApp;
  let tron: FakeUpstream;
  beforeAll(async () => {
    tron = await startJavaTronFake();
    t = await startTestApp({ env: { UPSTREAM_TRX: tron.url } });
  });
  afterAll(async () => {
    await t?.close();
    await tron?.close();
  });

  it('lists TRON’s errors inside a 200 among the error groups, and counts them in the error rate', async () => {
    const { url } = await listen(t);
    const caller = await newToken(t, { plan: 'professional' });
    const send = (path: string, body: string) =>
      fetch(`${url}/trx/${caller.token}/${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    expect((await send('wallet/getaccount', '{"address":"TNotAnAddress"}')).status).toBe(200);
    expect((await send('wallet/broadcasttransaction', '{"raw_data":{"contract":[]}}')).status).toBe(200);
    expect((await send('wallet/getaccount', `{"address":"${TRON_NODE.address}"}`)).status).toBe(200);

    const metrics = () => t.app.inject({ method: 'GET', url: '/api/v1/metrics/user', headers: caller.auth }).then((r) => r.json());
    const m = await eventually(metrics, (v) => v.totals?.requests === 3);
    expect(m.totals).toMatchObject({ requests: 3, errors: 2 });
    expect(m.errors).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          chain: 'trx',
          method: 'wallet/getaccount',
          code: RpcCode.nodeError,
          message: 'class java.lang.IllegalArgumentException : Invalid address',
          count: 1,
        }),
        expect.objectContaining({
          chain: 'trx',
          method: 'wallet/broadcasttransaction',
          code: RpcCode.nodeError,
          message: 'SIGERROR: Validate signature error: miss sig or contract',
          count: 1,
        }),
      ]),
    );
    expect(m.errors).toHaveLength(2);
  });
});
