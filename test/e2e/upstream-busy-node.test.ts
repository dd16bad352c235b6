/**
 * A node that refuses a call for want of capacity inside an HTTP 200 (Infura's -32005 "daily
 * request count exceeded, request rate limited"), through the whole service (startTestApp, the
 * nodes given as UPSTREAM_EVM, real metering) in front of two fake nodes serving one chain
 * (test/support/fakeUpstreams.ts): a busy node is a failing node for reads, its refusal is the
 * caller's answer only when every node refused, a write is never sent twice, and a complaint
 * about the call's own size is the node's answer, whatever its code.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';
import { until } from '../support/eventually.js';
import type { EvmNodeFake, ReceivedCall } from '../support/fakeUpstreams.js';
import { Started } from '../support/serviceOnEvmNodes.js';
import type { TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

const started = new Started();
afterEach(() => started.close());

/** Two nodes (or `nodeCount`) behind the service. */
async function setUp(nodeCount = 2) {
  const setup = await started.serviceOnEvmNodes(nodeCount);
  return { ...setup, nodes: setup.nodes as [EvmNodeFake, EvmNodeFake] };
}

const RATE_LIMITED = { code: -32005, message: 'daily request count exceeded, request rate limited' };
const TOO_MANY_RESULTS = { code: -32005, message: 'query returned more than 10000 results' };

/** Makes `node` answer callers' calls (not the gateway's head polls) with `error`, under each call's own id(s). */
function refuse(node: EvmNodeFake, error: { code: number; message: string }, only: (call: ReceivedCall) => boolean = () => true): void {
  node.rewrite = (body, call) => {
    if (call.headers[HEAD_POLL_HEADER] !== undefined || !only(call)) return body;
    const sent = JSON.parse(call.body) as { id: unknown } | Array<{ id: unknown }>;
    const answer = (id: unknown) => ({ jsonrpc: '2.0', id, error });
    return JSON.stringify(Array.isArray(sent) ? sent.map((s) => answer(s.id)) : answer(sent.id));
  };
}

let nextId = 1;
interface RpcAnswer {
  status: number;
  body: { id?: unknown; result?: unknown; error?: { code: number; message: string } };
}
async function rpc(url: string, method: string, params: unknown[] = []): Promise<RpcAnswer> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
  });
  return { status: r.status, body: JSON.parse(await r.text()) as RpcAnswer['body'] };
}

/** The account's usage records, once `count` are in the log, by time. */
async function records(t: TestApp, accountId: string, count: number): Promise<UsageRecord[]> {
  await until(async () => (await recordedCalls(t.runtime.store, accountId)).length >= count, 15_000);
  return (await recordedCalls(t.runtime.store, accountId)).sort((x, y) => x.at.localeCompare(y.at));
}

const balanceCalls = (node: EvmNodeFake): number => node.calls.filter((c) => c.body.includes('eth_getBalance')).length;

describe('a node rate-limited inside a 200', () => {
  it('is a failing node for reads: the other node answers, and the busy one rests after three refusals', async () => {
    const { t, url, nodes, accountId } = await setUp();
    const [busy, good] = nodes;
    refuse(busy, RATE_LIMITED);
    const pool = t.runtime.gateway!.pools.get('evm')!;
    let made = 0;
    // Until the busy node has refused three reads (the pool picks at random, by weight): every caller gets a result.
    await until(async () => {
      made += 1;
      const r = await rpc(url, 'eth_getBalance', [`0x${made.toString(16)}`, 'pending']);
      // Before: the node's -32005 was the caller's answer, though the other node was there.
      expect([r.status, r.body.error]).toEqual([200, undefined]);
      expect(r.body.result).toMatch(/^0x[0-9a-f]{64}$/);
      return pool.health()[0]!.ejectedUntil !== null;
    }, 15_000);
    expect(balanceCalls(busy)).toBe(3);
    expect(pool.health()[0]).toMatchObject({ healthy: false, consecutiveFailures: 3 });
    // Seen by the operator though every caller got a result.
    const metrics = await (await fetch(`${url.split('/evm/')[0]}/metrics`)).text();
    expect(metrics).toContain('gateway_upstream_attempt_failures_total{chain="evm",upstream="evm-env-1",reason="busy"} 3');
    expect(metrics).toContain('gateway_upstream_attempt_failures_total{chain="evm",upstream="evm-env-2",reason="busy"} 0');
    expect(pool.health()[0]!.errorRate).toBeGreaterThan(0);
    // Resting: the next calls go to the other node alone.
    for (let i = 0; i < 10; i++) {
      made += 1;
      expect((await rpc(url, 'eth_getBalance', ['0x1000', 'pending'])).body.result).toMatch(/^0x/);
    }
    expect(balanceCalls(busy)).toBe(3);
    expect(balanceCalls(good)).toBe(made);
    // Metered once each, as successes, by the node that answered.
    const seen = await records(t, accountId, made);
    expect(seen).toHaveLength(made);
    expect(new Set(seen.map((r) => [r.status, r.rpcErrorCode, r.upstream].join()))).toEqual(new Set(['200,,evm-env-2']));
  }, 30_000);

  it("gives the caller the last node's own refusal, at 200, when every node refused", async () => {
    const { t, url, nodes, accountId } = await setUp();
    for (const n of nodes) refuse(n, RATE_LIMITED);
    const r = await rpc(url, 'eth_getBalance', ['0x01', 'pending']);
    // The node's answer as it is, with the caller's id: not a 502 of the gateway's.
    expect(r).toEqual({ status: 200, body: { jsonrpc: '2.0', id: nextId - 1, error: RATE_LIMITED } });
    expect(nodes.map(balanceCalls)).toEqual([1, 1]);
    expect(t.runtime.gateway!.pools.health().evm!.map((h) => h.consecutiveFailures)).toEqual([1, 1]);
    // Metered as the node's error, by the node that answered last.
    const [record] = await records(t, accountId, 1);
    expect(record).toMatchObject({ status: 200, rpcErrorCode: -32005, errorMessage: RATE_LIMITED.message, charged: true });
    expect(['evm-env-1', 'evm-env-2']).toContain(record!.upstream);
  });

  it("keeps the last node standing at work: a chain's only node never rests for refusing, its callers get its refusal, not a 502", async () => {
    const { t, url, nodes } = await setUp(1);
    const [only] = nodes;
    refuse(only, RATE_LIMITED);
    for (let i = 0; i < 6; i++) {
      const r = await rpc(url, 'eth_getBalance', ['0x01', 'pending']);
      // Before: rested after its third refusal, the node's callers got 502 "no healthy upstream" for 5 s.
      expect([r.status, r.body.error]).toEqual([200, RATE_LIMITED]);
    }
    expect(balanceCalls(only)).toBe(6);
    expect(t.runtime.gateway!.pools.health().evm![0]).toMatchObject({ consecutiveFailures: 6, ejectedUntil: null });
    // Back to answering: its calls are results again at once.
    only.rewrite = undefined;
    expect((await rpc(url, 'eth_getBalance', ['0x01', 'pending'])).body.result).toMatch(/^0x/);
  });

  it('retries a read batch one member of which was refused, and hands the caller a whole answer', async () => {
    const { t, url, nodes } = await setUp();
    const [busy] = nodes;
    // A provider's limit cutting a batch part way: the second member refused.
    busy.rewrite = (body, call) => {
      if (call.headers[HEAD_POLL_HEADER] !== undefined || !call.body.startsWith('[')) return body;
      const answers = JSON.parse(body) as Array<{ id: number }>;
      return JSON.stringify(answers.map((a, i) => (i === 0 ? a : { jsonrpc: '2.0', id: a.id, error: RATE_LIMITED })));
    };
    const pool = t.runtime.gateway!.pools.get('evm')!;
    let n = 0;
    await until(async () => {
      n += 1;
      const r = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify([
          { jsonrpc: '2.0', id: 'a', method: 'eth_getBalance', params: [`0x${n.toString(16)}`, 'pending'] },
          { jsonrpc: '2.0', id: 'b', method: 'eth_getBalance', params: [`0x${(n + 1000).toString(16)}`, 'pending'] },
        ]),
      });
      const answers = (await r.json()) as Array<{ id: string; result?: string; error?: unknown }>;
      expect(r.status).toBe(200);
      expect(answers.map((a) => [a.id, a.error, /^0x[0-9a-f]{64}$/.test(a.result ?? '')]).sort()).toEqual([
        ['a', undefined, true],
        ['b', undefined, true],
      ]);
      return pool.health()[0]!.consecutiveFailures > 0;
    }, 15_000);
  });

  it("passes on a complaint about the call's size under -32005 as the node's answer, no other node asked", async () => {
    const { t, url, nodes } = await setUp();
    for (const n of nodes) refuse(n, TOO_MANY_RESULTS, (call) => call.body.includes('eth_getLogs'));
    for (let i = 0; i < 4; i++) {
      const r = await rpc(url, 'eth_getLogs', [{ fromBlock: '0x0', toBlock: 'pending' }]);
      expect(r).toEqual({ status: 200, body: { jsonrpc: '2.0', id: nextId - 1, error: TOO_MANY_RESULTS } });
    }
    // One node asked per call, none blamed.
    expect(nodes.reduce((sum, n) => sum + n.calls.length, 0)).toBe(4);
    expect(t.runtime.gateway!.pools.health().evm!.map((h) => [h.healthy, h.consecutiveFailures])).toEqual([
      [true, 0],
      [true, 0],
    ]);
  });
});

describe("a node's failed attempts", () => {
  it('are counted by reason on /metrics, though another node answered every caller', async () => {
    for (const [mode, reason] of [
      ['fail', 'status'],
      ['garbage', 'invalid'],
      ['hangup', 'unreachable'],
    ] as const) {
      const { t, url, nodes } = await setUp();
      nodes[0].mode = mode;
      const pool = t.runtime.gateway!.pools.get('evm')!;
      await until(async () => {
        // A call that needs no head: the failing node (its head polls failing too) stays eligible.
        const r = await rpc(url, 'eth_accounts');
        // The other node's own answer (it knows no such method), never the gateway's 502.
        expect([r.status, r.body.error?.code]).toEqual([200, -32601]);
        return pool.health()[0]!.failures[reason] > 0;
      }, 10_000);
      const failures = pool.health()[0]!.failures;
      expect(
        Object.entries(failures)
          .filter(([, n]) => n > 0)
          .map(([why]) => why),
      ).toEqual([reason]);
      const metrics = await (await fetch(`${url.split('/evm/')[0]}/metrics`)).text();
      expect(metrics).toContain(`gateway_upstream_attempt_failures_total{chain="evm",upstream="evm-env-1",reason="${reason}"} ${failures[reason]}`);
    }
  }, 40_000);
});

describe('a write answered busy', () => {
  it('reaches one node once, the refusal is the caller’s, and it counts against that node', async () => {
    const { t, url, nodes, accountId } = await setUp();
    for (const n of nodes) refuse(n, RATE_LIMITED);
    const r = await rpc(url, 'eth_sendRawTransaction', ['0x02']);
    expect(r).toEqual({ status: 200, body: { jsonrpc: '2.0', id: nextId - 1, error: RATE_LIMITED } });
    const sent = nodes.map((n) => n.calls.filter((c) => c.body.includes('eth_sendRawTransaction')).length);
    expect(sent.sort()).toEqual([0, 1]);
    const health = t.runtime.gateway!.pools.health().evm!;
    const asked = nodes.findIndex((n) => n.calls.length > 0);
    // Before: the node that refused stayed at 0 failures.
    expect(health.map((h) => h.consecutiveFailures)).toEqual(asked === 0 ? [1, 0] : [0, 1]);
    const [record] = await records(t, accountId, 1);
    expect(record).toMatchObject({ method: 'eth_sendRawTransaction', status: 200, rpcErrorCode: -32005, upstream: health[asked]!.label });
  });
});
