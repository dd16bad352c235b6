import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EVM_TX_HASH, type FakeUpstream, startEvmFake, startTronFake, TRON } from '../support/fakeUpstreams.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * Failover through the gateway: each chain has a failing upstream listed first (the pool is told
 * to always pick the first eligible one) and a good one second.
 */

let broken: FakeUpstream;
let evm: FakeUpstream;
let brokenTron: FakeUpstream;
let tron: FakeUpstream;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();

beforeAll(async () => {
  [broken, evm, brokenTron, tron] = await Promise.all([startEvmFake(), startEvmFake(), startTronFake(), startTronFake()]);
  gateway = await startGateway({
    gatekeeper,
    chains: [
      chainEntry('evm', [broken.url, evm.url]),
      {
        id: 'trx',
        name: 'TRON',
        protocol: 'rest',
        rest: 'passthrough',
        readOnlyPosts: ['wallet/get*'],
        upstreams: [
          { url: brokenTron.url, label: 'trx-broken' },
          { url: tron.url, label: 'trx-good' },
        ],
      },
    ],
    pool: { random: () => 0, ejectAfterFailures: 1000 },
  });
});
afterAll(async () => {
  await gateway?.close();
  await Promise.all([broken, evm, brokenTron, tron].map((f) => f?.close()));
});
beforeEach(() => {
  for (const f of [broken, evm, brokenTron, tron]) f.reset();
  broken.mode = 'fail';
  brokenTron.mode = 'hangup';
  gateway.usage.length = 0;
});

const rpc = (body: unknown) =>
  fetch(`${gateway.url}/evm/${gatekeeper.token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('JSON-RPC failover', () => {
  it('retries reads on another upstream, single and batch', async () => {
    const single = await rpc({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber' });
    expect(await single.json()).toEqual({ jsonrpc: '2.0', id: 1, result: '0x10' });
    const batch = await rpc([
      { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber' },
      { jsonrpc: '2.0', id: 2, method: 'eth_chainId' },
    ]);
    expect(batch.status).toBe(200);
    expect(broken.calls).toHaveLength(2);
    expect(evm.calls).toHaveLength(2);
    expect(gateway.usage.map((u) => u.upstream)).toEqual(['evm-2', 'evm-2', 'evm-2']);
  });

  it('never retries eth_sendRawTransaction, nor a batch that holds one', async () => {
    const r = await rpc({ jsonrpc: '2.0', id: 1, method: 'eth_sendRawTransaction', params: ['0x02f8'] });
    expect(r.status).toBe(502);
    expect(await r.json()).toMatchObject({ id: 1, error: { code: -32010 } });
    const batch = await rpc([
      { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber' },
      { jsonrpc: '2.0', id: 2, method: 'eth_sendRawTransaction', params: ['0x02f8'] },
    ]);
    expect(batch.status).toBe(502);
    expect(broken.calls).toHaveLength(2);
    expect(evm.calls).toHaveLength(0);

    broken.mode = 'ok';
    const sent = await rpc({ jsonrpc: '2.0', id: 2, method: 'eth_sendRawTransaction', params: ['0x02f8'] });
    expect(await sent.json()).toEqual({ jsonrpc: '2.0', id: 2, result: EVM_TX_HASH });
  });
});

describe('REST failover', () => {
  it('retries GET and read-only POST, never a broadcast', async () => {
    const got = await fetch(`${gateway.url}/trx/${gatekeeper.token}/wallet/getnowblock`);
    expect(await got.json()).toMatchObject({ blockID: TRON.blockID });
    const postedRead = await fetch(`${gateway.url}/trx/${gatekeeper.token}/wallet/getnowblock`, { method: 'POST', body: '{}' });
    expect(postedRead.status).toBe(200);
    expect(tron.calls).toHaveLength(2);

    const broadcast = await fetch(`${gateway.url}/trx/${gatekeeper.token}/wallet/broadcasttransaction`, { method: 'POST', body: '{"raw_data_hex":"0a02"}' });
    expect(broadcast.status).toBe(502);
    expect(await broadcast.json()).toMatchObject({ error: { code: 'upstream_unavailable' } });
    expect(tron.calls).toHaveLength(2);
    expect(brokenTron.calls).toHaveLength(3);
  });
});
