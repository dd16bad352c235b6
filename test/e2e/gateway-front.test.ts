import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import type { Gatekeeper } from '../../src/gateway/admission.js';
import { type FakeUpstream, startEvmFake, startSolanaFake } from '../support/fakeUpstreams.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * Chain calls reach ChainCalls two ways: the node:http front (a known chain's GET or POST over
 * HTTP) and the fastify routes (everything else, and `inject`). Both must answer alike: the
 * same status, body, headers and usage record for every kind of call.
 */

let evm: FakeUpstream;
let sol: FakeUpstream;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();
const logLines: string[] = [];

beforeAll(async () => {
  [evm, sol] = await Promise.all([startEvmFake(), startSolanaFake()]);
  gatekeeper.forbiddenChains.add('bsc');
  gateway = await startGateway({
    gatekeeper,
    chains: [
      chainEntry('eth', [evm.url]),
      chainEntry('bsc', [evm.url]),
      { id: 'sol', name: 'Solana', protocol: 'rest', rest: 'solana', upstreams: [{ url: sol.url }] },
    ],
    limits: { maxBodyBytes: 4096, maxBatch: 3 },
    trustProxy: true,
    log: { write: (line) => void logLines.push(line) },
  });
});
afterAll(async () => {
  await gateway?.close();
  await Promise.all([evm?.close(), sol?.close()]);
});

interface Call {
  name: string;
  method: 'GET' | 'POST';
  path: (token: string) => string;
  headers?: Record<string, string>;
  body?: string;
}

const call = (id: number, method = 'eth_blockNumber'): string => JSON.stringify({ jsonrpc: '2.0', id, method, params: [] });

const CALLS: Call[] = [
  { name: 'a call, token in the path', method: 'POST', path: (t) => `/eth/${t}`, body: call(1) },
  { name: 'a call, Bearer token', method: 'POST', path: () => '/eth', headers: { authorization: `Bearer ${gatekeeper.token}` }, body: call(2) },
  { name: 'a batch over the limit', method: 'POST', path: (t) => `/eth/${t}`, body: `[${[1, 2, 3, 4].map((i) => call(i)).join(',')}]` },
  // Not eth_chainId: the first answer would be kept, and the second way served from the cache.
  { name: 'a batch', method: 'POST', path: (t) => `/eth/${t}`, body: `[${call(1)},{"id":2},${call(3, 'eth_getBalance')}]` },
  { name: 'a notification', method: 'POST', path: (t) => `/eth/${t}`, body: '{"jsonrpc":"2.0","method":"eth_blockNumber"}' },
  { name: 'malformed JSON', method: 'POST', path: (t) => `/eth/${t}`, body: '{"jsonrpc":' },
  { name: 'a body over the limit', method: 'POST', path: (t) => `/eth/${t}`, body: `[${'1,'.repeat(3000)}1]` },
  { name: 'an unsupported media type', method: 'POST', path: (t) => `/eth/${t}`, headers: { 'content-type': 'application/xml' }, body: '<x/>' },
  { name: 'an unknown token', method: 'POST', path: () => '/eth/gk_unknown', body: call(1) },
  { name: 'no token', method: 'POST', path: () => '/eth', body: call(1) },
  { name: 'a chain outside the plan', method: 'POST', path: (t) => `/bsc/${t}`, body: call(1) },
  { name: 'REST on a JSON-RPC chain', method: 'GET', path: (t) => `/eth/${t}/eth_blockNumber` },
  { name: 'a REST call', method: 'GET', path: (t) => `/sol/${t}/getBlockHeight?commitment=finalized` },
  { name: 'a REST call with a body', method: 'POST', path: (t) => `/sol/${t}/getBalance`, body: '{"pubkey":"11111111111111111111111111111111"}' },
  { name: 'JSON-RPC on a REST chain', method: 'POST', path: (t) => `/sol/${t}`, body: '{"jsonrpc":"2.0","id":1,"method":"getSlot"}' },
  { name: 'a browser call', method: 'POST', path: (t) => `/eth/${t}`, headers: { origin: 'https://dapp.example' }, body: call(5) },
];

/** Headers that differ between two answers by nature: when, which connection, which request. */
const VARYING = new Set(['date', 'connection', 'keep-alive', 'x-request-id', 'x-ratelimit-reset']);

interface Seen {
  status: number;
  body: string;
  headers: Record<string, string>;
  requestId: string;
  usage: Omit<UsageRecord, 'requestId' | 'at' | 'totalMs' | 'upstreamMs'>[];
}

function seen(status: number, body: string, headers: Record<string, string>, usage: UsageRecord[]): Seen {
  const kept = Object.fromEntries(Object.entries(headers).filter(([k]) => !VARYING.has(k)));
  const records = usage.map(({ requestId: _r, at: _a, totalMs: _t, upstreamMs: _u, ...rest }) => rest);
  return { status, body, headers: kept, requestId: headers['x-request-id'] ?? '', usage: records };
}

/** What a proxy that appends (nginx's `$proxy_add_x_forwarded_for`) hands on: what the client wrote itself, then the address the proxy saw. */
const FORWARDED = '10.9.9.9, 203.0.113.7';

async function viaFront(c: Call): Promise<Seen> {
  gateway.usage.length = 0;
  const headers = { 'content-type': 'application/json', 'x-forwarded-for': FORWARDED, ...c.headers };
  const res = await fetch(`${gateway.url}${c.path(gatekeeper.token)}`, { method: c.method, headers, body: c.body });
  const body = await res.text();
  return seen(res.status, body, Object.fromEntries(res.headers), [...gateway.usage]);
}

async function viaFastify(c: Call): Promise<Seen> {
  gateway.usage.length = 0;
  const headers = { 'content-type': 'application/json', 'x-forwarded-for': FORWARDED, ...c.headers };
  const res = await gateway.app.inject({ method: c.method, url: c.path(gatekeeper.token), headers, payload: c.body });
  const flat = Object.fromEntries(Object.entries(res.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : String(v)]));
  return seen(res.statusCode, res.body, flat, [...gateway.usage]);
}

describe('the node:http front and the fastify routes', () => {
  it.each(CALLS)('answer $name alike', async (c) => {
    const front = await viaFront(c);
    const fastify = await viaFastify(c);
    expect(front.requestId).toMatch(/^front-/);
    expect(fastify.requestId).toMatch(/^fastify-/);
    expect({ ...front, requestId: '' }).toEqual({ ...fastify, requestId: '' });
    // Behind a trusted proxy, the client is the address the proxy added (the last), not one the client wrote.
    for (const u of front.usage) expect(u.clientIp).toBe('203.0.113.7');
    for (const u of fastify.usage) expect(u.clientIp).toBe('203.0.113.7');
  });

  it('leaves unknown chains, preflights and other methods to fastify', async () => {
    const unknown = await fetch(`${gateway.url}/nochain/${gatekeeper.token}`, { method: 'POST', body: call(1) });
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get('x-request-id')).toMatch(/^fastify-/);
    const preflight = await fetch(`${gateway.url}/eth/${gatekeeper.token}`, {
      method: 'OPTIONS',
      headers: { origin: 'https://dapp.example', 'access-control-request-method': 'POST' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('x-request-id')).toMatch(/^fastify-/);
    expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, POST, OPTIONS');
    const head = await fetch(`${gateway.url}/eth/${gatekeeper.token}/x`, { method: 'HEAD' });
    expect(head.headers.get('x-request-id')).toMatch(/^fastify-/);
  });

  it('answers another HTTP method on a chain endpoint 405 with Allow, in the chain shape, without echoing the token or metering', async () => {
    for (const [method, path, protocol] of [
      ['PUT', `/eth/${gatekeeper.token}`, 'POST (JSON-RPC 2.0)'],
      ['DELETE', `/eth/${gatekeeper.token}`, 'POST (JSON-RPC 2.0)'],
      ['PATCH', `/sol/${gatekeeper.token}/getBlockHeight`, 'GET and POST (REST)'],
      ['PUT', '/sol/getBlockHeight', 'GET and POST (REST)'],
    ] as const) {
      gateway.usage.length = 0;
      const res = await fetch(`${gateway.url}${path}`, { method, headers: { 'content-type': 'application/json' }, body: '{}' });
      const body = await res.text();
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get('allow')).toBe('GET, HEAD, POST, OPTIONS');
      expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(JSON.parse(body)).toEqual({
        error: { code: 'method_not_allowed', message: `${method} is not a chain call: ${path.split('/')[1]} takes ${protocol}.` },
      });
      expect(body).not.toContain(gatekeeper.token);
      expect(gateway.usage).toEqual([]);
    }
    // An unknown chain stays the server's 404, whatever the method.
    const unknown = await fetch(`${gateway.url}/nochain/x`, { method: 'PUT' });
    expect(unknown.status).toBe(404);
  });

  it('answers a gatekeeper failure with 503 in the call shape, on both, whether it rejects or throws at once', async () => {
    gatekeeper.failure = new Error('backend down');
    try {
      for (const failsAtOnce of [false, true]) {
        gatekeeper.failsAtOnce = failsAtOnce;
        for (const via of [viaFront, viaFastify]) {
          const r = await via(CALLS[0] as Call);
          expect(r.status, `failsAtOnce ${failsAtOnce}`).toBe(503);
          // The body was read: the error answers the caller's id.
          expect(JSON.parse(r.body)).toMatchObject({ jsonrpc: '2.0', id: 1, error: { code: -32603 } });
        }
      }
    } finally {
      gatekeeper.failure = null;
      gatekeeper.failsAtOnce = false;
    }
  });

  it('lets a caller that hangs up mid-body go: no answer, no usage, no error logged', async () => {
    gateway.usage.length = 0;
    logLines.length = 0;
    const port = Number(new URL(gateway.url).port);
    await new Promise<void>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => {
        socket.write(`POST /eth/${gatekeeper.token} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"jsonrpc"`);
        setTimeout(() => socket.destroy(), 50);
      });
      socket.on('close', () => resolve());
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(gateway.usage).toHaveLength(0);
    expect(logLines.filter((line) => line.includes('"level":50'))).toEqual([]);
    expect((await viaFront(CALLS[0] as Call)).status).toBe(200);
  });

  it('answers 500 when an answer cannot be written (a header node refuses), and stays up', async () => {
    const refused = new TestGatekeeper();
    const broken: Gatekeeper = {
      admit: async (request) => {
        const admission = await refused.admit({ ...request, token: refused.token });
        return { ...admission, headers: { ...admission.headers, 'x-ratelimit-limit': 'bad\nvalue' } };
      },
    };
    const other = await startGateway({ gatekeeper: broken, chains: [chainEntry('eth', [evm.url])] });
    try {
      const res = await fetch(`${other.url}/eth/${gatekeeper.token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: call(1) });
      expect(res.status).toBe(500);
      expect(await res.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32603 } });
      const again = await fetch(`${other.url}/eth/${gatekeeper.token}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: call(2) });
      expect(again.status).toBe(500);
    } finally {
      await other.close();
    }
  });
});
