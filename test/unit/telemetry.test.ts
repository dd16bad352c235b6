import { afterEach, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import type { LimitDecision, Limiter, LimitRequest } from '../../src/infra/limits/port.js';
import { Telemetry, type TelemetrySources } from '../../src/infra/telemetry.js';
import { MemoryUsageBackend, MemoryUsageQueue } from '../../src/infra/usage/memory.js';

const record = (chain: string, method: string, status: number, upstream = 'u1'): UsageRecord => ({
  requestId: `r-${Math.random()}`,
  at: '2026-11-24T05:00:00.000Z',
  accountId: 'acc-1',
  tokenId: 'tok-1',
  chain,
  method,
  status,
  rpcErrorCode: null,
  errorMessage: null,
  totalMs: 1.5,
  upstreamMs: 1,
  clientIp: '127.0.0.1',
  upstream,
});

/** Every Telemetry a test makes, closed after it (each runs an event loop delay timer). */
const made: Telemetry[] = [];
const telemetry = (sources: TelemetrySources = {}): Telemetry => {
  const t = new Telemetry(sources);
  made.push(t);
  return t;
};
afterEach(() => {
  for (const t of made.splice(0)) t.close();
});

const callsOf = (text: string, chain: string, cls: string, status: number): number | null => {
  const m = new RegExp(`^gateway_chain_calls_total\\{chain="${chain}",method_class="${cls}",status="${status}"\\} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
};

describe('telemetry: chain calls by chain, method class and status', () => {
  it('counts each label set on its own, and keeps counting across scrapes', async () => {
    const t = telemetry();
    t.observeCall(record('eth', 'eth_blockNumber', 200));
    t.observeCall(record('eth', 'eth_blockNumber', 200));
    t.observeCall(record('eth', 'eth_sendRawTransaction', 200));
    t.observeCall(record('eth', 'eth_call', 429));
    t.observeCall(record('trx', 'wallet/getnowblock', 200));
    t.observeCall(record('bsc', 'eth_blockNumber', 200));
    let text = await t.metrics();
    expect(callsOf(text, 'eth', 'read', 200)).toBe(2);
    expect(callsOf(text, 'eth', 'write', 200)).toBe(1);
    expect(callsOf(text, 'eth', 'read', 429)).toBe(1);
    expect(callsOf(text, 'trx', 'rest', 200)).toBe(1);
    expect(callsOf(text, 'bsc', 'read', 200)).toBe(1);
    expect(callsOf(text, 'bsc', 'write', 200)).toBeNull();

    // A method seen before keeps its class; the counter is cumulative, as Prometheus expects.
    t.observeCall(record('eth', 'eth_sendRawTransaction', 200));
    t.observeCall(record('eth', 'eth_blockNumber', 200));
    text = await t.metrics();
    expect(callsOf(text, 'eth', 'write', 200)).toBe(2);
    expect(callsOf(text, 'eth', 'read', 200)).toBe(3);
    expect(callsOf(text, 'trx', 'rest', 200)).toBe(1);
  });
});

describe('telemetry: limiter decisions', () => {
  const decision = (granted: number, refusedBy: LimitDecision['refusedBy']): LimitDecision => ({
    granted,
    refusedBy,
    rate: { limit: 10, remaining: 0, resetAt: 1 },
    monthly: { limit: null, remaining: null, resetAt: 2 },
    retryAfterSeconds: refusedBy ? 1 : null,
  });
  const request = (cost: number): LimitRequest => ({ tokenId: 't', rps: 10, monthly: { key: 'account:a', limit: null }, cost, nowMs: 0 });
  const decisionsOf = (text: string, outcome: string): number | null => {
    const m = new RegExp(`^gateway_limiter_decisions_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text);
    return m ? Number(m[1]) : null;
  };

  it('counts admitted and refused calls, answered at once or later, and keeps counting across scrapes', async () => {
    const t = telemetry();
    const answers: Array<LimitDecision | Promise<LimitDecision>> = [
      decision(1, null), // a call admitted at once
      Promise.resolve(decision(3, 'rate')), // a batch of 5, 3 admitted, 2 refused by the rate limit
      decision(0, 'monthly'), // a call refused by the quota
      decision(0, 'unavailable'), // a batch of 3 refused: the limits could not be checked (fail-closed)
    ];
    const limiter: Limiter = { take: () => answers.shift() as LimitDecision, refund: () => {}, monthlyUsed: async () => 0, close: async () => {} };
    const counted = t.countDecisions(limiter);
    expect(counted.take(request(1))).toEqual(decision(1, null));
    expect(await counted.take(request(5))).toEqual(decision(3, 'rate'));
    counted.take(request(1));
    counted.take(request(3));
    let text = await t.metrics();
    expect(decisionsOf(text, 'admitted')).toBe(4);
    expect(decisionsOf(text, 'refused_rate')).toBe(2);
    expect(decisionsOf(text, 'refused_monthly')).toBe(1);
    expect(decisionsOf(text, 'refused_unavailable')).toBe(3);
    answers.push(decision(2, null));
    counted.take(request(2));
    text = await t.metrics();
    expect(decisionsOf(text, 'admitted')).toBe(6);
    expect(decisionsOf(text, 'refused_rate')).toBe(2);
  });
});

describe('telemetry: upstreams', () => {
  it('times each upstream on its own and counts the calls it failed, from 0 at its first call', async () => {
    const t = telemetry();
    t.observeCall(record('eth', 'eth_blockNumber', 200, 'node-a'));
    t.observeCall(record('eth', 'eth_blockNumber', 200, 'node-a'));
    t.observeCall(record('eth', 'eth_blockNumber', 502, 'node-b'));
    t.observeCall(record('eth', 'eth_call', 200, 'node-b'));
    const text = await t.metrics();
    const sample = (name: string, upstream: string): number | null => {
      const m = new RegExp(`^${name}\\{chain="eth",upstream="${upstream}"\\} (\\d+)$`, 'm').exec(text);
      return m ? Number(m[1]) : null;
    };
    expect(sample('gateway_upstream_duration_seconds_count', 'node-a')).toBe(2);
    expect(sample('gateway_upstream_duration_seconds_count', 'node-b')).toBe(2);
    expect(sample('gateway_upstream_failures_total', 'node-a')).toBe(0);
    expect(sample('gateway_upstream_failures_total', 'node-b')).toBe(1);
    expect(text).toMatch(/^gateway_upstream_duration_seconds_bucket\{le="0.0025",chain="eth",upstream="node-a"\} 2$/m);
    expect(text).toMatch(/^# TYPE gateway_upstream_failures_total counter$/m);
  });
});

describe('telemetry: the usage journal', () => {
  it('counts the records the journal failed to write, where there is a journal', async () => {
    let failed = 0;
    const t = telemetry({ unjournaledRecords: () => failed });
    expect(await t.metrics()).toMatch(/^gateway_usage_unjournaled_total 0$/m);
    failed = 3;
    expect(await t.metrics()).toMatch(/^gateway_usage_unjournaled_total 3$/m);
    expect(await telemetry().metrics()).not.toContain('gateway_usage_unjournaled_total');
  });

  it('counts the usage records a queue dropped at its bound, where the process has such a queue', async () => {
    const queue = new MemoryUsageQueue(new MemoryUsageBackend({ capacity: 2 }), 'gateway');
    const t = telemetry({ droppedUsageRecords: () => queue.dropped });
    expect(await t.metrics()).toMatch(/^gateway_usage_dropped_total 0$/m);
    for (let i = 0; i < 5; i++) queue.enqueue(record('eth', 'eth_blockNumber', 200));
    expect(await t.metrics()).toMatch(/^gateway_usage_dropped_total 3$/m);
    expect(await telemetry().metrics()).not.toContain('gateway_usage_dropped_total');
  });
});

describe('telemetry: the process', () => {
  it("adds prom-client's process and Node.js metrics, without the gauges named like counters", async () => {
    const text = await telemetry().metrics();
    for (const family of [
      'process_cpu_seconds_total counter',
      'process_resident_memory_bytes gauge',
      'nodejs_heap_size_used_bytes gauge',
      'nodejs_active_handles gauge',
    ]) {
      expect(text).toContain(`# TYPE ${family}\n`);
    }
    // Gauges ending in _total, which promtool rejects (prom-client#283).
    expect(text).not.toMatch(/^# TYPE nodejs_active_\w+_total /m);
  });

  it('shows the process metrics once however many Telemetry the process has', async () => {
    telemetry();
    const text = await telemetry().metrics();
    expect(text.match(/^# TYPE process_cpu_seconds_total /gm)).toHaveLength(1);
  });
});

describe('telemetry: event loop delay', () => {
  const delayOf = (text: string, quantile: string): number | null => {
    const m = new RegExp(`^gateway_event_loop_delay_seconds\\{quantile="${quantile}"\\} ([\\d.e-]+)$`, 'm').exec(text);
    return m ? Number(m[1]) : null;
  };
  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

  it('shows a stall of the event loop in the scrape after it, and only in that one', async () => {
    const t = telemetry();
    await sleep(50);
    await t.metrics(); // starts a fresh interval
    await sleep(30);
    const until = Date.now() + 120;
    while (Date.now() < until) {
      // the event loop is blocked: no timer runs
    }
    await sleep(40);
    const stalled = delayOf(await t.metrics(), '1');
    expect(stalled).toBeGreaterThanOrEqual(0.09);
    await sleep(100);
    const after = delayOf(await t.metrics(), '1');
    expect(after).not.toBeNull();
    expect(after as number).toBeLessThan(stalled as number);
  });

  it('is a summary: quantiles since the previous scrape, a running sum and count', async () => {
    const t = telemetry();
    await sleep(50);
    const first = await t.metrics();
    await sleep(50);
    const second = await t.metrics();
    expect(second).toMatch(/^# TYPE gateway_event_loop_delay_seconds summary$/m);
    const countOf = (text: string): number => Number(/^gateway_event_loop_delay_seconds_count (\d+)$/m.exec(text)?.[1]);
    const sumOf = (text: string): number => Number(/^gateway_event_loop_delay_seconds_sum ([\d.e-]+)$/m.exec(text)?.[1]);
    expect(countOf(first)).toBeGreaterThan(0);
    expect(countOf(second)).toBeGreaterThan(countOf(first));
    expect(sumOf(second)).toBeGreaterThanOrEqual(sumOf(first));
  });
});

describe('telemetry: the response cache shared through Redis', () => {
  const counts = { hits: 0, misses: 0, late: 0, errors: 0, skipped: 0, rejected: 0, writes: 0, writeErrors: 0, writesSkipped: 0, pauses: 0 };
  const operationsOf = (text: string, operation: string, outcome: string): number | null => {
    const m = new RegExp(`^gateway_shared_cache_operations_total\\{operation="${operation}",outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text);
    return m ? Number(m[1]) : null;
  };

  it("shows the shared cache's lookups and writes by outcome, as counters that follow its totals", async () => {
    const stats = { ...counts, hits: 3, misses: 2, late: 1, writes: 4 };
    const t = telemetry({ sharedCache: () => stats });
    const first = await t.metrics();
    expect([
      operationsOf(first, 'lookup', 'hit'),
      operationsOf(first, 'lookup', 'miss'),
      operationsOf(first, 'lookup', 'late'),
      operationsOf(first, 'write', 'sent'),
    ]).toEqual([3, 2, 1, 4]);
    stats.hits = 10;
    stats.pauses = 1;
    const second = await t.metrics();
    expect(operationsOf(second, 'lookup', 'hit')).toBe(10);
    expect(operationsOf(second, 'pause', 'paused')).toBe(1);
    expect(operationsOf(second, 'lookup', 'miss')).toBe(2);
  });

  it('shows nothing of it when it is off', async () => {
    const text = await telemetry({ sharedCache: () => null }).metrics();
    expect(text).not.toMatch(/^gateway_shared_cache_operations_total\{/m);
  });
});
