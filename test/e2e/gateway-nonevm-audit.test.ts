import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { defaultChainsPath } from '../../src/gateway/chains.js';
import { methodLabel } from '../../src/projections/usageMethod.js';
import { COSMOS_NODE, KASPA_NODE, startCosmosLcdFake, startJavaTronFake, startKaspaRestFake, TRON_NODE } from '../support/fakeNonEvmUpstreams.js';
import { closedPortUrl, type FakeUpstream } from '../support/fakeUpstreams.js';
import { startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * The passthrough chains (TRON, Cosmos, Kaspa) as the shipped config/chains.json has them, their
 * upstreams replaced by fakes that route and fail as the real servers do: what a developer's
 * calls reach, what comes back, and what is metered.
 */

let trx: FakeUpstream;
let atom: FakeUpstream;
let kas: FakeUpstream;
let down: string;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();

const shipped: Array<Record<string, unknown>> = JSON.parse(readFileSync(defaultChainsPath(), 'utf8')).chains;

/** The shipped entry of `id` (its paths, deny lists, read-only POSTs), on the given nodes, in that order. */
function shippedChain(id: string, urls: string[], as = id, timeoutMs = 1_000): Record<string, unknown> {
  const entry = shipped.find((c) => c.id === id);
  if (!entry) throw new Error(`no ${id} in config/chains.json`);
  return { ...entry, id: as, timeoutMs, upstreams: urls.map((url, i) => ({ url, label: `${as}-${i + 1}` })) };
}

beforeAll(async () => {
  [trx, atom, kas, down] = await Promise.all([startJavaTronFake(), startCosmosLcdFake(), startKaspaRestFake(), closedPortUrl()]);
  gateway = await startGateway({
    gatekeeper,
    // The first node first: a test that puts a dead node ahead of a live one knows which is tried first.
    pool: { random: () => 0, hedge: false },
    chains: [
      shippedChain('trx', [trx.url]),
      shippedChain('atom', [atom.url]),
      shippedChain('kas', [kas.url]),
      shippedChain('atom', [down, atom.url], 'atomhalf'),
      shippedChain('kas', [down, kas.url], 'kashalf'),
      shippedChain('kas', [kas.url], 'kasslow', 100),
    ],
  });
});
afterAll(async () => {
  await gateway?.close();
  await Promise.all([trx, atom, kas].map((f) => f?.close()));
});
beforeEach(() => {
  gatekeeper.grantOnly(null);
  gateway.usage.length = 0;
  for (const f of [trx, atom, kas]) f.reset();
});

interface Reply {
  status: number;
  headers: Headers;
  text: string;
}

async function call(method: 'GET' | 'POST', path: string, body?: string, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    body,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** A request with its target sent exactly as written (fetch would normalise `..` and `%2e`). */
function rawCall(method: string, path: string, body?: string): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(gateway.url);
  return new Promise((resolve, reject) => {
    const headers = body === undefined ? {} : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) };
    const req = request({ hostname, port, path, method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const T = (): string => gatekeeper.token;

describe('TRON (java-tron HTTP API, shipped trx entry)', () => {
  it('passes GET with a query and POST with a body through unchanged, one usage record each under the endpoint', async () => {
    const viaGet = await call('GET', `/trx/${T()}/wallet/getaccount?address=${TRON_NODE.address}&visible=true`);
    const body = `{"address":"${TRON_NODE.address}","visible":true}`;
    const viaPost = await call('POST', `/trx/${T()}/walletsolidity/getaccount`, body);
    expect(viaGet.status).toBe(200);
    expect(viaGet.text).toBe(viaPost.text);
    expect(JSON.parse(viaGet.text)).toMatchObject({ address: TRON_NODE.address, balance: TRON_NODE.balance });
    expect(trx.calls.map((c) => [c.method, c.url, c.body])).toEqual([
      ['GET', `/wallet/getaccount?address=${TRON_NODE.address}&visible=true`, ''],
      ['POST', '/walletsolidity/getaccount', body],
    ]);
    expect(gateway.usage).toMatchObject([
      { chain: 'trx', method: 'wallet/getaccount', status: 200, charged: true, errorMessage: null },
      { chain: 'trx', method: 'walletsolidity/getaccount', status: 200, charged: true, errorMessage: null },
    ]);
  });

  it.each([
    ['a path parameter', 'wallet/gettransactionsign;jsessionid=1'],
    ['an empty path parameter', 'wallet/generateaddress;'],
    ['an encoded path parameter', 'wallet/gettransactionsign%3Bx'],
    ['another case', 'wallet/GetTransactionSign'],
    ['a parameter on the denied prefix', 'wallet/easytransferbyprivate;v=2'],
  ])('never lets a private-key endpoint through, written with %s', async (_what, path) => {
    const r = await rawCall('POST', `/trx/${T()}/${path}`, '{"transaction":{},"privateKey":"00"}');
    expect(r.status).toBeGreaterThanOrEqual(400);
    expect(r.status).toBeLessThan(500);
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: expect.any(String), message: expect.any(String) } });
    expect(trx.calls).toEqual([]);
    expect(gateway.usage).toMatchObject([{ chain: 'trx', charged: false, upstream: null }]);
  });

  it('passes the node’s HTML 404 on sandboxed and meters it as a 404 of that path', async () => {
    const r = await call('GET', `/trx/${T()}/wallet/nosuchendpoint`);
    expect(r.status).toBe(404);
    expect(r.headers.get('content-type')).toBe('text/html;charset=iso-8859-1');
    expect(r.text).toContain('HTTP ERROR 404');
    expect(r.headers.get('content-security-policy')).toBe("sandbox; default-src 'none'");
    expect(gateway.usage).toMatchObject([{ method: 'wallet/nosuchendpoint', status: 404, errorMessage: 'HTTP 404', charged: true }]);
  });
});

describe('Kaspa (kaspa-rest-server, shipped kas entry)', () => {
  it('submits a transaction with POST /transactions, and passes the node’s 201 on', async () => {
    const tx = JSON.stringify({ transaction: { version: 0, inputs: [], outputs: [], lockTime: 0, subnetworkId: '00'.repeat(20) }, allowOrphan: false });
    const r = await call('POST', `/kas/${T()}/transactions`, tx);
    expect(r.status).toBe(201);
    expect(r.text).toBe(`{"transactionId":"${KASPA_NODE.transactionId}"}`);
    expect(kas.calls.map((c) => [c.method, c.url, c.body])).toEqual([['POST', '/transactions', tx]]);
    expect(gateway.usage).toMatchObject([{ chain: 'kas', method: 'transactions', status: 201, charged: true }]);
  });

  it('never retries a submission on another node, where a read POST is retried', async () => {
    const submitted = await call('POST', `/kashalf/${T()}/transactions`, JSON.stringify({ transaction: {} }));
    expect(submitted.status).toBe(502);
    expect(kas.calls).toEqual([]);
    const search = await call('POST', `/kashalf/${T()}/transactions/search`, JSON.stringify({ transactionIds: [] }));
    expect(kas.calls.map((c) => c.url)).toEqual(['/transactions/search']);
    expect(search.status).toBe(404); // the fake has no search: its own answer, from the second node
    expect(gateway.usage).toMatchObject([
      { chain: 'kashalf', method: 'transactions', status: 502, upstream: 'kashalf-1' },
      { chain: 'kashalf', method: 'transactions/search', status: 404, upstream: 'kashalf-2' },
    ]);
  });

  it('reads blocks from a low hash with GET /blocks?lowHash=…', async () => {
    const r = await call('GET', `/kas/${T()}/blocks?lowHash=${KASPA_NODE.lowHash}&includeBlocks=false`);
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text)).toMatchObject({ blockHashes: [KASPA_NODE.lowHash, expect.any(String)] });
    expect(kas.calls[0]?.url).toBe(`/blocks?lowHash=${KASPA_NODE.lowHash}&includeBlocks=false`);
    const byBlueScore = await call('GET', `/kas/${T()}/blocks-from-bluescore?blueScore=43679173&includeTransactions=false`);
    expect(byBlueScore.status).toBe(200);
    expect(kas.calls[1]?.url).toBe('/blocks-from-bluescore?blueScore=43679173&includeTransactions=false');
  });

  it('answers a node that times out 504 (charged) and one that fails without JSON 502 (not charged), each one record', async () => {
    kas.mode = 'slow';
    const late = await call('GET', `/kasslow/${T()}/info/blockdag`);
    expect(late.status).toBe(504);
    expect(JSON.parse(late.text)).toMatchObject({ error: { code: 'upstream_timeout' } });
    kas.mode = 'fail'; // 500 text/plain: a proxy's or a crashed server's answer, not the API's
    const failed = await call('GET', `/kas/${T()}/info/blockdag`);
    expect(failed.status).toBe(502);
    expect(JSON.parse(failed.text)).toMatchObject({ error: { code: 'upstream_unavailable' } });
    expect(gateway.usage).toMatchObject([
      { chain: 'kasslow', method: 'info/blockdag', status: 504, charged: true },
      { chain: 'kas', method: 'info/blockdag', status: 502, charged: false },
    ]);
  });

  it('forwards an address segment as written (raw or percent-encoded colon) and labels it {id}', async () => {
    const raw = await call('GET', `/kas/${T()}/addresses/${KASPA_NODE.address}/balance`);
    const encoded = await call('GET', `/kas/${T()}/addresses/${encodeURIComponent(KASPA_NODE.address)}/balance`);
    expect(raw.text).toBe(`{"address":"${KASPA_NODE.address}","balance":${KASPA_NODE.balance}}`);
    expect(encoded.text).toBe(raw.text);
    expect(kas.calls.map((c) => c.url)).toEqual([`/addresses/${KASPA_NODE.address}/balance`, `/addresses/${encodeURIComponent(KASPA_NODE.address)}/balance`]);
    expect(gateway.usage.map((u) => methodLabel(u.method))).toEqual(['addresses/{id}/balance', 'addresses/{id}/balance']);
  });

  it('passes FastAPI’s 400 and 422 on unchanged and meters them as errors', async () => {
    const bad = await call('GET', `/kas/${T()}/addresses/kaspa:nothere/balance`);
    expect(bad.status).toBe(400);
    expect(bad.text).toBe('{"detail":"Invalid address: kaspa:nothere"}');
    const unprocessable = await call('POST', `/kas/${T()}/transactions`, '{"allowOrphan":false}');
    expect(unprocessable.status).toBe(422);
    expect(JSON.parse(unprocessable.text)).toEqual({ detail: [{ loc: ['body', 'transaction'], msg: 'field required', type: 'value_error.missing' }] });
    expect(gateway.usage).toMatchObject([
      { status: 400, errorMessage: 'Invalid address: kaspa:nothere' },
      { status: 422, errorMessage: 'HTTP 422' },
    ]);
  });
});

describe('Cosmos (LCD, shipped atom entry)', () => {
  it('passes a query at an older height (x-cosmos-block-height) on to the node', async () => {
    const now = await call('GET', `/atom/${T()}/cosmos/bank/v1beta1/balances/${COSMOS_NODE.address}`);
    const then = await call('GET', `/atom/${T()}/cosmos/bank/v1beta1/balances/${COSMOS_NODE.address}`, undefined, { 'x-cosmos-block-height': '24000000' });
    expect(JSON.parse(now.text)).toMatchObject({ balances: [{ denom: 'uatom', amount: COSMOS_NODE.balanceNow }] });
    expect(then.status).toBe(200);
    expect(JSON.parse(then.text)).toMatchObject({ balances: [{ denom: 'uatom', amount: '750000' }] });
    expect(gateway.usage.map((u) => methodLabel(u.method))).toEqual(['cosmos/bank/v1beta1/balances/{id}', 'cosmos/bank/v1beta1/balances/{id}']);
  });

  it('forwards a tx search query byte for byte: repeated keys, encoded quotes and pagination', async () => {
    const query =
      'events=message.sender%3D%27cosmos1fl48vsnmsdzcv85q5d2q4z5ajdha8yu34mf0eh%27&events=tx.height%3E%3D100&pagination.limit=5&order_by=ORDER_BY_DESC';
    const r = await call('GET', `/atom/${T()}/cosmos/tx/v1beta1/txs?${query}`);
    expect(r.status).toBe(200);
    expect(atom.calls[0]?.url).toBe(`/cosmos/tx/v1beta1/txs?${query}`);
  });

  it('passes grpc-gateway errors on with their status and meters their message under the endpoint', async () => {
    const hash = 'AB'.repeat(32);
    const missing = await call('GET', `/atom/${T()}/cosmos/tx/v1beta1/txs/${hash}`);
    expect(missing.status).toBe(404);
    expect(missing.text).toBe(`{"code":5,"message":"tx not found: ${hash}","details":[]}`);
    const invalid = await call('GET', `/atom/${T()}/cosmos/bank/v1beta1/balances/cosmos1short`);
    expect(invalid.status).toBe(400);
    expect(gateway.usage).toMatchObject([
      { status: 404, errorMessage: `tx not found: ${hash}`, rpcErrorCode: null, charged: true },
      { status: 400, errorMessage: 'decoding bech32 failed: invalid address cosmos1short', charged: true },
    ]);
    expect(gateway.usage.map((u) => methodLabel(u.method))).toEqual(['cosmos/tx/v1beta1/txs/{id}', 'cosmos/bank/v1beta1/balances/cosmos1short']);
  });

  it('retries a simulation on the next node, never a broadcast', async () => {
    const tx = JSON.stringify({ tx_bytes: 'CpIBCo8BChwvY29zbW9z', mode: 'BROADCAST_MODE_SYNC' });
    const broadcast = await call('POST', `/atomhalf/${T()}/cosmos/tx/v1beta1/txs`, tx);
    expect(broadcast.status).toBe(502);
    expect(JSON.parse(broadcast.text)).toMatchObject({ error: { code: 'upstream_unavailable' } });
    expect(atom.calls).toEqual([]);
    const simulated = await call('POST', `/atomhalf/${T()}/cosmos/tx/v1beta1/simulate`, JSON.stringify({ tx_bytes: 'CpIBCo8BChwvY29zbW9z' }));
    expect(simulated.status).toBe(200);
    expect(atom.calls.map((c) => c.url)).toEqual(['/cosmos/tx/v1beta1/simulate']);
  });

  it('refuses paths outside cosmos/, ibc/ and cosmwasm/ (Tendermint RPC, node admin) without a node call', async () => {
    for (const path of ['status', 'abci_query?path=%22/app/version%22', 'node_info', 'validatorsets/latest']) {
      const r = await call('GET', `/atom/${T()}/${path}`);
      expect(r.status).toBe(404);
      expect(JSON.parse(r.text)).toMatchObject({ error: { code: 'not_found' } });
    }
    expect(atom.calls).toEqual([]);
    expect(gateway.usage.map((u) => u.charged)).toEqual([false, false, false, false]);
  });
});

describe('traversal and odd paths on every passthrough chain', () => {
  const odd = ['%2e%2e/%2e%2e/admin', '.%2E/admin', '..', 'x/%2e', '%2F%2Fadmin', 'a%5Cb', 'a%00b'];
  it.each(['trx', 'atom', 'kas'])('%s: 400 invalid_path, never a node call, one uncharged record each', async (chain) => {
    const prefix = chain === 'trx' ? 'wallet' : chain === 'atom' ? 'cosmos' : 'info';
    for (const tail of odd) {
      const r = await rawCall('GET', `/${chain}/${T()}/${prefix}/${tail}`);
      expect(r.status, tail).toBe(400);
      expect(JSON.parse(r.text), tail).toMatchObject({ error: { code: 'invalid_path' } });
    }
    const doubleSlash = await rawCall('GET', `/${chain}/${T()}//${prefix}/x`);
    expect(doubleSlash.status).toBe(400);
    for (const f of [trx, atom, kas]) expect(f.calls).toEqual([]);
    expect(gateway.usage).toHaveLength(odd.length + 1);
    expect(gateway.usage.every((u) => u.charged === false && u.status === 400)).toBe(true);
  });
});
