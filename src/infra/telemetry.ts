import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import { Counter, Gauge, Registry } from 'prom-client';
import type { UsageRecord } from '../domain/usage.js';
import type { LimitDecision, Limiter, LimitRequest, MaybePromise } from './limits/port.js';
import type { RedisHealthSnapshot, RedisState } from './redisHealth.js';

/** What the scrape reads at that moment (queue depth, projection lag, upstream health...). */
export interface TelemetrySources {
  usageQueueDepth?(): Promise<number>;
  projectionLagMs?(): number | null;
  cachedTokens?(): number;
  upstreams?(): Record<string, Array<{ label: string; healthy: boolean }>>;
  /** Present when the process uses Redis. */
  redis?(): RedisHealthSnapshot;
}

const REDIS_STATES: readonly RedisState[] = ['up', 'down', 'stalled'];

/** The event loop delay monitor's timer interval: its figures are how much later than this the timer ran. */
const LOOP_DELAY_RESOLUTION_MS = 10;

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

type MethodClass = 'write' | 'read' | 'rest';

/** Calls that submit or change something, as opposed to reads: a coarse class keeps label sets small. */
const classOf = (method: string): MethodClass =>
  method.includes('/') ? 'rest' : /send|submit|broadcast|execute/i.test(method) ? 'write' : 'read';

/** Method classes remembered per process, up to a bound (REST paths are open-ended). */
const METHOD_CLASSES_MAX = 10_000;

const escapeLabelValue = (v: string): string => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');

/**
 * A histogram labelled by chain, kept by hand for the call path: prom-client's `observe` costs
 * about a microsecond (a closure, label validation and hashing per call), this a Map lookup and
 * a bucket search. Rendered in the text format prom-client writes, after the registry's metrics.
 */
class ChainHistogram {
  private readonly series = new Map<string, { counts: number[]; sum: number; count: number }>();

  constructor(
    private readonly name: string,
    private readonly help: string,
    private readonly bounds: readonly number[],
  ) {}

  observe(chain: string, value: number): void {
    let s = this.series.get(chain);
    if (!s) {
      s = { counts: this.bounds.map(() => 0), sum: 0, count: 0 };
      this.series.set(chain, s);
    }
    for (let i = 0; i < this.bounds.length; i++) {
      if (value <= (this.bounds[i] as number)) {
        s.counts[i] = (s.counts[i] as number) + 1;
        break;
      }
    }
    s.sum += value;
    s.count += 1;
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const [chain, s] of this.series) {
      const label = `chain="${escapeLabelValue(chain)}"`;
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += s.counts[i] as number;
        lines.push(`${this.name}_bucket{le="${bound}",${label}} ${cumulative}`);
      });
      lines.push(`${this.name}_bucket{le="+Inf",${label}} ${s.count}`, `${this.name}_sum{${label}} ${s.sum}`, `${this.name}_count{${label}} ${s.count}`);
    }
    return `${lines.join('\n')}\n`;
  }
}

type CallLabels = { chain: string; method_class: string; status: string };
type PendingCalls = { labels: CallLabels; count: number };

/**
 * Prometheus metrics of one process, on its own registry (no global state). Chain calls are
 * observed from their usage records, so metering and metrics can never disagree. A call costs
 * a few Map updates: the calls counter is summed here and handed to prom-client when scraped,
 * and the latency histograms are `ChainHistogram`s.
 */
export class Telemetry {
  readonly registry = new Registry();
  private readonly latency = new ChainHistogram('gateway_call_duration_seconds', 'Time from arrival to answer of a chain call', LATENCY_BUCKETS);
  private readonly upstreamLatency = new ChainHistogram('gateway_upstream_duration_seconds', 'Time the upstream node took', LATENCY_BUCKETS);
  /** Calls counted since the last scrape, one entry per label set. */
  private readonly pendingCalls: PendingCalls[] = [];
  /** The entries by chain, class and status: a call finds its own without building a key. */
  private readonly pendingIndex = new Map<string, Map<string, Map<number, PendingCalls>>>();
  private readonly methodClasses = new Map<string, MethodClass>();
  /** Limiter decisions since the last scrape, by outcome (`admitted`, `refused_rate`, `refused_monthly`). */
  private readonly pendingDecisions = new Map<string, number>();
  private readonly loopDelay: IntervalHistogram = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });

  constructor(sources: TelemetrySources = {}) {
    const registers = [this.registry];
    const loopDelay = this.loopDelay;
    loopDelay.enable();
    new Gauge({
      name: 'gateway_event_loop_delay_seconds',
      help: 'How late the event loop ran a timer since the previous scrape (quantile 1: the longest wait): every request waiting in this process waited as long',
      labelNames: ['quantile'], registers,
      collect() {
        this.reset();
        if (loopDelay.count === 0) return;
        // In whole microseconds: the histogram's nanoseconds minus the interval, without float dust.
        const beyondInterval = (ns: number): number => Math.max(0, Math.round(ns / 1e3 - LOOP_DELAY_RESOLUTION_MS * 1e3)) / 1e6;
        this.set({ quantile: '0.5' }, beyondInterval(loopDelay.percentile(50)));
        this.set({ quantile: '0.99' }, beyondInterval(loopDelay.percentile(99)));
        this.set({ quantile: '1' }, beyondInterval(loopDelay.max));
        loopDelay.reset();
      },
    });
    const pendingCalls = this.pendingCalls;
    new Counter({
      name: 'gateway_chain_calls_total', help: 'Chain calls (batch members count one each) by chain, method class and HTTP status', labelNames: ['chain', 'method_class', 'status'], registers,
      collect() {
        for (const { labels, count } of pendingCalls) if (count > 0) this.inc(labels, count);
        for (const entry of pendingCalls) entry.count = 0;
      },
    });
    const pendingDecisions = this.pendingDecisions;
    new Counter({
      name: 'gateway_limiter_decisions_total', help: 'Calls admitted or refused by the rate limit or the monthly quota', labelNames: ['outcome'], registers,
      collect() {
        for (const [outcome, count] of pendingDecisions) if (count > 0) this.inc({ outcome }, count);
        for (const outcome of pendingDecisions.keys()) pendingDecisions.set(outcome, 0);
      },
    });
    new Gauge({
      name: 'gateway_usage_queue_depth', help: 'Usage records not yet appended to the event store', registers,
      async collect() { if (sources.usageQueueDepth) this.set(await sources.usageQueueDepth()); },
    });
    new Gauge({
      name: 'gateway_projection_lag_seconds', help: 'Age of the newest event the projector has applied, when it applied it', registers,
      collect() { const lag = sources.projectionLagMs?.(); if (lag !== null && lag !== undefined) this.set(lag / 1000); },
    });
    new Gauge({
      name: 'gateway_cached_tokens', help: 'Tokens in this gateway\'s cache', registers,
      collect() { if (sources.cachedTokens) this.set(sources.cachedTokens()); },
    });
    new Gauge({
      name: 'gateway_upstream_healthy', help: '1 when the upstream is in rotation, 0 when ejected', labelNames: ['chain', 'upstream'], registers,
      collect() {
        this.reset();
        for (const [chain, list] of Object.entries(sources.upstreams?.() ?? {})) {
          for (const u of list) this.set({ chain, upstream: u.label }, u.healthy ? 1 : 0);
        }
      },
    });
    const redis = sources.redis;
    if (redis) {
      new Gauge({
        name: 'gateway_redis_up', help: '1 while Redis is connected and answers PING in time, 0 while it is unreachable or stalled', registers,
        collect() { this.set(redis().state === 'up' ? 1 : 0); },
      });
      new Gauge({
        name: 'gateway_redis_state', help: '1 for the state Redis is in (up, down: unreachable, stalled: connected but not answering)', labelNames: ['state'], registers,
        collect() {
          const { state } = redis();
          for (const s of REDIS_STATES) this.set({ state: s }, s === state ? 1 : 0);
        },
      });
      new Counter({
        name: 'gateway_redis_outages_total', help: 'Times Redis went from up to unreachable or stalled', registers,
        collect() {
          this.reset();
          this.inc(redis().outages);
        },
      });
    }
  }

  observeCall(record: UsageRecord): void {
    this.pendingCallsOf(record.chain, this.methodClass(record.method), record.status).count += 1;
    this.latency.observe(record.chain, record.totalMs / 1000);
    if (record.upstreamMs !== null) this.upstreamLatency.observe(record.chain, record.upstreamMs / 1000);
  }

  /** A call's class without a regex run for methods seen before. */
  private methodClass(method: string): MethodClass {
    let cls = this.methodClasses.get(method);
    if (cls === undefined) {
      cls = classOf(method);
      if (this.methodClasses.size < METHOD_CLASSES_MAX) this.methodClasses.set(method, cls);
    }
    return cls;
  }

  private pendingCallsOf(chain: string, cls: string, status: number): PendingCalls {
    let byClass = this.pendingIndex.get(chain);
    if (!byClass) {
      byClass = new Map();
      this.pendingIndex.set(chain, byClass);
    }
    let byStatus = byClass.get(cls);
    if (!byStatus) {
      byStatus = new Map();
      byClass.set(cls, byStatus);
    }
    let entry = byStatus.get(status);
    if (!entry) {
      entry = { labels: { chain, method_class: cls, status: String(status) }, count: 0 };
      byStatus.set(status, entry);
      this.pendingCalls.push(entry);
    }
    return entry;
  }

  /** The limiter, counting its decisions (summed here, handed to prom-client when scraped: no label hashing per call). */
  countDecisions(limiter: Limiter): Limiter {
    const pending = this.pendingDecisions;
    const add = (outcome: string, n: number): void => {
      pending.set(outcome, (pending.get(outcome) ?? 0) + n);
    };
    const count = (request: LimitRequest, d: LimitDecision): LimitDecision => {
      if (d.granted > 0) add('admitted', d.granted);
      if (d.granted < request.cost) add(d.refusedBy === 'monthly' ? 'refused_monthly' : 'refused_rate', request.cost - d.granted);
      return d;
    };
    return {
      take: (request: LimitRequest): MaybePromise<LimitDecision> => {
        const decision = limiter.take(request);
        return decision instanceof Promise ? decision.then((d) => count(request, d)) : count(request, decision);
      },
      monthlyUsed: (key, nowMs) => limiter.monthlyUsed(key, nowMs),
      close: () => limiter.close(),
    };
  }

  /** Stops the event loop delay monitor's timer. */
  close(): void {
    this.loopDelay.disable();
  }

  async metrics(): Promise<string> {
    return `${await this.registry.metrics()}${this.latency.render()}${this.upstreamLatency.render()}`;
  }
}
