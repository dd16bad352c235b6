/**
 * Features built apart, checked together on the chain-call path: a wide eth_getLogs split into
 * sub-ranges (`getLogsMaxBlockRange`), a busy node's refusal inside a 200 passed over for another
 * node, a call the gateway failed to serve left uncharged and its unit given back, and
 * gateway_upstream_attempt_failures_total. Through the whole service (startTestApp, real HTTP and
 * WebSocket, real metering, a small monthly plan) in front of two fake nodes serving one chain,
 * every node refusing a range over 100 blocks: each sub-call's fate (a 502 of ours, a busy node,
 * every node busy, a 504, logs over the cap) gives the caller's answer, its record's `charged`,
 * the limiter's X-MonthlyLimit-Remaining and the account view, which must all agree.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { until } from '../support/eventually.js';
import type { EvmNodeFake, FakeEvmChain, ReceivedCall } from '../support/fakeUpstreams.js';
import { answerGetLogs, blockOfTag, isGetLogs, type LogsAnswer, type SentRpc } from '../support/getLogsCalls.js';
import { accountUsage } from '../support/quotaCalls.js';
import { headsFollowed, Started } from '../support/serviceOnEvmNodes.js';
import type { TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';
import { WsClient } from '../support/wsClient.js';

const started = new Started();
afterEach(() => started.close());

const MAX_RANGE = 100;
const MONTHLY = 100;
const RANGE_REFUSAL = { code: -32000, message: `exceed maximum block range: ${MAX_RANGE}` };
const RATE_LIMITED = { code: -32005, message: 'daily request count exceeded, request rate limited' };
const GARBAGE = '<html>bad gateway</html>';
const hex = (n: number): string => `0x${n.toString(16)}`;

interface RpcBody {
  id?: unknown;
  result?: unknown[];
  error?: { code: number; message: string };
}

/** The `fromBlock` of a single eth_getLogs sent to a node (null: another call, or a batch). */
function fromOf(call: ReceivedCall, chain: FakeEvmChain): number | null {
  if (!isGetLogs(call) || call.body.startsWith('[')) return null;
  return blockOfTag((JSON.parse(call.body) as SentRpc).params?.[0]?.fromBlock, chain);
}

/**
 * Makes `node` answer a single eth_getLogs over `from..to` as `answer` says (null: as the fake
 * answers); a range over MAX_RANGE blocks is always refused, as a node with a range limit does.
 */
function nodeAnswers(node: EvmNodeFake, chain: FakeEvmChain, answer: (from: number) => LogsAnswer = () => null): void {
  answerGetLogs(node, chain, ([from, to]) => (to - from + 1 > MAX_RANGE ? { error: RANGE_REFUSAL } : answer(from)));
}

/** The service on two nodes of a chain 1,300 blocks high (finalized 1,292), splitting eth_getLogs at 100 blocks, on a plan of MONTHLY calls. */
async function setUp() {
  const setup = await started.serviceOnEvmNodes(2, { getLogsMaxBlockRange: MAX_RANGE }, { rps: 1_000, monthly_requests: MONTHLY });
  const { chain, nodes } = setup;
  chain.advance(1_100);
  for (const node of nodes) nodeAnswers(node, chain);
  // The month's first charged call.
  await headsFollowed(setup);
  return { ...setup, nodes: setup.nodes as [EvmNodeFake, EvmNodeFake] };
}

interface Answered {
  status: number;
  remaining: number;
  body: RpcBody;
  text: string;
}
let nextId = 1;
async function post(url: string, body: unknown): Promise<Answered> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, remaining: Number(r.headers.get('x-monthlylimit-remaining')), body: JSON.parse(text) as RpcBody, text };
}
const logsCall = (from: number, to: number, id: unknown = nextId++) => ({
  jsonrpc: '2.0',
  id,
  method: 'eth_getLogs',
  params: [{ fromBlock: hex(from), toBlock: hex(to) }],
});
const getLogs = (url: string, from: number, to: number, id?: unknown) => post(url, logsCall(from, to, id));

/** The block numbers of a result's logs. */
const blocksOf = (result: unknown): number[] => (result as Array<{ blockNumber: string }>).map((l) => Number.parseInt(l.blockNumber, 16));
const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** The account's records once `count` are in the log, by time then batch position. */
/** The first blocks of the eth_getLogs sub-calls node `node` was sent. */
const logsSent = (node: EvmNodeFake, chain: FakeEvmChain): number[] => node.calls.map((c) => fromOf(c, chain)).filter((f): f is number => f !== null);

async function records(t: TestApp, accountId: string, count: number): Promise<UsageRecord[]> {
  await until(async () => (await recordedCalls(t.runtime.store, accountId)).length >= count, 15_000);
  return (await recordedCalls(t.runtime.store, accountId)).sort((x, y) => x.at.localeCompare(y.at) || x.requestId.localeCompare(y.requestId));
}

/** The lines of the service's /metrics starting with `name` (the service behind chain URL `url`). */
async function metric(url: string, name: string): Promise<string> {
  const text = await (await fetch(`${url.slice(0, url.indexOf('/evm/'))}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(name))
    .join('\n');
}

describe('a split eth_getLogs and the fate of its sub-calls', () => {
  it('each sub-call outcome gives the caller answer, its charge, the limiter header and the account view, all agreeing', async () => {
    const { t, url, chain, nodes, accountId, auth } = await setUp();
    const [first, second] = nodes;
    const pool = t.runtime.gateway!.pools.get('evm')!;
    const both = (answer: (from: number) => LogsAnswer) => {
      for (const node of nodes) nodeAnswers(node, chain, answer);
    };

    // Served: every log, one unit.
    const served = await getLogs(url, 0, 299);
    expect([served.status, blocksOf(served.body.result)]).toEqual([200, range(0, 299)]);
    expect(served.remaining).toBe(MONTHLY - 2);

    // A sub-call every node answers with garbage: the gateway's 502, no partial list, its unit back.
    both((from) => (from === 400 ? { raw: GARBAGE } : null));
    const ours = await getLogs(url, 300, 599, 'ours');
    expect([ours.status, ours.body.id, ours.body.error?.code, ours.body.result]).toEqual([502, 'ours', -32010, undefined]);
    expect(ours.remaining).toBe(MONTHLY - 2);

    // A sub-call one node refuses for capacity: passed over, the other node answers it.
    both(() => null);
    nodeAnswers(first, chain, (from) => (from === 700 ? { error: RATE_LIMITED } : null));
    nodeAnswers(second, chain, () => null);
    const busyOne = await getLogs(url, 600, 799);
    expect([busyOne.status, blocksOf(busyOne.body.result)]).toEqual([200, range(600, 799)]);
    expect(busyOne.remaining).toBe(MONTHLY - 3);

    // Every node refuses it: the node's own refusal at its 200, charged.
    both((from) => (from === 900 ? { error: RATE_LIMITED } : null));
    const allBusy = await getLogs(url, 800, 999, 'busy');
    expect([allBusy.status, allBusy.body]).toEqual([200, { jsonrpc: '2.0', id: 'busy', error: RATE_LIMITED }]);
    expect(allBusy.remaining).toBe(MONTHLY - 4);

    // A sub-call no node answers in time: 504, charged.
    both(() => null);
    for (const node of nodes) node.latency = (call) => (fromOf(call, chain) === 1_100 ? 1_500 : 0);
    const late = await getLogs(url, 1_000, 1_199, 'late');
    for (const node of nodes) node.latency = undefined;
    expect([late.status, late.body.error?.code]).toEqual([504, -32015]);
    expect(late.remaining).toBe(MONTHLY - 5);

    // Logs over the answer cap (each sub-range under it): the 502 -32010 of an oversized answer, charged.
    const cap = pool as unknown as { maxResponseBytes: number };
    const maxBytes = cap.maxResponseBytes;
    cap.maxResponseBytes = 40_000;
    try {
      const large = await getLogs(url, 600, 899, 'large');
      expect([large.status, large.body.error?.code]).toEqual([502, -32010]);
      expect(large.body.error?.message).toMatch(/the most the gateway passes on/);
      expect(large.remaining).toBe(MONTHLY - 6);
    } finally {
      cap.maxResponseBytes = maxBytes;
    }

    const all = await records(t, accountId, 7);
    expect(all.map((r) => [r.method, r.status, r.rpcErrorCode, r.charged])).toEqual([
      ['eth_chainId', 200, null, true],
      ['eth_getLogs', 200, null, true],
      ['eth_getLogs', 502, -32010, false],
      ['eth_getLogs', 200, null, true],
      ['eth_getLogs', 200, -32005, true],
      ['eth_getLogs', 504, -32015, true],
      ['eth_getLogs', 502, -32010, true],
    ]);
    await accountUsage(t, auth, { requests: 6, remaining: MONTHLY - 6 });
    // The busy node's refusals counted against it, by reason.
    expect(await metric(url, 'gateway_upstream_attempt_failures_total{chain="evm",upstream="evm-env-1",reason="busy"}')).toMatch(/ [1-9]\d*$/);
    expect(second.calls.length).toBeGreaterThan(0);
  }, 30_000);

  it('in a batch: each member charged by its own fate, and the refund is the uncharged members', async () => {
    const { t, url, chain, nodes, accountId, auth } = await setUp();
    for (const node of nodes) nodeAnswers(node, chain, (from) => (from === 400 ? { raw: GARBAGE } : null));
    const answer = await post(url, [
      logsCall(0, 299, 1),
      { jsonrpc: '2.0', id: 2, method: 'eth_chainId', params: [] },
      logsCall(300, 599, 3),
      logsCall(1_000, 1_049, 4),
    ]);
    expect(answer.status).toBe(200);
    const members = JSON.parse(answer.text) as RpcBody[];
    const byId = (id: number) => members.find((m) => m.id === id);
    expect(blocksOf(byId(1)?.result)).toEqual(range(0, 299));
    expect(byId(2)?.result).toBe('0x2a');
    expect([byId(3)?.error?.code, byId(3)?.result]).toEqual([-32010, undefined]);
    expect(blocksOf(byId(4)?.result)).toEqual(range(1_000, 1_049));
    // Four granted, three charged: one back.
    expect(answer.remaining).toBe(MONTHLY - 1 - 3);

    const all = await records(t, accountId, 5);
    expect(all.slice(1).map((r) => [r.method, r.rpcErrorCode, r.charged])).toEqual([
      ['eth_getLogs', null, true],
      ['eth_chainId', null, true],
      ['eth_getLogs', -32010, false],
      ['eth_getLogs', null, true],
    ]);
    await accountUsage(t, auth, { requests: 4, remaining: MONTHLY - 4 });
  }, 30_000);

  it('a batch of split members all failed by the gateway keeps the 502 a batch failed whole gets, uncharged', async () => {
    const { t, url, chain, nodes, accountId } = await setUp();
    for (const node of nodes) nodeAnswers(node, chain, (from) => (from === 400 ? { raw: GARBAGE } : null));
    // As a batch the nodes failed whole is answered (502: clients drop a whole batch answered 5xx); before: 200 with the -32010 elements.
    const split = await post(url, [logsCall(300, 599, 2), logsCall(400, 699, 3)]);
    expect(split.status).toBe(502);
    expect((JSON.parse(split.text) as RpcBody[]).map((m) => [m.id, m.error?.code])).toEqual([
      [2, -32010],
      [3, -32010],
    ]);
    expect(split.remaining).toBe(MONTHLY - 1);
    const all = await records(t, accountId, 3);
    expect(all.slice(1).map((r) => [r.status, r.rpcErrorCode, r.charged])).toEqual([
      [502, -32010, false],
      [502, -32010, false],
    ]);
  }, 30_000);

  it('over the WebSocket: a split call the gateway failed is uncharged, a served one charged', async () => {
    const { t, url, chain, nodes, accountId, auth } = await setUp();
    for (const node of nodes) nodeAnswers(node, chain, (from) => (from === 400 ? { raw: GARBAGE } : null));
    const ws = await WsClient.open(url.replace(/^http/, 'ws'));
    try {
      const failed = await ws.call('eth_getLogs', [{ fromBlock: hex(300), toBlock: hex(599) }]);
      expect((failed.error as { code: number }).code).toBe(-32010);
      const served = await ws.call('eth_getLogs', [{ fromBlock: hex(0), toBlock: hex(299) }]);
      expect(blocksOf(served.result)).toEqual(range(0, 299));
    } finally {
      ws.close();
    }
    const all = await records(t, accountId, 3);
    expect(all.map((r) => [r.method, r.rpcErrorCode, r.charged])).toEqual([
      ['eth_chainId', null, true],
      ['eth_getLogs', -32010, false],
      ['eth_getLogs', null, true],
    ]);
    await accountUsage(t, auth, { requests: 2, remaining: MONTHLY - 2 });
  }, 30_000);

  it("hedges a slow node's sub-calls; the caller gets every log", async () => {
    const { t, url, chain, nodes, accountId } = await setUp();
    const [first, second] = nodes;

    // Reads seen (the latency window and the hedge budget filled), then one node slow on eth_getLogs: its sub-calls go to the other node too.
    for (let i = 0; i < 40; i++) await post(url, { jsonrpc: '2.0', id: nextId++, method: 'eth_getBalance', params: [hex(i + 1), 'pending'] });
    first.latency = (call) => (fromOf(call, chain) === null ? 0 : 800);
    const hedged = await getLogs(url, 0, 999);
    first.latency = undefined;
    expect([hedged.status, blocksOf(hedged.body.result)]).toEqual([200, range(0, 999)]);
    const slowOnes = logsSent(first, chain);
    expect(slowOnes.length).toBeGreaterThan(0);
    expect(logsSent(second, chain).filter((from) => slowOnes.includes(from)).length).toBeGreaterThan(0);
    const logs = (await records(t, accountId, 42)).filter((r) => r.method === 'eth_getLogs');
    expect(logs.map((r) => [r.status, r.charged])).toEqual([[200, true]]);
  }, 30_000);

  it('counts each sub-call a node failed in gateway_upstream_attempt_failures_total, retried on the other node; the caller gets every log', async () => {
    // A fresh service: too few answers seen for a hedge, so every sub-call the node got is one it failed (a hedge's
    // loser, cancelled when the other node answered first, is not a failure: under load it made the count 1 where 2).
    const { t, url, chain, nodes, accountId } = await setUp();
    const [first, second] = nodes;
    nodeAnswers(first, chain, () => ({ raw: GARBAGE }));
    const filter = { fromBlock: hex(0), toBlock: hex(999), address: `0x${'11'.repeat(20)}` };
    const answer = await post(url, { jsonrpc: '2.0', id: nextId++, method: 'eth_getLogs', params: [filter] });
    expect([answer.status, blocksOf(answer.body.result)]).toEqual([200, range(0, 999)]);
    const failedAtNode = logsSent(first, chain).length;
    expect(failedAtNode).toBeGreaterThan(0);
    expect(logsSent(second, chain)).toHaveLength(10);
    expect(await metric(url, 'gateway_upstream_attempt_failures_total{chain="evm",upstream="evm-env-1",reason="invalid"}')).toMatch(
      new RegExp(` ${failedAtNode}$`),
    );
    expect(await metric(url, 'gateway_upstream_attempt_failures_total{chain="evm",upstream="evm-env-2",reason="invalid"}')).toMatch(/ 0$/);
    const logs = (await records(t, accountId, 2)).filter((r) => r.method === 'eth_getLogs');
    expect(logs.map((r) => [r.status, r.charged])).toEqual([[200, true]]);
  }, 30_000);

  it('serves one split range to two callers at once with one sub-call per sub-range (coalesced), then from the cache', async () => {
    const { t, url, chain, nodes, accountId } = await setUp();
    for (const node of nodes) node.latency = (call) => (fromOf(call, chain) === null ? 0 : 150);
    const [a, b] = await Promise.all([getLogs(url, 0, 999, 'a'), getLogs(url, 0, 999, 'b')]);
    expect([a.status, a.body.id, blocksOf(a.body.result)]).toEqual([200, 'a', range(0, 999)]);
    expect([b.status, b.body.id, blocksOf(b.body.result)]).toEqual([200, 'b', range(0, 999)]);
    const sent = () => nodes.flatMap((n) => n.calls).filter((c) => fromOf(c, chain) !== null).length;
    expect(sent()).toBe(10);
    const c = await getLogs(url, 0, 999, 'c');
    expect(c.text).toBe(a.text.replace('"id":"a"', '"id":"c"'));
    expect(sent()).toBe(10);
    const logs = (await records(t, accountId, 4)).filter((r) => r.method === 'eth_getLogs');
    expect(logs.map((r) => r.charged)).toEqual([true, true, true]);
    expect(logs.map((r) => r.cache).sort()).toEqual(['coalesced', 'hit', 'miss']);
    expect(a.remaining + b.remaining).toBe(2 * MONTHLY - 2 - 3);
  }, 30_000);
});
