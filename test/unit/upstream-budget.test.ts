import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseChainsConfig } from '../../src/gateway/chains.js';
import { type UpstreamPool, type UpstreamPoolOptions, UpstreamPools } from '../../src/gateway/upstream.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';

/**
 * A node's calls-per-second budget (`maxRps`, a provider plan's cap): the pool sends a node over
 * its budget for the current second no call while another node the call may take is within its
 * own, and when none is, sends it anyway (the node decides). Two real loopback nodes; the pool's
 * clock is the test's, so "one second" is exact.
 */

let a: FakeUpstream;
let b: FakeUpstream;
const opened: UpstreamPools[] = [];
let clock = 1_700_000_000_000;
let draw = 0;

beforeAll(async () => {
  [a, b] = await Promise.all([startEvmFake(), startEvmFake()]);
});
afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
});
afterEach(async () => {
  a.reset();
  b.reset();
  draw = 0;
  await Promise.all(opened.splice(0).map((p) => p.close()));
});

function poolFor(upstreams: Array<{ url: string; label: string; maxRps?: number }>, options: UpstreamPoolOptions = {}): UpstreamPool {
  const registry = parseChainsConfig({ chains: [{ id: 'test', name: 'test', protocol: 'jsonrpc', timeoutMs: 1_000, upstreams }] }, 'test');
  // No hedges (a hedge's timing would move the counts) and a fixed draw: the first node within its budget.
  const pools = new UpstreamPools(registry, { random: () => draw, now: () => clock, hedge: false, heads: false, ejectAfterFailures: 100, ...options });
  opened.push(pools);
  return pools.get('test') as UpstreamPool;
}

const READ = { method: 'POST', path: '', body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}', retriable: true } as const;

async function reads(pool: UpstreamPool, count: number): Promise<number[]> {
  const outcomes = await Promise.all(Array.from({ length: count }, () => pool.send(READ)));
  return outcomes.map((o) => (o.ok ? o.status : 502));
}

const budgetOf = (pool: UpstreamPool, label: string) => {
  const h = pool.health().find((u) => u.label === label);
  return { maxRps: h?.maxRps, sentThisSecond: h?.sentThisSecond, overBudget: h?.overBudget };
};

describe('a node with maxRps', () => {
  it('takes at most its budget of 40 reads in one second, the other node the rest, every caller answered', async () => {
    const pool = poolFor([
      { url: a.url, label: 'a', maxRps: 5 },
      { url: b.url, label: 'b' },
    ]);
    const statuses = await reads(pool, 40);
    expect(statuses).toEqual(Array(40).fill(200));
    // The draw favours a (first): without the budget it would take all 40.
    expect(a.calls.length).toBe(5);
    expect(b.calls.length).toBe(35);
    expect(budgetOf(pool, 'a')).toEqual({ maxRps: 5, sentThisSecond: 5, overBudget: 0 });
    expect(budgetOf(pool, 'b')).toEqual({ maxRps: null, sentThisSecond: 0, overBudget: 0 });

    // The next clock second is a new window: 5 more for a.
    clock += 1_000;
    expect(await reads(pool, 10)).toEqual(Array(10).fill(200));
    expect(a.calls.length).toBe(10);
    expect(b.calls.length).toBe(40);
  });

  it('takes its share of the budget when several gateways send to it: maxRps ÷ the live gateways, rounded down, at least 1', async () => {
    const pool = poolFor([
      { url: a.url, label: 'a', maxRps: 10 },
      { url: b.url, label: 'b' },
    ]);
    // Two gateways live (RedisGatewayInstances counts them): 5 a second each, 10 together.
    pool.shareBudgets(2);
    expect(await reads(pool, 40)).toEqual(Array(40).fill(200));
    expect(a.calls.length).toBe(5);
    expect(pool.health().find((h) => h.label === 'a')?.budget).toBe(5);
    // Three: 3 each (9 together, within the cap); eleven: 1 each, as a node with a budget still takes a call.
    clock += 1_000;
    pool.shareBudgets(3);
    expect(await reads(pool, 20)).toEqual(Array(20).fill(200));
    expect(a.calls.length).toBe(8);
    pool.shareBudgets(11);
    expect(pool.health().map((h) => h.budget)).toEqual([1, null]);
    // Alone again: the whole cap.
    pool.shareBudgets(1);
    expect(pool.health().map((h) => [h.maxRps, h.budget])).toEqual([
      [10, 10],
      [null, null],
    ]);
  });

  it('still gets the call when every node is over its budget: sent anyway, counted as over budget', async () => {
    const pool = poolFor([
      { url: a.url, label: 'a', maxRps: 3 },
      { url: b.url, label: 'b', maxRps: 3 },
    ]);
    expect(await reads(pool, 20)).toEqual(Array(20).fill(200));
    expect(a.calls.length + b.calls.length).toBe(20);
    expect(b.calls.length).toBe(3);
    expect(budgetOf(pool, 'a')).toEqual({ maxRps: 3, sentThisSecond: 17, overBudget: 14 });
    expect(budgetOf(pool, 'b')).toEqual({ maxRps: 3, sentThisSecond: 3, overBudget: 0 });
  });

  it('counts retries against the budget: they are calls the node receives', async () => {
    const pool = poolFor([
      { url: b.url, label: 'b' },
      { url: a.url, label: 'a', maxRps: 2 },
    ]);
    // b fails: each read is retried on a.
    b.mode = 'fail';
    for (let i = 0; i < 2; i++) expect(await reads(pool, 1)).toEqual([200]);
    expect(a.calls.length).toBe(2);
    expect(budgetOf(pool, 'a').sentThisSecond).toBe(2);
    // b is back; a draw that would pick a goes to b: a's budget was spent by the retries.
    b.mode = 'ok';
    draw = 0.99;
    expect(await reads(pool, 3)).toEqual([200, 200, 200]);
    expect(a.calls.length).toBe(2);
  });
});

describe('a hedge', () => {
  it('goes only to a node within its budget: a call the caller does not need is not worth a refusal', async () => {
    const pool = poolFor(
      [
        { url: a.url, label: 'a' },
        { url: b.url, label: 'b', maxRps: 2 },
      ],
      { hedge: { quantile: 0.9, minDelayMs: 20, maxShare: 0.5 } },
    );
    // 40 quick answers (all from a, the draw's first) give the hedge delay its figure.
    expect(await reads(pool, 40)).toEqual(Array(40).fill(200));
    expect(b.calls.length).toBe(0);
    a.latency = () => 500;
    const hedged: boolean[] = [];
    for (let i = 0; i < 3; i++) {
      const outcome = await pool.send(READ);
      expect(outcome.ok).toBe(true);
      hedged.push(outcome.hedged === true && outcome.upstream === 'b');
    }
    // Two hedges answered by b; the third found b over its budget and was not sent (a answered, late).
    expect(hedged).toEqual([true, true, false]);
    expect(b.calls.length).toBe(2);
    expect(budgetOf(pool, 'b')).toEqual({ maxRps: 2, sentThisSecond: 2, overBudget: 0 });
  });
});

describe('the maxRps option', () => {
  it('is a whole number of calls a second, at least 1', () => {
    const parse = (maxRps: unknown) => () =>
      parseChainsConfig({ chains: [{ id: 'test', name: 'test', protocol: 'jsonrpc', upstreams: [{ url: 'http://127.0.0.1:1', maxRps }] }] }, 'test');
    expect(parse(25)().get('test')?.upstreams[0]?.maxRps).toBe(25);
    expect(parse(0)).toThrow(/maxRps/);
    expect(parse(2.5)).toThrow(/maxRps/);
  });
});
