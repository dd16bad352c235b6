import type { Admission } from './admission.js';
import {
  type Answer,
  type CacheUse,
  type CallScope,
  draft,
  INVALID_METHOD,
  localError,
  type Refusal,
  refusedRpc,
  retryData,
  type UsageDraft,
} from './answer.js';
import { admissionRpcCode, JSON_CONTENT_TYPE, RpcCode, rpcError, rpcErrorFor, upstreamFailureCodes } from './errors.js';
import {
  batchUpstreamBody,
  type MemberAnswer,
  parseJsonRpc,
  type RpcCall,
  idTextsOf,
  type RpcErrorInfo,
  type RpcMember,
  restoreId,
  rpcErrorOf,
  singleUpstreamBody,
  STAND_IN_ID,
  splitBatchAnswer,
} from './jsonrpc.js';
import { answerWithResult, judgeSingle, keepableResult, readKey } from './cache/rpcReads.js';
import { type CallShape, isShareable, shapeOf } from './upstreams/evmCalls.js';
import type { ChainHeads } from './upstreams/heads.js';
import { startsLikeJson } from './jsonScan.js';
import type { UpstreamFailure, UpstreamOutcome } from './upstream.js';
import type { MaybePromise } from '../domain/maybePromise.js';

/**
 * A JSON-RPC request end to end: validate, ask the gatekeeper for the calls that would reach the
 * node, forward the granted ones (a batch as one upstream batch), and answer every member in
 * the caller's order. A single answer from the node is passed on byte for byte.
 */

const deniedMessage = (method: string, chainId: string): string => `Method not found: ${method} is not available on ${chainId}`;
const limitMessage = (a: Admission): string => (a.ok ? 'Limit exceeded: this call was refused by the rate or monthly limit' : a.message);
/** What a call on a chain without head tracking depends on, as far as the gateway reads it: nothing it knows. */
const OTHER_CALL: CallShape = { kind: 'other', low: -1, high: -1, cacheable: false };
const methodOf = (m: RpcMember): string => (m.kind === 'call' ? m.method : (m.method ?? INVALID_METHOD));

export function handleJsonRpc(scope: CallScope, body: Buffer, maxBatch: number): MaybePromise<Answer> {
  const parsed = parseJsonRpc(body, maxBatch);
  if (parsed.kind === 'error') {
    return localError(scope, {
      shape: 'rpc',
      status: parsed.status,
      rpcCode: parsed.code,
      restCode: 'invalid_request',
      message: parsed.message,
      method: INVALID_METHOD,
    });
  }
  if (parsed.kind === 'single') return single(scope, parsed.member);
  return batchCall(scope, parsed.members);
}

/** A batch: admitted as a whole (one cost per forwardable member), forwarded as one upstream batch. */
async function batchCall(scope: CallScope, members: RpcMember[]): Promise<Answer> {
  const { chain } = scope;
  const forwardable = members.filter((m): m is RpcCall => m.kind === 'call' && chain.isMethodAllowed(m.method));
  const admission = await scope.admit(forwardable.length);
  if (!admission.ok) return refuseBatch(admission, members);
  const granted = new Set(forwardable.slice(0, admission.granted).map((c) => c.index));
  return batch(scope, members, granted, admission);
}

/** A batch refused as a whole (unknown token, limits exhausted...): one error per member with an id. */
function refuseBatch(refusal: Refusal, members: RpcMember[]): Answer {
  const code = admissionRpcCode(refusal.status);
  return {
    status: refusal.status,
    body: rpcErrorFor({ kind: 'batch', idTexts: idTextsOf(members) }, code, refusal.message, retryData(refusal)),
    contentType: JSON_CONTENT_TYPE,
    admission: refusal,
    usage: members.map((m) => draft(methodOf(m), code, refusal.message, m.index)),
  };
}

/** A single call the gateway answers with an error of its own (one usage draft). */
function singleError(admission: Admission, m: RpcMember, status: number, idText: string, code: number, message: string, data?: unknown): Answer {
  return {
    status,
    body: rpcError(idText, code, message, data),
    contentType: JSON_CONTENT_TYPE,
    admission,
    usage: [draft(methodOf(m), code, message)],
  };
}

/**
 * A single call: the common case, so it skips the batch's bookkeeping, and goes on at once
 * when the admission needs no I/O (the upstream's answer is then its only wait).
 */
function single(scope: CallScope, m: RpcMember): MaybePromise<Answer> {
  const allowed = m.kind === 'call' && scope.chain.isMethodAllowed(m.method);
  const admission = scope.admit(allowed ? 1 : 0);
  return admission instanceof Promise ? admission.then((a) => admittedSingle(scope, m, allowed, a)) : admittedSingle(scope, m, allowed, admission);
}

function admittedSingle(scope: CallScope, m: RpcMember, allowed: boolean, admission: Admission): MaybePromise<Answer> {
  const { chain, pool } = scope;
  if (!admission.ok) return refusedRpc(admission, { kind: 'single', idText: m.idText ?? 'null' }, methodOf(m));
  if (m.kind === 'invalid') return singleError(admission, m, 400, m.idText, m.code, m.message);
  const idText = m.idText ?? 'null';
  if (!allowed) return singleError(admission, m, 403, idText, RpcCode.methodNotFound, deniedMessage(m.method, chain.id));
  if (admission.granted < 1) return singleError(admission, m, 429, idText, RpcCode.limitExceeded, limitMessage(admission), retryData(admission));
  if (chain.isWriteMethod(m.method)) {
    return pool.sendThen(
      { method: 'POST', path: '', body: singleUpstreamBody(m), retriable: false, judge: judgeSingle, answerId: answerIdOf(m) },
      (outcome) => {
        pool.heads?.invalidate();
        return forwardedSingle(m, admission, outcome, 'miss');
      },
    );
  }
  return read(scope, m, admission);
}

/** The id the node's answer carries: the one sent upstream. */
const answerIdOf = (m: RpcCall): string | undefined => (m.idIsFragile ? STAND_IN_ID : m.idText);

/**
 * A read: from the cache when its answer was kept, else sharing the call of an identical read in
 * flight (coalescing), else its own call, whose answer the waiting callers share and the cache
 * may keep. Stateful calls (filters, subscriptions) and notifications go alone.
 */
function read(scope: CallScope, m: RpcCall, admission: Admission): MaybePromise<Answer> {
  const { chain, pool } = scope;
  const heads = pool.heads;
  const shape = heads === null ? OTHER_CALL : shapeOf(m.method, m.paramsText);
  const epoch = heads?.epoch ?? 0;
  const cache = heads !== null && mayKeep(shape, heads) ? pool.cache : null;
  const shared = m.idText !== undefined && (cache !== null || pool.coalesces) && isShareable(m.method);
  const key = shared ? readKey(chain.id, m.method, m.paramsText, shape, epoch) : null;
  if (key !== null && cache !== null) {
    const kept = cache.get(key);
    if (kept !== undefined) return cachedAnswer(m, admission, kept);
  }
  if (key !== null && pool.coalesces) {
    const waiting = pool.waiting.get(key);
    if (waiting !== undefined) return new Promise((resolve) => waiting.push((outcome) => resolve(forwardedSingle(m, admission, outcome, 'coalesced'))));
    pool.waiting.set(key, []);
  }
  const request = { method: 'POST' as const, path: '', body: singleUpstreamBody(m), retriable: true, shape, judge: judgeSingle, answerId: answerIdOf(m) };
  return pool.sendThen(request, (outcome) => {
    if (key !== null) {
      const waiting = pool.coalesces ? pool.waiting.get(key) : undefined;
      if (waiting !== undefined) pool.waiting.delete(key);
      // After the caller whose call it is: its answer goes out first (pipelined calls on one connection are answered in order).
      if (waiting !== undefined && waiting.length > 0)
        setImmediate(() => {
          for (const w of waiting) w(outcome);
        });
      if (cache !== null && heads !== null && outcome.ok && outcome.status === 200) {
        const result = keepableResult(outcome.body, m.method, shape, heads, epoch);
        if (result !== null) cache.set(key, result, shape.kind === 'head' ? heads.tracking.pollMs * 2 : undefined);
      }
    }
    return forwardedSingle(m, admission, outcome, outcome.hedged ? 'hedged' : 'miss');
  });
}

/** Whether an answer to a call of this shape could be kept now: no key is built, and no lookup made, for one that could not. */
function mayKeep(shape: CallShape, heads: ChainHeads): boolean {
  if (!shape.cacheable) return false;
  if (shape.kind === 'head') return heads.best !== null;
  if (shape.kind === 'number') return heads.finalized !== null && shape.high <= heads.finalized;
  return shape.kind === 'static' || heads.finalized !== null;
}

/** A read answered from the cache: a granted call (quota, limits, metering) with the caller's id and no upstream. */
function cachedAnswer(m: RpcCall, admission: Admission, resultText: string): Answer {
  const d = draft(m.method, null, null);
  d.charged = true;
  d.cache = 'hit';
  return { status: 200, body: answerWithResult(m.idText ?? 'null', resultText), contentType: JSON_CONTENT_TYPE, admission, usage: [d] };
}

/** A single call's answer from what its upstream did; `use` says how it was served. */
function forwardedSingle(m: RpcCall, admission: Admission, outcome: UpstreamOutcome, use: CacheUse): Answer {
  const idText = m.idText ?? 'null';
  if (!outcome.ok) {
    const f = upstreamFailureCodes(outcome.kind);
    return withUpstream(singleError(admission, m, f.status, idText, f.rpc, outcome.message), outcome, use);
  }
  const isSuccess = outcome.status >= 200 && outcome.status < 300;
  if (m.idText === undefined && isSuccess) {
    return withUpstream({ status: 204, body: null, contentType: JSON_CONTENT_TYPE, admission, usage: [draft(m.method, null, null)] }, outcome, use);
  }
  const isJson = startsLikeJson(outcome.body);
  const error = isJson ? rpcErrorOf(outcome.body) : null;
  if (!isJson || (!isSuccess && error === null)) {
    const message = `upstream ${outcome.upstream} sent an invalid answer (HTTP ${outcome.status})`;
    return withUpstream(singleError(admission, m, 502, idText, RpcCode.upstreamUnavailable, message), outcome, use);
  }
  // A caller sharing another's call gets the answer with its own id.
  const ownId = use === 'coalesced' || (m.idIsFragile && m.idText !== undefined);
  return withUpstream(
    {
      status: outcome.status,
      body: ownId ? restoreId(outcome.body, idText) : outcome.body,
      contentType: JSON_CONTENT_TYPE,
      admission,
      usage: [draft(m.method, error?.code ?? null, error?.message ?? null)],
    },
    outcome,
    use,
  );
}

/** A granted call's answer: it used quota, whatever its upstream did. */
function withUpstream(answer: Answer, u: { upstreamMs: number | null; upstream: string | null }, use: CacheUse): Answer {
  for (const d of answer.usage) {
    d.upstreamMs = u.upstreamMs;
    d.upstream = u.upstream;
    d.charged = true;
    d.cache = use;
  }
  return answer;
}

interface ForwardResult {
  answers: Map<number, MemberAnswer> | null;
  failure: UpstreamFailure | null;
  upstreamMs: number | null;
  upstream: string | null;
}

async function forwardBatch(scope: CallScope, calls: RpcCall[]): Promise<ForwardResult> {
  const outcome = await scope.pool.send({
    method: 'POST',
    path: '',
    body: batchUpstreamBody(calls),
    retriable: calls.every((c) => !scope.chain.isWriteMethod(c.method)),
  });
  if (!outcome.ok) return { answers: null, failure: outcome, upstreamMs: outcome.upstreamMs, upstream: outcome.upstream };
  const answers = splitBatchAnswer(outcome.body, calls);
  const failure: UpstreamFailure | null =
    answers === null
      ? {
          ok: false,
          kind: 'unavailable',
          message: `upstream ${outcome.upstream} sent an invalid answer (HTTP ${outcome.status})`,
          upstreamMs: outcome.upstreamMs,
          upstream: outcome.upstream,
        }
      : null;
  return { answers, failure, upstreamMs: outcome.upstreamMs, upstream: outcome.upstream };
}

async function batch(scope: CallScope, members: RpcMember[], granted: Set<number>, admission: Admission): Promise<Answer> {
  const { chain } = scope;
  const forwarded = members.filter((m): m is RpcCall => m.kind === 'call' && granted.has(m.index));
  const result: ForwardResult =
    forwarded.length > 0 ? await forwardBatch(scope, forwarded) : { answers: null, failure: null, upstreamMs: null, upstream: null };
  const failure = result.failure ? upstreamFailureCodes(result.failure.kind) : null;

  const elements: string[] = [];
  const usage: UsageDraft[] = [];
  const local = (m: RpcMember, code: number, message: string, data?: unknown): void => {
    if (m.idText !== undefined) elements.push(rpcError(m.idText, code, message, data));
    usage.push(draft(methodOf(m), code, message, m.index));
  };
  for (const m of members) {
    if (m.kind === 'invalid') local(m, m.code, m.message);
    else if (!chain.isMethodAllowed(m.method)) local(m, RpcCode.methodNotFound, deniedMessage(m.method, chain.id));
    else if (!granted.has(m.index)) local(m, RpcCode.limitExceeded, limitMessage(admission), retryData(admission));
    else {
      const before = usage.length;
      if (failure && result.failure) local(m, failure.rpc, result.failure.message);
      else if (m.idText === undefined) usage.push(draft(m.method, null, null, m.index));
      else {
        const answer = result.answers?.get(m.index);
        if (answer) {
          elements.push(answer.text);
          usage.push(memberDraft(m, answer.error));
        } else local(m, RpcCode.upstreamUnavailable, `upstream ${result.upstream} returned no answer for this call`);
      }
      for (const d of usage.slice(before)) {
        d.upstreamMs = result.upstreamMs;
        d.upstream = result.upstream;
        d.charged = true;
        d.cache = 'miss';
      }
    }
  }
  const status = failure?.status ?? (forwarded.length > 0 ? 200 : localBatchStatus(members, granted, chain));
  if (elements.length === 0) {
    const body = failure && result.failure ? rpcError('null', failure.rpc, result.failure.message) : null;
    return { status: body === null ? 204 : status, body, contentType: JSON_CONTENT_TYPE, admission, usage };
  }
  return { status, body: `[${elements.join(',')}]`, contentType: JSON_CONTENT_TYPE, admission, usage };
}

/**
 * The status of a batch the gateway answered alone: a limit refusal says "back off" (429),
 * otherwise bad input (400) before denied methods (403).
 */
function localBatchStatus(members: RpcMember[], granted: Set<number>, chain: CallScope['chain']): number {
  const calls = members.filter((m): m is RpcCall => m.kind === 'call');
  if (calls.some((c) => chain.isMethodAllowed(c.method) && !granted.has(c.index))) return 429;
  if (members.some((m) => m.kind === 'invalid')) return 400;
  return 403;
}

const memberDraft = (m: RpcCall, error: RpcErrorInfo | null): UsageDraft => draft(m.method, error?.code ?? null, error?.message ?? null, m.index);
