import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type GanacheNode, startGanache } from '../support/ganache.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';

/**
 * The chain front (src/gateway/front.ts) as attackers and odd-but-legal HTTP clients reach it:
 * raw bytes over TCP, a real node (ganache) behind. Smuggling shapes are refused before any
 * admission; pipelined calls are answered in order and metered once each; `Expect:
 * 100-continue`, absolute-form targets and compressed bodies get what HTTP says.
 * (Slow clients' cut-offs: test/e2e/http-timeouts.test.ts; front/fastify parity: gateway-front.)
 */

const MAX_BODY = 4096;
let node: GanacheNode;
let gateway: TestGateway;
let port: number;
const gatekeeper = new TestGatekeeper();
const T = gatekeeper.token;

beforeAll(async () => {
  node = await startGanache();
  gateway = await startGateway({
    gatekeeper,
    chains: [chainEntry('eth', [node.url]), { id: 'sol', name: 'Solana', protocol: 'rest', rest: 'solana', upstreams: [{ url: node.url }] }],
    limits: { maxBodyBytes: MAX_BODY, maxBatch: 3 },
  });
  port = Number(new URL(gateway.url).port);
});
afterAll(async () => {
  await gateway?.close();
  await node?.close();
});
beforeEach(() => {
  gateway.usage.length = 0;
  gatekeeper.requests.length = 0;
});

const rpc = (id: number, method = 'eth_chainId'): string => JSON.stringify({ jsonrpc: '2.0', id, method, params: [] });
const post = (path: string, body: string | Buffer, headers = ''): Buffer =>
  Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\n${headers}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`), Buffer.from(body)]);

interface Exchange {
  /** Everything the server wrote, as latin1 text. */
  text: string;
  /** The server closed the connection. */
  closed: boolean;
  /** Sends more on the same connection. */
  write(bytes: string | Buffer): void;
  /** Resolves once `done(text)` holds or the server closes, or after `ms`. */
  wait(done: (text: string) => boolean, ms?: number): Promise<void>;
  end(): void;
}

function open(): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let waiter: (() => void) | null = null;
    const x: Exchange = {
      text: '',
      closed: false,
      write: (bytes) => void socket.write(bytes),
      wait: (done, ms = 3_000) =>
        new Promise<void>((res) => {
          const timer = setTimeout(res, ms);
          const check = (): void => {
            if (x.closed || done(x.text)) {
              clearTimeout(timer);
              waiter = null;
              res();
            }
          };
          waiter = check;
          check();
        }),
      end: () => socket.destroy(),
    };
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      x.text += chunk;
      waiter?.();
    });
    socket.on('error', () => undefined); // a reset after the server closed: `closed` says it
    socket.on('close', () => {
      x.closed = true;
      waiter?.();
    });
    socket.once('connect', () => resolve(x));
    socket.once('error', reject);
  });
}

/** Sends `bytes` on a new connection; what came back once `done` holds or the server closed. */
async function exchange(bytes: string | Buffer, done: (text: string) => boolean = () => false, ms = 1_500): Promise<Exchange> {
  const x = await open();
  x.write(bytes);
  await x.wait(done, ms);
  x.end();
  return x;
}

const statuses = (text: string): number[] => [...text.matchAll(/(?:^|\r\n\r\n|\})HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
const count = (n: number) => (text: string) => statuses(text).filter((s) => s >= 200).length >= n && text.endsWith('}');
/** The JSON bodies of the answers, in order (every answer here ends with one). */
const bodies = (text: string): unknown[] => [...text.matchAll(/\r\n\r\n(\{[^\r]*?\}|\[[^\r]*?\])(?=HTTP\/1\.1 |$)/g)].map((m) => JSON.parse(m[1] as string));

describe('request smuggling shapes', () => {
  it.each([
    [
      'both Content-Length and Transfer-Encoding',
      `POST /eth/${T} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n3b\r\n${rpc(1)}\r\n0\r\n\r\n`,
    ],
    ['two different Content-Lengths', `POST /eth/${T} HTTP/1.1\r\nHost: x\r\nContent-Length: ${rpc(1).length}\r\nContent-Length: 4\r\n\r\n${rpc(1)}`],
    ['chunked not the last coding', `POST /eth/${T} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n3b\r\n${rpc(1)}\r\n0\r\n\r\n`],
    ['a bad chunk size', `POST /eth/${T} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n${rpc(1)}\r\n0\r\n\r\n`],
    ['a space before the colon', `POST /eth/${T} HTTP/1.1\r\nHost: x\r\nContent-Length : 4\r\n\r\n${rpc(1)}`],
    ['a folded header line', `POST /eth/${T} HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\nContent-Length: ${rpc(1).length}\r\n\r\n${rpc(1)}`],
    ['bare LF line ends', `POST /eth/${T} HTTP/1.1\nHost: x\nContent-Length: ${rpc(1).length}\n\n${rpc(1)}`],
  ])('%s: 400 and the connection closed, before any admission or metering', async (_name, bytes) => {
    const x = await exchange(bytes);
    expect(statuses(x.text)).toEqual([400]);
    expect(x.closed).toBe(true);
    expect(gatekeeper.requests).toEqual([]);
    expect(gateway.usage).toEqual([]);
  });

  it('takes chunked bodies, with chunk extensions, and a final chunked after identity', async () => {
    const body = rpc(7);
    const size = body.length.toString(16);
    for (const [te, chunk] of [
      ['chunked', `${size};name=value\r\n`],
      ['identity, chunked', `${size}\r\n`],
    ]) {
      gateway.usage.length = 0;
      const x = await exchange(`POST /eth/${T} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ${te}\r\n\r\n${chunk}${body}\r\n0\r\n\r\n`, count(1));
      expect(statuses(x.text), te).toEqual([200]);
      expect(bodies(x.text)).toEqual([{ jsonrpc: '2.0', id: 7, result: '0x539' }]);
      expect(gateway.usage.map((u) => u.method)).toEqual(['eth_chainId']);
    }
  });

  it('answers pipelined calls in order, each metered once, the bytes past a Content-Length never read as its body', async () => {
    // The second request sits right behind the first's declared length: the next request, not more body.
    const x = await exchange(
      Buffer.concat([post(`/eth/${T}`, rpc(1)), post(`/eth/${T}`, rpc(2, 'eth_blockNumber')), post(`/eth/${T}`, rpc(3))]),
      count(3),
      5_000,
    );
    expect(statuses(x.text)).toEqual([200, 200, 200]);
    expect(bodies(x.text).map((b) => (b as { id: number }).id)).toEqual([1, 2, 3]);
    // Metered as each is answered: a cached eth_chainId may be before the blockNumber ahead of it.
    expect(gateway.usage.map((u) => u.method).sort()).toEqual(['eth_blockNumber', 'eth_chainId', 'eth_chainId']);
    expect(new Set(gateway.usage.map((u) => u.requestId)).size).toBe(3);
    expect(x.closed).toBe(false);
  });

  it('answers a call in flight before the 400 for bytes behind it that are not a request, then closes', async () => {
    // eth_blockNumber goes to the node (not cached): its answer is still due when the garbage is parsed.
    const x = await exchange(Buffer.concat([post(`/eth/${T}`, rpc(1, 'eth_blockNumber')), Buffer.from('NOT HTTP AT ALL\r\n\r\n')]), () => false, 3_000);
    expect(statuses(x.text)).toEqual([200, 400]);
    expect(bodies(x.text)[0]).toMatchObject({ jsonrpc: '2.0', id: 1, result: expect.stringMatching(/^0x/) });
    expect(x.closed).toBe(true);
    expect(gateway.usage.map((u) => u.method)).toEqual(['eth_blockNumber']);
  });

  it('reads the bytes after a body shorter than its Content-Length as the rest of it, never as a request; nothing admitted meanwhile', async () => {
    const body = rpc(1);
    const x = await open();
    x.write(`POST /eth/${T} HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length + 10}\r\n\r\n${body}`);
    await x.wait(() => false, 500);
    expect(x.text).toBe('');
    expect(gatekeeper.requests).toEqual([]);
    // The next request's first 10 bytes complete the declared length: they are body (not JSON), and
    // the rest of that request is no request at all: node's 400, the connection closed.
    x.write(post(`/eth/${T}`, rpc(2)));
    await x.wait(() => false);
    x.end();
    expect(x.closed).toBe(true);
    expect(statuses(x.text)).toContain(400);
    expect(x.text).not.toContain('"id":2');
    // At most the first call, its body unreadable; the second never became a call.
    expect(gateway.usage.map((u) => u.method).filter((m) => m !== '(invalid)')).toEqual([]);
  });
});

describe('Expect: 100-continue', () => {
  const expectHead = (path: string, length: number, extra = ''): string =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}Content-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;

  it('answers 100 Continue, then the call once the body came', async () => {
    const body = rpc(4);
    const x = await open();
    x.write(expectHead(`/eth/${T}`, body.length));
    await x.wait((text) => text.includes('\r\n\r\n'));
    expect(x.text).toBe('HTTP/1.1 100 Continue\r\n\r\n');
    x.write(body);
    await x.wait(count(1));
    x.end();
    expect(statuses(x.text)).toEqual([100, 200]);
    expect(bodies(x.text)).toEqual([{ jsonrpc: '2.0', id: 4, result: '0x539' }]);
    expect(gateway.usage).toHaveLength(1);
  });

  it('refuses a declared body over MAX_BODY_BYTES with 413 at once, without a 100 or reading the body, and closes', async () => {
    const x = await open();
    x.write(expectHead(`/eth/${T}`, MAX_BODY + 1));
    await x.wait(count(1));
    x.end();
    expect(statuses(x.text)).toEqual([413]);
    expect(x.text).toMatch(/\r\nconnection: close\r\n/i);
    expect(bodies(x.text)).toEqual([{ jsonrpc: '2.0', id: null, error: { code: -32600, message: `Request body larger than ${MAX_BODY} bytes` } }]);
    // Metered, not charged, as any body over the limit.
    expect(gateway.usage.map((u) => [u.status, u.charged])).toEqual([[413, false]]);
  });

  it('a bad token: the 401 comes once the body did (admission needs the body), answering its id', async () => {
    const body = rpc(9);
    const x = await open();
    x.write(expectHead('/eth/gk_unknown', body.length));
    await x.wait((text) => text.includes('\r\n\r\n'));
    x.write(body);
    await x.wait(count(1));
    x.end();
    expect(statuses(x.text)).toEqual([100, 401]);
    expect(bodies(x.text)).toEqual([{ jsonrpc: '2.0', id: 9, error: { code: -32001, message: 'Invalid, revoked or expired API token' } }]);
  });

  it('an expectation other than 100-continue: 417, no call', async () => {
    const x = await exchange(`POST /eth/${T} HTTP/1.1\r\nHost: x\r\nExpect: something\r\nContent-Length: 2\r\n\r\n{}`, (t) => t.includes('\r\n\r\n'));
    expect(statuses(x.text)).toEqual([417]);
    expect(gatekeeper.requests).toEqual([]);
  });
});

describe('slow clients', () => {
  it('a body still arriving holds no admission and no usage record', async () => {
    const body = rpc(1);
    const x = await open();
    x.write(`POST /eth/${T} HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n`);
    for (const ch of body.slice(0, 10)) {
      x.write(ch);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(gatekeeper.requests).toEqual([]);
    expect(gateway.usage).toEqual([]);
    x.end();
    await new Promise((r) => setTimeout(r, 100));
    expect(gatekeeper.requests).toEqual([]);
    expect(gateway.usage).toEqual([]);
  });

  it('a client that never reads its answers: each call is metered once all the same, and others are served', async () => {
    const x = await open();
    // Answers of ~1 KB each, 200 of them: far more than the socket buffers take unread.
    const big = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByNumber', params: ['0x0', false] });
    const requests = Buffer.concat(Array.from({ length: 200 }, () => post(`/eth/${T}`, big)));
    x.write(requests);
    const deadline = Date.now() + 10_000;
    while (gateway.usage.length < 200 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const other = await fetch(`${gateway.url}/eth/${T}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpc(2) });
    expect(other.status).toBe(200);
    x.end();
    expect(gateway.usage.filter((u) => u.method === 'eth_getBlockByNumber')).toHaveLength(200);
  });
});

describe('header oddities', () => {
  it.each([
    ['a huge header', `X-Big: ${'a'.repeat(20_000)}\r\n`],
    ['very many headers', Array.from({ length: 3_000 }, (_, i) => `X-H${i}: v\r\n`).join('')],
  ])('%s: 431 and closed, before any admission', async (_name, headers) => {
    const x = await exchange(post(`/eth/${T}`, rpc(1), headers));
    expect(statuses(x.text)).toEqual([431]);
    expect(x.closed).toBe(true);
    expect(gatekeeper.requests).toEqual([]);
  });

  it('two Authorization headers: the first is the one read (node drops the rest)', async () => {
    const first = await exchange(post('/eth', rpc(1), `Authorization: Bearer gk_unknown\r\nAuthorization: Bearer ${T}\r\n`), count(1));
    expect(statuses(first.text)).toEqual([401]);
    const second = await exchange(post('/eth', rpc(1), `Authorization: Bearer ${T}\r\nAuthorization: Bearer gk_unknown\r\n`), count(1));
    expect(statuses(second.text)).toEqual([200]);
  });

  it('a token in the path and another as Bearer: the path one counts', async () => {
    const x = await exchange(post(`/eth/${T}`, rpc(1), 'Authorization: Bearer gk_unknown\r\n'), count(1));
    expect(statuses(x.text)).toEqual([200]);
    expect(gatekeeper.requests.map((r) => [r.token, r.via])).toEqual([[T, 'path']]);
  });

  it.each([
    ['`..` before the token', `/eth/../eth/${T}`, 401],
    ['an encoded slash after the chain', `/eth%2F${T}`, 404],
    ['a leading double slash', `//eth/${T}`, 404],
    ['a double slash before the token', `/eth//${T}`, 401],
  ])('%s is not normalised into a call: %s answers %i', async (_name, path, status) => {
    const x = await exchange(post(path, rpc(1)), count(1));
    expect(statuses(x.text)).toEqual([status]);
    expect(gateway.usage).toEqual([]);
  });

  it('an unknown chain that holds the caller’s token is not echoed: the 404 never repeats the token', async () => {
    for (const path of [`/eth%2F${T}`, `/${T}`, `/eth%2f${T}/x`]) {
      const x = await exchange(post(path, rpc(1)), count(1));
      expect(statuses(x.text), path).toEqual([404]);
      expect(x.text, path).not.toContain(T.slice(3, 20));
      expect(x.text, path).toContain('Unknown chain');
    }
  });

  it('a REST path with `..` or an empty segment is refused, never sent on', async () => {
    for (const path of [`/sol/${T}/getSlot/..`, `/sol/${T}/%2e%2e/getSlot`, `/sol/${T}//getSlot`]) {
      const x = await exchange(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`, count(1));
      expect(statuses(x.text), path).toEqual([400]);
      expect(gateway.usage.every((u) => u.upstream === null)).toBe(true);
    }
  });

  it('a query string on a JSON-RPC path is ignored', async () => {
    const x = await exchange(post(`/eth/${T}?foo=bar&x`, rpc(1)), count(1));
    expect(statuses(x.text)).toEqual([200]);
  });

  it('HEAD is answered as the GET would be, without a body', async () => {
    const x = await exchange(`HEAD /eth/${T} HTTP/1.1\r\nHost: x\r\n\r\n`, (t) => t.includes('\r\n\r\n'));
    expect(statuses(x.text)).toEqual([400]);
    expect(x.text.endsWith('\r\n\r\n')).toBe(true);
  });

  it('answers an absolute-form request target (what clients send through a proxy) as its path', async () => {
    for (const target of [`http://127.0.0.1:${port}/eth/${T}`, `HTTP://gateway.example/eth/${T}?x=1`]) {
      gateway.usage.length = 0;
      const x = await exchange(`POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Length: ${rpc(5).length}\r\n\r\n${rpc(5)}`, count(1));
      expect(statuses(x.text), target).toEqual([200]);
      expect(bodies(x.text)).toEqual([{ jsonrpc: '2.0', id: 5, result: '0x539' }]);
      expect(gateway.usage.map((u) => u.method)).toEqual(['eth_chainId']);
    }
    // And what fastify answers (an unknown chain) sees the path too.
    const unknown = await exchange(`GET http://gateway.example/nochain/x HTTP/1.1\r\nHost: x\r\n\r\n`, count(1));
    expect(statuses(unknown.text)).toEqual([404]);
    expect(bodies(unknown.text)).toEqual([{ error: { code: 'unknown_chain', message: 'Unknown chain "nochain"' } }]);
  });
});

describe('Content-Encoding', () => {
  const body = rpc(6);

  it.each([
    ['gzip', gzipSync(body)],
    ['deflate', gzipSync(body)],
    ['br', Buffer.from(body)],
    ['gzip, identity', Buffer.from(body)],
  ])('a JSON-RPC body sent as %s: 415 with Accept-Encoding: identity, not read as JSON, nothing charged', async (coding, payload) => {
    const x = await exchange(post(`/eth/${T}`, payload, `Content-Type: application/json\r\nContent-Encoding: ${coding}\r\n`), count(1));
    expect(statuses(x.text)).toEqual([415]);
    expect(x.text).toMatch(/\r\naccept-encoding: identity\r\n/i);
    expect(bodies(x.text)[0]).toMatchObject({ error: { code: -32600, message: `Unsupported Content-Encoding "${coding}": send the body uncompressed` } });
    expect(gateway.usage.map((u) => [u.status, u.charged])).toEqual([[415, false]]);
  });

  it('a REST body sent compressed: 415 in the REST shape', async () => {
    const x = await exchange(post(`/sol/${T}/getBalance`, gzipSync('{}'), 'Content-Encoding: gzip\r\n'), count(1));
    expect(statuses(x.text)).toEqual([415]);
    expect(bodies(x.text)[0]).toMatchObject({ error: { code: 'unsupported_content_encoding' } });
  });

  it('identity is a plain body; answers are never compressed, whatever Accept-Encoding says', async () => {
    const x = await exchange(post(`/eth/${T}`, body, 'Content-Encoding: identity\r\nAccept-Encoding: gzip, br\r\n'), count(1));
    expect(statuses(x.text)).toEqual([200]);
    expect(x.text).not.toMatch(/\r\ncontent-encoding:/i);
    expect(bodies(x.text)).toEqual([{ jsonrpc: '2.0', id: 6, result: '0x539' }]);
  });

  it('fastify answers a compressed body as the front does', async () => {
    const res = await gateway.app.inject({
      method: 'POST',
      url: `/eth/${T}`,
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      payload: gzipSync(body),
    });
    expect(res.statusCode).toBe(415);
    expect(res.headers['accept-encoding']).toBe('identity');
  });
});
