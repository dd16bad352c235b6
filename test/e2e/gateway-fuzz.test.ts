import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeUpstream, startEvmFake, startSolanaFake, startTronFake } from '../support/fakeUpstreams.js';
import { chainEntry, startGateway, type TestGateway } from '../support/gatewayApp.js';
import { TestGatekeeper } from '../support/gatewayTestGatekeeper.js';
import { prng } from '../support/prng.js';

/**
 * Invalid input of every kind, a few hundred times: each answer must be a 4xx with a JSON body,
 * the process must keep serving, and no upstream may see a single call.
 */

const SEED = Number(process.env.FUZZ_SEED ?? 20240611);
const ROUNDS = 400;

let evm: FakeUpstream;
let sol: FakeUpstream;
let trx: FakeUpstream;
let gateway: TestGateway;
const gatekeeper = new TestGatekeeper();

beforeAll(async () => {
  [evm, sol, trx] = await Promise.all([startEvmFake(), startSolanaFake(), startTronFake()]);
  gateway = await startGateway({
    gatekeeper,
    limits: { maxBatch: 20, maxBodyBytes: 64 * 1024 },
    chains: [
      chainEntry('evm', [evm.url]),
      { id: 'sol', name: 'Solana', protocol: 'rest', rest: 'solana', jsonRpcPost: true, upstreams: [{ url: sol.url }] },
      {
        id: 'trx',
        name: 'TRON',
        protocol: 'rest',
        rest: 'passthrough',
        allowedPaths: ['wallet/*'],
        deniedPaths: ['wallet/easytransfer*'],
        upstreams: [{ url: trx.url }],
      },
    ],
  });
});
afterAll(async () => {
  await gateway?.close();
  await Promise.all([evm, sol, trx].map((f) => f?.close()));
});

interface Raw {
  status: number;
  contentType: string;
  body: string;
}

function send(method: string, path: string, headers: Record<string, string>, body: Buffer | null): Promise<Raw> {
  const { hostname, port } = new URL(gateway.url);
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, path, method, headers: body ? { ...headers, 'content-length': String(body.length) } : headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type'] ?? ''), body: Buffer.concat(chunks).toString('utf8') }),
      );
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

interface Case {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer | null;
}

function generator(random: () => number) {
  const int = (n: number): number => Math.floor(random() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;
  const bytes = (n: number): Buffer => Buffer.from(Array.from({ length: n }, () => int(256)));
  const token = gatekeeper.token;

  const weirdId = (): string => pick(['{"a":1}', '[1]', 'true', 'false', `1${'0'.repeat(int(400))}`, '1e999', '-0', '"x"', 'null']);
  const weirdMethod = (): string => pick(['1', 'null', '""', '[]', '{}', '"admin_peers"', '"debug_traceCall"', '"personal_sign"', `"${'m'.repeat(300)}"`]);
  const nearlyValid = (): string => {
    const kind = int(5);
    if (kind === 0) return `{"jsonrpc":"2.0","id":${weirdId()},"method":${weirdMethod()}}`;
    if (kind === 1) return `{"jsonrpc":"${pick(['1.0', '2', '', '2.0 '])}","id":${weirdId()},"method":"eth_blockNumber"}`;
    if (kind === 2) return `{"jsonrpc":"2.0","id":1,"method":"eth_call","params":${pick(['"x"', '5', 'false', 'true'])}}`;
    if (kind === 3) return `{"id":${weirdId()},"method":"eth_blockNumber"}`;
    return `{"jsonrpc":"2.0","id":[${weirdId()}],"method":"eth_chainId"}`;
  };
  const deep = (): string => {
    const depth = 500 + int(60_000);
    return random() < 0.5 ? `${'['.repeat(depth)}${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
  };
  const jsonRpcBody = (): Buffer => {
    switch (int(9)) {
      case 0:
        return bytes(int(2000));
      case 1:
        return Buffer.from(deep());
      case 2:
        return Buffer.from(nearlyValid());
      case 3:
        return Buffer.from(`[${Array.from({ length: 1 + int(15) }, nearlyValid).join(',')}]`);
      case 4:
        return Buffer.from(pick(['[]', '', ' ', 'null', '0', '"x"', '[[]]', '{}', '{"jsonrpc":"2.0"', '\u0000']));
      case 5:
        return Buffer.from(`[${Array.from({ length: 21 + int(50) }, () => '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}').join(',')}]`);
      case 6: {
        // Not UTF-8: high bytes led by a lone continuation byte (random high bytes alone can
        // happen to spell valid UTF-8, such as D7 AF).
        const notUtf8 = Buffer.concat([Buffer.from([0x80 | int(64)]), bytes(int(20)).map((b) => b | 0x80)]);
        return Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":"'), notUtf8, Buffer.from('","method":"eth_blockNumber"}')]);
      }
      case 7:
        return Buffer.from(`{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["${'0'.repeat(65 * 1024)}"]}`);
      default:
        return Buffer.from(`{"jsonrpc":"2.0","id":${weirdId()},"method":${weirdMethod()},"params":${deep()}}`);
    }
  };
  const contentType = (): Record<string, string> =>
    pick<Record<string, string>>([
      {},
      { 'content-type': 'application/json' },
      { 'content-type': 'text/plain' },
      { 'content-type': 'multipart/form-data; boundary=z' },
      { 'content-type': 'a/b' },
      { 'content-type': 'application/octet-stream' },
      { 'content-type': ';;;' },
    ]);
  const oddSegment = (): string =>
    pick(['%', '%zz', '%ff%fe', '..', '.', '%2e%2e', '%2F', '', '%00', 'a%0Ab', '%C3%A9', '%E2%82', 'x'.repeat(3000), '*', '~', ':', '@', '!']);

  return (): Case => {
    switch (int(6)) {
      case 0:
      case 1: {
        // A JSON-RPC POST whose body is never a valid, allowed call.
        const viaBearer = random() < 0.3;
        return {
          method: 'POST',
          path: viaBearer ? '/evm' : pick([`/evm/${token}`, `/sol/${token}`]),
          headers: { ...contentType(), ...(viaBearer ? { authorization: `Bearer ${token}` } : {}) },
          body: jsonRpcBody(),
        };
      }
      case 2: // REST calls a JSON-RPC chain does not take
        return {
          method: pick(['GET', 'POST']),
          path: `/evm/${token}/${oddSegment()}/${oddSegment()}`,
          headers: contentType(),
          body: random() < 0.5 ? jsonRpcBody() : null,
        };
      case 3: {
        // REST paths and methods that are malformed, denied or not served
        const path = pick([
          `/trx/${token}/wallet/${oddSegment()}/../x`,
          `/trx/${token}/wallet/easytransfer${oddSegment()}`,
          `/trx/${token}/${oddSegment()}/${oddSegment()}`,
          `/sol/${token}/${pick(['get-x', '1abc', 'sendTransaction', 'x'.repeat(150), oddSegment()])}`,
          `/sol/${token}/getBalance?params=${pick(['%7B', '5', 'nope', '%5B'])}`,
          `/trx/${token}`,
        ]);
        // POST sendTransaction is a valid call; GET is not.
        const method = path.endsWith('/sendTransaction') ? 'GET' : pick(['GET', 'POST']);
        return { method, path, headers: contentType(), body: random() < 0.5 ? bytes(int(500)) : null };
      }
      case 4: // unknown chains, other verbs, odd roots
        return {
          method: pick(['GET', 'POST', 'PUT', 'DELETE', 'PATCH']),
          path: pick([
            `/${oddSegment()}`,
            `/nochain/${token}`,
            `/nochain/${token}/${oddSegment()}`,
            `/${'c'.repeat(500)}/x`,
            '/',
            '//evm',
            `/evm/${token}?${oddSegment()}=${oddSegment()}`,
          ]),
          headers: contentType(),
          body: random() < 0.3 ? jsonRpcBody() : null,
        };
      default: // valid-looking calls with credentials that are wrong or in the wrong place
        return {
          method: 'POST',
          path: pick([`/evm/gk_${'x'.repeat(int(60))}`, `/evm?api_key=${token}`, '/evm', `/evm/${oddSegment()}`]),
          headers: {
            'content-type': 'application/json',
            ...pick<Record<string, string>>([
              {},
              { authorization: 'Bearer' },
              { authorization: `Basic ${Buffer.from(`:${token}`).toString('base64')}` },
              { authorization: 'Bearer gk_nope' },
              { authorization: `Token ${token}` },
            ]),
          },
          body: Buffer.from('{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'),
        };
    }
  };
}

describe('fuzz', () => {
  it(`answers ${ROUNDS} invalid requests with a 4xx JSON and never calls a node (seed ${SEED})`, async () => {
    const next = generator(prng(SEED));
    const statuses = new Map<number, number>();
    for (let i = 0; i < ROUNDS; i++) {
      const c = next();
      const label = `#${i} ${c.method} ${c.path.slice(0, 120)} ${JSON.stringify(c.headers)} ${c.body?.length ?? 0} bytes: ${c.body?.subarray(0, 120).toString('latin1') ?? ''}`;
      const answer = await send(c.method, c.path, c.headers, c.body).catch((err: Error) => {
        throw new Error(`${label}: ${err.message}`);
      });
      statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      expect(answer.status, label).toBeGreaterThanOrEqual(400);
      expect(answer.status, label).toBeLessThan(500);
      expect(answer.contentType, label).toMatch(/^application\/json/);
      expect(() => JSON.parse(answer.body), label).not.toThrow();
    }
    expect(evm.calls).toHaveLength(0);
    expect(sol.calls).toHaveLength(0);
    expect(trx.calls).toHaveLength(0);
    // A spread of refusals, not one answer for everything.
    expect([...statuses.keys()].filter((s) => s >= 400).length).toBeGreaterThanOrEqual(5);

    // Still serving.
    const ok = await send(
      'POST',
      `/evm/${gatekeeper.token}`,
      { 'content-type': 'application/json' },
      Buffer.from('{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}'),
    );
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toEqual({ jsonrpc: '2.0', id: 1, result: '0x10' });
  });
});
