import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { MaybePromise } from '../domain/maybePromise.js';
import type { UsageRecord } from '../domain/usage.js';
import type { LimitDecision, Limiter, LimitRequest, RefundRequest } from './limits/port.js';
import type { UnsettledUnits } from './limits/redis.js';
import { ResilientLimiter } from './limits/resilient.js';
import type { RedisHealthSnapshot, RedisState } from './redisHealth.js';

/** Live WebSocket connections and subscriptions (src/gateway/ws), per token. */
export interface WebSocketCounts {
  connections: number;
  subscriptions: number;
  upstreamSubscriptions: number;
  byToken: Array<{ tokenId: string; connections: number; subscriptions: number }>;
}

/** What the shared response cache counts (src/gateway/cache/sharedCache.ts), since start. */
export interface SharedCacheCounts {
  hits: number;
  misses: number;
  /** Lookups answered after their deadline (or never): counted as misses by the caller. */
  late: number;
  /** Lookups whose command failed. */
  errors: number;
  /** Lookups not sent: paused after failures, or the connection not ready. */
  skipped: number;
  /** Values found that failed their check (garbage, truncated, another key's): served as misses. */
  rejected: number;
  writes: number;
  writeErrors: number;
  /** Writes not sent: too big, paused, not ready, or too many unanswered. */
  writesSkipped: number;
  /** Times lookups were paused after failures. */
  pauses: number;
}

/** What the scrape reads at that moment (queue depth, projection lag, upstream health...). */
export interface TelemetrySources {
  usageQueueDepth?(): Promise<number>;
  projectionLagMs?(): number | null;
  cachedTokens?(): number;
  /** The in-process response cache, when on (RESPONSE_CACHE_MB > 0): what it holds and its bound. */
  responseCache?(): { readonly size: number; readonly bytes: number; readonly maxBytes: number } | null;
  /** The response cache shared through Redis, when on (RESPONSE_CACHE_REDIS): its counters since start. */
  sharedCache?(): SharedCacheCounts | null;
  upstreams?(): Record<string, UpstreamSnapshot[]>;
  /** Present when the process uses Redis. */
  redis?(): RedisHealthSnapshot;
  /** Present on the embedded default: usage records the journal failed to write (answered anyway). */
  unjournaledRecords?(): number;
  /** Present where this process's usage queue buffers records in memory (Redis, or in process without the storage thread): records dropped at its bound. */
  droppedUsageRecords?(): number;
  /** Present with Redis: usage records answered without the replicas REDIS_USAGE_WAIT_REPLICAS asks for confirming them. */
  unreplicatedUsageRecords?(): number;
}

/** An upstream as the scrape sees it; head, lag and state where its chain's heads are tracked (EVM). */
export interface UpstreamSnapshot {
  label: string;
  healthy: boolean;
  head?: number | null;
  lag?: number | null;
  state?: string | null;
  /** Calls sent to it that failed, by why, since start. */
  failures?: Readonly<Record<string, number>>;
  /** Calls sent to it past its calls-per-second budget (config `maxRps`), since start. */
  overBudget?: number;
  /** This gateway's share of its `maxRps` (divided among the live gateway instances); null: no budget. */
  budget?: number | null;
}

const REDIS_STATES: readonly RedisState[] = ['up', 'down', 'stalled', 'refusing'];
const HEAD_STATES = ['ok', 'lagging', 'liar', 'wrong_network', 'unknown'] as const;
/** How a served read was answered, in the order of the counts kept per chain. */
const CACHE_RESULTS = ['hit', 'miss', 'coalesced', 'hedged'] as const;

/** The event loop delay monitor's timer interval: its figures are how much later than this the timer ran. */
const LOOP_DELAY_RESOLUTION_MS = 10;

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

type MethodClass = 'write' | 'read' | 'rest';

/** Calls that submit or change something, as opposed to reads: a coarse class keeps label sets small. */
const classOf = (method: string): MethodClass => (method.includes('/') ? 'rest' : /send|submit|broadcast|execute/i.test(method) ? 'write' : 'read');

/** Method classes remembered per process, up to a bound (REST paths are open-ended). */
const METHOD_CLASSES_MAX = 10_000;

/** A limiter refusal's `outcome` label: which limit, or the limits being unavailable (fail-closed). */
const refusalOutcome = (refusedBy: LimitDecision['refusedBy']): string =>
  refusedBy === 'monthly' ? 'refused_monthly' : refusedBy === 'unavailable' ? 'refused_unavailable' : 'refused_rate';

const escapeLabelValue = (v: string): string => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');

interface Series {
  /** The rendered label pairs, without braces. */
  labels: string;
  counts: number[];
  sum: number;
  count: number;
  failures: number;
}

/**
 * A histogram labelled by chain, and by upstream when observations give one, kept by hand for the
 * call path: prom-client's `observe` costs about a microsecond (a closure, label validation and
 * hashing per call), this two Map lookups and a bucket search. With `failures`, it also counts the
 * observations that failed, per series, as a counter of its own: every series it has shows 0 from
 * its first call, so a rate of failures over calls exists before the first failure.
 * Rendered in the text format prom-client writes, after the registry's metrics.
 */
class CallHistogram {
  private readonly series = new Map<string, Map<string | null, Series>>();

  constructor(
    private readonly name: string,
    private readonly help: string,
    private readonly bounds: readonly number[],
    private readonly failures?: { name: string; help: string },
  ) {}

  observe(chain: string, upstream: string | null, value: number, failed = false): void {
    let byUpstream = this.series.get(chain);
    if (!byUpstream) {
      byUpstream = new Map();
      this.series.set(chain, byUpstream);
    }
    let s = byUpstream.get(upstream);
    if (!s) {
      const labels = `chain="${escapeLabelValue(chain)}"${upstream === null ? '' : `,upstream="${escapeLabelValue(upstream)}"`}`;
      s = { labels, counts: this.bounds.map(() => 0), sum: 0, count: 0, failures: 0 };
      byUpstream.set(upstream, s);
    }
    for (let i = 0; i < this.bounds.length; i++) {
      if (value <= (this.bounds[i] as number)) {
        s.counts[i] = (s.counts[i] as number) + 1;
        break;
      }
    }
    s.sum += value;
    s.count += 1;
    if (failed) s.failures += 1;
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    const failures = this.failures ? [`# HELP ${this.failures.name} ${this.failures.help}`, `# TYPE ${this.failures.name} counter`] : [];
    for (const byUpstream of this.series.values()) {
      for (const s of byUpstream.values()) {
        let cumulative = 0;
        this.bounds.forEach((bound, i) => {
          cumulative += s.counts[i] as number;
          lines.push(`${this.name}_bucket{le="${bound}",${s.labels}} ${cumulative}`);
        });
        lines.push(
          `${this.name}_bucket{le="+Inf",${s.labels}} ${s.count}`,
          `${this.name}_sum{${s.labels}} ${s.sum}`,
          `${this.name}_count{${s.labels}} ${s.count}`,
        );
        if (this.failures) failures.push(`${this.failures.name}{${s.labels}} ${s.failures}`);
      }
    }
    return `${[...lines, ...failures].join('\n')}\n`;
  }
}

/**
 * prom-client's process and Node.js metrics (CPU, memory, heap, file descriptors, GC, version),
 * one registry per process: they describe the process, and prom-client starts a GC observer and
 * an event loop monitor for them that nothing stops, so every Telemetry of a process (tests open
 * many) shares them. Three of its gauges end in `_total`, which promtool rejects for anything but
 * a counter (prom-client#283); they are left out, as each is the sum of the gauge of the same name
 * without the suffix (`nodejs_active_handles{type}`...).
 */
let processRegistry: Registry | undefined;
const COUNTER_NAMED_GAUGES = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];
const processMetrics = (): Registry => {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
    for (const name of COUNTER_NAMED_GAUGES) processRegistry.removeSingleMetric(name);
  }
  return processRegistry;
};

type CallLabels = { chain: string; method_class: string; status: string };
type PendingCalls = { labels: CallLabels; count: number };

/**
 * Prometheus metrics of one process, the gateway's on a registry of their own (no global state;
 * the process's CPU, memory and heap come from `processMetrics`). Chain calls are
 * observed from their usage records, so metering and metrics can never disagree. A call costs
 * a few Map updates: the calls counter is summed here and handed to prom-client when scraped,
 * and the latency histograms are `CallHistogram`s.
 */
export class Telemetry {
  readonly registry = new Registry();
  private readonly latency = new CallHistogram('gateway_call_duration_seconds', 'Time from arrival to answer of a chain call', LATENCY_BUCKETS);
  private readonly upstreamLatency = new CallHistogram(
    'gateway_upstream_duration_seconds',
    'Time the upstream node took, by the upstream that answered',
    LATENCY_BUCKETS,
    {
      name: 'gateway_upstream_failures_total',
      help: 'Calls sent to the upstream that the gateway answered with a 5xx: the upstream failed, timed out or sent an invalid answer',
    },
  );
  /** Calls counted since the last scrape, one entry per label set. */
  private readonly pendingCalls: PendingCalls[] = [];
  /** The entries by chain, class and status: a call finds its own without building a key. */
  private readonly pendingIndex = new Map<string, Map<string, Map<number, PendingCalls>>>();
  private readonly methodClasses = new Map<string, MethodClass>();
  /** Limiter decisions since the last scrape, by outcome (`admitted`, `refused_rate`, `refused_monthly`, `refused_unavailable`). */
  private readonly pendingDecisions = new Map<string, number>();
  /** With Redis: the monthly units the limiter dropped of those Redis did not take (set by `countDecisions`). */
  private limiterUnsettled: (() => UnsettledUnits) | null = null;
  /** Served reads since the last scrape by chain, counted per CACHE_RESULTS entry. */
  private readonly pendingCache = new Map<string, number[]>();
  private readonly loopDelay: IntervalHistogram = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });
  /** The event loop delay summary's running totals, over every scrape. */
  private loopDelaySumSeconds = 0;
  private loopDelayCount = 0;
  /** Set where this process serves WebSockets. */
  webSockets: () => WebSocketCounts | null = () => null;

  constructor(sources: TelemetrySources = {}) {
    const registers = [this.registry];
    this.loopDelay.enable();
    const pendingCalls = this.pendingCalls;
    new Counter({
      name: 'gateway_chain_calls_total',
      help: 'Chain calls (batch members count one each) by chain, method class and HTTP status',
      labelNames: ['chain', 'method_class', 'status'],
      registers,
      collect() {
        for (const { labels, count } of pendingCalls) if (count > 0) this.inc(labels, count);
        for (const entry of pendingCalls) entry.count = 0;
      },
    });
    const pendingDecisions = this.pendingDecisions;
    new Counter({
      name: 'gateway_limiter_decisions_total',
      help: 'Calls admitted or refused by the rate limit or the monthly quota (or while the limits cannot be checked)',
      labelNames: ['outcome'],
      registers,
      collect() {
        for (const [outcome, count] of pendingDecisions) if (count > 0) this.inc({ outcome }, count);
        for (const outcome of pendingDecisions.keys()) pendingDecisions.set(outcome, 0);
      },
    });
    const unsettled = (): UnsettledUnits | null => this.limiterUnsettled?.() ?? null;
    new Counter({
      name: 'gateway_limiter_unsettled_units_total',
      help: 'Monthly units Redis did not take that this gateway dropped, counted (calls admitted while Redis was away) or given back (refunds, unused leases): past the bound of months held, or sent with their reply lost',
      labelNames: ['kind', 'reason'],
      registers,
      collect() {
        const units = unsettled();
        if (units === null) return;
        this.reset();
        for (const reason of ['cap', 'unknown'] as const) {
          this.inc({ kind: 'counted', reason }, units.counted[reason]);
          this.inc({ kind: 'given_back', reason }, units.givenBack[reason]);
        }
      },
    });
    new Gauge({
      name: 'gateway_usage_queue_depth',
      help: 'Usage records not yet appended to the event store',
      registers,
      async collect() {
        if (sources.usageQueueDepth) this.set(await sources.usageQueueDepth());
      },
    });
    new Gauge({
      name: 'gateway_projection_lag_seconds',
      help: 'Age of the newest event the projector has applied, when it applied it',
      registers,
      collect() {
        const lag = sources.projectionLagMs?.();
        if (lag !== null && lag !== undefined) this.set(lag / 1000);
      },
    });
    /** A counter showing a running total kept elsewhere, read at each scrape. */
    const totalOf = (name: string, help: string, total: () => number): void => {
      new Counter({
        name,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(total());
        },
      });
    };
    if (sources.unjournaledRecords) {
      totalOf(
        'gateway_usage_unjournaled_total',
        'Usage records the journal could not write (disk errors): their calls were answered anyway',
        sources.unjournaledRecords,
      );
    }
    if (sources.droppedUsageRecords) {
      totalOf(
        'gateway_usage_dropped_total',
        'Usage records dropped because the in-memory buffer was full (Redis away or refusing too long): their calls were answered, never recorded',
        sources.droppedUsageRecords,
      );
    }
    if (sources.unreplicatedUsageRecords) {
      totalOf(
        'gateway_usage_unreplicated_total',
        'Usage records whose calls were answered without REDIS_USAGE_WAIT_REPLICAS replicas confirming them (a failover of their master may lose them)',
        sources.unreplicatedUsageRecords,
      );
    }
    const sockets = () => this.webSockets();
    new Gauge({
      name: 'gateway_ws_connections',
      help: 'Open WebSocket connections, by token',
      labelNames: ['token_id'],
      registers,
      collect() {
        this.reset();
        for (const t of sockets()?.byToken ?? []) this.set({ token_id: t.tokenId }, t.connections);
      },
    });
    new Gauge({
      name: 'gateway_ws_subscriptions',
      help: 'Open eth_subscribe subscriptions of WebSocket clients, by token',
      labelNames: ['token_id'],
      registers,
      collect() {
        this.reset();
        for (const t of sockets()?.byToken ?? []) this.set({ token_id: t.tokenId }, t.subscriptions);
      },
    });
    new Gauge({
      name: 'gateway_ws_upstream_subscriptions',
      help: 'Subscriptions this gateway holds on the nodes: one per distinct chain, kind and filter, shared by its clients',
      registers,
      collect() {
        this.set(sockets()?.upstreamSubscriptions ?? 0);
      },
    });
    new Gauge({
      name: 'gateway_cached_tokens',
      help: "Tokens in this gateway's cache",
      registers,
      collect() {
        if (sources.cachedTokens) this.set(sources.cachedTokens());
      },
    });
    const cache = () => sources.responseCache?.() ?? null;
    new Gauge({
      name: 'gateway_response_cache_entries',
      help: "Answers in this gateway's response cache",
      registers,
      collect() {
        this.set(cache()?.size ?? 0);
      },
    });
    new Gauge({
      name: 'gateway_response_cache_bytes',
      help: 'Bytes the response cache holds, keys and results, as it counts them against its bound',
      registers,
      collect() {
        this.set(cache()?.bytes ?? 0);
      },
    });
    new Gauge({
      name: 'gateway_response_cache_max_bytes',
      help: "The response cache's bound (RESPONSE_CACHE_MB); 0: no cache",
      registers,
      collect() {
        this.set(cache()?.maxBytes ?? 0);
      },
    });
    const counted = new Map<string, number>();
    new Counter({
      name: 'gateway_shared_cache_operations_total',
      help: 'The response cache shared through Redis (RESPONSE_CACHE_REDIS), by operation and outcome: lookups hit, miss, late (past the deadline), error, skipped (paused or not connected), rejected (a value that failed its check); writes sent, error, skipped; pauses after failures',
      labelNames: ['operation', 'outcome'],
      registers,
      collect() {
        const stats = sources.sharedCache?.();
        if (!stats) return;
        const rows: Array<[string, string, number]> = [
          ['lookup', 'hit', stats.hits],
          ['lookup', 'miss', stats.misses],
          ['lookup', 'late', stats.late],
          ['lookup', 'error', stats.errors],
          ['lookup', 'skipped', stats.skipped],
          ['lookup', 'rejected', stats.rejected],
          ['write', 'sent', stats.writes],
          ['write', 'error', stats.writeErrors],
          ['write', 'skipped', stats.writesSkipped],
          ['pause', 'paused', stats.pauses],
        ];
        for (const [operation, outcome, value] of rows) {
          const key = `${operation}/${outcome}`;
          this.inc({ operation, outcome }, value - (counted.get(key) ?? 0));
          counted.set(key, value);
        }
      },
    });
    const pendingCache = this.pendingCache;
    new Counter({
      name: 'gateway_cache_calls_total',
      help: 'Served reads by how they were answered: hit (response cache), miss (own upstream call), coalesced (shared an identical call in flight), hedged (a second upstream was asked)',
      labelNames: ['chain', 'result'],
      registers,
      collect() {
        for (const [chain, counts] of pendingCache) {
          CACHE_RESULTS.forEach((result, i) => {
            this.inc({ chain, result }, counts[i] ?? 0);
            counts[i] = 0;
          });
        }
      },
    });
    /** Each upstream of each chain, as the scrape sees it. */
    const eachUpstream = (visit: (chain: string, u: UpstreamSnapshot) => void): void => {
      for (const [chain, list] of Object.entries(sources.upstreams?.() ?? {})) for (const u of list) visit(chain, u);
    };
    const headGauge = (name: string, help: string, value: (u: UpstreamSnapshot) => number | null | undefined): void => {
      new Gauge({
        name,
        help,
        labelNames: ['chain', 'upstream'],
        registers,
        collect() {
          this.reset();
          eachUpstream((chain, u) => {
            const v = value(u);
            if (v !== null && v !== undefined) this.set({ chain, upstream: u.label }, v);
          });
        },
      });
    };
    headGauge('gateway_upstream_head_block', 'Latest block the upstream reported (EVM chains; Solana: its processed slot)', (u) => u.head);
    headGauge('gateway_upstream_lag_blocks', 'Blocks (Solana: slots) the upstream is behind the best head of its chain', (u) => u.lag);
    new Gauge({
      name: 'gateway_upstream_head_state',
      help: '1 for the head state the upstream is in: ok, lagging (no head calls), liar (no calls), wrong_network (on another network than its chain: no calls), unknown (not answering polls)',
      labelNames: ['chain', 'upstream', 'state'],
      registers,
      collect() {
        this.reset();
        eachUpstream((chain, u) => {
          if (u.state === null || u.state === undefined) return;
          for (const state of HEAD_STATES) this.set({ chain, upstream: u.label, state }, u.state === state ? 1 : 0);
        });
      },
    });
    new Counter({
      name: 'gateway_upstream_attempt_failures_total',
      help: 'Calls sent to the upstream that failed, by reason (timeout, unreachable, status: 429/5xx, invalid: not an answer to the call, busy: a rate limit inside a 200), another upstream then answering or not',
      labelNames: ['chain', 'upstream', 'reason'],
      registers,
      collect() {
        this.reset();
        eachUpstream((chain, u) => {
          for (const [reason, n] of Object.entries(u.failures ?? {})) this.inc({ chain, upstream: u.label, reason }, n);
        });
      },
    });
    new Counter({
      name: 'gateway_upstream_over_budget_total',
      help: "Calls sent to the upstream past its maxRps for the second, because every node the call could take was past its own (0 for a node without maxRps): this gateway's share of the provider's limit is too small for its traffic",
      labelNames: ['chain', 'upstream'],
      registers,
      collect() {
        this.reset();
        eachUpstream((chain, u) => this.inc({ chain, upstream: u.label }, u.overBudget ?? 0));
      },
    });
    new Gauge({
      name: 'gateway_upstream_budget_rps',
      help: "This gateway's share of the upstream's maxRps: the cap divided among the live gateway instances (with Redis), at least 1; 0 for an upstream without maxRps",
      labelNames: ['chain', 'upstream'],
      registers,
      collect() {
        this.reset();
        eachUpstream((chain, u) => this.set({ chain, upstream: u.label }, u.budget ?? 0));
      },
    });
    new Gauge({
      name: 'gateway_upstream_healthy',
      help: '1 when the upstream is in rotation, 0 when ejected, a liar or on another network than its chain',
      labelNames: ['chain', 'upstream'],
      registers,
      collect() {
        this.reset();
        eachUpstream((chain, u) => this.set({ chain, upstream: u.label }, u.healthy ? 1 : 0));
      },
    });
    const redis = sources.redis;
    if (redis) {
      new Gauge({
        name: 'gateway_redis_up',
        help: '1 while Redis is connected, answers PING and takes writes in time, 0 while it is unreachable, stalled or refusing writes',
        registers,
        collect() {
          this.set(redis().state === 'up' ? 1 : 0);
        },
      });
      new Gauge({
        name: 'gateway_redis_state',
        help: '1 for the state Redis is in (up, down: unreachable, stalled: connected but not answering, refusing: answering but refusing writes)',
        labelNames: ['state'],
        registers,
        collect() {
          const { state } = redis();
          for (const s of REDIS_STATES) this.set({ state: s }, s === state ? 1 : 0);
        },
      });
      totalOf('gateway_redis_outages_total', 'Times Redis went from up to unreachable, stalled or refusing writes', () => redis().outages);
    }
  }

  observeCall(record: UsageRecord): void {
    if (record.cache !== undefined) {
      let counts = this.pendingCache.get(record.chain);
      if (counts === undefined) {
        counts = [0, 0, 0, 0];
        this.pendingCache.set(record.chain, counts);
      }
      const i = CACHE_RESULTS.indexOf(record.cache);
      counts[i] = (counts[i] ?? 0) + 1;
    }
    this.pendingCallsOf(record.chain, this.methodClass(record.method), record.status).count += 1;
    this.latency.observe(record.chain, null, record.totalMs / 1000);
    if (record.upstreamMs !== null && record.upstream !== null) {
      this.upstreamLatency.observe(record.chain, record.upstream, record.upstreamMs / 1000, record.status >= 500);
    }
  }

  /** A call's class without a regex run for methods seen before. */
  private methodClass(method: string): MethodClass {
    let cls = this.methodClasses.get(method);
    if (cls === undefined) {
      cls = classOf(method);
      // A copy: the method may be a slice of the whole request path or body, which a key would keep alive.
      if (this.methodClasses.size < METHOD_CLASSES_MAX) this.methodClasses.set(JSON.parse(JSON.stringify(method)) as string, cls);
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
    if (limiter instanceof ResilientLimiter) this.limiterUnsettled = () => limiter.unsettled;
    const pending = this.pendingDecisions;
    const add = (outcome: string, n: number): void => {
      pending.set(outcome, (pending.get(outcome) ?? 0) + n);
    };
    const count = (request: LimitRequest, d: LimitDecision): LimitDecision => {
      if (d.granted > 0) add('admitted', d.granted);
      if (d.granted < request.cost) add(refusalOutcome(d.refusedBy), request.cost - d.granted);
      return d;
    };
    return {
      take: (request: LimitRequest): MaybePromise<LimitDecision> => {
        const decision = limiter.take(request);
        return decision instanceof Promise ? decision.then((d) => count(request, d)) : count(request, decision);
      },
      // Admitted less refunded: the units the month keeps (calls the gateway failed to serve go back).
      refund: (request: RefundRequest): MaybePromise<void> => {
        add('refunded', request.units);
        return limiter.refund(request);
      },
      monthlyUsed: (key, nowMs) => limiter.monthlyUsed(key, nowMs),
      close: () => limiter.close(),
    };
  }

  /** Stops the event loop delay monitor's timer. */
  close(): void {
    this.loopDelay.disable();
  }

  /**
   * The event loop delay since the previous scrape as a summary: its 0.5 and 0.99 quantiles and
   * its maximum (quantile 1), with running totals. In whole microseconds beyond the monitor's
   * interval: its figures count the interval itself (prom-client's nodejs_eventloop_lag_*_seconds
   * include it, 10 ms at rest).
   */
  private renderLoopDelay(): string {
    const name = 'gateway_event_loop_delay_seconds';
    const lines = [
      `# HELP ${name} How late the event loop ran a timer since the previous scrape (quantile 1: the longest wait): every request waiting in this process waited as long`,
      `# TYPE ${name} summary`,
    ];
    const delay = this.loopDelay;
    if (delay.count > 0) {
      const intervalNs = LOOP_DELAY_RESOLUTION_MS * 1e6;
      const beyondInterval = (ns: number): number => Math.max(0, Math.round((ns - intervalNs) / 1e3)) / 1e6;
      lines.push(
        `${name}{quantile="0.5"} ${beyondInterval(delay.percentile(50))}`,
        `${name}{quantile="0.99"} ${beyondInterval(delay.percentile(99))}`,
        `${name}{quantile="1"} ${beyondInterval(delay.max)}`,
      );
      this.loopDelaySumSeconds += beyondInterval(delay.mean) * delay.count;
      this.loopDelayCount += delay.count;
      delay.reset();
    }
    lines.push(`${name}_sum ${this.loopDelaySumSeconds}`, `${name}_count ${this.loopDelayCount}`);
    return `${lines.join('\n')}\n`;
  }

  async metrics(): Promise<string> {
    const own = await this.registry.metrics();
    const ofProcess = await processMetrics().metrics();
    return `${own}${ofProcess}${this.renderLoopDelay()}${this.latency.render()}${this.upstreamLatency.render()}`;
  }
}
