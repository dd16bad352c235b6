import { JsonRpcHTTPTransport, SuiJsonRpcClient } from '@mysten/sui/jsonRpc';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, SUI_NODE, startSuiNodeFake } from '../support/fakeUpstreams.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

/**
 * Sui's own SDK (`SuiJsonRpcClient` of @mysten/sui) through the whole service, on the shipped
 * chain registry: it POSTs JSON-RPC to `/sui/<token>` (or `/sui` with a Bearer header), the
 * gateway meters it and forwards it to a node fake that answers with a Sui full node's shapes.
 */

let node: FakeUpstream;
let t: TestApp;
let base: string;
let caller: { token: string; tokenId: string; accountId: string; auth: Record<string, string> };

const { suiCoin, usdcCoin } = SUI_NODE.objects;
const MISSING = `0x${'e'.repeat(64)}`;

beforeAll(async () => {
  node = await startSuiNodeFake();
  t = await startTestApp({ env: { UPSTREAM_SUI: node.url } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const o = await owner(t.app);
  // The free plan does not reach sui; a paid one with room for every call of this file in one second.
  await t.app.inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${o.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan: 'professional' },
  });
  const res = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'sui sdk' } });
  if (res.statusCode !== 201) throw new Error(`token not created: ${res.body}`);
  caller = { token: res.json().token as string, tokenId: res.json().id as string, accountId: o.accountId, auth: o.auth };
});
afterAll(async () => {
  await t?.close();
  await node?.close();
});

const sentToNode = (): Array<{ method: string; params: unknown } | Array<{ method: string; params: unknown }>> => node.calls.map((c) => JSON.parse(c.body));

const usage = async (): Promise<UsageRecord[]> => recordedCalls(t.runtime.store, caller.accountId);

const rpc = (path: string, body: unknown) =>
  fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('Sui SDK through the gateway', () => {
  it('reads the latest checkpoint, balances, an object and several objects on /sui/<token>, each call metered', async () => {
    node.reset();
    const usedBefore = (await usage()).length;
    const client = new SuiJsonRpcClient({ url: `${base}/sui/${caller.token}`, network: 'mainnet' });

    expect(await client.getLatestCheckpointSequenceNumber()).toBe(SUI_NODE.checkpoint);
    expect(await client.getBalance({ owner: SUI_NODE.owner })).toEqual(SUI_NODE.balances['0x2::sui::SUI']);
    expect(await client.getBalance({ owner: SUI_NODE.owner, coinType: SUI_NODE.usdc })).toEqual(SUI_NODE.balances[SUI_NODE.usdc]);

    const options = { showType: true, showOwner: true, showContent: true };
    const object = await client.getObject({ id: suiCoin.objectId, options });
    expect(object).toEqual({
      data: {
        objectId: suiCoin.objectId,
        version: suiCoin.version,
        digest: suiCoin.digest,
        type: suiCoin.type,
        owner: suiCoin.owner,
        content: suiCoin.content,
      },
    });
    expect(object.data?.content).toMatchObject({ dataType: 'moveObject', hasPublicTransfer: true, fields: { balance: '12000000000' } });

    const several = await client.multiGetObjects({ ids: [usdcCoin.objectId, MISSING, suiCoin.objectId], options: { showType: true } });
    expect(several).toEqual([
      { data: { objectId: usdcCoin.objectId, version: usdcCoin.version, digest: usdcCoin.digest, type: usdcCoin.type } },
      { error: { code: 'notExists', object_id: MISSING } },
      { data: { objectId: suiCoin.objectId, version: suiCoin.version, digest: suiCoin.digest, type: suiCoin.type } },
    ]);

    // The node got the SDK's calls as the SDK wrote them, options included.
    expect(sentToNode()).toMatchObject([
      { method: 'sui_getLatestCheckpointSequenceNumber', params: [] },
      { method: 'suix_getBalance', params: [SUI_NODE.owner, null] },
      { method: 'suix_getBalance', params: [SUI_NODE.owner, SUI_NODE.usdc] },
      { method: 'sui_getObject', params: [suiCoin.objectId, options] },
      { method: 'sui_multiGetObjects', params: [[usdcCoin.objectId, MISSING, suiCoin.objectId], { showType: true }] },
    ]);

    const records = await eventually(usage, (u) => u.length >= usedBefore + 5);
    expect(records.slice(usedBefore).map((r) => [r.chain, r.method, r.status, r.charged])).toEqual([
      ['sui', 'sui_getLatestCheckpointSequenceNumber', 200, true],
      ['sui', 'suix_getBalance', 200, true],
      ['sui', 'suix_getBalance', 200, true],
      ['sui', 'sui_getObject', 200, true],
      ['sui', 'sui_multiGetObjects', 200, true],
    ]);
    const tokenUsage = async () =>
      (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${caller.tokenId}`, headers: caller.auth })).json().current_month_usage as number;
    expect(await eventually(tokenUsage, (n) => n >= usedBefore + 5)).toBe(usedBefore + 5);
  });

  it('takes the token from a Bearer header on POST /sui', async () => {
    node.reset();
    const transport = new JsonRpcHTTPTransport({ url: `${base}/sui`, rpc: { headers: { authorization: `Bearer ${caller.token}` } } });
    const client = new SuiJsonRpcClient({ transport, network: 'mainnet' });
    expect(await client.getLatestCheckpointSequenceNumber()).toBe(SUI_NODE.checkpoint);
    expect(await client.getObject({ id: usdcCoin.objectId, options: { showOwner: true } })).toEqual({
      data: { objectId: usdcCoin.objectId, version: usdcCoin.version, digest: usdcCoin.digest, owner: { AddressOwner: SUI_NODE.owner } },
    });
    expect(node.calls.every((c) => c.headers.authorization === undefined)).toBe(true);
  });

  it('answers a JSON-RPC batch member by member in the caller order, sent to the node one call at a time (a Sui node refuses batches)', async () => {
    node.reset();
    const res = await rpc(`/sui/${caller.token}`, [
      { jsonrpc: '2.0', id: 1, method: 'sui_getLatestCheckpointSequenceNumber', params: [] },
      { jsonrpc: '2.0', id: 'balance', method: 'suix_getBalance', params: [SUI_NODE.owner] },
      { jsonrpc: '2.0', id: 3, method: 'sui_getObject', params: [suiCoin.objectId] },
    ]);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual([
      { jsonrpc: '2.0', result: SUI_NODE.checkpoint, id: 1 },
      { jsonrpc: '2.0', result: SUI_NODE.balances['0x2::sui::SUI'], id: 'balance' },
      { jsonrpc: '2.0', result: { data: { objectId: suiCoin.objectId, version: suiCoin.version, digest: suiCoin.digest } }, id: 3 },
    ]);
    expect(node.calls).toHaveLength(3);
    expect(node.calls.map((c) => JSON.parse(c.body) as unknown).every((sent) => !Array.isArray(sent))).toBe(true);
  });

  it('still serves the REST form GET /sui/<token>/<method>', async () => {
    const checkpoint = await fetch(`${base}/sui/${caller.token}/sui_getLatestCheckpointSequenceNumber`);
    expect(checkpoint.status).toBe(200);
    expect(await checkpoint.json()).toEqual({ result: SUI_NODE.checkpoint });
    const object = await fetch(`${base}/sui/${caller.token}/sui_getObject/${suiCoin.objectId}?showType=true`);
    expect(await object.json()).toEqual({
      result: { data: { objectId: suiCoin.objectId, version: suiCoin.version, digest: suiCoin.digest, type: suiCoin.type } },
    });
  });

  it('answers a method outside the Sui namespaces with a JSON-RPC error, without calling the node', async () => {
    node.reset();
    const single = await rpc(`/sui/${caller.token}`, { jsonrpc: '2.0', id: 7, method: 'eth_blockNumber', params: [] });
    expect(single.status).toBe(403);
    expect(await single.json()).toEqual({ jsonrpc: '2.0', error: { code: -32601, message: expect.stringContaining('eth_blockNumber') }, id: 7 });
    const batch = await rpc(`/sui/${caller.token}`, [
      { jsonrpc: '2.0', id: 1, method: 'debug_traceTransaction', params: [] },
      { jsonrpc: '2.0', id: 2, method: 'sui_getLatestCheckpointSequenceNumber', params: [] },
    ]);
    expect(batch.status).toBe(200);
    expect(await batch.json()).toEqual([
      { jsonrpc: '2.0', error: { code: -32601, message: expect.stringContaining('debug_traceTransaction') }, id: 1 },
      { jsonrpc: '2.0', result: SUI_NODE.checkpoint, id: 2 },
    ]);
    // Only the allowed member reached the node, as a single call.
    expect(sentToNode()).toHaveLength(1);
    expect(sentToNode()[0]).toEqual(expect.objectContaining({ method: 'sui_getLatestCheckpointSequenceNumber', params: [] }));
  });
});

describe('Sui writes over JSON-RPC, with two failing nodes', () => {
  let nodes: FakeUpstream[];
  let app: TestApp;
  let url: string;

  beforeAll(async () => {
    nodes = await Promise.all([startSuiNodeFake(), startSuiNodeFake()]);
    app = await startTestApp({ env: { UPSTREAM_SUI: nodes.map((n) => n.url).join(',') } });
    await app.app.listen({ port: 0, host: '127.0.0.1' });
    const address = app.app.server.address();
    const o = await owner(app.app);
    await app.app.inject({
      method: 'PUT',
      url: `/api/v1/admin/accounts/${o.accountId}/plan`,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      payload: { plan: 'professional' },
    });
    const res = await app.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'sui writes' } });
    url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/sui/${res.json().token as string}`;
    for (const n of nodes) n.mode = 'fail';
  });
  afterAll(async () => {
    await app?.close();
    await Promise.all(nodes.map((n) => n.close()));
  });

  const callsOnNodes = (): number => nodes.reduce((sum, n) => sum + n.calls.length, 0);

  it('sends sui_executeTransactionBlock to one node only, where a read is tried on the other', async () => {
    const client = new SuiJsonRpcClient({ url, network: 'mainnet' });
    // A failed submission may still have landed: trying it on another node could execute it twice.
    await expect(client.executeTransactionBlock({ transactionBlock: 'AAACAQ==', signature: 'AQID' })).rejects.toMatchObject({ status: 502 });
    expect(callsOnNodes()).toBe(1);
    expect(JSON.parse(nodes.find((n) => n.calls.length === 1)?.calls[0]?.body ?? 'null')).toMatchObject({ method: 'sui_executeTransactionBlock' });
    await expect(client.getLatestCheckpointSequenceNumber()).rejects.toMatchObject({ status: 502 });
    expect(callsOnNodes()).toBe(3);
  });
});
