import { request } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  COSMOS,
  closedPortUrl,
  type FakeUpstream,
  KASPA,
  SOLANA,
  SUI,
  startCosmosFake,
  startFake,
  startKaspaFake,
  startSolanaFake,
  startSuiFake,
  startTronFake,
  TRON,
} from '../support/fakeUpstreams.js';
import { startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/** REST chains end to end, against fakes that answer like Solana, Sui, TRON, Cosmos and Kaspa nodes. */

let sol: FakeUpstream;
let sui: FakeUpstream;
let trx: FakeUpstream;
let atom: FakeUpstream;
let kas: FakeUpstream;
let bigNumbers: FakeUpstream;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();
const PUBKEY = '7cVfgArCheMR6Cs4t6vz5rfnqd56vZq4ndaBrY5xkxXy';

const passthrough = (id: string, url: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  id,
  name: id,
  protocol: 'rest',
  rest: 'passthrough',
  timeoutMs: 1_000,
  upstreams: [{ url, label: `${id}-node` }],
  ...extra,
});

beforeAll(async () => {
  [sol, sui, trx, atom, kas] = await Promise.all([startSolanaFake(), startSuiFake(), startTronFake(), startCosmosFake(), startKaspaFake()]);
  bigNumbers = await startFake(() => ({ body: null, raw: '{"jsonrpc":"2.0","result":18446744073709551615,"id":1}' }));
  const slowSui = await startSuiFake();
  slowSui.mode = 'slow';
  gateway = await startGateway({
    gatekeeper,
    chains: [
      { id: 'sol', name: 'Solana', protocol: 'rest', rest: 'solana', jsonRpcPost: true, upstreams: [{ url: sol.url, label: 'sol-node' }] },
      { id: 'solbig', name: 'Solana', protocol: 'rest', rest: 'solana', upstreams: [{ url: bigNumbers.url }] },
      { id: 'sui', name: 'Sui', protocol: 'rest', rest: 'sui', upstreams: [{ url: sui.url, label: 'sui-node' }] },
      { id: 'suislow', name: 'Sui', protocol: 'rest', rest: 'sui', timeoutMs: 100, upstreams: [{ url: slowSui.url }] },
      passthrough('trx', trx.url, {
        allowedPaths: ['wallet/*', 'walletsolidity/*'],
        deniedPaths: ['wallet/easytransfer*', 'wallet/*byprivate*'],
        readOnlyPosts: ['wallet/get*'],
      }),
      passthrough('atom', atom.url, { allowedPaths: ['cosmos/*'] }),
      passthrough('kas', kas.url),
      passthrough('kasdown', await closedPortUrl()),
    ],
  });
  afterAll(() => slowSui.close());
});
afterAll(async () => {
  await gateway?.close();
  await Promise.all([sol, sui, trx, atom, kas, bigNumbers].map((f) => f?.close()));
});
beforeEach(() => {
  gatekeeper.grantOnly(null);
  gateway.usage.length = 0;
  for (const f of [sol, sui, trx, atom, kas]) f.reset();
});

interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: unknown;
}

async function call(method: 'GET' | 'POST', path: string, body?: string, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    body,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** A GET with the path sent exactly as written (fetch would normalise dot segments away). */
function rawGet(path: string): Promise<{ status: number }> {
  const { hostname, port } = new URL(gateway.url);
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, path, method: 'GET' }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0 }));
    });
    req.on('error', reject);
    req.end();
  });
}

const get = (path: string, headers?: Record<string, string>): Promise<Reply> => call('GET', path, undefined, headers);
const sentToNode = (fake: FakeUpstream, i = 0): { method: string; params: unknown } => JSON.parse(fake.calls[i]?.body ?? 'null');

describe('Solana', () => {
  it('answers GET getBlockHeight with {"result":{"blockHeight":N}}', async () => {
    const r = await get(`/sol/${gatekeeper.token}/getBlockHeight`);
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ result: { blockHeight: SOLANA.blockHeight } });
    expect(sentToNode(sol)).toMatchObject({ jsonrpc: '2.0', method: 'getBlockHeight', params: [] });
    expect(gateway.usage).toMatchObject([{ method: 'getBlockHeight', status: 200, upstream: 'sol-node', rpcErrorCode: null }]);
  });

  it('takes the token from a Bearer header', async () => {
    const r = await get('/sol/getSlot?commitment=finalized&minContextSlot=5', { authorization: `Bearer ${gatekeeper.token}` });
    expect(r.json).toEqual({ result: { slot: SOLANA.finalizedSlot } });
    expect(sentToNode(sol).params).toEqual([{ commitment: 'finalized', minContextSlot: 5 }]);
  });

  it('builds params from path segments, ?params= and the body; getBalance comes back as the node wrote it', async () => {
    const fromPath = await get(`/sol/${gatekeeper.token}/getBalance/${PUBKEY}?commitment=confirmed`);
    expect(fromPath.json).toEqual({ result: { context: { apiVersion: SOLANA.apiVersion, slot: SOLANA.slot }, value: SOLANA.lamports } });
    expect(sentToNode(sol, 0).params).toEqual([PUBKEY, { commitment: 'confirmed' }]);

    const params = encodeURIComponent(JSON.stringify([PUBKEY, { commitment: 'processed' }]));
    await get(`/sol/${gatekeeper.token}/getBalance?params=${params}`);
    expect(sentToNode(sol, 1).params).toEqual([PUBKEY, { commitment: 'processed' }]);

    const posted = await call('POST', `/sol/${gatekeeper.token}/getBalance`, JSON.stringify({ params: [PUBKEY] }));
    expect(posted.status).toBe(200);
    expect(sentToNode(sol, 2).params).toEqual([PUBKEY]);
  });

  it('keeps integers beyond 2^53 exact', async () => {
    const r = await get(`/solbig/${gatekeeper.token}/getSlot`);
    expect(r.text).toBe('{"result":{"slot":18446744073709551615}}');
  });

  it('maps a node error to a REST error and meters its code', async () => {
    const r = await get(`/sol/${gatekeeper.token}/getBalance`);
    expect(r.status).toBe(400);
    expect(r.json).toEqual({ error: { code: 'invalid_params', message: 'Invalid params: missing pubkey', rpcCode: -32602 } });
    expect(gateway.usage).toMatchObject([{ status: 400, rpcErrorCode: -32602, method: 'getBalance' }]);
    const unknown = await get(`/sol/${gatekeeper.token}/getNothing`);
    expect(unknown.status).toBe(404);
    expect(unknown.json).toMatchObject({ error: { code: 'method_not_found', rpcCode: -32601 } });
  });

  it('refuses methods outside the REST list, writes over GET and bad params without calling the node', async () => {
    const notListed = await get(`/sol/${gatekeeper.token}/notAMethodWeServe`);
    expect(notListed.status).toBe(404);
    const write = await get(`/sol/${gatekeeper.token}/sendTransaction`);
    expect(write.status).toBe(405);
    expect(write.headers.get('allow')).toBe('POST');
    expect(write.json).toMatchObject({ error: { code: 'use_post' } });
    const badParams = await get(`/sol/${gatekeeper.token}/getBalance?params=notjson`);
    expect(badParams.status).toBe(400);
    const badName = await get(`/sol/${gatekeeper.token}/get-block`);
    expect(badName.status).toBe(400);
    expect(sol.calls).toHaveLength(0);
    const sent = await call('POST', `/sol/${gatekeeper.token}/sendTransaction`, JSON.stringify({ params: ['AQAB', { encoding: 'base64' }] }));
    expect(sent.json).toMatchObject({ result: { signature: expect.any(String) } });
  });

  it('also takes JSON-RPC on POST /sol/<token>', async () => {
    const r = await call('POST', `/sol/${gatekeeper.token}`, JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'getBlockHeight' }));
    expect(r.json).toEqual({ jsonrpc: '2.0', result: SOLANA.blockHeight, id: 4 });
    const batch = await call(
      'POST',
      `/sol/${gatekeeper.token}`,
      JSON.stringify([
        { jsonrpc: '2.0', id: 1, method: 'getSlot' },
        { jsonrpc: '2.0', id: 2, method: 'getHealth' },
      ]),
    );
    expect(batch.json).toEqual([
      { jsonrpc: '2.0', result: SOLANA.finalizedSlot, id: 1 },
      { jsonrpc: '2.0', result: 'ok', id: 2 },
    ]);
  });
});

describe('Sui', () => {
  it('maps GET /sui/<token>/<method> onto the node JSON-RPC', async () => {
    const r = await get(`/sui/${gatekeeper.token}/sui_getLatestCheckpointSequenceNumber`);
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ result: SUI.checkpoint });
    const obj = await get(`/sui/${gatekeeper.token}/sui_getObject/0x5?showType=true`);
    expect(obj.json).toMatchObject({ result: { data: { objectId: '0x5' } } });
    expect(sentToNode(sui, 1).params).toEqual(['0x5', { showType: true }]);
  });

  it('refuses a JSON-RPC body: Sui is REST here', async () => {
    const r = await call('POST', `/sui/${gatekeeper.token}`, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'sui_getChainIdentifier' }));
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ error: { code: -32600, message: expect.stringContaining('REST') } });
    expect(sui.calls).toHaveLength(0);
  });

  it('answers 504 upstream_timeout when the node is too slow', async () => {
    const r = await get(`/suislow/${gatekeeper.token}/sui_getChainIdentifier`);
    expect(r.status).toBe(504);
    expect(r.json).toMatchObject({ error: { code: 'upstream_timeout' } });
  });
});

describe('passthrough chains', () => {
  it('forwards TRON GET and POST to the node as they are', async () => {
    const r = await get(`/trx/${gatekeeper.token}/wallet/getnowblock`);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ blockID: TRON.blockID, block_header: { raw_data: { number: TRON.number } } });
    const account = JSON.stringify({ address: 'TZ4UXDV5ZhNW7fb2AMSbgfAEZ7hWsnYS2g', visible: true });
    const posted = await call('POST', `/trx/${gatekeeper.token}/wallet/getaccount`, account);
    expect(posted.text).toBe(account);
    expect(trx.calls.map((c) => [c.method, c.url])).toEqual([
      ['GET', '/wallet/getnowblock'],
      ['POST', '/wallet/getaccount'],
    ]);
    expect(trx.calls[1]?.headers['content-type']).toBe('application/json');
    expect(trx.calls[0]?.headers.authorization).toBeUndefined();
    expect(gateway.usage.map((u) => u.method)).toEqual(['wallet/getnowblock', 'wallet/getaccount']);
  });

  it('refuses paths outside the chain list, denied paths and traversal without calling the node', async () => {
    expect((await get(`/trx/${gatekeeper.token}/admin/shutdown`)).status).toBe(404);
    expect((await call('POST', `/trx/${gatekeeper.token}/wallet/easytransferbyprivate`, '{}')).status).toBe(404);
    const traversal = await get(`/trx/${gatekeeper.token}/wallet/..%2F..%2Fadmin`);
    expect(traversal.status).toBe(400);
    expect(traversal.json).toMatchObject({ error: { code: 'invalid_path' } });
    expect((await rawGet(`/trx/${gatekeeper.token}/wallet/%2e%2e/admin`)).status).toBe(400);
    expect((await rawGet(`/trx/${gatekeeper.token}/wallet/../../admin`)).status).toBe(400);
    expect((await rawGet(`/trx/${gatekeeper.token}/wallet//getnowblock`)).status).toBe(400);
    expect(trx.calls).toHaveLength(0);
  });

  it('forwards Cosmos LCD paths with their query', async () => {
    const r = await get(`/atom/${gatekeeper.token}/cosmos/base/tendermint/v1beta1/blocks/latest?pagination.limit=1`);
    expect(r.json).toMatchObject({ block: { header: { chain_id: COSMOS.chainId, height: COSMOS.height } } });
    expect(atom.calls[0]?.url).toBe('/cosmos/base/tendermint/v1beta1/blocks/latest?pagination.limit=1');
    const notServed = await get(`/atom/${gatekeeper.token}/cosmos/nothing/here`);
    expect(notServed.status).toBe(501);
    expect(gateway.usage.at(-1)).toMatchObject({ status: 501, errorMessage: 'Not Implemented' });
  });

  it('forwards Kaspa REST calls and passes the node 404 on', async () => {
    const r = await get(`/kas/${gatekeeper.token}/info/blockdag`);
    expect(r.json).toMatchObject({ networkName: KASPA.networkName, blockCount: KASPA.blockCount, virtualDaaScore: KASPA.virtualDaaScore });
    const missing = await get(`/kas/${gatekeeper.token}/info/nothing`);
    expect(missing.status).toBe(404);
    expect(missing.json).toEqual({ detail: 'Not Found' });
  });

  it("passes a node's answer that is not JSON on sandboxed: its page cannot run on the origin the dashboard shares", async () => {
    kas.mode = 'garbage'; // 200 text/html, as a node's maintenance or error page
    const page = await get(`/kas/${gatekeeper.token}/info/blockdag`);
    expect(page.headers.get('content-type')).toBe('text/html');
    expect(page.text).toBe('<html>maintenance</html>');
    expect(page.headers.get('content-security-policy')).toBe("sandbox; default-src 'none'");
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
    kas.mode = 'ok';
    // JSON answers, the hot path, carry neither: a browser never runs them.
    const json = await get(`/kas/${gatekeeper.token}/info/blockdag`);
    expect(json.headers.get('content-security-policy')).toBeNull();
  });

  it('answers 502 upstream_unavailable when the node is down', async () => {
    const r = await get(`/kasdown/${gatekeeper.token}/info/blockdag`);
    expect(r.status).toBe(502);
    expect(r.json).toMatchObject({ error: { code: 'upstream_unavailable' } });
    expect(gateway.usage).toMatchObject([{ status: 502, method: 'info/blockdag', rpcErrorCode: null }]);
  });
});

describe('REST refusals', () => {
  it('answers 401 and 429 in the REST shape with limit headers', async () => {
    const anonymous = await get('/kas/info/blockdag');
    expect(anonymous.status).toBe(401);
    expect(anonymous.json).toMatchObject({ error: { code: 'unauthorized' } });
    gatekeeper.grantOnly(0);
    const limited = await get(`/kas/${gatekeeper.token}/info/blockdag`);
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('1');
    expect(limited.headers.get('x-ratelimit-limit')).toBe('1000');
    expect(limited.json).toMatchObject({ error: { code: 'rate_limited', retryAfter: 1 } });
    expect(kas.calls).toHaveLength(0);
    expect(gateway.usage).toMatchObject([{ status: 429, method: 'info/blockdag' }]);
  });

  it('answers a GET without method on a REST chain with 400', async () => {
    const r = await get(`/sol/${gatekeeper.token}`);
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ error: { code: 'missing_path' } });
  });
});
