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
  headers: Record<string, string>;
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

async function readBody(body: Dispatcher.ResponseData['body'], maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > maxBytes) {
      body.destroy();
      throw new ResponseTooLarge(`answer larger than ${maxBytes} bytes`);
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks, size);
}

function flattenHeaders(headers: Dispatcher.ResponseData['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

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

export class UpstreamPool {
  private readonly members: Member[];
  private readonly ejectAfter: number;
  private readonly coolDownMs: number;
  private readonly maxAttempts: number;
  private readonly maxResponseBytes: number;
  private readonly random: () => number;
  private readonly now: () => number;

  constructor(
    readonly chain: Chain,
    dispatcherFor: (origin: string) => Dispatcher,
    options: UpstreamPoolOptions = {},
  ) {
    this.members = chain.upstreams.map((upstream) => ({
      upstream,
      dispatcher: dispatcherFor(upstream.url.origin),
      consecutiveFailures: 0,
      ejectedUntil: null,
      probing: false,
    }));
    this.ejectAfter = options.ejectAfterFailures ?? 3;
    this.coolDownMs = options.coolDownMs ?? 5_000;
    this.maxAttempts = options.maxAttempts ?? 3;
    this.maxResponseBytes = options.maxResponseBytes ?? 64 * 1024 * 1024;
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
  }

  async send(request: UpstreamRequest): Promise<UpstreamOutcome> {
    const tried = new Set<Member>();
    const attempts = request.retriable ? Math.min(this.maxAttempts, this.members.length) : 1;
    let last: UpstreamFailure | null = null;
    for (let attempt = 0; attempt < attempts; attempt++) {
      const member = this.pick(tried);
      if (member === null) break;
      tried.add(member);
      const outcome = await this.attempt(member, request);
      if (outcome.ok && !isNodeFailure(outcome.status, outcome.body)) {
        this.recordSuccess(member);
        return outcome;
      }
      this.recordFailure(member);
      last = outcome.ok
        ? { ok: false, kind: 'unavailable', message: `upstream ${member.upstream.label} answered HTTP ${outcome.status}`, upstreamMs: outcome.upstreamMs, upstream: member.upstream.label }
        : outcome;
    }
    return last ?? { ok: false, kind: 'unavailable', message: `no healthy upstream for ${this.chain.id}`, upstreamMs: null, upstream: null };
  }

  health(): UpstreamHealth[] {
    return this.members.map((m) => ({
      label: m.upstream.label,
      healthy: m.ejectedUntil === null,
      consecutiveFailures: m.consecutiveFailures,
      ejectedUntil: m.ejectedUntil,
    }));
  }

  /** Weighted choice among untried upstreams that are healthy or due for a trial call. */
  private pick(tried: Set<Member>): Member | null {
    const now = this.now();
    const eligible = this.members.filter(
      (m) => !tried.has(m) && (m.ejectedUntil === null || (now >= m.ejectedUntil && !m.probing)),
    );
    if (eligible.length === 0) return null;
    const total = eligible.reduce((sum, m) => sum + m.upstream.weight, 0);
    let r = this.random() * total;
    let chosen = eligible[eligible.length - 1] as Member;
    for (const m of eligible) {
      r -= m.upstream.weight;
      if (r < 0) {
        chosen = m;
        break;
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

  private async attempt(m: Member, request: UpstreamRequest): Promise<UpstreamOutcome> {
    const { upstream } = m;
    const started = performance.now();
    const elapsed = (): number => Math.max(0, Math.round((performance.now() - started) * 100) / 100);
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.chain.timeoutMs);
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': 'chain-gateway', ...upstream.headers };
    if (request.body !== undefined) headers['content-type'] = request.contentType ?? 'application/json';
    try {
      const res = await m.dispatcher.request({
        method: request.method,
        path: targetPath(upstream.url, request.path),
        headers,
        body: request.body,
        signal: controller.signal,
      });
      const body = await readBody(res.body, this.maxResponseBytes);
      return { ok: true, status: res.statusCode, headers: flattenHeaders(res.headers), body, upstreamMs: elapsed(), upstream: upstream.label };
    } catch (err) {
      if (timedOut) {
        return {
          ok: false,
          kind: 'timeout',
          message: `upstream ${upstream.label} did not answer within ${this.chain.timeoutMs} ms`,
          upstreamMs: elapsed(),
          upstream: upstream.label,
        };
      }
      return { ok: false, kind: 'unavailable', message: `upstream ${upstream.label}: ${describeError(err)}`, upstreamMs: elapsed(), upstream: upstream.label };
    } finally {
      clearTimeout(timer);
    }
  }
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
        // up the calls queued behind it on the same socket.
        pool = new Pool(origin, { connections: options.connections ?? 64, pipelining: 1, keepAliveTimeout: 10_000 });
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
