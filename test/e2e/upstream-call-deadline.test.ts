/**
 * A chain call's whole wait is bounded (docs/decisions.md, "A caller waits at most the chain's
 * `callTimeoutMs`"), through the whole service (startTestApp, the nodes given as UPSTREAM_EVM,
 * real metering) in front of fake nodes that hang: the read is tried on another node only within
 * what is left of the call's time, each attempt gets the smaller of `timeoutMs` and what is left,
 * and a split eth_getLogs' sub-calls share their parent's deadline. The 504 is metered and
 * charged as before.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { until } from '../support/eventually.js';
import type { EvmNodeFake, ReceivedCall } from '../support/fakeUpstreams.js';
import { headsFollowed, rpc, Started } from '../support/serviceOnEvmNodes.js';
import type { TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

const started = new Started();
afterEach(() => started.close());

/** The account's records of `method`, once `count` are in the log. */
async function recordsOf(t: TestApp, accountId: string, method: string, count: number): Promise<UsageRecord[]> {
  const of = async () => (await recordedCalls(t.runtime.store, accountId)).filter((r) => r.method === method);
  await until(async () => (await of()).length >= count, 15_000);
  return of();
}

/** Every node hangs on callers' calls (60 s: only the gateway's own deadline ends them). */
function hang(nodes: EvmNodeFake[]): void {
  for (const n of nodes) {
    n.calls.length = 0;
    n.latency = (call) => (call.body.includes('eth_getBalance') ? 60_000 : 0);
  }
}

const asked = (nodes: EvmNodeFake[]): number => nodes.reduce((n, f) => n + f.calls.length, 0);

describe('a read on hanging nodes', () => {
  it('answers 504 at the chain timeout: no node is asked after it (before: each of 3 nodes got a full timeout of its own)', async () => {
    const setup = await started.serviceOnEvmNodes(3, { timeoutMs: 300 });
    const { t, url, nodes, accountId } = setup;
    await headsFollowed(setup);
    hang(nodes);
    const r = await rpc(url, 'eth_getBalance', ['0x01', 'latest']);
    expect([r.status, r.body.error?.code]).toEqual([504, -32015]);
    // Before: 3 (a retry on the next node after each timeout, the caller answered after 3 × 300 ms).
    expect(asked(nodes)).toBe(1);
    const [record] = await recordsOf(t, accountId, 'eth_getBalance', 1);
    expect([record?.status, record?.rpcErrorCode, record?.charged]).toEqual([504, -32015, true]);
  });

  it('with callTimeoutMs over timeoutMs tries the next nodes within what is left; the one cut short by the call is not blamed', async () => {
    // 300 ms a node, 700 ms the call: the first two nodes get 300 ms each, the third what is left (about 100 ms, under half its own).
    const setup = await started.serviceOnEvmNodes(3, { timeoutMs: 300, callTimeoutMs: 700 });
    const { t, url, nodes } = setup;
    await headsFollowed(setup);
    hang(nodes);
    const r = await rpc(url, 'eth_getBalance', ['0x01', 'latest']);
    expect([r.status, r.body.error?.code]).toEqual([504, -32015]);
    expect(nodes.map((n) => n.calls.length)).toEqual([1, 1, 1]);
    // Two nodes did not answer within their own 300 ms (a failure each); the third's attempt ended with the call's time.
    const health = t.runtime.gateway!.pools.health().evm!;
    expect(health.map((h) => h.failures.timeout).sort()).toEqual([0, 1, 1]);
    expect(health.map((h) => h.consecutiveFailures).sort()).toEqual([0, 1, 1]);
  });

  it('blames a node that hangs on a retry given most of its time (after a quick failure elsewhere)', async () => {
    // callTimeoutMs unset (= timeoutMs 300): a retry after the first node's garbage gets ~295 ms.
    const setup = await started.serviceOnEvmNodes(2, { timeoutMs: 300 });
    const { t, url, nodes } = setup;
    await headsFollowed(setup);
    // Whichever node is asked first sends garbage at once; the one the retry goes to hangs (the pick is a weighted
    // draw: fixed roles needed the quick node drawn first, and 3 draws of the other in a row rested it).
    const asked = new Set<string>();
    const first = new WeakSet<ReceivedCall>();
    for (const node of nodes) {
      node.latency = (call) => {
        if (!call.body.includes('eth_getBalance')) return 0;
        const params = JSON.stringify((JSON.parse(call.body) as { params: unknown }).params);
        if (asked.has(params)) return 60_000;
        asked.add(params);
        first.add(call);
        return 0;
      };
      node.rewrite = (body, call) => (first.has(call) ? '{"jsonrpc":' : body);
    }
    expect((await rpc(url, 'eth_getBalance', ['0x01', 'latest'])).status).toBe(504);
    const hungOn = nodes.map((n) => n.calls.filter((c) => c.body.includes('eth_getBalance') && !first.has(c)).length);
    expect([...hungOn].sort()).toEqual([0, 1]);
    const health = t.runtime.gateway!.pools.health().evm!;
    // The retry timed out with most of its time: the hanging node's failure (before: not a retry's); the other's, garbage.
    expect(health.map((h) => h.failures.timeout)).toEqual(hungOn);
    expect(health.map((h) => h.failures.invalid)).toEqual(hungOn.map((n) => 1 - n));
  });

  it('refuses a callTimeoutMs shorter than timeoutMs', async () => {
    await expect(started.serviceOnEvmNodes(1, { timeoutMs: 300, callTimeoutMs: 200 })).rejects.toThrow(/callTimeoutMs.*lower "timeoutMs" instead/);
  });
});

describe('a split eth_getLogs', () => {
  it("keeps its sub-calls under the parent's deadline: 504 once the call's time is up, not each sub-call's own timeout", async () => {
    // 10 sub-ranges of 20 blocks, 4 at a time, each answered in 400 ms: within a node's 1 s, but 3 rounds (1.2 s) pass the call's 1 s.
    const setup = await started.serviceOnEvmNodes(2, { timeoutMs: 1_000, getLogsMaxBlockRange: 20 });
    const { t, url, nodes, accountId } = setup;
    await headsFollowed(setup);
    for (const n of nodes) n.latency = (call) => (call.body.includes('eth_getLogs') ? 400 : 0);
    const r = await rpc(url, 'eth_getLogs', [{ fromBlock: '0x0', toBlock: '0xc7' }]);
    // Before: 200 with every log, after 1.2 s (each sub-call held to its own 1 s alone).
    expect([r.status, r.body.error?.code]).toEqual([504, -32015]);
    const [record] = await recordsOf(t, accountId, 'eth_getLogs', 1);
    expect([record?.status, record?.rpcErrorCode, record?.charged]).toEqual([504, -32015, true]);
  });
});
