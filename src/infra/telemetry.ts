import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { UsageRecord } from '../domain/usage.js';
import type { LimitDecision, Limiter, LimitRequest } from './limits/port.js';

/** What the scrape reads at that moment (queue depth, projection lag, upstream health...). */
export interface TelemetrySources {
  usageQueueDepth?(): Promise<number>;
  projectionLagMs?(): number | null;
  cachedTokens?(): number;
  upstreams?(): Record<string, Array<{ label: string; healthy: boolean }>>;
}

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Calls that submit or change something, as opposed to reads: a coarse class keeps label sets small. */
export function methodClass(method: string): 'write' | 'read' | 'rest' {
  if (method.includes('/')) return 'rest';
  return /send|submit|broadcast|execute/i.test(method) ? 'write' : 'read';
}

/**
 * Prometheus metrics of one process, on its own registry (no global state). Chain calls are
 * observed from their usage records, so metering and metrics can never disagree.
 */
export class Telemetry {
  readonly registry = new Registry();
  private readonly calls: Counter<'chain' | 'method_class' | 'status'>;
  private readonly latency: Histogram<'chain'>;
  private readonly upstreamLatency: Histogram<'chain'>;
  private readonly limiterDecisions: Counter<'outcome'>;

  constructor(sources: TelemetrySources = {}) {
    const registers = [this.registry];
    this.calls = new Counter({ name: 'gateway_chain_calls_total', help: 'Chain calls (batch members count one each) by chain, method class and HTTP status', labelNames: ['chain', 'method_class', 'status'], registers });
    this.latency = new Histogram({ name: 'gateway_call_duration_seconds', help: 'Time from arrival to answer of a chain call', labelNames: ['chain'], buckets: LATENCY_BUCKETS, registers });
    this.upstreamLatency = new Histogram({ name: 'gateway_upstream_duration_seconds', help: 'Time the upstream node took', labelNames: ['chain'], buckets: LATENCY_BUCKETS, registers });
    this.limiterDecisions = new Counter({ name: 'gateway_limiter_decisions_total', help: 'Calls admitted or refused by the rate limit or the monthly quota', labelNames: ['outcome'], registers });
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
  }

  observeCall(record: UsageRecord): void {
    this.calls.inc({ chain: record.chain, method_class: methodClass(record.method), status: String(record.status) });
    this.latency.observe({ chain: record.chain }, record.totalMs / 1000);
    if (record.upstreamMs !== null) this.upstreamLatency.observe({ chain: record.chain }, record.upstreamMs / 1000);
  }

  /** The limiter, counting its decisions. */
  countDecisions(limiter: Limiter): Limiter {
    return {
      take: async (request: LimitRequest): Promise<LimitDecision> => {
        const d = await limiter.take(request);
        if (d.granted > 0) this.limiterDecisions.inc({ outcome: 'admitted' }, d.granted);
        if (d.granted < request.cost) this.limiterDecisions.inc({ outcome: `refused_${d.refusedBy ?? 'rate'}` }, request.cost - d.granted);
        return d;
      },
      monthlyUsed: (key, nowMs) => limiter.monthlyUsed(key, nowMs),
      close: () => limiter.close(),
    };
  }

  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
