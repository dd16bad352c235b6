/**
 * A wide eth_getLogs split into sub-ranges (`getLogsMaxBlockRange`), through the whole service
 * (startTestApp, the nodes given as UPSTREAM_EVM, real metering) in front of fake nodes serving
 * one chain (test/support/fakeUpstreams.ts) that refuse a range over 100 blocks as nodes with a
 * range limit do ("exceed maximum block range: 100"): with the option the caller gets every log
 * in one answer, without it the node's refusal as before; a failing sub-range gives no partial
 * answer; one record, charged once; a range needing more sub-calls than the bound goes whole.
 */
import { createPublicClient, http } from 'viem';
import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { until } from '../support/eventually.js';
import type { EvmNodeFake, FakeEvmChain } from '../support/fakeUpstreams.js';
import { answerGetLogs, blockOfTag, isGetLogs, type LogsAnswer, type LogsFilter, type SentRpc } from '../support/getLogsCalls.js';
import { headsFollowed, Started } from '../support/serviceOnEvmNodes.js';
import type { TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

const started = new Started();
afterEach(() => started.close());

const MAX_RANGE = 100;
const RANGE_REFUSAL = { code: -32000, message: `exceed maximum block range: ${MAX_RANGE}` };
const hex = (n: number): string => `0x${n.toString(16)}`;

/** The eth_getLogs ranges `node` was asked for, as [from, to]. */
function logsRanges(node: EvmNodeFake, chain: FakeEvmChain): Array<[number, number]> {
  return node.calls.filter(isGetLogs).map((c) => {
    const filter = (JSON.parse(c.body) as SentRpc).params?.[0] ?? {};
    return [blockOfTag(filter.fromBlock, chain), blockOfTag(filter.toBlock, chain)];
  });
}

/**
 * Makes `node` answer a single call as `answer` says (a node error object, or a raw body); the
 * rest as the fake answers. By default: an eth_getLogs over more than MAX_RANGE blocks is refused.
 */
function nodeAnswers(
  node: EvmNodeFake,
  chain: FakeEvmChain,
  answer: (range: [number, number]) => LogsAnswer = ([from, to]) => (to - from + 1 > MAX_RANGE ? { error: RANGE_REFUSAL } : null),
): void {
  answerGetLogs(node, chain, answer);
}

/** The service on `count` nodes of a chain 1,300 blocks high (finalized 1,292), every node refusing ranges over 100 blocks. */
async function setUp(chainExtra: Record<string, unknown>, count = 2) {
  const setup = await started.serviceOnEvmNodes(count, chainExtra);
  const { chain, nodes } = setup;
  chain.advance(1_100);
  for (const node of nodes) nodeAnswers(node, chain);
  await headsFollowed(setup);
  return setup;
}

let nextId = 1;
async function post(url: string, body: unknown): Promise<{ status: number; text: string }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
}
const getLogs = (url: string, filter: LogsFilter, id: unknown = nextId++) => post(url, { jsonrpc: '2.0', id, method: 'eth_getLogs', params: [filter] });

/** What one node answers for `from..to` asked directly, in ranges it takes: the logs one node has for the range. */
async function logsFromNode(node: EvmNodeFake, from: number, to: number): Promise<unknown[]> {
  const logs: unknown[] = [];
  for (let start = from; start <= to; start += MAX_RANGE) {
    const r = await getLogs(node.url, { fromBlock: hex(start), toBlock: hex(Math.min(to, start + MAX_RANGE - 1)) });
    logs.push(...(JSON.parse(r.text) as { result: unknown[] }).result);
  }
  node.calls.length = 0;
  return logs;
}

/** The account's eth_getLogs records, once `count` are in the log, by time. */
async function logsRecords(t: TestApp, accountId: string, count: number): Promise<UsageRecord[]> {
  const ofLogs = async () => (await recordedCalls(t.runtime.store, accountId)).filter((r) => r.method === 'eth_getLogs');
  await until(async () => (await ofLogs()).length >= count, 15_000);
  return (await ofLogs()).sort((x, y) => x.at.localeCompare(y.at));
}

const allRanges = (nodes: EvmNodeFake[], chain: FakeEvmChain) => nodes.flatMap((n) => logsRanges(n, chain)).sort((a, b) => a[0] - b[0]);

describe('a wide eth_getLogs with getLogsMaxBlockRange', () => {
  it('is answered once with every log in block order, as ten allowed calls give them; kept sub-ranges serve it again; one charged record', async () => {
    const { t, url, chain, nodes, accountId } = await setUp({ getLogsMaxBlockRange: MAX_RANGE });
    const expected = await logsFromNode(nodes[0]!, 100, 1_099);
    expect(expected).toHaveLength(1_000);

    const first = await getLogs(url, { fromBlock: hex(100), toBlock: hex(1_099) }, 'wide');
    // Before: the node's refusal, -32000 "exceed maximum block range: 100".
    expect(first.status).toBe(200);
    expect(first.text).toBe(`{"jsonrpc":"2.0","id":"wide","result":${JSON.stringify(expected)}}`);
    expect(allRanges(nodes, chain)).toEqual(Array.from({ length: 10 }, (_, k) => [100 + k * 100, 199 + k * 100]));

    // Final sub-ranges were kept: the same call again reaches no node.
    for (const node of nodes) node.calls.length = 0;
    const again = await getLogs(url, { fromBlock: hex(100), toBlock: hex(1_099) }, 'wide');
    expect(again).toEqual(first);
    expect(allRanges(nodes, chain)).toEqual([]);

    // Open at the head: `latest` is the tracked head (1,300), the range cut where the cache's pieces are.
    const head = chain.head;
    const toHead = await logsFromNode(nodes[1]!, head - 250, head);
    const fromHead = await getLogs(url, { fromBlock: hex(head - 250), toBlock: 'latest' }, 7);
    expect(fromHead.text).toBe(`{"jsonrpc":"2.0","id":7,"result":${JSON.stringify(toHead)}}`);
    expect(allRanges(nodes, chain)).toEqual([
      [1_050, 1_099],
      [1_100, 1_199],
      [1_200, 1_299],
      [1_300, 1_300],
    ]);

    // In a batch: the member split, the rest as ever; 100..299 was kept, cut as the first call cut it.
    const firstBlocks = await logsFromNode(nodes[0]!, 0, 299);
    for (const node of nodes) node.calls.length = 0;
    const batch = await post(url, [
      { jsonrpc: '2.0', id: 1, method: 'eth_getLogs', params: [{ fromBlock: hex(0), toBlock: hex(299) }] },
      { jsonrpc: '2.0', id: 2, method: 'eth_chainId', params: [] },
    ]);
    const members = JSON.parse(batch.text) as Array<{ id: number; result: unknown }>;
    expect(members.find((m) => m.id === 1)?.result).toEqual(firstBlocks);
    expect(allRanges(nodes, chain)).toEqual([[0, 99]]);
    expect(members.find((m) => m.id === 2)?.result).toBe('0x2a');

    // One record per caller's call, charged once, however many sub-calls it took.
    const records = await logsRecords(t, accountId, 4);
    expect(records).toHaveLength(4);
    expect(records.map((r) => [r.status, r.rpcErrorCode, r.charged])).toEqual(Array.from({ length: 4 }, () => [200, null, true]));
    expect(records[1]?.cache).toBe('hit');
    expect(records[0]?.upstream).toMatch(/^evm-env-/);
  });

  it('gives no partial answer when a sub-range fails: the node error at its 200 (charged), or the gateway 502 (not charged)', async () => {
    const { t, url, chain, nodes, accountId } = await setUp({ getLogsMaxBlockRange: MAX_RANGE });
    const nodeError = { code: -32603, message: 'leveldb: closed' };
    for (const node of nodes) {
      nodeAnswers(node, chain, ([from, to]) =>
        to - from + 1 > MAX_RANGE ? { error: RANGE_REFUSAL } : from === 500 ? { error: nodeError } : from === 700 ? { raw: '<html>bad gateway</html>' } : null,
      );
    }
    const failedAtNode = await getLogs(url, { fromBlock: hex(100), toBlock: hex(599) }, 'n');
    expect(failedAtNode.status).toBe(200);
    expect(JSON.parse(failedAtNode.text)).toEqual({ jsonrpc: '2.0', id: 'n', error: nodeError });

    const failedHere = await getLogs(url, { fromBlock: hex(600), toBlock: hex(999) }, 'g');
    expect(failedHere.status).toBe(502);
    const body = JSON.parse(failedHere.text) as { id: string; error: { code: number; message: string }; result?: unknown };
    expect([body.id, body.error.code, body.result]).toEqual(['g', -32010, undefined]);
    expect(body.error.message).toMatch(/invalid answer/);

    const records = await logsRecords(t, accountId, 2);
    expect(records.map((r) => [r.status, r.rpcErrorCode, r.charged])).toEqual([
      [200, -32603, true],
      [502, -32010, false],
    ]);
  });

  it('sends a range needing more sub-calls than getLogsMaxSplits whole: the node refusal is the caller answer', async () => {
    const { url, chain, nodes } = await setUp({ getLogsMaxBlockRange: MAX_RANGE, getLogsMaxSplits: 5 });
    const five = await getLogs(url, { fromBlock: hex(100), toBlock: hex(599) });
    expect((JSON.parse(five.text) as { result: unknown[] }).result).toHaveLength(500);
    for (const node of nodes) node.calls.length = 0;

    const six = await getLogs(url, { fromBlock: hex(100), toBlock: hex(699) }, 6);
    expect([six.status, JSON.parse(six.text)]).toEqual([200, { jsonrpc: '2.0', id: 6, error: RANGE_REFUSAL }]);
    expect(allRanges(nodes, chain)).toEqual([[100, 699]]);
  });

  it('serves viem getLogs over 1,000 blocks, which the nodes alone refuse', async () => {
    const { url, chain, nodes } = await setUp({ getLogsMaxBlockRange: MAX_RANGE });
    const client = createPublicClient({ transport: http(url, { retryCount: 0 }) });
    const logs = await client.getLogs({ fromBlock: 100n, toBlock: 1_099n });
    expect(logs.map((l) => l.blockNumber)).toEqual(Array.from({ length: 1_000 }, (_, i) => BigInt(100 + i)));
    expect(logs.map((l) => l.blockHash)).toEqual(chain.blocks.slice(100, 1_100).map((b) => b.hash));
    expect(allRanges(nodes, chain)).toHaveLength(10);
  });
});

describe('a wide eth_getLogs without the option', () => {
  it('goes to the node whole, as before: its refusal is the caller answer (viem throws it)', async () => {
    const { t, url, chain, nodes, accountId } = await setUp({});
    const r = await getLogs(url, { fromBlock: hex(100), toBlock: hex(1_099) }, 3);
    expect([r.status, JSON.parse(r.text)]).toEqual([200, { jsonrpc: '2.0', id: 3, error: RANGE_REFUSAL }]);
    expect(allRanges(nodes, chain)).toEqual([[100, 1_099]]);
    const client = createPublicClient({ transport: http(url, { retryCount: 0 }) });
    await expect(client.getLogs({ fromBlock: 100n, toBlock: 1_099n })).rejects.toThrow(/exceed maximum block range: 100/);
    const records = await logsRecords(t, accountId, 2);
    expect(records.map((x) => [x.status, x.rpcErrorCode, x.charged])).toEqual([
      [200, -32000, true],
      [200, -32000, true],
    ]);
  });
});
