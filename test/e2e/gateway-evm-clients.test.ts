import { AbiCoder, Contract, type EthersError, id as eventTopic, FetchRequest, Interface, JsonRpcProvider, Log } from 'ethers';
import {
  BaseError,
  ContractFunctionRevertedError,
  createPublicClient,
  createWalletClient,
  decodeErrorResult,
  encodeAbiParameters,
  type Hex,
  http,
  parseAbi,
  parseAbiItem,
  RpcRequestError,
} from 'viem';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ContractExecutionError, Web3 } from 'web3';
import { UsageRecord } from '../../src/domain/usage.js';
import { deployCode, loggingRuntime, postJsonRpc, revertingRuntime } from '../support/evmContracts.js';
import { GANACHE_ACCOUNT_0, GANACHE_ACCOUNT_1, GANACHE_CHAIN, type GanacheNode, startGanache } from '../support/ganache.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * What dApps built on ethers v6, viem and web3.js v4 depend on, through the gateway against a real
 * node (ganache): reverts with their data, logs, fee history, block tags, batches mixing errors.
 * Each answer through the gateway is compared with the node's own answer to the same call.
 */

const ABI = ['function guarded()', 'error Unauthorized(address who)', 'event Note(uint256 value)'];
const ethersAbi = new Interface(ABI);
const viemAbi = parseAbi(ABI);
const NOTE = parseAbiItem('event Note(uint256 value)');
const NOTE_TOPIC = eventTopic('Note(uint256)') as Hex;
/** `Unauthorized(GANACHE_ACCOUNT_1)`: a custom error with an argument. */
const UNAUTHORIZED_DATA = ethersAbi.encodeErrorResult('Unauthorized', [GANACHE_ACCOUNT_1]) as Hex;
/** `Error("not allowed")`: what `require(cond, "not allowed")` reverts with. */
const REASON = 'not allowed';
const ERROR_STRING_DATA = `0x08c379a0${AbiCoder.defaultAbiCoder().encode(['string'], [REASON]).slice(2)}` as Hex;
const CHECKSUMMED_ACCOUNT_1 = '0xFFcf8FDEE72ac11b5c542428B35EEF5769C409f0';

let node: GanacheNode;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();
/** Contracts deployed before the gateway's first call: one reverting with each kind of data, one emitting Note. */
let unauthorized: Hex;
let refusing: Hex;
let noter: Hex;

/** The node itself, and the node through the gateway (token in the path). */
type Route = 'direct' | 'gateway';
const ROUTES = ['direct', 'gateway'] as const;
const urlOf = (route: Route): string => (route === 'direct' ? node.url : `${gateway.url}/local/${gatekeeper.token}`);

let nextId = 1;
const call = (method: string, params: unknown[]) => ({ jsonrpc: '2.0', id: nextId++, method, params });

/** The same JSON-RPC body sent to the node and through the gateway: both answers, parsed. */
async function askBoth(body: unknown): Promise<{ direct: unknown; gateway: unknown }> {
  const direct = await postJsonRpc(urlOf('direct'), body);
  const viaGateway = await postJsonRpc(urlOf('gateway'), body);
  expect(viaGateway.status).toBe(direct.status);
  return { direct: direct.json, gateway: viaGateway.json };
}

async function deploy(runtime: string): Promise<Hex> {
  const sent = await postJsonRpc(node.url, call('eth_sendTransaction', [{ from: GANACHE_ACCOUNT_0, data: deployCode(runtime), gas: '0x100000' }]));
  const receipt = await postJsonRpc(node.url, call('eth_getTransactionReceipt', [(sent.json as { result: string }).result]));
  return (receipt.json as { result: { contractAddress: Hex } }).result.contractAddress;
}

beforeAll(async () => {
  node = await startGanache();
  unauthorized = await deploy(revertingRuntime(UNAUTHORIZED_DATA));
  refusing = await deploy(revertingRuntime(ERROR_STRING_DATA));
  noter = await deploy(loggingRuntime(NOTE_TOPIC));
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

function ethersProvider(route: Route): JsonRpcProvider {
  const request = new FetchRequest(urlOf(route));
  request.retryFunc = async () => false;
  return new JsonRpcProvider(request, 1337, { staticNetwork: true, cacheTimeout: -1 });
}

const viemClient = (route: Route, batch = false) => createPublicClient({ chain: GANACHE_CHAIN, transport: http(urlOf(route), { batch, retryCount: 0 }) });

/** What a call's rejection leaves a caller: its error, or a failure when it did not reject. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to be rejected');
}

/** What an ethers caller reads off a revert: the decoded revert and the node's JSON-RPC error. */
function ethersRevert(error: unknown) {
  const e = error as EthersError & { data?: string | null; revert?: { name: string; signature: string; args: unknown[] } | null; reason?: string | null };
  const info = e.info as { error?: unknown } | undefined;
  return {
    code: e.code,
    data: e.data ?? null,
    reason: e.reason ?? null,
    revert: e.revert ? { name: e.revert.name, signature: e.revert.signature, args: [...e.revert.args] } : null,
    rpcError: info?.error ?? null,
  };
}

/** What a viem caller reads off a failed call: the node's JSON-RPC error (viem's RpcRequestError). */
function viemRpcError(error: unknown) {
  expect(error).toBeInstanceOf(BaseError);
  const rpc = (error as BaseError).walk((e) => e instanceof RpcRequestError) as RpcRequestError | null;
  expect(rpc).not.toBeNull();
  return { code: rpc?.code, message: rpc?.details, data: rpc?.data as unknown };
}

/** What a web3.js caller reads off a revert: web3's error and the node's error inside it, decoded against the ABI. */
function web3Revert(error: unknown) {
  expect(error).toBeInstanceOf(ContractExecutionError);
  const cause = (error as ContractExecutionError).cause as unknown as Record<string, unknown>;
  return {
    name: (error as ContractExecutionError).name,
    code: (error as ContractExecutionError).code,
    causeCode: cause.code,
    message: cause.message,
    data: cause.data,
    errorName: cause.errorName,
    errorSignature: cause.errorSignature,
    errorArgs: cause.errorArgs === undefined ? undefined : { ...(cause.errorArgs as object) },
  };
}

describe('reverts keep their data through the gateway', () => {
  it.each([
    ['a custom error', () => unauthorized, UNAUTHORIZED_DATA],
    ['Error(string)', () => refusing, ERROR_STRING_DATA],
  ] as const)("eth_call and eth_estimateGas reverting with %s: the node's JSON-RPC error, exactly", async (_kind, contract, data) => {
    const ethCall = await askBoth(call('eth_call', [{ to: contract(), data: '0x' }, 'latest']));
    expect(ethCall.gateway).toEqual(ethCall.direct);
    expect(ethCall.gateway).toMatchObject({ error: { code: -32000, data } });

    const estimate = await askBoth(call('eth_estimateGas', [{ from: GANACHE_ACCOUNT_0, to: contract(), data: '0x' }]));
    expect(estimate.gateway).toEqual(estimate.direct);
    // ganache puts the revert data of an estimate under data.result.
    expect(estimate.gateway).toMatchObject({ error: { code: -32000, data: { result: data } } });
  });

  it('a call with id 0 or "" that the node fails (ganache then answers id null): its error reaches the caller with its id, the node stays in rotation', async () => {
    // viem's first request in a process has id 0. ganache answers an error to a falsy id with
    // "id": null: the node's own answer on that call's request all the same, not another call's.
    const failing = [
      { method: 'eth_call', params: [{ to: unauthorized, data: '0x' }, 'latest'] },
      { method: 'eth_estimateGas', params: [{ from: GANACHE_ACCOUNT_0, to: refusing, data: '0x' }] },
      { method: 'eth_noSuchMethod', params: [] },
    ];
    const expectedUsage: unknown[] = [];
    // More of them than the failures in a row that would eject the node (3).
    for (const id of [0, '']) {
      for (const { method, params } of failing) {
        const body = { jsonrpc: '2.0', id, method, params };
        const direct = await postJsonRpc(urlOf('direct'), body);
        expect(direct.json).toMatchObject({ id: null, error: { code: expect.any(Number) } });
        expectedUsage.push([method, (direct.json as { error: { code: number } }).error.code, 'local-1']);
        const viaGateway = await postJsonRpc(urlOf('gateway'), body);
        expect({ status: viaGateway.status, answer: viaGateway.json }, `${method} with id ${JSON.stringify(id)}`).toEqual({
          status: direct.status,
          answer: { ...(direct.json as object), id },
        });
      }
    }
    expect((await postJsonRpc(urlOf('gateway'), call('eth_chainId', []))).json).toMatchObject({ result: '0x539' });
    expect(gateway.pools.health().local).toMatchObject([{ healthy: true, consecutiveFailures: 0 }]);
    expect(gateway.usage.slice(0, 6).map((u) => [u.method, u.rpcErrorCode, u.upstream])).toEqual(expectedUsage);
    // The revert reaches a client as data it decodes.
    const revert = await postJsonRpc(urlOf('gateway'), { jsonrpc: '2.0', id: 0, method: 'eth_call', params: [{ to: unauthorized, data: '0x' }, 'latest'] });
    const data = (revert.json as { error: { data: Hex } }).error.data;
    expect(decodeErrorResult({ abi: viemAbi, data })).toMatchObject({ errorName: 'Unauthorized', args: [CHECKSUMMED_ACCOUNT_1] });
  });

  it('ethers: the custom error decoded (error.revert, interface.parseError), its code, message and data as the node sent them', async () => {
    const seen = new Map<Route, unknown>();
    for (const route of ROUTES) {
      const provider = ethersProvider(route);
      const contract = new Contract(unauthorized, ABI, provider);
      const callError = ethersRevert(await rejectionOf(contract.getFunction('guarded').staticCall()));
      // The provider's own call keeps the node's JSON-RPC error (info.error); the Contract rebuilds the error from its data.
      const providerError = ethersRevert(await rejectionOf(provider.call({ to: unauthorized, data: '0x' })));
      const stringError = ethersRevert(await rejectionOf(new Contract(refusing, ABI, provider).getFunction('guarded').staticCall()));
      const estimateError = ethersRevert(await rejectionOf(contract.getFunction('guarded').estimateGas({ from: GANACHE_ACCOUNT_0 })));
      provider.destroy();
      seen.set(route, { callError, providerError, stringError, estimateError });

      expect(callError).toMatchObject({
        code: 'CALL_EXCEPTION',
        data: UNAUTHORIZED_DATA,
        revert: { name: 'Unauthorized', signature: 'Unauthorized(address)', args: [CHECKSUMMED_ACCOUNT_1] },
      });
      expect(providerError).toMatchObject({
        code: 'CALL_EXCEPTION',
        data: UNAUTHORIZED_DATA,
        rpcError: { code: -32000, message: 'VM Exception while processing transaction: revert', data: UNAUTHORIZED_DATA },
      });
      expect(ethersAbi.parseError(callError.data as string)?.args.toArray()).toEqual([CHECKSUMMED_ACCOUNT_1]);
      expect(stringError).toMatchObject({ code: 'CALL_EXCEPTION', data: ERROR_STRING_DATA, reason: REASON, revert: { name: 'Error', args: [REASON] } });
      // ethers finds no revert data in ganache's estimate error (an object): the node's error is still there, whole.
      expect(estimateError).toMatchObject({ code: 'CALL_EXCEPTION', rpcError: { code: -32000, data: { result: UNAUTHORIZED_DATA } } });
    }
    expect(seen.get('gateway')).toEqual(seen.get('direct'));
  });

  it("viem: the node's error (code, message, data) reaches RpcRequestError; its data decodes to ContractFunctionRevertedError", async () => {
    const seen = new Map<Route, unknown>();
    for (const route of ROUTES) {
      const client = viemClient(route);
      const read = viemRpcError(await rejectionOf(client.readContract({ address: unauthorized, abi: viemAbi, functionName: 'guarded' })));
      const readString = viemRpcError(await rejectionOf(client.readContract({ address: refusing, abi: viemAbi, functionName: 'guarded' })));
      const estimate = viemRpcError(
        await rejectionOf(client.estimateContractGas({ address: unauthorized, abi: viemAbi, functionName: 'guarded', account: GANACHE_ACCOUNT_0 })),
      );
      seen.set(route, { read, readString, estimate });

      expect(read).toEqual({ code: -32000, message: 'VM Exception while processing transaction: revert', data: UNAUTHORIZED_DATA });
      expect(readString).toMatchObject({ code: -32000, data: ERROR_STRING_DATA });
      expect(estimate).toMatchObject({ code: -32000, data: { result: UNAUTHORIZED_DATA } });
      // viem builds ContractFunctionRevertedError itself only for codes 3 and -32603 (geth, anvil, hardhat);
      // ganache says -32000, so the test builds it from the data as viem would.
      const reverted = new ContractFunctionRevertedError({ abi: viemAbi, data: read.data as Hex, functionName: 'guarded' });
      expect(reverted.data).toMatchObject({ errorName: 'Unauthorized', args: [CHECKSUMMED_ACCOUNT_1] });
      expect(new ContractFunctionRevertedError({ abi: viemAbi, data: readString.data as Hex, functionName: 'guarded' }).reason).toBe(REASON);
      expect(decodeErrorResult({ abi: viemAbi, data: read.data as Hex })).toMatchObject({ errorName: 'Unauthorized', args: [CHECKSUMMED_ACCOUNT_1] });
    }
    expect(seen.get('gateway')).toEqual(seen.get('direct'));
  });
});

describe('logs, fee history and block tags: the same answers as the node', () => {
  it('eth_getLogs by address and topics (viem and ethers) after Note events sent through the gateway', async () => {
    const wallet = createWalletClient({ chain: GANACHE_CHAIN, transport: http(urlOf('gateway'), { retryCount: 0 }), account: GANACHE_ACCOUNT_0 });
    const values = [5n, 7n];
    const hashes: Hex[] = [];
    for (const value of values) hashes.push(await wallet.sendTransaction({ to: noter, data: encodeAbiParameters([{ type: 'uint256' }], [value]) }));
    const receipts = await Promise.all(hashes.map((hash) => viemClient('gateway').getTransactionReceipt({ hash })));
    expect(receipts.map((r) => [r.status, r.logs.length])).toEqual([
      ['success', 1],
      ['success', 1],
    ]);

    const viemLogs = new Map<Route, unknown>();
    const ethersLogs = new Map<Route, unknown>();
    for (const route of ROUTES) {
      const logs = await viemClient(route).getLogs({ address: noter, event: NOTE, fromBlock: 0n });
      expect(logs.map((l) => [l.args.value, l.transactionHash])).toEqual(values.map((v, i) => [v, hashes[i]]));
      viemLogs.set(route, logs);
      const provider = ethersProvider(route);
      const found = await provider.getLogs({ address: noter, topics: [NOTE_TOPIC], fromBlock: 0 });
      provider.destroy();
      expect(found.every((l) => l instanceof Log)).toBe(true);
      expect(found.map((l) => ethersAbi.parseLog(l)?.args.toArray())).toEqual(values.map((v) => [v]));
      ethersLogs.set(
        route,
        found.map((l) => l.toJSON()),
      );
    }
    expect(viemLogs.get('gateway')).toEqual(viemLogs.get('direct'));
    expect(ethersLogs.get('gateway')).toEqual(ethersLogs.get('direct'));

    const head = `0x${receipts[1]?.blockNumber.toString(16)}`;
    const filters = [
      { address: noter, topics: [NOTE_TOPIC], fromBlock: '0x0', toBlock: 'latest' },
      { address: noter, topics: [NOTE_TOPIC], fromBlock: 'earliest', toBlock: head },
      { address: noter, topics: [[NOTE_TOPIC, eventTopic('Other()')]], fromBlock: head, toBlock: head },
      { address: noter, topics: [eventTopic('Other()')] },
      { address: unauthorized, topics: [NOTE_TOPIC], fromBlock: '0x0' },
      { blockHash: receipts[0]?.blockHash, address: noter },
    ];
    for (const filter of filters) {
      // Twice: the second answer may come from the gateway's cache, and must still be the node's.
      for (let i = 0; i < 2; i++) {
        const answers = await askBoth(call('eth_getLogs', [filter]));
        expect(answers.gateway, JSON.stringify(filter)).toEqual(answers.direct);
      }
    }
  });

  it('eth_feeHistory, eth_maxPriorityFeePerGas and eth_gasPrice, raw and through viem and ethers', async () => {
    for (const body of [
      call('eth_feeHistory', ['0x4', 'latest', [10, 50, 90]]),
      call('eth_feeHistory', ['0x2', 'pending', []]),
      call('eth_feeHistory', ['0x1', '0x1', [50]]),
      call('eth_maxPriorityFeePerGas', []),
      call('eth_gasPrice', []),
    ]) {
      const answers = await askBoth(body);
      expect(answers.gateway, body.method).toEqual(answers.direct);
      expect(answers.gateway).toHaveProperty('result');
    }
    const viemFees = new Map<Route, unknown>();
    const ethersFees = new Map<Route, unknown>();
    for (const route of ROUTES) {
      const client = viemClient(route);
      viemFees.set(route, {
        history: await client.getFeeHistory({ blockCount: 3, rewardPercentiles: [25, 75] }),
        priority: await client.estimateMaxPriorityFeePerGas(),
      });
      const provider = ethersProvider(route);
      const data = await provider.getFeeData();
      ethersFees.set(route, data.toJSON());
      provider.destroy();
    }
    expect(viemFees.get('gateway')).toEqual(viemFees.get('direct'));
    expect(ethersFees.get('gateway')).toEqual(ethersFees.get('direct'));
  });

  it('blockTag latest, pending, safe, finalized, earliest, a number, a hash and EIP-1898 objects: the answer (or the error) is the node’s', async () => {
    const latest = (await postJsonRpc(urlOf('direct'), call('eth_getBlockByNumber', ['latest', false]))).json as { result: { hash: string; number: string } };
    const { hash, number } = latest.result;
    const tags: unknown[] = [
      'latest',
      'pending',
      'safe',
      'finalized',
      'earliest',
      number,
      '0x1',
      '0xffffff',
      hash,
      { blockHash: hash },
      { blockHash: hash, requireCanonical: true },
      { blockNumber: number },
      { blockHash: `0x${'11'.repeat(32)}` },
    ];
    for (const tag of tags) {
      const bodies = [
        call('eth_getBlockByNumber', [tag, false]),
        call('eth_getBalance', [GANACHE_ACCOUNT_0, tag]),
        call('eth_getTransactionCount', [GANACHE_ACCOUNT_0, tag]),
        call('eth_getCode', [noter, tag]),
        call('eth_getStorageAt', [noter, '0x0', tag]),
        call('eth_call', [{ to: unauthorized, data: '0x' }, tag]),
        call('eth_call', [{ to: noter, data: '0x' }, tag]),
      ];
      for (const body of bodies) {
        // Twice: the second may be a cache hit (or a call coalesced with the first), and must still be the node's answer.
        for (let i = 0; i < 2; i++) {
          const answers = await askBoth(body);
          expect(answers.gateway, `${body.method} at ${JSON.stringify(tag)}`).toEqual(answers.direct);
        }
      }
    }
    // Some of those answers came from the gateway's cache: they were compared too.
    expect(gateway.usage.some((u) => u.cache === 'hit')).toBe(true);
    // Through the clients too.
    const viemBlocks = new Map<Route, unknown>();
    for (const route of ROUTES) {
      const client = viemClient(route);
      viemBlocks.set(
        route,
        await Promise.all([
          ...(['latest', 'pending', 'safe', 'finalized', 'earliest'] as const).map((blockTag) => client.getBlock({ blockTag })),
          client.getBlock({ blockHash: hash as Hex }),
          client.getBalance({ address: GANACHE_ACCOUNT_0, blockTag: 'safe' }),
        ]),
      );
    }
    expect(viemBlocks.get('gateway')).toEqual(viemBlocks.get('direct'));
  });
});

describe('web3.js v4', () => {
  it('reads the block number and chain id, sends a transaction with its receipt', async () => {
    const web3 = new Web3(urlOf('gateway'));
    const direct = new Web3(urlOf('direct'));
    const before = await web3.eth.getBlockNumber();
    expect(before).toBe(await direct.eth.getBlockNumber());
    expect(await web3.eth.getChainId()).toBe(1337n);

    const receipt = await web3.eth.sendTransaction({ from: GANACHE_ACCOUNT_0, to: GANACHE_ACCOUNT_1, value: 12345n });
    expect(receipt.status).toBe(1n);
    expect(receipt.blockNumber).toBe(before + 1n);
    expect(await web3.eth.getBlockNumber()).toBe(before + 1n);
    expect(await web3.eth.getTransactionReceipt(receipt.transactionHash)).toEqual(await direct.eth.getTransactionReceipt(receipt.transactionHash));
    expect(await web3.eth.getBalance(GANACHE_ACCOUNT_1)).toBe(await direct.eth.getBalance(GANACHE_ACCOUNT_1));

    const methods = gateway.usage.map((r) => r.method);
    expect(methods).toEqual(expect.arrayContaining(['eth_blockNumber', 'eth_chainId', 'eth_sendTransaction', 'eth_getTransactionReceipt']));
    for (const r of gateway.usage) expect(UsageRecord.parse(r)).toMatchObject({ chain: 'local', tokenId: 'tok-test', status: 200 });
  });

  it("surfaces a revert as web3's ContractExecutionError with the node's data, decoded against the ABI", async () => {
    const abi = [
      { type: 'function', name: 'guarded', inputs: [], outputs: [], stateMutability: 'view' },
      { type: 'error', name: 'Unauthorized', inputs: [{ name: 'who', type: 'address' }] },
    ] as const;
    const seen = new Map<Route, unknown>();
    for (const route of ROUTES) {
      const web3 = new Web3(urlOf(route));
      const viaContract = web3Revert(await rejectionOf(new web3.eth.Contract(abi, unauthorized).methods.guarded().call()));
      const viaCall = web3Revert(await rejectionOf(web3.eth.call({ to: refusing, data: '0x' })));
      const viaEstimate = web3Revert(await rejectionOf(web3.eth.estimateGas({ from: GANACHE_ACCOUNT_0, to: unauthorized, data: '0x' })));
      seen.set(route, { viaContract, viaCall, viaEstimate });

      expect(viaContract).toMatchObject({
        name: 'ContractExecutionError',
        causeCode: -32000,
        message: 'VM Exception while processing transaction: revert',
        data: UNAUTHORIZED_DATA,
        errorName: 'Unauthorized',
        errorSignature: 'Unauthorized(address)',
        errorArgs: { who: CHECKSUMMED_ACCOUNT_1 },
      });
      expect(viaCall).toMatchObject({ causeCode: -32000, data: ERROR_STRING_DATA });
      expect(viaEstimate).toMatchObject({ causeCode: -32000, message: 'VM Exception while processing transaction: revert' });
    }
    expect(seen.get('gateway')).toEqual(seen.get('direct'));
  });
});

describe('a JSON-RPC batch mixing a revert, a valid call and an unknown method', () => {
  it('answers each member as the node does, ids kept, and meters one record per member', async () => {
    const batch = [
      { jsonrpc: '2.0', id: 'revert-1', method: 'eth_call', params: [{ to: unauthorized, data: '0x' }, 'latest'] },
      { jsonrpc: '2.0', id: 2, method: 'eth_getBalance', params: [GANACHE_ACCOUNT_0, 'latest'] },
      { jsonrpc: '2.0', id: 3, method: 'eth_noSuchMethod', params: [] },
      { jsonrpc: '2.0', id: 4, method: 'eth_estimateGas', params: [{ from: GANACHE_ACCOUNT_0, to: refusing, data: '0x' }] },
    ];
    // Twice: the second time the valid member may be answered from the cache beside the others.
    for (let round = 0; round < 2; round++) {
      gateway.usage.length = 0;
      const answers = await askBoth(batch);
      const direct = answers.direct as Array<{ id: unknown; error?: { code: number; message: string } }>;
      expect(direct.map((a) => a.id)).toEqual(['revert-1', 2, 3, 4]);
      expect(answers.gateway).toEqual(direct);

      expect(gateway.usage).toHaveLength(4);
      const base = gateway.usage[0]?.requestId.split(':')[0];
      expect(gateway.usage.map((u) => u.requestId)).toEqual([0, 1, 2, 3].map((i) => `${base}:${i}`));
      expect(gateway.usage.map((u) => [u.method, u.status, u.rpcErrorCode, u.errorMessage, u.charged])).toEqual([
        ['eth_call', 200, -32000, direct[0]?.error?.message, true],
        ['eth_getBalance', 200, null, null, true],
        ['eth_noSuchMethod', 200, direct[2]?.error?.code, direct[2]?.error?.message, true],
        ['eth_estimateGas', 200, -32000, direct[3]?.error?.message, true],
      ]);
      for (const u of gateway.usage) UsageRecord.parse(u);
    }
  });

  it('through viem (batch transport) and ethers (its own batching): each member settles as it does against the node', async () => {
    const outcome = (settled: PromiseSettledResult<unknown>) =>
      settled.status === 'fulfilled' ? { value: settled.value } : { error: viemOrEthersError(settled.reason) };
    const viemSeen = new Map<Route, unknown>();
    const ethersSeen = new Map<Route, unknown>();
    for (const route of ROUTES) {
      gateway.usage.length = 0;
      const client = viemClient(route, true);
      const settled = await Promise.allSettled([
        client.readContract({ address: unauthorized, abi: viemAbi, functionName: 'guarded' }),
        client.getBalance({ address: GANACHE_ACCOUNT_0 }),
        client.request({ method: 'eth_noSuchMethod' as 'eth_chainId' }),
      ]);
      viemSeen.set(route, settled.map(outcome));
      if (route === 'gateway') {
        // One HTTP batch: the members' records share the request's id.
        expect(new Set(gateway.usage.map((u) => u.requestId.split(':')[0])).size).toBe(1);
        expect(gateway.usage.map((u) => u.method).sort()).toEqual(['eth_call', 'eth_getBalance', 'eth_noSuchMethod']);
      }

      gateway.usage.length = 0;
      const provider = ethersProvider(route);
      const ethersSettled = await Promise.allSettled([
        new Contract(unauthorized, ABI, provider).getFunction('guarded').staticCall(),
        provider.getBalance(GANACHE_ACCOUNT_0),
        provider.send('eth_noSuchMethod', []),
      ]);
      provider.destroy();
      ethersSeen.set(route, ethersSettled.map(outcome));
      if (route === 'gateway') expect(gateway.usage.map((u) => u.method).sort()).toEqual(['eth_call', 'eth_getBalance', 'eth_noSuchMethod']);
    }
    expect(viemSeen.get('gateway')).toEqual(viemSeen.get('direct'));
    expect(ethersSeen.get('gateway')).toEqual(ethersSeen.get('direct'));
    expect((viemSeen.get('gateway') as Array<{ error?: unknown }>)[0]?.error).toMatchObject({ data: UNAUTHORIZED_DATA });
    expect((ethersSeen.get('gateway') as Array<{ error?: unknown }>)[0]?.error).toMatchObject({ revert: { name: 'Unauthorized' } });
  });
});

/** A client's error, reduced to what does not name the URL it was sent to. */
function viemOrEthersError(error: unknown): unknown {
  if (error instanceof BaseError) return viemRpcError(error);
  return ethersRevert(error);
}
