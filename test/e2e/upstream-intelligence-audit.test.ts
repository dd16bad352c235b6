/**
 * The gateway's node-side intelligence as a caller comparing RPC providers meets it, through the
 * whole service (startTestApp, the nodes given as UPSTREAM_EVM, real metering and /metrics) in
 * front of two or three fake nodes serving one moving chain (test/support/fakeUpstreams.ts):
 * a resting node's return, the head never going back between two calls, answers cut short or
 * over the size cap, and writes that time out. What gateway-upstream-intelligence, -upstreams and
 * -reorg cover is not repeated here.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { until } from '../support/eventually.js';
import type { EvmNodeFake } from '../support/fakeUpstreams.js';
import { rpc, Started } from '../support/serviceOnEvmNodes.js';
import type { TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

const started = new Started();
afterEach(() => started.close());

const setUp = (count: number, chainExtra: Record<string, unknown> = {}) => started.serviceOnEvmNodes(count, chainExtra);

/** The account's usage records, once `count` are in the log. */
async function records(t: TestApp, accountId: string, count: number): Promise<UsageRecord[]> {
  await until(async () => (await recordedCalls(t.runtime.store, accountId)).length >= count, 15_000);
  return recordedCalls(t.runtime.store, accountId);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('a resting node', () => {
  it('comes back after its trial call lost to a hedge: the next call may try it again', async () => {
    const { t, url, nodes, accountId } = await setUp(2);
    const [a, b] = nodes as [EvmNodeFake, EvmNodeFake];
    const pool = t.runtime.gateway!.pools.get('evm')!;
    // Every call made, each to be metered once.
    let made = 0;
    const call = (params: unknown[]) => {
      made += 1;
      return rpc(url, 'eth_getBalance', params);
    };
    // Enough answers for a hedge delay (and budget): both nodes answer at once.
    for (let i = 0; i < 60; i++) expect((await call([`0x${i.toString(16)}`, 'pending'])).status).toBe(200);
    a.mode = 'fail';
    await until(async () => {
      expect((await call(['0x01', 'pending'])).status).toBe(200);
      return pool.health()[0]!.ejectedUntil !== null;
    });
    // Back, but slow at first: after the 5 s rest its trial call is hedged to the other node, which answers first
    // (under the 1 s timeout: a trial call that timed out would rest it again, rightly).
    a.mode = 'ok';
    a.latency = () => 900;
    await sleep(5_100);
    const before = a.calls.length;
    await until(async () => {
      expect((await call(['0x02', 'pending'])).status).toBe(200);
      return a.calls.length > before;
    }, 10_000);
    // Now the other node dies and this one is quick: it must take the calls (it was never tried again: 502 for good).
    a.latency = () => 0;
    b.mode = 'fail';
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await call(['0x03', 'pending'])).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200]);
    expect(pool.health()[0]).toMatchObject({ label: 'evm-env-1', healthy: true, consecutiveFailures: 0 });
    const metrics = await (await fetch(`${url.split('/evm/')[0]}/metrics`)).text();
    expect(metrics).toContain('gateway_upstream_healthy{chain="evm",upstream="evm-env-1"} 1');
    // Each call metered once, by the node that answered it.
    const seen = await records(t, accountId, made);
    expect(seen).toHaveLength(made);
    // The last five by time: the log holds records in the order they were handed over, not answered.
    const last = seen
      .filter((r) => r.method === 'eth_getBalance')
      .sort((x, y) => x.at.localeCompare(y.at))
      .slice(-5);
    expect(last.map((r) => [r.status, r.upstream, r.charged])).toEqual(Array.from({ length: 5 }, () => [200, 'evm-env-1', true]));
    expect(new Set(seen.map((r) => r.requestId)).size).toBe(seen.length);
  }, 30_000);
});

describe('the head across nodes at different heights', () => {
  it('never goes back between two calls, and the newest block is found, while a node a few blocks behind is in rotation', async () => {
    const { t, url, nodes, chain } = await setUp(2);
    const [, behind] = nodes as [EvmNodeFake, EvmNodeFake];
    // 3 blocks behind: within maxLagBlocks (10), so not "lagging".
    behind.behaviour = 'behind';
    behind.lagBlocks = 3;
    const heads = t.runtime.gateway!.pools.get('evm')!.heads!;
    await rpc(url, 'eth_chainId');
    await until(() => heads.upstreams.every((u) => u.head !== null) && heads.best === chain.head);
    expect(t.runtime.gateway!.pools.health().evm!.map((h) => h.state)).toEqual(['ok', 'ok']);
    const numbers: number[] = [];
    const newest: unknown[] = [];
    for (let round = 0; round < 8; round++) {
      chain.advance();
      await until(() => heads.best === chain.head);
      for (let i = 0; i < 3; i++) {
        numbers.push(Number((await rpc(url, 'eth_blockNumber')).body.result));
        // The block the caller was just told is the head, by its hash: a node behind answers null.
        newest.push((await rpc(url, 'eth_getBlockByHash', [chain.block(chain.head)!.hash, false])).body.result === null ? 'null' : 'found');
        numbers.push(Number(((await rpc(url, 'eth_getBlockByNumber', ['latest', false])).body.result as { number: string }).number));
      }
    }
    // Before: 202 202 200 203 … (the node behind answered every other epoch's first call).
    expect(numbers.every((n, i) => i === 0 || n >= (numbers[i - 1] as number))).toBe(true);
    expect(numbers.at(-1)).toBe(chain.head);
    expect(newest.filter((r) => r === 'null')).toEqual([]);
    // None of those reached the node behind; it still serves what it has: an explicit older block.
    expect(behind.calls.filter((c) => /eth_blockNumber|eth_getBlockByHash|"latest"/.test(c.body))).toEqual([]);
    behind.calls.length = 0;
    for (let i = 0; i < 6; i++) expect((await rpc(url, 'eth_getBlockByNumber', [`0x${(chain.head - 20 - i).toString(16)}`, false])).status).toBe(200);
    expect(behind.calls.length).toBeGreaterThan(0);
  });
});

describe('answers a node gets wrong', () => {
  it('takes an answer cut short after its id for no answer: another node answers, or -32010 in well-formed JSON', async () => {
    const { t, url, nodes, accountId } = await setUp(2);
    const [cut, good] = nodes as [EvmNodeFake, EvmNodeFake];
    // As geth writes it (id before result), ended early by something between: an HTTP message complete in itself.
    const truncate = (body: string): string => {
      const o = JSON.parse(body) as { id: unknown };
      return `{"jsonrpc":"2.0","id":${JSON.stringify(o.id)},"result":"0x12`;
    };
    cut.rewrite = truncate;
    for (let i = 0; i < 6; i++) {
      const r = await rpc(url, 'eth_getBalance', ['0x01', 'pending']);
      expect([r.status, r.body.error]).toEqual([200, undefined]);
      expect(r.body.result).toMatch(/^0x[0-9a-f]{64}$/);
    }
    const seen = await records(t, accountId, 6);
    expect(seen.map((r) => r.upstream)).toEqual(Array.from({ length: 6 }, () => 'evm-env-2'));
    good.rewrite = truncate;
    const r = await rpc(url, 'eth_getBalance', ['0x01', 'pending']);
    // Before: 200 and `{"jsonrpc":"2.0","id":…,"result":"0x12`, charged as a success.
    expect(r.status).toBe(502);
    expect(r.body.error).toMatchObject({ code: -32010, message: expect.stringContaining('invalid answer') });
    const last = (await records(t, accountId, 7)).at(-1)!;
    expect([last.status, last.rpcErrorCode]).toEqual([502, -32010]);
  });

  it('gives up an answer over the size cap at once: one node asked, none blamed, other callers served', async () => {
    // Time to send 64 MiB on a loaded machine: the answer is cut by the cap, not the deadline.
    const { t, url, nodes } = await setUp(3, { timeoutMs: 30_000 });
    // 65 MiB of result: over the 64 MiB every node answer is capped at.
    const big = 'a'.repeat(65 * 1024 * 1024);
    for (const n of nodes)
      n.rewrite = (body, call) =>
        call.body.includes('eth_getLogs') ? `{"jsonrpc":"2.0","id":${(JSON.parse(call.body) as { id: number }).id},"result":"0x${big}"}` : body;
    for (let i = 0; i < 3; i++) {
      const r = await rpc(url, 'eth_getLogs', [{ fromBlock: '0x0', toBlock: 'latest' }]);
      expect(r.status).toBe(502);
      expect(r.body.error).toMatchObject({ code: -32010, message: expect.stringContaining('ask for less') });
    }
    // Before: each call went to every node (three 64 MiB transfers) and three such calls ejected them all: "no healthy upstream" for everyone.
    expect(nodes.reduce((n, f) => n + f.calls.length, 0)).toBe(3);
    expect(t.runtime.gateway!.pools.health().evm!.map((h) => [h.healthy, h.consecutiveFailures])).toEqual([
      [true, 0],
      [true, 0],
      [true, 0],
    ]);
    expect((await rpc(url, 'eth_getBalance', ['0x01', 'pending'])).status).toBe(200);
  }, 30_000);
});

describe('writes', () => {
  it('sends a write that times out to one node only, alone or in a batch, even with hedging warmed up', async () => {
    const { t, url, nodes, accountId } = await setUp(2, { timeoutMs: 300 });
    for (let i = 0; i < 60; i++) await rpc(url, 'eth_getBalance', [`0x${i.toString(16)}`, 'pending']);
    for (const n of nodes) {
      n.calls.length = 0;
      n.latency = () => 600;
    }
    const single = await rpc(url, 'eth_sendRawTransaction', ['0x02']);
    expect(single.status).toBe(504);
    const batch = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([
        { jsonrpc: '2.0', id: 1, method: 'eth_sendRawTransaction', params: ['0x03'] },
        { jsonrpc: '2.0', id: 2, method: 'eth_chainId' },
      ]),
    });
    expect(batch.status).toBe(504);
    await sleep(700);
    const sent = nodes.flatMap((n) => n.calls.map((c) => c.body)).filter((b) => b.includes('eth_sendRawTransaction'));
    expect(sent).toHaveLength(2);
    expect(sent.filter((b) => b.includes('0x02'))).toHaveLength(1);
    const seen = (await records(t, accountId, 63)).slice(-3);
    expect(seen.map((r) => [r.method, r.status, r.rpcErrorCode, r.cache])).toEqual([
      ['eth_sendRawTransaction', 504, -32015, 'miss'],
      ['eth_sendRawTransaction', 504, -32015, 'miss'],
      ['eth_chainId', 504, -32015, 'miss'],
    ]);
  });
});
