import { Worker } from 'node:worker_threads';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseChainsConfig } from '../../src/gateway/chains.js';
import { isNodeFailure, targetPath, type UpstreamPoolOptions, UpstreamPools } from '../../src/gateway/upstream.js';
import { closedPortUrl, type FakeUpstream, startEvmFake, startFake } from '../support/fakeUpstreams.js';
import { blockFor } from '../support/stall.js';

/** The upstream pool against real loopback HTTP servers: choice, retries, timeouts, health. */

let a: FakeUpstream;
let b: FakeUpstream;
let deadUrl: string;
const opened: UpstreamPools[] = [];

beforeAll(async () => {
  [a, b, deadUrl] = await Promise.all([startEvmFake(), startEvmFake(), closedPortUrl()]);
});
afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
});
afterEach(async () => {
  a.reset();
  b.reset();
  await Promise.all(opened.splice(0).map((p) => p.close()));
});

function poolFor(
  upstreams: Array<{ url: string; weight?: number; label: string }>,
  options: UpstreamPoolOptions = {},
  timeoutMs = 1_000,
  chainExtra: Record<string, unknown> = {},
) {
  const registry = parseChainsConfig({ chains: [{ id: 'test', name: 'test', protocol: 'jsonrpc', timeoutMs, upstreams, ...chainExtra }] }, 'test');
  const pools = new UpstreamPools(registry, { random: () => 0, ...options });
  opened.push(pools);
  return pools.get('test')!;
}

/** An HTTP node on a worker thread (it answers while this thread is blocked), 30 ms after each request. */
async function startThreadUpstream(): Promise<{ url: string; requested: Promise<void>; close: () => Promise<void> }> {
  const worker = new Worker(
    `const { createServer } = require('node:http');
    const { parentPort } = require('node:worker_threads');
    const server = createServer((req, res) => {
      parentPort.postMessage('request');
      req.resume();
      req.on('end', () => setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":"0x10"}'), 30));
    });
    server.listen(0, '127.0.0.1', () => parentPort.postMessage(server.address().port));
    parentPort.on('message', () => server.close(() => process.exit(0)));`,
    { eval: true },
  );
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  const requested = new Promise<void>((resolve) => worker.once('message', () => resolve()));
  return {
    url: `http://127.0.0.1:${port}`,
    requested,
    close: async () => {
      worker.postMessage('close');
      await new Promise((resolve) => worker.once('exit', resolve));
    },
  };
}

const READ = { method: 'POST', path: '', body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}', retriable: true } as const;
const WRITE = { ...READ, body: '{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x00"]}', retriable: false } as const;

describe('choice', () => {
  it('picks upstreams in proportion to their weight', async () => {
    // A fresh pool for each draw: a pool also weighs nodes by their latency so far, and one slow
    // first answer on a busy machine would move the split this test is not about.
    const labels: string[] = [];
    for (const draw of [0.1, 0.8, 0.74, 0.76]) {
      const pool = poolFor(
        [
          { url: a.url, weight: 3, label: 'a' },
          { url: b.url, weight: 1, label: 'b' },
        ],
        { random: () => draw },
      );
      labels.push((await pool.send(READ)).upstream ?? '');
    }
    expect(labels).toEqual(['a', 'b', 'a', 'b']);
  });

  it('answers with status, content type, body and timing', async () => {
    const r = await poolFor([{ url: a.url, label: 'a' }]).send(READ);
    expect(r).toMatchObject({ ok: true, status: 200, upstream: 'a', contentType: 'application/json' });
    if (!r.ok) throw new Error('expected an answer');
    expect(JSON.parse(r.body.toString())).toEqual({ jsonrpc: '2.0', id: 1, result: '0x10' });
    expect(r.upstreamMs).toBeGreaterThan(0);
    expect(a.calls[0]?.headers['content-type']).toBe('application/json');
  });

  it('sendThen resolves with the next step applied to the outcome, after retries, and rejects when it throws', async () => {
    const pool = poolFor(
      [
        { url: deadUrl, label: 'dead' },
        { url: a.url, label: 'a' },
      ],
      { ejectAfterFailures: 100 },
    );
    expect(await pool.sendThen(READ, (outcome) => (outcome.ok ? `${outcome.upstream} ${outcome.status}` : outcome.kind))).toBe('a 200');
    await expect(
      pool.sendThen(READ, () => {
        throw new Error('next step failed');
      }),
    ).rejects.toThrow('next step failed');
  });
});

describe('retries', () => {
  it('retries a read on another upstream after a connection error, a 5xx or a timeout', async () => {
    const pool = poolFor(
      [
        { url: deadUrl, label: 'dead' },
        { url: a.url, label: 'a' },
      ],
      { ejectAfterFailures: 100 },
    );
    expect(await pool.send(READ)).toMatchObject({ ok: true, upstream: 'a' });

    b.mode = 'fail';
    const failing = poolFor(
      [
        { url: b.url, label: 'b' },
        { url: a.url, label: 'a' },
      ],
      { ejectAfterFailures: 100 },
    );
    expect(await failing.send(READ)).toMatchObject({ ok: true, upstream: 'a' });
    expect(b.calls).toHaveLength(1);

    b.mode = 'slow';
    b.delayMs = 500;
    const slow = poolFor(
      [
        { url: b.url, label: 'b' },
        { url: a.url, label: 'a' },
      ],
      { ejectAfterFailures: 100 },
      100,
      // A retry after a node's timeout needs the call's time to outlast it (callTimeoutMs; by default the call ends with the timeout).
      { callTimeoutMs: 300 },
    );
    expect(await slow.send(READ)).toMatchObject({ ok: true, upstream: 'a' });
  });

  it('never retries a submission', async () => {
    const pool = poolFor([
      { url: deadUrl, label: 'dead' },
      { url: a.url, label: 'a' },
    ]);
    expect(await pool.send(WRITE)).toMatchObject({ ok: false, kind: 'unavailable', upstream: 'dead' });
    expect(a.calls).toHaveLength(0);
  });

  it('reports a timeout as a timeout and a refused connection as unavailable', async () => {
    // The node never answers within the test: nothing but the pool's own timer can end the call,
    // no socket event wakes the process to do it.
    b.mode = 'slow';
    b.delayMs = 60_000;
    expect(await poolFor([{ url: b.url, label: 'b' }], {}, 80).send(READ)).toMatchObject({ ok: false, kind: 'timeout', upstream: 'b' });
    expect(await poolFor([{ url: deadUrl, label: 'dead' }]).send(READ)).toMatchObject({
      ok: false,
      kind: 'unavailable',
      message: expect.stringContaining('ECONNREFUSED'),
    });
  });

  it('times out a node that stalls after its headers, by the chain timeout alone', async () => {
    // The rest of the body would come long after the test's own 5 s limit: only the chain
    // timeout (80 ms) can end this call.
    b.mode = 'slowBody';
    b.delayMs = 60_000;
    expect(await poolFor([{ url: b.url, label: 'b' }], {}, 80).send(READ)).toMatchObject({ ok: false, kind: 'timeout', upstream: 'b' });
    expect(b.calls).toHaveLength(1);
  });

  it('counts the wait for a free connection in the timeout, and forgets nothing after it', async () => {
    b.mode = 'slow';
    b.delayMs = 60_000;
    const pool = poolFor([{ url: b.url, label: 'b' }], { connections: 1, ejectAfterFailures: 100 }, 1_000);
    const started = performance.now();
    // One connection: the second call waits for the first, and its deadline runs meanwhile. Had
    // its deadline started only once it had the connection, both would take 2 s, not 1 s.
    const outcomes = await Promise.all([pool.send(READ), pool.send(READ)]);
    expect(outcomes).toMatchObject([
      { ok: false, kind: 'timeout', upstream: 'b' },
      { ok: false, kind: 'timeout', upstream: 'b' },
    ]);
    expect(performance.now() - started).toBeLessThan(1_900);
    b.mode = 'ok';
    expect(await pool.send(READ)).toMatchObject({ ok: true, upstream: 'b' });
  });

  it('treats a dropped connection and an oversize answer as unavailable', async () => {
    b.mode = 'hangup';
    expect(await poolFor([{ url: b.url, label: 'b' }]).send(READ)).toMatchObject({ ok: false, kind: 'unavailable' });
    expect(await poolFor([{ url: a.url, label: 'a' }], { maxResponseBytes: 10 }).send(READ)).toMatchObject({
      ok: false,
      kind: 'unavailable',
      message: expect.stringContaining('larger than 10 bytes'),
    });
  });
});

describe('health', () => {
  it('ejects an upstream after K consecutive failures and takes it back after a successful trial', async () => {
    let clock = 1_000_000;
    const pool = poolFor(
      [
        { url: b.url, label: 'b' },
        { url: a.url, label: 'a' },
      ],
      { ejectAfterFailures: 2, coolDownMs: 5_000, now: () => clock },
    );
    b.mode = 'fail';
    for (let i = 0; i < 4; i++) expect(await pool.send(READ)).toMatchObject({ ok: true, upstream: 'a' });
    expect(b.calls).toHaveLength(2); // ejected after the second failure: later reads skip it
    expect(pool.health()[0]).toMatchObject({ label: 'b', healthy: false, consecutiveFailures: 2, ejectedUntil: clock + 5_000 });

    clock += 5_000; // cool-down over, still broken: one trial, and out again at once
    expect(await pool.send(READ)).toMatchObject({ ok: true, upstream: 'a' });
    expect(b.calls).toHaveLength(3);
    expect(await pool.send(READ)).toMatchObject({ ok: true, upstream: 'a' });
    expect(b.calls).toHaveLength(3);

    clock += 5_000; // repaired: the trial succeeds and b is back
    b.mode = 'ok';
    expect(await pool.send(READ)).toMatchObject({ ok: true, upstream: 'b' });
    expect(pool.health()[0]).toMatchObject({ healthy: true, consecutiveFailures: 0, ejectedUntil: null });
    expect(await pool.send(READ)).toMatchObject({ ok: true, upstream: 'b' });
  });

  it('reads what arrived while the process was stalled before calling a call late, and does not blame the node', async () => {
    // The node runs on a thread of its own, so it answers while this one is blocked.
    const node = await startThreadUpstream();
    try {
      const pool = poolFor([{ url: node.url, label: 'node' }], { ejectAfterFailures: 1 }, 100);
      const call = pool.send(READ);
      await node.requested; // the call is out; the node answers 30 ms after it came
      // A stall longer than the timeout (a long collection, a paused VM) while the answer arrives.
      // Blocked in the check phase, the next turn of the event loop starts with its timers, as
      // after any stall, and only then reads the sockets.
      await new Promise((resolve) => setImmediate(() => resolve(blockFor(300))));
      expect(await call).toMatchObject({ ok: true, status: 200, upstream: 'node' });
      expect(pool.health()[0]).toMatchObject({ healthy: true, consecutiveFailures: 0 });
    } finally {
      await node.close();
    }
  });

  it('fails fast when every upstream is ejected', async () => {
    const clock = 0;
    b.mode = 'fail';
    const pool = poolFor([{ url: b.url, label: 'b' }], { ejectAfterFailures: 1, coolDownMs: 60_000, now: () => clock });
    expect(await pool.send(READ)).toMatchObject({ ok: false, kind: 'unavailable', upstream: 'b' });
    expect(await pool.send(READ)).toMatchObject({ ok: false, kind: 'unavailable', upstream: null, message: 'no healthy upstream for test' });
    expect(b.calls).toHaveLength(1);
  });
});

describe('answers', () => {
  it('counts 429, 502-504 and non-JSON 5xx as node failures, but passes a JSON 500/501 on', () => {
    const json = Buffer.from('{"code":12,"message":"Not Implemented"}');
    const html = Buffer.from('<html>oops</html>');
    expect([429, 502, 503, 504].map((s) => isNodeFailure(s, json))).toEqual([true, true, true, true]);
    expect(isNodeFailure(500, html)).toBe(true);
    expect(isNodeFailure(501, json)).toBe(false);
    expect(isNodeFailure(500, json)).toBe(false);
    expect(isNodeFailure(404, html)).toBe(false);
  });

  it('passes a JSON 501 from the node on without retrying', async () => {
    const lcd = await startFake(() => ({ status: 501, body: { code: 12, message: 'Not Implemented', details: [] } }));
    try {
      const pool = poolFor([
        { url: lcd.url, label: 'lcd' },
        { url: a.url, label: 'a' },
      ]);
      expect(await pool.send({ method: 'GET', path: 'cosmos/x', retriable: true })).toMatchObject({ ok: true, status: 501, upstream: 'lcd' });
      expect(a.calls).toHaveLength(0);
    } finally {
      await lcd.close();
    }
  });

  it('joins the upstream URL path and query with the call path and query', () => {
    expect(targetPath(new URL('https://node.example/ext/bc/C/rpc'), '')).toBe('/ext/bc/C/rpc');
    expect(targetPath(new URL('https://node.example'), 'wallet/getnowblock')).toBe('/wallet/getnowblock');
    expect(targetPath(new URL('https://node.example/cosmoshub/'), 'cosmos/bank?x=1')).toBe('/cosmoshub/cosmos/bank?x=1');
    expect(targetPath(new URL('https://node.example/v1?key=k'), 'a?b=2')).toBe('/v1/a?key=k&b=2');
  });
});
