import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { UsageRecord } from '../../src/domain/usage.js';
import { closedPortUrl, type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/** JSON-RPC 2.0 handling end to end: ganache behind the gateway, fakes for failing upstreams. */

let node: GanacheNode;
let evm: FakeUpstream;
let slow: FakeUpstream;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();

beforeAll(async () => {
  [node, evm, slow] = await Promise.all([startGanache(), startEvmFake(), startEvmFake()]);
  slow.mode = 'slow';
  slow.delayMs = 1_000;
  gateway = await startGateway({
    gatekeeper,
    chains: [
      chainEntry('local', [node.url]),
      chainEntry('fake', [evm.url]),
      chainEntry('down', [await closedPortUrl()]),
      chainEntry('slow', [slow.url], { timeoutMs: 150 }),
      { id: 'trx', name: 'TRON', protocol: 'rest', rest: 'passthrough', upstreams: [{ url: evm.url }] },
    ],
    pool: { ejectAfterFailures: 1000 },
  });
});
afterAll(async () => {
  await gateway?.close();
  await Promise.all([node?.close(), evm?.close(), slow?.close()]);
});
beforeEach(() => {
  gatekeeper.grantOnly(null);
  gatekeeper.forbiddenChains.clear();
  gatekeeper.failure = null;
  gateway.usage.length = 0;
  evm.reset();
});

interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: unknown;
}

async function post(path: string, body: string, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(`${gateway.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, text, json };
}

const rpc = (chain: string, body: unknown, headers?: Record<string, string>): Promise<Reply> =>
  post(`/${chain}/${gatekeeper.token}`, typeof body === 'string' ? body : JSON.stringify(body), headers);
const call = (method: string, id: unknown = 1, params: unknown = []): Record<string, unknown> => ({ jsonrpc: '2.0', id, method, params });

describe('ids and notifications', () => {
  it.each([7, 'req-abc', null])('echoes the id %j unchanged', async (id) => {
    const r = await rpc('local', call('eth_blockNumber', id));
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ jsonrpc: '2.0', id, result: '0x0' });
  });

  it('echoes an id beyond 2^53 digit for digit, although the node rounds it', async () => {
    const r = await rpc('local', '{"jsonrpc":"2.0","id":12345678901234567890123,"method":"eth_blockNumber","params":[]}');
    expect(r.text).toContain('"id":12345678901234567890123');
    expect(r.text).toContain('"result":"0x0"');
    const batch = await rpc('local', '[{"jsonrpc":"2.0","id":98765432109876543210,"method":"eth_chainId"}]');
    expect(batch.text).toContain('"id":98765432109876543210');
  });

  it('answers a notification with 204 and no body', async () => {
    const r = await rpc('fake', { jsonrpc: '2.0', method: 'eth_blockNumber' });
    expect(r.status).toBe(204);
    expect(r.text).toBe('');
    expect(evm.calls).toHaveLength(1);
    const batch = await rpc('fake', [
      { jsonrpc: '2.0', method: 'eth_blockNumber' },
      { jsonrpc: '2.0', method: 'eth_chainId' },
    ]);
    expect(batch.status).toBe(204);
    expect(batch.text).toBe('');
    expect(gateway.usage).toHaveLength(3);
  });
});

describe('batches', () => {
  it('answers valid, invalid, denied and limit-refused members in the original order', async () => {
    gatekeeper.grantOnly(3);
    // The first member goes to the node (a pending count is never kept; eth_blockNumber may be in the cache by now).
    const r = await rpc('local', [
      call('eth_getTransactionCount', 1, ['0x00000000000000000000000000000000000000aa', 'pending']),
      { foo: 'bar' },
      call('admin_peers', 'denied'),
      { jsonrpc: '2.0', id: 'bad-params', method: 'eth_chainId', params: 5 },
      { jsonrpc: '2.0', method: 'eth_chainId' },
      call('eth_chainId', 2),
      call('eth_blockNumber', 3),
      { jsonrpc: '1.0', id: 4, method: 'eth_chainId' },
      5,
    ]);
    expect(r.status).toBe(200);
    const answers = r.json as Array<{ id: unknown; result?: unknown; error?: { code: number; data?: unknown } }>;
    expect(answers.map((a) => [a.id, a.result ?? a.error?.code])).toEqual([
      [1, '0x0'],
      [null, -32600],
      ['denied', -32601],
      ['bad-params', -32602],
      [2, '0x539'],
      [3, -32005],
      [4, -32600],
      [null, -32600],
    ]);
    expect(answers[5]?.error?.data).toEqual({ retryAfter: 1 });
    // Forwardable calls: ids 1, the notification, 2 and 3 → cost 4, the first 3 granted.
    expect(gatekeeper.requests.at(-1)?.cost).toBe(4);

    expect(gateway.usage).toHaveLength(9);
    const base = gateway.usage[0]?.requestId.split(':')[0];
    expect(gateway.usage.map((u) => u.requestId)).toEqual(Array.from({ length: 9 }, (_, i) => `${base}:${i}`));
    expect(gateway.usage.map((u) => [u.method, u.rpcErrorCode])).toEqual([
      ['eth_getTransactionCount', null],
      ['(invalid)', -32600],
      ['admin_peers', -32601],
      ['eth_chainId', -32602],
      ['eth_chainId', null],
      ['eth_chainId', null],
      ['eth_blockNumber', -32005],
      ['eth_chainId', -32600],
      ['(invalid)', -32600],
    ]);
    expect(gateway.usage[0]).toMatchObject({ upstream: 'local-1', status: 200 });
    expect(gateway.usage[0]?.upstreamMs).toBeGreaterThan(0);
    expect(gateway.usage[2]).toMatchObject({ upstream: null, upstreamMs: null });
  });

  it('keeps repeated ids apart and matches answers the node sends out of order', async () => {
    const r = await rpc('fake', [call('eth_blockNumber', 1), call('eth_chainId', 1), call('eth_getBalance', 'x')]);
    expect(r.json).toEqual([
      { jsonrpc: '2.0', id: 1, result: '0x10' },
      { jsonrpc: '2.0', id: 1, result: '0x539' },
      { jsonrpc: '2.0', id: 'x', result: '0xde0b6b3a7640000' },
    ]);
    expect(evm.calls).toHaveLength(1);
  });

  it('meters a node error inside a batch', async () => {
    await rpc('fake', [call('eth_call', 1), call('eth_blockNumber', 2)]);
    expect(gateway.usage.map((u) => u.rpcErrorCode)).toEqual([3, null]);
    expect(gateway.usage[0]?.errorMessage).toBe('execution reverted');
  });

  it('answers an empty batch with one -32600', async () => {
    const r = await rpc('fake', []);
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(evm.calls).toHaveLength(0);
  });

  it('refuses a batch over the limit with 413 and a body over 1 MiB with 413', async () => {
    const big = await rpc(
      'fake',
      Array.from({ length: 101 }, (_, i) => call('eth_blockNumber', i)),
    );
    expect(big.status).toBe(413);
    expect(big.json).toMatchObject({ id: null, error: { code: -32600 } });
    const huge = await rpc('fake', call('eth_call', 1, [{ data: `0x${'00'.repeat(600_000)}` }, 'latest']));
    expect(huge.status).toBe(413);
    expect(huge.json).toMatchObject({ id: null, error: { code: -32600 } });
    expect(evm.calls).toHaveLength(0);
    expect(gateway.usage.map((u) => u.status)).toEqual([413, 413]);
  });

  it('answers a whole batch refused by the limit with 429 and one -32005 per call', async () => {
    gatekeeper.grantOnly(0);
    const r = await rpc('fake', [call('eth_blockNumber', 1), call('eth_chainId', 2)]);
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBe('1');
    expect((r.json as Array<{ id: number; error: { code: number } }>).map((a) => [a.id, a.error.code])).toEqual([
      [1, -32005],
      [2, -32005],
    ]);
    expect(evm.calls).toHaveLength(0);
    expect(gateway.usage.map((u) => [u.status, u.rpcErrorCode])).toEqual([
      [429, -32005],
      [429, -32005],
    ]);
  });
});

describe('errors', () => {
  it('answers a parse error with 400, -32700 and id null', async () => {
    for (const body of ['{"jsonrpc":"2.0",', '', 'null]']) {
      const r = await rpc('fake', body);
      expect(r.status).toBe(400);
      expect(r.json).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32700, message: expect.any(String) } });
    }
    const notUtf8 = await fetch(`${gateway.url}/fake/${gatekeeper.token}`, { method: 'POST', body: Buffer.from([0x7b, 0xff, 0xfe, 0x7d]) });
    expect(notUtf8.status).toBe(400);
    expect(evm.calls).toHaveLength(0);
  });

  it('answers an invalid single call with 400 and a denied method with 403, without calling the node', async () => {
    const invalid = await rpc('fake', { jsonrpc: '2.0', id: 9, method: 42 });
    expect(invalid.status).toBe(400);
    expect(invalid.json).toMatchObject({ id: 9, error: { code: -32600 } });
    const badParams = await rpc('fake', { jsonrpc: '2.0', id: 10, method: 'eth_chainId', params: 'x' });
    expect(badParams.json).toMatchObject({ id: 10, error: { code: -32602 } });
    for (const method of ['admin_addPeer', 'personal_unlockAccount', 'debug_traceTransaction', 'miner_start', 'ADMIN_peers']) {
      const denied = await rpc('fake', call(method, 'd'));
      expect(denied.status).toBe(403);
      expect(denied.json).toMatchObject({ id: 'd', error: { code: -32601 } });
    }
    expect(evm.calls).toHaveLength(0);
  });

  it('refuses a missing, unknown or misplaced token with 401 and records nothing', async () => {
    const body = JSON.stringify(call('eth_blockNumber'));
    const attempts: Array<[string, Record<string, string>]> = [
      ['/fake', {}],
      ['/fake/gk_notARealToken', {}],
      ['/fake', { authorization: 'Bearer gk_wrong' }],
      [`/fake?api_key=${gatekeeper.token}`, {}],
      [`/fake?token=${gatekeeper.token}`, {}],
      ['/fake', { authorization: `Basic ${Buffer.from(`user:${gatekeeper.token}`).toString('base64')}` }],
    ];
    for (const [path, headers] of attempts) {
      const r = await post(path, body, headers);
      expect(r.status, path).toBe(401);
      expect(r.json).toMatchObject({ id: 1, error: { code: -32001 } });
      expect(r.headers.get('x-ratelimit-limit')).toBe('1000');
    }
    expect(gatekeeper.requests.slice(-attempts.length).map((q) => q.via)).toEqual([null, 'path', 'bearer', 'query', 'query', 'basic']);
    expect(evm.calls).toHaveLength(0);
    expect(gateway.usage).toHaveLength(0);
  });

  it('answers a chain outside the plan with 403 -32003 and meters it', async () => {
    gatekeeper.forbiddenChains.add('fake');
    const r = await rpc('fake', call('eth_blockNumber', 5));
    expect(r.status).toBe(403);
    expect(r.json).toMatchObject({ id: 5, error: { code: -32003 } });
    expect(evm.calls).toHaveLength(0);
    expect(gateway.usage).toMatchObject([{ status: 403, rpcErrorCode: -32003, method: 'eth_blockNumber' }]);
  });

  it('answers a single call over the limit with 429, Retry-After and data.retryAfter', async () => {
    gatekeeper.grantOnly(0);
    const r = await rpc('fake', call('eth_blockNumber', 5));
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBe('1');
    expect(r.headers.get('x-monthlylimit-remaining')).toBe('0');
    expect(r.json).toMatchObject({ id: 5, error: { code: -32005, data: { retryAfter: 1 } } });
  });

  it('answers 502 -32010 when the node is down and 504 -32015 when it is too slow', async () => {
    const down = await rpc('down', call('eth_blockNumber', 'a'));
    expect(down.status).toBe(502);
    expect(down.json).toMatchObject({ id: 'a', error: { code: -32010 } });
    const late = await rpc('slow', call('eth_blockNumber', 'b'));
    expect(late.status).toBe(504);
    expect(late.json).toMatchObject({ id: 'b', error: { code: -32015 } });
    expect(gateway.usage.map((u) => [u.status, u.rpcErrorCode, u.upstream])).toEqual([
      [502, -32010, 'down-1'],
      [504, -32015, 'slow-1'],
    ]);
    const batch = await rpc('down', [call('eth_blockNumber', 1), call('admin_peers', 2)]);
    expect(batch.status).toBe(502);
    expect((batch.json as Array<{ error: { code: number } }>).map((a) => a.error.code)).toEqual([-32010, -32601]);
  });

  it('answers 503 when the gatekeeper cannot decide, without calling the node', async () => {
    gatekeeper.failure = new Error('redis down');
    const r = await rpc('fake', call('eth_blockNumber', 1));
    expect(r.status).toBe(503);
    expect(r.json).toMatchObject({ id: 1, error: { code: -32603 } });
    const rest = await fetch(`${gateway.url}/trx/${gatekeeper.token}/wallet/getnowblock`);
    expect(rest.status).toBe(503);
    expect(await rest.json()).toMatchObject({ error: { code: 'service_unavailable' } });
    expect(evm.calls).toHaveLength(0);
  });

  it('answers 502 when the node sends something that is not JSON-RPC', async () => {
    evm.mode = 'garbage';
    const r = await rpc('fake', call('eth_blockNumber', 1));
    expect(r.status).toBe(502);
    expect(r.json).toMatchObject({ id: 1, error: { code: -32010 } });
  });

  it('refuses unsupported media types with 415', async () => {
    const r = await post(`/fake/${gatekeeper.token}`, JSON.stringify(call('eth_blockNumber')), { 'content-type': 'multipart/form-data; boundary=x' });
    expect(r.status).toBe(415);
    const plain = await post(`/fake/${gatekeeper.token}`, JSON.stringify(call('eth_blockNumber')), { 'content-type': 'text/plain' });
    expect(plain.status).toBe(200);
  });

  it('answers a JSON-RPC body on a REST chain and a REST call on a JSON-RPC chain with 400 naming the protocol', async () => {
    const toRest = await rpc('trx', call('eth_blockNumber', 'mine'));
    expect(toRest.status).toBe(400);
    expect(toRest.json).toMatchObject({ id: 'mine', error: { code: -32600, message: expect.stringContaining('REST') } });
    const batchToRest = await rpc('trx', [call('eth_blockNumber', 3), call('eth_chainId', 4)]);
    expect(batchToRest.json).toMatchObject([
      { id: 3, error: { code: -32600 } },
      { id: 4, error: { code: -32600 } },
    ]);
    const restOnRpc = await fetch(`${gateway.url}/fake/${gatekeeper.token}/eth_blockNumber`);
    expect(restOnRpc.status).toBe(400);
    expect(await restOnRpc.json()).toMatchObject({ error: { code: 'protocol_mismatch', message: expect.stringContaining('JSON-RPC') } });
    const getOnRpc = await fetch(`${gateway.url}/fake/${gatekeeper.token}`);
    expect(getOnRpc.status).toBe(400);
    expect(evm.calls).toHaveLength(0);
  });

  it('answers an unknown chain with 404 in the shape of the call', async () => {
    const rpcShaped = await rpc('nochain', call('eth_blockNumber', 42));
    expect(rpcShaped.status).toBe(404);
    expect(rpcShaped.json).toMatchObject({ jsonrpc: '2.0', id: 42, error: { code: -32601 } });
    const restShaped = await fetch(`${gateway.url}/nochain/${gatekeeper.token}/getBlockHeight`);
    expect(restShaped.status).toBe(404);
    expect(await restShaped.json()).toMatchObject({ error: { code: 'unknown_chain' } });
  });

  it("answers errors about the whole request to the caller's ids, and null only when the body cannot be read", async () => {
    const bigId = '123456789012345678901234567890';
    const single = await rpc('nochain', `{"jsonrpc":"2.0","id":${bigId},"method":"eth_blockNumber"}`);
    expect(single.text).toContain(`"id":${bigId}`);
    const batch = await rpc('nochain', [call('eth_blockNumber', 'a'), { jsonrpc: '2.0', method: 'eth_chainId' }, call('eth_chainId', 'b')]);
    expect(batch.status).toBe(404);
    expect(batch.json).toMatchObject([
      { id: 'a', error: { code: -32601 } },
      { id: 'b', error: { code: -32601 } },
    ]);
    expect(batch.json).toHaveLength(2);
    const unreadable = await rpc('nochain', '{"jsonrpc":"2.0","id":5,');
    expect(unreadable.json).toMatchObject({ id: null, error: { code: -32601 } });
    const media = await post(`/fake/${gatekeeper.token}`, JSON.stringify(call('eth_blockNumber', 9)), { 'content-type': 'multipart/form-data; boundary=x' });
    expect(media.status).toBe(415);
    expect(media.json).toMatchObject({ id: 9, error: { code: -32600 } });
  });

  it('answers a refused caller to its id on a request the gateway answers itself', async () => {
    const refused = await post('/trx/gk_not_a_token', JSON.stringify(call('eth_blockNumber', 'who')));
    expect(refused.status).toBe(401);
    expect(refused.json).toMatchObject({ id: 'who', error: { code: -32001 } });
  });
});

describe('usage records', () => {
  it('emits exactly one complete record per call', async () => {
    const r = await rpc('local', call('eth_getBalance', 1, ['0x90f8bf6a479f320ead074411a4b0e7944ea8c9c1', 'latest']), {
      authorization: 'ignored when the token is in the path',
    });
    expect(r.status).toBe(200);
    expect(gateway.usage).toHaveLength(1);
    const record = UsageRecord.parse(gateway.usage[0]);
    expect(record).toMatchObject({
      accountId: 'acc-test',
      tokenId: 'tok-test',
      chain: 'local',
      method: 'eth_getBalance',
      status: 200,
      rpcErrorCode: null,
      errorMessage: null,
      clientIp: '127.0.0.1',
      upstream: 'local-1',
    });
    expect(record.requestId).toMatch(/^front-[0-9a-f-]{36}$/);
    expect(r.headers.get('x-request-id')).toBe(record.requestId);
    expect(record.totalMs).toBeGreaterThanOrEqual(record.upstreamMs ?? 0);
    expect(Date.parse(record.at)).toBeGreaterThan(Date.now() - 10_000);
  });

  it('meters a node error of a single call without touching the answer', async () => {
    const r = await rpc('local', call('eth_nope', 'x'));
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ id: 'x', error: { message: expect.stringContaining('eth_nope') } });
    expect(gateway.usage[0]?.rpcErrorCode).toEqual((r.json as { error: { code: number } }).error.code);
  });
});

describe('browsers', () => {
  it('answers a CORS preflight and lets pages read the limit headers', async () => {
    const preflight = await fetch(`${gateway.url}/fake/${gatekeeper.token}`, {
      method: 'OPTIONS',
      headers: { origin: 'https://dapp.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('*');
    expect(preflight.headers.get('access-control-allow-methods')).toContain('POST');
    expect(preflight.headers.get('access-control-allow-headers')).toBe('content-type');
    const r = await rpc('fake', call('eth_blockNumber'), { origin: 'https://dapp.example' });
    expect(r.headers.get('access-control-allow-origin')).toBe('*');
    expect(r.headers.get('access-control-expose-headers')).toContain('x-ratelimit-remaining');
    expect(gateway.usage).toHaveLength(1);
  });

  it('leaves the CORS headers out of answers to callers that are not browsers (no Origin)', async () => {
    const r = await rpc('fake', call('eth_blockNumber'));
    expect(r.status).toBe(200);
    expect(r.headers.get('x-request-id')).toMatch(/^front-[0-9a-f-]{36}$/);
    expect(r.headers.get('x-ratelimit-remaining')).not.toBeNull();
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
  });
});
