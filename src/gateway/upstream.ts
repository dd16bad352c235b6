import type { IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import { type Dispatcher, Pool } from 'undici';
import { DEFAULT_CACHE_BYTES, ResponseCache } from './cache/responseCache.js';
import type { Chain, ChainRegistry, Upstream } from './chains.js';
import { startsLikeJson } from './jsonScan.js';
import type { CallShape } from './upstreams/evmCalls.js';
import { filterKeys } from './upstreams/filters.js';
import { type AnswerHead, type HeadAnswerKind, headOfAnswer, withHeadNumberText } from './upstreams/headAnswers.js';
import { ChainHeads, type HeadStatus, takesNoCall } from './upstreams/heads.js';
import { LatencyWindow } from './upstreams/latency.js';
import { HEAD_PUSH_DIALECTS, PushedHeads, type PushedHeadsHandlers } from './upstreams/pushedHeads.js';

/**
 * Upstream pools: per chain, a weighted choice among healthy nodes scored by their recent latency
 * and error rate, a per-chain timeout, a retry on another node for reads, a hedge of reads that
 * are slow to answer, and passive health tracking (K consecutive failures eject a node; after a
 * cool-down one trial call may go to it, and a success brings it back). On EVM chains each
 * node's head is tracked (src/gateway/upstreams/heads.ts; polled, or pushed over a node's
 * WebSocket where it has one): a lagging node gets no call that
 * depends on the head, a lying one no call at all, and old state goes to archive nodes.
 */

export interface UpstreamRequest {
  method: 'GET' | 'POST';
  /** Path (and query) relative to the upstream URL; '' for the URL itself. */
  path: string;
  body?: string | Buffer;
  contentType?: string;
  /** Request headers of the caller's passed on to the node (REST passthrough), beside the node's own. */
  headers?: Record<string, string>;
  /** Reads may be retried (and hedged) on another upstream; submissions never are (they could land twice). */
  retriable: boolean;
  /** What the call depends on (EVM JSON-RPC): decides which nodes may take it. */
  shape?: CallShape;
  /**
   * Judges an answer the node gave (not a node failure by its status): 'bad' when it is not a
   * valid answer to this call (counted against the node, another one tried), 'archive' when a
   * full node lacks the state asked (an archive node tried, when the chain has one), 'busy' when
   * the node refused it for want of capacity (counted against the node, another one tried; the
   * last such answer is the caller's when no node answered better), 'behind' when the node has
   * not reached the slot the call names (Solana's -32016: a node at the best slot is asked, the
   * node not blamed, its answer the caller's when none answers better).
   */
  judge?: (body: Buffer, answerId: string | undefined) => Verdict;
  /** The id text a single JSON-RPC answer must carry, passed to `judge` (a module-level function: no closure per call). */
  answerId?: string;
  /** The one upstream (its index) that may take the call: the node holding the state it acts on (a filter). Give with `retriable: false`. */
  pinned?: number;
  /**
   * When (performance.now(), ms) the caller must have its answer, retries and hedges included (a
   * split eth_getLogs' sub-calls share their parent's); unset: the chain's `callTimeoutMs` from
   * the first attempt.
   */
  deadline?: number;
  /**
   * A head call whose answer tells the node's head (EVM, with head tracking): `eth_blockNumber`
   * ('number') or `eth_getBlockByNumber("latest")` ('block'). The answer raises what is known of
   * the node's head; a number under the best head is answered as that head, a block
   * under the best head is asked again of a node at it (docs/decisions.md, "The head never goes
   * back within a poll interval").
   */
  headAnswer?: HeadAnswerKind;
  /**
   * A batch's head calls (EVM, with head tracking): what a node's answer to the batch says of its
   * head, raised as a single head call's answer raises it. The members are then answered from the
   * best head (rpcHandler's forwardBatch).
   */
  headsIn?: (body: Buffer) => AnswerHead[];
  /**
   * A head call asked again (a batch member whose answer was under the head): that answer, the
   * caller's when no other node at the head answers in time; its attempts go only to nodes at the
   * head (or at the chain's finalized block, for a `finalized` block), not to the one that answered it.
   */
  behind?: UpstreamAnswer;
}

export type Verdict = 'ok' | 'bad' | 'archive' | 'busy' | 'behind';

export interface UpstreamAnswer {
  ok: true;
  status: number;
  /** The answer's Content-Type (REST passes it on); its other headers are not kept. */
  contentType: string | undefined;
  body: Buffer;
  upstreamMs: number;
  upstream: string;
  /** A second upstream was asked too, because the first was slow (absent: no). */
  hedged?: boolean;
}

export interface UpstreamFailure {
  ok: false;
  kind: 'unavailable' | 'timeout';
  message: string;
  upstreamMs: number | null;
  upstream: string | null;
  hedged?: boolean;
  /**
   * The answer passed the size cap: the call's doing, not the node's (every node would answer
   * the same), so it is neither counted against the node nor tried on another.
   */
  tooLarge?: boolean;
}

export type UpstreamOutcome = UpstreamAnswer | UpstreamFailure;

export interface UpstreamPoolOptions {
  /** Consecutive failures that eject an upstream. */
  ejectAfterFailures?: number;
  /** How long an ejected upstream rests before one trial call may reach it. */
  coolDownMs?: number;
  /** Attempts per read call, each on a different upstream. */
  maxAttempts?: number;
  maxResponseBytes?: number;
  /** Keep-alive connections per upstream origin. */
  connections?: number;
  /** Hedging of reads; false: never. */
  hedge?: HedgeOptions | false;
  /** Head tracking on chains that have it configured; false: none (tests of other things). */
  heads?: boolean;
  /** Bytes of the response cache shared by the pools; 0: no cache. */
  cacheBytes?: number;
  /** Identical reads in flight share one upstream call; false: each goes alone. */
  coalesce?: boolean;
  /** The secret in the keys of the filter ids' tags (FILTER_ID_SECRET, src/gateway/upstreams/filters.ts); unset: none. */
  filterIdSecret?: string | null;
  random?: () => number;
  now?: () => number;
  /** Where a pool says what an operator should know (a node on another network than its chain's); unset: nowhere. */
  warn?: (message: string) => void;
}

export interface HedgeOptions {
  /** The chain's recent latency quantile after which a read is sent to a second upstream. */
  quantile: number;
  /** The hedge delay's floor. */
  minDelayMs: number;
  /** Hedges at most this share of reads. */
  maxShare: number;
}

const DEFAULT_HEDGE: HedgeOptions = { quantile: 0.9, minDelayMs: 20, maxShare: 0.1 };

export interface UpstreamHealth {
  label: string;
  healthy: boolean;
  consecutiveFailures: number;
  ejectedUntil: number | null;
  /** Tracked head (EVM chains; null elsewhere or before its first poll), blocks behind the best, head state. */
  head: number | null;
  finalized: number | null;
  lag: number | null;
  state: HeadStatus | null;
  /** Recent latency (ms, moving average) and error rate (0..1) that weigh its share of calls. */
  latencyMs: number | null;
  errorRate: number;
  /** Calls sent to it that failed, by why, since start (`gateway_upstream_attempt_failures_total`). */
  failures: Record<AttemptFailure, number>;
  /** Its budget (config `maxRps`; null: none), calls sent to it in the pool's current second, and calls sent past the budget since start. */
  maxRps: number | null;
  /** This gateway's share of `maxRps` (divided among the live gateway instances; null: no budget). */
  budget: number | null;
  sentThisSecond: number;
  overBudget: number;
}

/**
 * Why a call sent to a node got no answer the caller could be given from it: no answer in time,
 * no connection or a broken one, a status saying the node failed (429, 502–504, a 5xx without
 * JSON), an answer that is not one to the call (or cut short), or a refusal for want of capacity
 * inside a 200. An attempt another node then answered counts too: a provider's failures show
 * before its callers see any.
 */
export type AttemptFailure = 'timeout' | 'unreachable' | 'status' | 'invalid' | 'busy';

interface Member {
  index: number;
  upstream: Upstream;
  dispatcher: Dispatcher;
  /** The path of a call to the upstream URL itself (JSON-RPC), computed once. */
  rootPath: string;
  /** Request headers, built once: without a body, and with a JSON body (the common case). */
  headers: Record<string, string>;
  jsonHeaders: Record<string, string>;
  consecutiveFailures: number;
  ejectedUntil: number | null;
  probing: boolean;
  /** Moving averages of its latency (ms; null before its first answer) and error rate. */
  latencyMs: number | null;
  errorRate: number;
  /** Its configured weight times its score (latency and errors): what the weighted choice uses. */
  effectiveWeight: number;
  failures: Record<AttemptFailure, number>;
  /** Its calls-per-second cap (config `maxRps`); 0: none. */
  maxRps: number;
  /** This gateway's share of it: `maxRps` ÷ the live gateway instances, at least 1; 0: none. */
  budget: number;
  /** The pool's clock second (ms ÷ 1000) `sent` counts calls of: a fixed window. */
  second: number;
  sent: number;
  /** Calls sent to it past its budget (every node the call could take was over its own), since start. */
  overBudget: number;
}

/**
 * An answer the pool treats as the node failing (overloaded, or a proxy in front of it that
 * could not reach it): worth another node, and counted against its health. A 500 or 501 with a
 * JSON body is the node's API speaking (a Cosmos LCD answers 501 for an unknown path, some
 * JSON-RPC nodes 500 with an error object) and is passed on.
 */
export function isNodeFailure(status: number, body: Buffer): boolean {
  if (status === 429 || status === 502 || status === 503 || status === 504) return true;
  return status >= 500 && !startsLikeJson(body);
}

class ResponseTooLarge extends Error {}

/** Why an answer over `maxBytes` is not passed on (a node's, or one merged from several: eth_getLogs split). */
export const answerTooLargeMessage = (maxBytes: number): string =>
  `answer larger than ${maxBytes} bytes (${Math.round((maxBytes / 1_048_576) * 10) / 10} MiB), the most the gateway passes on: ask for less (a narrower block range, fewer calls in a batch)`;
class UpstreamTimeout extends Error {}

/** The upstream URL's path joined with the call's path; both query strings kept. */
export function targetPath(base: URL, path: string): string {
  const q = path.indexOf('?');
  const callPath = q < 0 ? path : path.slice(0, q);
  const callQuery = q < 0 ? '' : path.slice(q + 1);
  const pathname = callPath === '' ? base.pathname : `${base.pathname.replace(/\/+$/, '')}/${callPath.replace(/^\/+/, '')}`;
  const query = [base.search.slice(1), callQuery].filter((s) => s !== '').join('&');
  return query === '' ? pathname : `${pathname}?${query}`;
}

function describeError(err: unknown): string {
  if (err instanceof ResponseTooLarge) return err.message;
  const e = err as { code?: unknown; message?: unknown };
  if (typeof e?.code === 'string') return e.code;
  return typeof e?.message === 'string' ? e.message : 'request failed';
}

/** Healthy, or due for a trial call. */
const isInRotation = (m: Member, now: number): boolean => m.ejectedUntil === null || (now >= m.ejectedUntil && !m.probing);

/** A node with a budget that has had its calls for clock second `second`. */
const isOverBudget = (m: Member, second: number): boolean => m.budget > 0 && m.second === second && m.sent >= m.budget;

/**
 * Counts a call sent to a node with a budget (a caller's attempt, retry, hedge, or a head poll: the
 * node's plan counts them all); `chosen` past the budget (not a head poll, which is not a choice) counts as over it.
 */
function spendBudget(m: Member, now: number, chosen: boolean): void {
  const second = Math.floor(now / 1000);
  if (m.second !== second) {
    m.second = second;
    m.sent = 0;
  }
  if (++m.sent > m.budget && chosen) m.overBudget++;
}

/** A score's floor: a slow or failing node still gets a trickle of calls, so its recovery is seen. */
const MIN_SCORE = 0.05;
/** Weight of the latest answer in a node's moving averages. */
const LATENCY_ALPHA = 0.1;
const ERROR_ALPHA = 0.05;

const noUpstream = (chainId: string): UpstreamFailure => ({
  ok: false,
  kind: 'unavailable',
  message: `no healthy upstream for ${chainId}`,
  upstreamMs: null,
  upstream: null,
});

export class UpstreamPool {
  private readonly members: Member[];
  private readonly ejectAfter: number;
  private readonly coolDownMs: number;
  private readonly maxAttempts: number;
  /** The most bytes a node's answer may hold (also the bound of an answer merged from several: eth_getLogs split). */
  readonly maxResponseBytes: number;
  private readonly random: () => number;
  private readonly now: () => number;
  private readonly inFlight = new InFlightCalls();
  /** Attempts whose time is what was left of their call's (a retry, a hedge): their deadlines come in no set order. */
  private readonly cutShort = new InFlightCalls();
  private readonly probes = new InFlightCalls();
  /** Head tracking (EVM chains); null where the chain has none. */
  readonly heads: ChainHeads | null;
  readonly hasArchive: boolean;
  private readonly hedge: HedgeOptions | null;
  private readonly latency: LatencyWindow | null;
  /** Reads and hedges, halved together now and then: the hedge share is over recent traffic. */
  private reads = 0;
  private hedgesRecent = 0;
  /** Each upstream's key of the tags in the filter ids it made (src/gateway/upstreams/filters.ts), in order. */
  readonly filterKeys: readonly Buffer[];
  /** Answers kept for reads (shared by every pool of the process); null: none. */
  readonly cache: ResponseCache | null;
  /** Some node has a calls-per-second budget: without one, picking a node never looks at budgets. */
  private readonly budgeted: boolean;
  /** Reads in flight by key: callers of an identical read wait here for its answer (coalescing). */
  readonly waiting = new Map<string, Array<(outcome: UpstreamOutcome) => void>>();
  readonly coalesces: boolean;

  constructor(
    readonly chain: Chain,
    dispatcherFor: (origin: string) => Dispatcher,
    options: UpstreamPoolOptions = {},
    cache: ResponseCache | null = null,
  ) {
    this.cache = cache;
    this.members = chain.upstreams.map((upstream, index) => {
      const headers = { accept: 'application/json', 'user-agent': 'chain-gateway', ...upstream.headers };
      return {
        index,
        upstream,
        dispatcher: dispatcherFor(upstream.url.origin),
        rootPath: targetPath(upstream.url, ''),
        headers,
        jsonHeaders: { ...headers, 'content-type': 'application/json' },
        consecutiveFailures: 0,
        failures: { timeout: 0, unreachable: 0, status: 0, invalid: 0, busy: 0 },
        ejectedUntil: null,
        probing: false,
        latencyMs: null,
        errorRate: 0,
        effectiveWeight: upstream.weight,
        maxRps: upstream.maxRps ?? 0,
        budget: upstream.maxRps ?? 0,
        second: 0,
        sent: 0,
        overBudget: 0,
      };
    });
    this.budgeted = this.members.some((m) => m.budget > 0);
    this.filterKeys = filterKeys(chain.upstreams, options.filterIdSecret ?? null);
    this.ejectAfter = options.ejectAfterFailures ?? 3;
    this.coolDownMs = options.coolDownMs ?? 5_000;
    this.maxAttempts = options.maxAttempts ?? 3;
    this.maxResponseBytes = options.maxResponseBytes ?? 64 * 1024 * 1024;
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
    this.hasArchive = chain.upstreams.some((u) => u.archive);
    this.coalesces = options.coalesce !== false;
    this.hedge = options.hedge === false || this.members.length < 2 ? null : (options.hedge ?? DEFAULT_HEDGE);
    this.latency = this.hedge ? new LatencyWindow(this.hedge.quantile) : null;
    this.heads =
      chain.heads && options.heads !== false
        ? new ChainHeads(
            chain.heads,
            chain.upstreams.map((u) => u.label),
            (index, body) => this.probe(index, body),
            this.now,
            (index, handlers) => this.followHeads(index, handlers),
            (message) => options.warn?.(`chain ${chain.id}: ${message}`),
          )
        : null;
  }

  /** One promise per call, whatever the retries: each attempt reports to the next step by callback. */
  send(request: UpstreamRequest): Promise<UpstreamOutcome> {
    return this.sendThen(request, (outcome) => outcome);
  }

  /**
   * `send` with the caller's next step applied to the outcome inside the one promise (a single
   * JSON-RPC call's answer is made there): no second promise and microtask per call. An
   * exception from `then` rejects the promise.
   */
  sendThen<T>(request: UpstreamRequest, then: (outcome: UpstreamOutcome) => T): Promise<T> {
    const attempts = request.retriable ? Math.min(this.maxAttempts, this.members.length) : 1;
    this.heads?.touch();
    // The call itself applies `then` and settles the promise: no wrapper closure per call.
    // `resolve` gets what `then` returned, a T.
    return new Promise<T>((resolve, reject) => new PoolCall(this, request, attempts, then, resolve as (value: unknown) => void, reject).start());
  }

  health(): UpstreamHealth[] {
    const heads = this.heads;
    return this.members.map((m, i) => {
      const h = heads?.upstreams[i];
      return {
        label: m.upstream.label,
        healthy: m.ejectedUntil === null && !takesNoCall(h?.status),
        consecutiveFailures: m.consecutiveFailures,
        ejectedUntil: m.ejectedUntil,
        head: h?.head ?? null,
        finalized: h?.finalized ?? null,
        lag: h?.head != null && heads?.best != null ? Math.max(0, heads.best - h.head) : null,
        state: h?.status ?? null,
        latencyMs: m.latencyMs === null ? null : Math.round(m.latencyMs * 100) / 100,
        errorRate: Math.round(m.errorRate * 1000) / 1000,
        failures: { ...m.failures },
        maxRps: m.maxRps > 0 ? m.maxRps : null,
        budget: m.budget > 0 ? m.budget : null,
        sentThisSecond: m.second === Math.floor(this.now() / 1000) ? m.sent : 0,
        overBudget: m.overBudget,
      };
    });
  }

  /**
   * Divides each node's `maxRps` among `instances` live gateways (docs/decisions.md, "A node's
   * calls-per-second budget"): this gateway's share, rounded down so the shares stay within the
   * cap, but never under 1 (a budget of 0 would be none).
   */
  shareBudgets(instances: number): void {
    for (const m of this.members) if (m.maxRps > 0) m.budget = Math.max(1, Math.floor(m.maxRps / Math.max(1, instances)));
  }

  /**
   * Whether `m` may take `call` now. `strict` adds what is preferred but not required: a node at
   * the best head for the head or a hash, a node that has the blocks asked, an archive node for old state.
   */
  private isEligible(m: Member, call: PoolCall, now: number, strict: boolean): boolean {
    if (call.hasTried(m) || !isInRotation(m, now)) return false;
    const heads = this.heads;
    if (call.request.pinned !== undefined) return m.index === call.request.pinned && !(heads?.takesNoCall(m.index) ?? false);
    const shape = call.request.shape;
    if (heads === null) return !call.archiveOnly || m.upstream.archive;
    if (heads.takesNoCall(m.index)) return false;
    if (call.archiveOnly && !m.upstream.archive) return false;
    if (shape === undefined) return true;
    if ((shape.kind === 'head' || shape.kind === 'volatile' || shape.kind === 'recent') && !heads.servesHead(m.index)) return false;
    // Asked again because a node answered a `latest` block under the best head: only a node at it.
    if (call.atBestOnly && !heads.reachesBest(m.index)) return false;
    // Asked again because a node answered a `finalized` block under the chain's: only a node that has it.
    if (call.atTagOnly === 'finalized' && !heads.reachesFinalized(m.index)) return false;
    // Asked again because a node answered a `safe` block under the chain's: only a node known to have it.
    if (call.atTagOnly === 'safe' && !heads.reachesSafe(m.index)) return false;
    if (!strict) return true;
    // The head, and blocks named by hash (maybe the newest), from a node at the best head while one can take it: a
    // node a few blocks behind would answer an older `latest` than the caller saw a call before (the head going back)
    // and not find the newest block or its transactions.
    if ((shape.kind === 'head' || shape.kind === 'volatile' || shape.kind === 'hash') && !heads.reachesBest(m.index)) return false;
    if (shape.high >= 0 && heads.lacksBlock(m.index, shape.high)) return false;
    return !this.hasArchive || m.upstream.archive || !heads.needsArchive(shape.low);
  }

  /**
   * Weighted choice (by score) among eligible upstreams; no allocation: it runs per call. Where
   * nodes have budgets, one within its budget first, at each level of preference: what the call
   * needs (the best head, the blocks, archive state) comes before a budget (an over-budget node
   * may refuse, which costs a retry; a node behind answers an older state). When every node the
   * call may take is over its budget, one of them still gets it: the node decides. A hedge
   * (`extra`), a call the caller does not need, goes only to a node within its budget.
   */
  pick(call: PoolCall, extra = false): Member | null {
    const now = this.now();
    const chosen =
      this.pickAt(call, now, true, extra) ?? (this.heads !== null && call.request.shape !== undefined ? this.pickAt(call, now, false, extra) : null);
    if (chosen?.ejectedUntil != null) chosen.probing = true;
    return chosen;
  }

  /** At one level of preference: a node within its budget first, then (not for a hedge) any. */
  private pickAt(call: PoolCall, now: number, strict: boolean, extra: boolean): Member | null {
    if (!this.budgeted) return this.pickAmong(call, now, strict, -1);
    return this.pickAmong(call, now, strict, Math.floor(now / 1000)) ?? (extra ? null : this.pickAmong(call, now, strict, -1));
  }

  /** `withinBudgetOf`: the clock second whose budgets a node must be within; -1: budgets not looked at. */
  private pickAmong(call: PoolCall, now: number, strict: boolean, withinBudgetOf: number): Member | null {
    let total = 0;
    let count = 0;
    let only: Member | null = null;
    for (const m of this.members) {
      if (!this.isEligible(m, call, now, strict) || (withinBudgetOf >= 0 && isOverBudget(m, withinBudgetOf))) continue;
      total += m.effectiveWeight;
      count++;
      only = m;
    }
    if (count <= 1) return only;
    let r = this.random() * total;
    for (const m of this.members) {
      if (!this.isEligible(m, call, now, strict) || (withinBudgetOf >= 0 && isOverBudget(m, withinBudgetOf))) continue;
      r -= m.effectiveWeight;
      if (r < 0) return m;
    }
    return only;
  }

  recordSuccess(m: Member, ms: number): void {
    m.consecutiveFailures = 0;
    m.ejectedUntil = null;
    m.probing = false;
    this.latency?.add(ms);
    this.score(m, ms, 0);
  }

  /**
   * A call the node failed. It rests after `ejectAfter` in a row (or a failed trial), except a
   * node that refused for want of capacity (`busy`) while no other node is up: the last node
   * standing keeps taking calls, so its callers get its own refusal, which clients back off on,
   * instead of 502 "no healthy upstream" for the whole rest (a provider's rate limit is per
   * second, a rest 5 s).
   */
  recordFailure(m: Member, ms: number | null, why: AttemptFailure): void {
    m.failures[why]++;
    m.consecutiveFailures++;
    if ((m.probing || m.consecutiveFailures >= this.ejectAfter) && (why !== 'busy' || this.anotherUp(m))) m.ejectedUntil = this.now() + this.coolDownMs;
    m.probing = false;
    this.score(m, ms, 1);
  }

  private anotherUp(m: Member): boolean {
    const now = this.now();
    return this.members.some((o) => o !== m && (o.ejectedUntil === null || o.ejectedUntil <= now));
  }

  /**
   * A call given up on (another node answered first): its wait so far counts as its latency. A
   * resting node's trial call given up on so tells nothing of its health: the next call may try
   * it again (left marked as on trial, it was never picked again, and never came back).
   */
  recordAbandoned(m: Member, ms: number): void {
    m.probing = false;
    this.score(m, ms, null);
  }

  /** A node's answer that says nothing of its health (one over the size cap): a trial call may be made again. */
  recordUnjudged(m: Member): void {
    m.probing = false;
  }

  /** Updates a node's moving averages and every node's weight (a score is relative to the fastest). */
  private score(m: Member, ms: number | null, failed: 0 | 1 | null): void {
    if (ms !== null) m.latencyMs = m.latencyMs === null ? ms : m.latencyMs + LATENCY_ALPHA * (ms - m.latencyMs);
    if (failed !== null) m.errorRate += ERROR_ALPHA * (failed - m.errorRate);
    let fastest = Number.POSITIVE_INFINITY;
    for (const o of this.members) if (o.latencyMs !== null && o.latencyMs < fastest) fastest = o.latencyMs;
    // Within twice the fastest (and 50 ms) a node keeps its weight: only a clearly slower one loses calls.
    const par = 2 * fastest + 50;
    for (const o of this.members) {
      const speed = o.latencyMs === null || o.latencyMs <= par ? 1 : Math.max(MIN_SCORE, par / o.latencyMs);
      o.effectiveWeight = o.upstream.weight * speed * Math.max(MIN_SCORE, 1 - o.errorRate);
    }
  }

  /** How long a read waits before it is hedged; null: no hedge (off, or too few answers seen yet). */
  hedgeDelayMs(): number | null {
    const q = this.latency?.current() ?? null;
    return q === null || this.hedge === null ? null : Math.max(this.hedge.minDelayMs, q);
  }

  /** Counts a read for the hedge share. */
  countRead(): void {
    if (++this.reads >= 2_000) {
      this.reads /= 2;
      this.hedgesRecent /= 2;
    }
  }

  /** Takes one hedge from the budget, when the share allows it. */
  takeHedge(): boolean {
    if (this.hedge === null || this.hedgesRecent + 1 > this.hedge.maxShare * this.reads) return false;
    this.hedgesRecent++;
    return true;
  }

  /**
   * Sends `done`'s request to `m`. The attempt gets the chain's `timeoutMs`, or what is left of the
   * call's time when that is less (a retry or hedge late in the call): the caller's wait is the
   * call's, whatever the attempts (docs/decisions.md, "A caller waits at most the chain's `callTimeoutMs`").
   */
  attempt(m: Member, request: UpstreamRequest, done: PoolCall): UpstreamCall {
    const hasBody = request.body !== undefined;
    const json = request.contentType === undefined || request.contentType === 'application/json';
    const own = !hasBody ? m.headers : json ? m.jsonHeaders : { ...m.headers, 'content-type': request.contentType as string };
    const started = performance.now();
    if (done.deadline < 0) done.deadline = started + this.chain.callTimeoutMs;
    const left = done.deadline - started;
    // Within a millisecond of a node's whole time (a split eth_getLogs' first sub-calls, a moment into their parent's) it is the node's.
    const cut = left < this.chain.timeoutMs - 1;
    const call = new UpstreamCall(m, started, cut ? left : this.chain.timeoutMs, cut ? this.chain.callTimeoutMs : 0, this.maxResponseBytes, done);
    call.spared = cut && left < this.chain.timeoutMs / 2;
    if (m.budget > 0) spendBudget(m, this.now(), true);
    (cut ? this.cutShort : this.inFlight).add(call);
    try {
      m.dispatcher.dispatch(
        {
          method: request.method,
          path: request.path === '' ? m.rootPath : targetPath(m.upstream.url, request.path),
          headers: request.headers === undefined ? own : { ...own, ...request.headers },
          body: request.body,
        },
        call,
      );
    } catch (error) {
      call.onResponseError(null, error as Error);
    }
    return call;
  }

  /** The call's time ran out before an attempt could start (a split eth_getLogs' sub-call late in its parent's time). */
  outOfTime(): UpstreamFailure {
    return {
      ok: false,
      kind: 'timeout',
      message: `no upstream answered within ${this.chain.callTimeoutMs} ms, the call's time`,
      upstreamMs: null,
      upstream: null,
    };
  }

  /**
   * A head call's answer (`kind`) from node `m`: raises what is known of the node's head, and
   * gives the answer the caller gets: as it is; an `eth_blockNumber` under the best head
   * answered as that head; null for a `latest` block under the best head when `mayRetry` (the
   * call is then asked of a node at the best head, this answer kept for when none answers).
   */
  headAnswer(m: Member, kind: HeadAnswerKind, outcome: UpstreamAnswer, mayRetry: boolean): UpstreamAnswer | null {
    if (this.heads === null || outcome.status !== 200) return outcome;
    const seen = headOfAnswer(outcome.body, kind);
    if (seen === null) return outcome;
    this.sawHead(m, seen);
    const verdict = this.underHead(seen);
    if (verdict === null) return outcome;
    if (verdict === 'again') return mayRetry ? null : outcome;
    return {
      ok: true,
      status: outcome.status,
      contentType: outcome.contentType,
      body: Buffer.from(verdict.text),
      upstreamMs: outcome.upstreamMs,
      upstream: outcome.upstream,
    };
  }

  /** What a node's answer to a head call names raises what is known of the node: its head, or its finalized block. */
  private sawHead(m: Member, head: AnswerHead): void {
    const heads = this.heads;
    if (heads === null) return;
    if (head.kind === 'finalized' || head.kind === 'finalizedSlot') heads.sawFinalized(m.index, head.number, head.hash);
    else if (head.kind === 'safe') heads.sawSafe(m.index, head.number);
    else if (head.kind === 'confirmedSlot') heads.sawConfirmed(m.index, head.number);
    else heads.sawHead(m.index, head.number, head.hash);
  }

  /** The heads a node's answer to a batch names (`UpstreamRequest.headsIn`). */
  sawHeads(m: Member, seen: AnswerHead[]): void {
    for (const head of seen) this.sawHead(m, head);
  }

  /**
   * A head call's answer naming `head`, if it is under what is known: an `eth_blockNumber` under
   * the best head is given that head (the answer's new text); a `latest` block under the best
   * head, or a `finalized` block under the chain's, is asked again ('again'). null: it stands.
   */
  underHead(head: AnswerHead): { text: string } | 'again' | null {
    const heads = this.heads;
    if (heads === null) return null;
    if (head.kind === 'finalized' || head.kind === 'finalizedSlot') {
      const finalized = heads.finalized;
      if (!heads.followsFinalizedTag || finalized === null || head.number >= finalized) return null;
      return head.kind === 'finalizedSlot' ? { text: withHeadNumberText(head, finalized) } : 'again';
    }
    if (head.kind === 'safe') {
      const floor = heads.safeFloor;
      return floor === null || head.number >= floor ? null : 'again';
    }
    if (head.kind === 'confirmedSlot') {
      const confirmed = heads.confirmed;
      return confirmed === null || head.number >= confirmed ? null : { text: withHeadNumberText(head, confirmed) };
    }
    const floor = heads.headFloor;
    if (floor === null || head.number >= floor) return null;
    return head.kind === 'block' ? 'again' : { text: withHeadNumberText(head, floor) };
  }

  /** Why no upstream took `request`: none is healthy, or the one it is pinned to rests after failing. */
  unavailableFor(request: UpstreamRequest): UpstreamFailure {
    const pinned = request.pinned === undefined ? undefined : this.members[request.pinned];
    if (pinned === undefined) return noUpstream(this.chain.id);
    const message = `upstream ${pinned.upstream.label}, the node holding this filter, is resting after failures: try again shortly`;
    return { ok: false, kind: 'unavailable', message, upstreamMs: null, upstream: null };
  }

  /** A head poll to upstream `index`: its answer's bytes, or null when it failed. Not counted in the node's health. */
  private probe(index: number, body: string): Promise<Buffer | null> {
    const m = this.members[index] as Member;
    return new Promise((resolve) => {
      const call = new UpstreamCall(m, performance.now(), Math.min(this.chain.timeoutMs, 5_000), 0, 1024 * 1024, {
        settled: (outcome) => resolve(outcome.ok && outcome.status === 200 ? outcome.body : null),
      });
      this.probes.add(call);
      if (m.budget > 0) spendBudget(m, this.now(), false);
      try {
        m.dispatcher.dispatch({ method: 'POST', path: m.rootPath, headers: { ...m.jsonHeaders, [HEAD_POLL_HEADER]: '1' }, body }, call);
      } catch (error) {
        call.onResponseError(null, error as Error);
      }
    });
  }

  /** Upstream `index`'s heads pushed over its WebSocket, where it has one. */
  private followHeads(index: number, handlers: PushedHeadsHandlers): PushedHeads | null {
    const u = this.chain.upstreams[index];
    const family = this.chain.heads?.family;
    if (!u?.ws || family === undefined) return null;
    // Marked as the head polls are: the gateway's own traffic, not a caller's.
    const headers = { ...u.headers, [HEAD_POLL_HEADER]: '1' };
    return new PushedHeads(u.ws, headers, Math.min(this.chain.timeoutMs, 5_000), HEAD_PUSH_DIALECTS[family], handlers);
  }

  close(): void {
    this.heads?.stop();
  }
}

/** Marks the gateway's own head polls, so a node's logs (and the tests' fakes) can tell them from callers' calls. */
export const HEAD_POLL_HEADER = 'x-chain-gateway-head-poll';

/**
 * One call through the pool: its attempts, one after another on failure, and a hedge (a second
 * attempt while the first is still out) when the first is slow. The first good answer wins and
 * the other attempt is cancelled.
 */
class PoolCall implements Settles {
  private first: Member | null = null;
  private tried: Member[] | null = null;
  private live: UpstreamCall | null = null;
  private hedgeCall: UpstreamCall | null = null;
  private last: UpstreamFailure | null = null;
  /** The last node's refusal for want of capacity: its own answer, passed on when no node answers better. */
  private busy: UpstreamAnswer | null = null;
  /** A `latest` block under the best head: the caller's when no node at the best head answers. */
  private behind: UpstreamAnswer | null = null;
  private hedged = false;
  private finished = false;
  private timer: NodeJS.Timeout | null = null;
  /** A full node lacked the state: only archive nodes from now on. */
  archiveOnly = false;
  /** A node answered a `latest` block under the best head: only nodes at the best head from now on. */
  atBestOnly = false;
  /** A node answered a `finalized` (`safe`) block under the chain's: only nodes whose finalized (safe) block is the chain's from now on. */
  atTagOnly: 'finalized' | 'safe' | null = null;
  /** When (performance.now(), ms) the caller must have its answer: the request's, or set at the first attempt; -1 until then. */
  deadline: number;

  constructor(
    private readonly pool: UpstreamPool,
    readonly request: UpstreamRequest,
    private attemptsLeft: number,
    private readonly then: (outcome: UpstreamOutcome) => unknown,
    private readonly resolve: (value: unknown) => void,
    private readonly reject: (reason: unknown) => void,
  ) {
    this.deadline = request.deadline ?? -1;
    if (request.behind !== undefined) {
      this.behind = request.behind;
      this.askAgainOf(request.headAnswer);
    }
  }

  /** A head call answered under what is known (`kind`): only nodes at the chain's level of it from now on. */
  private askAgainOf(kind: HeadAnswerKind | undefined): void {
    if (kind === 'finalized' || kind === 'safe') this.atTagOnly = kind;
    else this.atBestOnly = true;
  }

  /** Whether `m` was asked already: by this call, or, for a call asked again, the node whose answer was behind. */
  hasTried(m: Member): boolean {
    return this.first === m || this.tried?.includes(m) === true || m.upstream.label === this.request.behind?.upstream;
  }

  start(): void {
    if (!this.launch()) return;
    if (!this.request.retriable) return;
    this.pool.countRead();
    const delay = this.attemptsLeft > 0 ? this.pool.hedgeDelayMs() : null;
    if (delay !== null) this.timer = setTimeout(hedgeDue, delay, this);
  }

  /** Sends the next attempt; false when no upstream may take it (the call is then finished, unless another attempt is out). */
  private launch(hedge = false): boolean {
    // No attempt in the call's last millisecond: it could not be answered in time.
    const inTime = this.deadline < 0 || this.deadline - performance.now() >= 1;
    const member = this.attemptsLeft > 0 && inTime ? this.pool.pick(this, hedge) : null;
    if (member === null) {
      if (this.live === null && this.hedgeCall === null)
        this.finish(this.behind ?? this.busy ?? this.last ?? (inTime ? this.pool.unavailableFor(this.request) : this.pool.outOfTime()));
      return false;
    }
    this.attemptsLeft--;
    if (this.first === null) this.first = member;
    else if (this.tried === null) this.tried = [member];
    else this.tried.push(member);
    const call = this.pool.attempt(member, this.request, this);
    // Settled at once (the dispatch threw): `settled` already ran.
    if (!call.isSettled()) {
      if (this.live === null) this.live = call;
      else this.hedgeCall = call;
    }
    return true;
  }

  /** The hedge timer fired (hedgeDue): a second attempt, when the first is still out and the budget allows. */
  onHedgeDue(): void {
    this.timer = null;
    if (this.finished || this.hedgeCall !== null || this.live === null || this.attemptsLeft <= 0) return;
    if (!this.pool.takeHedge()) return;
    if (!this.launch(true)) return;
    this.hedged = true;
  }

  settled(outcome: UpstreamOutcome, call: UpstreamCall): void {
    if (this.finished) return;
    if (this.live === call) this.live = null;
    else if (this.hedgeCall === call) this.hedgeCall = null;
    const member = call.member;
    if (!outcome.ok && outcome.tooLarge === true) {
      // Another node would send as much: the caller gets the failure now, and no node is blamed.
      this.pool.recordUnjudged(member);
      this.finish(outcome);
      return;
    }
    const failure = outcome.ok ? (isNodeFailure(outcome.status, outcome.body) ? 'status' : null) : 'failed';
    const verdict: Verdict = failure !== null ? 'bad' : this.request.judge && outcome.ok ? this.request.judge(outcome.body, this.request.answerId) : 'ok';
    if (outcome.ok && (verdict === 'ok' || (verdict === 'archive' && (this.archiveOnly || !this.pool.hasArchive)))) {
      this.pool.recordSuccess(member, outcome.upstreamMs);
      if (this.request.headsIn !== undefined) this.pool.sawHeads(member, this.request.headsIn(outcome.body));
      const kind = this.request.headAnswer;
      const answer = kind === undefined ? outcome : this.pool.headAnswer(member, kind, outcome, this.behind === null);
      if (answer !== null) {
        this.finish(answer);
        return;
      }
      // A `latest` block under the best head: asked of a node at it (within the attempts and the time left), this one the answer otherwise.
      // The same for a `finalized` block under the chain's, of a node that has it.
      this.behind = outcome;
      this.askAgainOf(kind);
      this.next();
      return;
    }
    if (outcome.ok && verdict === 'behind') {
      // The node answered (it is healthy) that it has not reached the call's slot: once, a node at the best slot is asked, this answer the caller's otherwise.
      this.pool.recordSuccess(member, outcome.upstreamMs);
      if (this.behind !== null) {
        this.finish(outcome);
        return;
      }
      this.behind = outcome;
      this.atBestOnly = true;
      this.next();
      return;
    }
    if (!outcome.ok && outcome.kind === 'timeout' && call.spared) {
      // Its time was what was left of the call's, under half the node's own: given up on, not the node's failure.
      this.pool.recordAbandoned(member, call.elapsed());
      this.last = outcome;
      this.next();
      return;
    }
    if (verdict === 'archive') {
      // The node answered: it is healthy, it just does not keep that state.
      this.archiveOnly = true;
      this.attemptsLeft = Math.max(this.attemptsLeft, 1);
    } else {
      this.pool.recordFailure(member, outcome.upstreamMs, whyFailed(outcome, verdict, failure === 'status'));
    }
    if (verdict === 'busy' && outcome.ok) {
      // A busy node's answer is its own, which clients know and back off on: the caller's if no node answers better (a write's at once).
      this.busy = outcome;
    } else {
      this.last = !outcome.ok
        ? outcome
        : {
            ok: false,
            kind: 'unavailable',
            message: `upstream ${member.upstream.label} ${failure === 'status' ? `answered HTTP ${outcome.status}` : `sent an invalid answer (HTTP ${outcome.status})`}`,
            upstreamMs: outcome.upstreamMs,
            upstream: member.upstream.label,
          };
    }
    this.next();
  }

  /** The next attempt, once none is out (or the call's end, when none may be made). */
  private next(): void {
    if (this.live !== null || this.hedgeCall !== null) return;
    // The next attempt starts outside the finished one's undici callback.
    queueMicrotask(() => {
      if (!this.finished) this.launch();
    });
  }

  private finish(outcome: UpstreamOutcome): void {
    this.finished = true;
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.live !== null) this.abandon(this.live);
    if (this.hedgeCall !== null) this.abandon(this.hedgeCall);
    this.live = null;
    this.hedgeCall = null;
    try {
      this.resolve(this.then(this.hedged ? { ...outcome, hedged: true } : outcome));
    } catch (err) {
      this.reject(err);
    }
  }

  private abandon(other: UpstreamCall): void {
    other.cancel();
    this.pool.recordAbandoned(other.member, other.elapsed());
  }
}

/** Why an attempt judged 'bad' or 'busy' failed: `failedStatus` when its status said the node failed. */
function whyFailed(outcome: UpstreamOutcome, verdict: Verdict, failedStatus: boolean): AttemptFailure {
  if (!outcome.ok) return outcome.kind === 'timeout' ? 'timeout' : 'unreachable';
  if (verdict === 'busy') return 'busy';
  return failedStatus ? 'status' : 'invalid';
}

/** setTimeout's callback for a hedge, with the call as its argument: no closure per call. */
function hedgeDue(call: PoolCall): void {
  call.onHedgeDue();
}

/** Who hears how one upstream call ended. */
interface Settles {
  settled(outcome: UpstreamOutcome, call: UpstreamCall): void;
}

/**
 * One call to one upstream, as an undici dispatch handler: the answer is gathered into one
 * Buffer without a body stream, and the deadline is kept by the pool's `InFlightCalls` (one
 * timer for all calls) instead of an AbortController and a timer per call. The deadline
 * covers everything, from waiting for a free connection to the last byte.
 */
class UpstreamCall implements Dispatcher.DispatchHandler {
  /** Links of the pool's in-flight list. */
  prev: UpstreamCall | null = null;
  next: UpstreamCall | null = null;
  readonly deadline: number;
  /**
   * Cut to under half a node's time: its timeout is the call's, not the node's failure. Given half
   * or more and still silent, the node is as slow as a timeout says (a retry after a quick failure
   * gets nearly all of it: spared, a hanging node was never blamed on retries).
   */
  spared = false;
  onSettle: ((call: UpstreamCall) => void) | null = null;
  private controller: Dispatcher.DispatchController | null = null;
  private settled = false;
  private status = 0;
  private contentType: string | undefined = undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;

  private readonly label: string;

  /** `callTimeoutMs`: the call's time, when this attempt's `timeoutMs` is what was left of it (0: the node's own timeout). */
  constructor(
    readonly member: Member,
    readonly started: number,
    private readonly timeoutMs: number,
    private readonly callTimeoutMs: number,
    private readonly maxBytes: number,
    private readonly done: Settles,
  ) {
    this.label = member.upstream.label;
    this.deadline = started + timeoutMs;
  }

  isSettled(): boolean {
    return this.settled;
  }

  /** Given up on: settles without an outcome and aborts the request (its connection is closed). */
  cancel(): void {
    if (this.settled) return;
    this.settled = true;
    this.chunks.length = 0;
    this.onSettle?.(this);
    this.controller?.abort(new UpstreamTimeout('cancelled: another upstream answered'));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    // Expired while waiting for a connection: never sent.
    if (this.settled) controller.abort(new UpstreamTimeout('deadline passed'));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.status = statusCode;
    const type = headers['content-type'];
    this.contentType = Array.isArray(type) ? type.join(', ') : type;
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return;
    this.size += chunk.length;
    if (this.size > this.maxBytes) {
      controller.abort(new ResponseTooLarge(answerTooLargeMessage(this.maxBytes)));
      return;
    }
    this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    if (this.settled) return;
    const body = this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks, this.size);
    this.settle({ ok: true, status: this.status, contentType: this.contentType, body, upstreamMs: this.elapsed(), upstream: this.label });
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, error: Error): void {
    if (this.settled) return;
    const tooLarge = error instanceof ResponseTooLarge;
    this.settle({
      ok: false,
      kind: 'unavailable',
      message: `upstream ${this.label}: ${describeError(error)}`,
      upstreamMs: this.elapsed(),
      upstream: this.label,
      ...(tooLarge ? { tooLarge } : {}),
    });
  }

  /** Called by the pool's timer once the deadline has passed. */
  expire(): void {
    if (this.settled) return;
    this.settle({
      ok: false,
      kind: 'timeout',
      // Its time was what was left of its call's: the call's time is up, not this node's.
      message:
        this.callTimeoutMs > 0
          ? `no upstream answered within ${this.callTimeoutMs} ms, the call's time (upstream ${this.label} was given the last ${Math.round(this.timeoutMs)} ms)`
          : `upstream ${this.label} did not answer within ${this.timeoutMs} ms`,
      upstreamMs: this.elapsed(),
      upstream: this.label,
    });
    this.controller?.abort(new UpstreamTimeout('deadline passed'));
  }

  private settle(outcome: UpstreamOutcome): void {
    this.settled = true;
    this.chunks.length = 0;
    this.onSettle?.(this);
    this.done.settled(outcome, this);
  }

  elapsed(): number {
    return Math.max(0, Math.round((performance.now() - this.started) * 100) / 100);
  }
}

/**
 * A pool's calls in flight, soonest deadline first, in a linked list, and one timer armed for the
 * first that serves them all. A call goes in after the last one due no later, looked for from the
 * tail: in the pool's main list every call has the chain's timeout, so that is the tail (O(1));
 * attempts given only what was left of their call's time (retries, hedges) are kept in a list of
 * their own, few and in nearly that order. A settled call leaves the list at once (O(1)); under
 * steady traffic the timer fires about once per timeout, finds nothing expired and is armed again.
 *
 * Calls are expired only after the event loop has read its sockets once more: after a stall of
 * this process (a long collection, a paused VM) timers run before the I/O that waited, and a
 * call whose answer arrived in time would otherwise be called a timeout, and its upstream
 * blamed and ejected, for this process's pause.
 */
class InFlightCalls {
  private head: UpstreamCall | null = null;
  private tail: UpstreamCall | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** The deadline the timer is armed for (Infinity: none), and whether it fired and the expiry waits for the poll phase. */
  private armedFor = Number.POSITIVE_INFINITY;
  private expiring = false;
  private readonly remove = (call: UpstreamCall): void => {
    if (call.prev) call.prev.next = call.next;
    else this.head = call.next;
    if (call.next) call.next.prev = call.prev;
    else this.tail = call.prev;
    call.prev = null;
    call.next = null;
  };

  add(call: UpstreamCall): void {
    call.onSettle = this.remove;
    let after = this.tail;
    while (after !== null && after.deadline > call.deadline) after = after.prev;
    call.prev = after;
    call.next = after === null ? this.head : after.next;
    if (call.next) call.next.prev = call;
    else this.tail = call;
    if (after) after.next = call;
    else this.head = call;
    // Due before what the timer waits for: armed again (not while an expiry is under way: it arms the timer when done).
    if (!this.expiring && call.deadline < this.armedFor) this.arm();
  }

  private arm(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.armedFor = Number.POSITIVE_INFINITY;
    if (this.head === null) return;
    this.armedFor = this.head.deadline;
    const wait = Math.max(1, Math.ceil(this.head.deadline - performance.now()));
    this.timer = setTimeout(this.afterPoll, wait);
    // A call in flight keeps the process alive through its socket, not through this timer.
    this.timer.unref();
  }

  /**
   * setImmediate runs after the event loop's poll phase: answers already received settle first.
   * It stays ref'd: the loop waits in its poll phase for an unref'd immediate as if it were not
   * there, so the calls due would expire only at the next socket event or timer (seconds later
   * on a quiet gateway).
   */
  private readonly afterPoll = (): void => {
    this.timer = null;
    this.armedFor = Number.POSITIVE_INFINITY;
    this.expiring = true;
    setImmediate(this.expireDue);
  };

  private readonly expireDue = (): void => {
    this.expiring = false;
    const now = performance.now();
    while (this.head !== null && this.head.deadline <= now) {
      const call = this.head;
      call.expire();
      if (this.head === call) this.remove(call); // settled already: it should have left; never spin
    }
    this.arm();
  };
}

/** One pool per chain over shared keep-alive connections, one undici `Pool` per upstream origin. */
export class UpstreamPools {
  private readonly dispatchers = new Map<string, Pool>();
  private readonly pools = new Map<string, UpstreamPool>();
  readonly cache: ResponseCache | null;

  constructor(registry: ChainRegistry, options: UpstreamPoolOptions = {}) {
    const dispatcherFor = (origin: string): Dispatcher => {
      let pool = this.dispatchers.get(origin);
      if (!pool) {
        // pipelining: 1 keeps connections alive but never pipelines: a slow call must not hold
        // up the calls queued behind it on the same socket. No headers or body timeout of
        // undici's own: each call's deadline (InFlightCalls) aborts it, and undici's timers,
        // one per call, stayed in its timer list after the call ended and were promoted.
        pool = new Pool(origin, { connections: options.connections ?? 64, pipelining: 1, keepAliveTimeout: 10_000, headersTimeout: 0, bodyTimeout: 0 });
        this.dispatchers.set(origin, pool);
      }
      return pool;
    };
    const bytes = options.cacheBytes ?? DEFAULT_CACHE_BYTES;
    this.cache = bytes > 0 ? new ResponseCache(bytes) : null;
    for (const chain of registry.list()) {
      const pool = new UpstreamPool(chain, dispatcherFor, options, this.cache);
      this.pools.set(chain.id, pool);
    }
  }

  get(chainId: string): UpstreamPool | undefined {
    return this.pools.get(chainId);
  }

  health(): Record<string, UpstreamHealth[]> {
    return Object.fromEntries([...this.pools].map(([id, pool]) => [id, pool.health()]));
  }

  /** Each node's `maxRps` shared among `instances` live gateways (UpstreamPool.shareBudgets). */
  shareBudgets(instances: number): void {
    for (const pool of this.pools.values()) pool.shareBudgets(instances);
  }

  async close(): Promise<void> {
    for (const pool of this.pools.values()) pool.close();
    await Promise.all([...this.dispatchers.values()].map((d) => d.destroy()));
    this.dispatchers.clear();
  }
}
