import type { IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import { type Dispatcher, Pool } from 'undici';
import type { Chain, ChainRegistry, Upstream } from './chains.js';
import { startsLikeJson } from './jsonScan.js';

/**
 * Upstream pools: per chain, a weighted choice among healthy nodes, a per-chain timeout, a retry
 * on another node for reads, and passive health tracking (K consecutive failures eject a node;
 * after a cool-down one trial call may go to it, and a success brings it back).
 */

export interface UpstreamRequest {
  method: 'GET' | 'POST';
  /** Path (and query) relative to the upstream URL; '' for the URL itself. */
  path: string;
  body?: string | Buffer;
  contentType?: string;
  /** Reads may be retried on another upstream; submissions never are (they could land twice). */
  retriable: boolean;
}

export interface UpstreamAnswer {
  ok: true;
  status: number;
  /** The answer's Content-Type (REST passes it on); its other headers are not kept. */
  contentType: string | undefined;
  body: Buffer;
  upstreamMs: number;
  upstream: string;
}

export interface UpstreamFailure {
  ok: false;
  kind: 'unavailable' | 'timeout';
  message: string;
  upstreamMs: number | null;
  upstream: string | null;
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
  random?: () => number;
  now?: () => number;
}

export interface UpstreamHealth {
  label: string;
  healthy: boolean;
  consecutiveFailures: number;
  ejectedUntil: number | null;
}

interface Member {
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

/** Not tried yet for this call, and healthy or due for a trial call. */
const isEligible = (m: Member, tried: Member[] | null, now: number): boolean =>
  !tried?.includes(m) && (m.ejectedUntil === null || (now >= m.ejectedUntil && !m.probing));

export class UpstreamPool {
  private readonly members: Member[];
  private readonly ejectAfter: number;
  private readonly coolDownMs: number;
  private readonly maxAttempts: number;
  private readonly maxResponseBytes: number;
  private readonly random: () => number;
  private readonly now: () => number;
  private readonly inFlight = new InFlightCalls();

  constructor(
    readonly chain: Chain,
    dispatcherFor: (origin: string) => Dispatcher,
    options: UpstreamPoolOptions = {},
  ) {
    this.members = chain.upstreams.map((upstream) => {
      const headers = { accept: 'application/json', 'user-agent': 'chain-gateway', ...upstream.headers };
      return {
        upstream,
        dispatcher: dispatcherFor(upstream.url.origin),
        rootPath: targetPath(upstream.url, ''),
        headers,
        jsonHeaders: { ...headers, 'content-type': 'application/json' },
        consecutiveFailures: 0,
        ejectedUntil: null,
        probing: false,
      };
    });
    this.ejectAfter = options.ejectAfterFailures ?? 3;
    this.coolDownMs = options.coolDownMs ?? 5_000;
    this.maxAttempts = options.maxAttempts ?? 3;
    this.maxResponseBytes = options.maxResponseBytes ?? 64 * 1024 * 1024;
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
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
    return new Promise((resolve, reject) =>
      this.tryNext(request, attempts, null, null, (outcome) => {
        try {
          resolve(then(outcome));
        } catch (err) {
          reject(err);
        }
      }),
    );
  }

  private tryNext(
    request: UpstreamRequest,
    attemptsLeft: number,
    tried: Member[] | null,
    last: UpstreamFailure | null,
    resolve: (outcome: UpstreamOutcome) => void,
  ): void {
    const member = attemptsLeft > 0 ? this.pick(tried) : null;
    if (member === null) {
      resolve(last ?? { ok: false, kind: 'unavailable', message: `no healthy upstream for ${this.chain.id}`, upstreamMs: null, upstream: null });
      return;
    }
    this.attempt(member, request, (outcome) => {
      if (outcome.ok && !isNodeFailure(outcome.status, outcome.body)) {
        this.recordSuccess(member);
        resolve(outcome);
        return;
      }
      this.recordFailure(member);
      // Only a retry needs to know who was tried: the common call allocates no list.
      const triedNow = tried ?? [];
      triedNow.push(member);
      const failure: UpstreamFailure = outcome.ok
        ? { ok: false, kind: 'unavailable', message: `upstream ${member.upstream.label} answered HTTP ${outcome.status}`, upstreamMs: outcome.upstreamMs, upstream: member.upstream.label }
        : outcome;
      // The next attempt starts outside the finished one's undici callback.
      queueMicrotask(() => this.tryNext(request, attemptsLeft - 1, triedNow, failure, resolve));
    });
  }

  health(): UpstreamHealth[] {
    return this.members.map((m) => ({
      label: m.upstream.label,
      healthy: m.ejectedUntil === null,
      consecutiveFailures: m.consecutiveFailures,
      ejectedUntil: m.ejectedUntil,
    }));
  }

  /** Weighted choice among untried upstreams that are healthy or due for a trial call (no allocation: it runs per call). */
  private pick(tried: Member[] | null): Member | null {
    const now = this.now();
    let total = 0;
    let count = 0;
    let only: Member | null = null;
    for (const m of this.members) {
      if (!isEligible(m, tried, now)) continue;
      total += m.upstream.weight;
      count++;
      only = m;
    }
    if (count === 0) return null;
    let chosen = only as Member;
    if (count > 1) {
      let r = this.random() * total;
      for (const m of this.members) {
        if (!isEligible(m, tried, now)) continue;
        r -= m.upstream.weight;
        if (r < 0) {
          chosen = m;
          break;
        }
      }
    }
    if (chosen.ejectedUntil !== null) chosen.probing = true;
    return chosen;
  }

  private recordSuccess(m: Member): void {
    m.consecutiveFailures = 0;
    m.ejectedUntil = null;
    m.probing = false;
  }

  private recordFailure(m: Member): void {
    m.consecutiveFailures++;
    if (m.probing || m.consecutiveFailures >= this.ejectAfter) m.ejectedUntil = this.now() + this.coolDownMs;
    m.probing = false;
  }

  private attempt(m: Member, request: UpstreamRequest, done: (outcome: UpstreamOutcome) => void): void {
    const hasBody = request.body !== undefined;
    const json = request.contentType === undefined || request.contentType === 'application/json';
    const call = new UpstreamCall(m.upstream.label, this.chain.timeoutMs, this.maxResponseBytes, done);
    this.inFlight.add(call);
    try {
      m.dispatcher.dispatch(
        {
          method: request.method,
          path: request.path === '' ? m.rootPath : targetPath(m.upstream.url, request.path),
          headers: !hasBody ? m.headers : json ? m.jsonHeaders : { ...m.headers, 'content-type': request.contentType as string },
          body: request.body,
        },
        call,
      );
    } catch (error) {
      call.onResponseError(null, error as Error);
    }
  }
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
  readonly started = performance.now();
  readonly deadline: number;
  onSettle: ((call: UpstreamCall) => void) | null = null;
  private controller: Dispatcher.DispatchController | null = null;
  private settled = false;
  private status = 0;
  private contentType: string | undefined = undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;

  constructor(
    private readonly label: string,
    private readonly timeoutMs: number,
    private readonly maxBytes: number,
    private readonly done: (outcome: UpstreamOutcome) => void,
  ) {
    this.deadline = this.started + timeoutMs;
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
      controller.abort(new ResponseTooLarge(`answer larger than ${this.maxBytes} bytes`));
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
    this.settle({ ok: false, kind: 'unavailable', message: `upstream ${this.label}: ${describeError(error)}`, upstreamMs: this.elapsed(), upstream: this.label });
  }

  /** Called by the pool's timer once the deadline has passed. */
  expire(): void {
    if (this.settled) return;
    this.settle({
      ok: false,
      kind: 'timeout',
      message: `upstream ${this.label} did not answer within ${this.timeoutMs} ms`,
      upstreamMs: this.elapsed(),
      upstream: this.label,
    });
    this.controller?.abort(new UpstreamTimeout('deadline passed'));
  }

  private settle(outcome: UpstreamOutcome): void {
    this.settled = true;
    this.chunks.length = 0;
    this.onSettle?.(this);
    this.done(outcome);
  }

  private elapsed(): number {
    return Math.max(0, Math.round((performance.now() - this.started) * 100) / 100);
  }
}

/**
 * A pool's calls in flight, oldest first, in a linked list: every call of a pool has the same
 * timeout, so the oldest is always the next to expire, and one timer armed for it serves them
 * all. A settled call leaves the list at once (O(1)); under steady traffic the timer fires about
 * once per timeout, finds nothing expired and is armed again.
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
    call.prev = this.tail;
    if (this.tail) this.tail.next = call;
    else this.head = call;
    this.tail = call;
    if (this.timer === null) this.arm();
  }

  private arm(): void {
    if (this.head === null) return;
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
    setImmediate(this.expireDue);
  };

  private readonly expireDue = (): void => {
    this.timer = null;
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
    for (const chain of registry.list()) this.pools.set(chain.id, new UpstreamPool(chain, dispatcherFor, options));
  }

  get(chainId: string): UpstreamPool | undefined {
    return this.pools.get(chainId);
  }

  health(): Record<string, UpstreamHealth[]> {
    return Object.fromEntries([...this.pools].map(([id, pool]) => [id, pool.health()]));
  }

  async close(): Promise<void> {
    await Promise.all([...this.dispatchers.values()].map((d) => d.destroy()));
    this.dispatchers.clear();
  }
}
