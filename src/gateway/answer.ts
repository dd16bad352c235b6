import type { MaybePromise } from '../domain/maybePromise.js';
import type { Admission } from './admission.js';
import type { Chain } from './chains.js';
import { admissionRpcCode, JSON_CONTENT_TYPE, type RequestIds, restError, rpcErrorFor } from './errors.js';
import type { UpstreamFailure, UpstreamPool } from './upstream.js';

/**
 * What a protocol handler hands back to the routes: the HTTP answer, the admission it got (for
 * the limit headers and the caller) and one usage draft per call. The routes add what only they
 * know (request id, time, client IP, caller) and send.
 */

export interface UsageDraft {
  /** Position in a batch; null for a single call or a REST call. */
  memberIndex: number | null;
  method: string;
  rpcErrorCode: number | null;
  errorMessage: string | null;
  upstreamMs: number | null;
  upstream: string | null;
  /**
   * The limiter granted this call and it used quota (set where a granted call is answered). A
   * granted call left uncharged (the gateway failed to serve it: `chargedFailure`) gets its unit
   * back (ChainCalls), so the limiter's month counts exactly the records that say charged.
   */
  charged: boolean;
  /** How a read was served: from the cache, sharing another caller's call, hedged, or its own call (miss); null: not a served read. */
  cache: CacheUse | null;
}

export type CacheUse = 'hit' | 'miss' | 'coalesced' | 'hedged';

export interface Answer {
  status: number;
  /** null: no body (204). */
  body: string | Buffer | null;
  contentType: string;
  headers?: Record<string, string>;
  /** null when no admission was asked (unknown chain). */
  admission: Admission | null;
  usage: UsageDraft[];
}

/**
 * Everything a handler may use for one request; `admit` is asked at most once. It answers at
 * once when the gatekeeper needs no I/O, so the common call reaches its upstream without a
 * promise of ours on the way; a failing gatekeeper throws (or rejects) GatekeeperUnavailable.
 */
export interface CallScope {
  chain: Chain;
  pool: UpstreamPool;
  admit(cost: number): MaybePromise<Admission>;
  /** Where JSON-RPC goes on the node, relative to its URL (a passthrough chain's `jsonRpcPath`); absent: the URL itself. */
  rpcPath?: string;
}

export type Refusal = Extract<Admission, { ok: false }>;

/** Stands for the method of a call too malformed to have one. */
export const INVALID_METHOD = '(invalid)';

export const draft = (method: string, rpcErrorCode: number | null, errorMessage: string | null, memberIndex: number | null = null): UsageDraft => ({
  memberIndex,
  method,
  rpcErrorCode,
  errorMessage,
  upstreamMs: null,
  upstream: null,
  charged: false,
  cache: null,
});

/** A granted call served from the cache: charged, no node asked. */
export const cacheHitDraft = (method: string): UsageDraft => ({ ...draft(method, null, null), charged: true, cache: 'hit' });

/**
 * Whether a granted call the nodes failed is charged (docs/decisions.md, "A call the gateway
 * failed to serve is not charged"): a 504 is (a node worked on it until the deadline, and a caller
 * could make heavy calls time out on purpose), and so is an answer over the size cap (the call's
 * doing: every node would send as much); a 502 the nodes failed, refused, hung up on or answered
 * with garbage, or "no healthy upstream", is not.
 */
export const chargedFailure = (failure: Pick<UpstreamFailure, 'kind' | 'tooLarge'>): boolean => failure.kind === 'timeout' || failure.tooLarge === true;

export const retryData = (a: Admission): { retryAfter: number } | undefined => (a.retryAfterSeconds === null ? undefined : { retryAfter: a.retryAfterSeconds });

export function refusedRest(refusal: Refusal, method: string): Answer {
  const extra = retryData(refusal);
  return {
    status: refusal.status,
    body: restError(refusal.code, refusal.message, extra),
    contentType: JSON_CONTENT_TYPE,
    admission: refusal,
    usage: [draft(method, null, refusal.message)],
  };
}

/** A JSON-RPC request refused by its admission, as one usage draft: the error goes to each caller's id. */
export function refusedRpc(refusal: Refusal, ids: RequestIds, method: string): Answer {
  const code = admissionRpcCode(refusal.status);
  return {
    status: refusal.status,
    body: rpcErrorFor(ids, code, refusal.message, retryData(refusal)),
    contentType: JSON_CONTENT_TYPE,
    admission: refusal,
    usage: [draft(method, code, refusal.message)],
  };
}

export type Shape = 'rpc' | 'rest';

export interface LocalError {
  shape: Shape;
  status: number;
  rpcCode: number;
  restCode: string;
  message: string;
  method: string;
  headers?: Record<string, string>;
  /** Whom a JSON-RPC error answers (the request's ids, when its body could be read); null otherwise. */
  ids?: RequestIds;
}

/**
 * An answer the gateway gives itself (bad input, wrong protocol). The admission is still asked,
 * at cost 0, so an unknown token gets its 401 first and a known caller's mistake is metered.
 */
export async function localError(scope: CallScope, e: LocalError): Promise<Answer> {
  const admission = await scope.admit(0);
  const ids = e.ids ?? null;
  if (!admission.ok) return e.shape === 'rpc' ? refusedRpc(admission, ids, e.method) : refusedRest(admission, e.method);
  return {
    status: e.status,
    body: e.shape === 'rpc' ? rpcErrorFor(ids, e.rpcCode, e.message) : restError(e.restCode, e.message),
    contentType: JSON_CONTENT_TYPE,
    headers: e.headers,
    admission,
    usage: [draft(e.method, e.shape === 'rpc' ? e.rpcCode : null, e.message)],
  };
}
