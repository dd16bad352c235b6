import type { MaybePromise } from '../domain/maybePromise.js';
import type { Admission } from './admission.js';
import {
  type Answer,
  type CacheUse,
  type CallScope,
  cacheHitDraft,
  chargedFailure,
  draft,
  INVALID_METHOD,
  localError,
  type Refusal,
  refusedRpc,
  retryData,
  type UsageDraft,
} from './answer.js';
import type { ResponseCache } from './cache/responseCache.js';
import { answerWithResult, judgeBatch, judgeSingle, keepableResult, mayKeep, neverChanges, readKey } from './cache/rpcReads.js';
import { sharedKey } from './cache/sharedCache.js';
import { admissionRpcCode, JSON_CONTENT_TYPE, RpcCode, rpcError, rpcErrorFor, upstreamFailureCodes } from './errors.js';
import {
  batchUpstreamBody,
  idTextsOf,
  type MemberAnswer,
  parseJsonRpc,
  type RpcCall,
  type RpcErrorInfo,
  type RpcMember,
  restoreId,
  rpcErrorOf,
  STAND_IN_ID,
  singleUpstreamBody,
  splitBatchAnswer,
} from './jsonrpc.js';
import { startsLikeJson } from './jsonScan.js';
import type { UpstreamAnswer, UpstreamFailure, UpstreamOutcome, UpstreamRequest, Verdict } from './upstream.js';
import { callShapeOf } from './upstreams/callShape.js';
import { type CallShape, isShareable, rewritesHistory, shapeOfAll } from './upstreams/evmCalls.js';
import { createsFilter, FILTER_NOT_FOUND, filterRoute, tagFilterAnswer, usesFilter } from './upstreams/filters.js';
import { type AnswerHead, type HeadAnswerKind, headAnswerOf, headOfAnswerText } from './upstreams/headAnswers.js';
import { knownBlocksOf, logsSubParams, readSplitLogs } from './upstreams/logsSplit.js';
import { isMinContextSlotNotReached } from './upstreams/solanaCalls.js';

/**
 * A JSON-RPC request end to end: validate, ask the gatekeeper for the calls that would reach the
 * node, answer the granted ones (from the cache, sharing an identical call in flight, or from
 * the node; a batch's members each so, the rest as one upstream batch), and answer every member
 * in the caller's order. A single answer from the node is passed on byte for byte.
 */

const deniedMessage = (method: string, chainId: string): string => `Method not found: ${method} is not available on ${chainId}`;
const limitMessage = (a: Admission): string => (a.ok ? 'Limit exceeded: this call was refused by the rate or monthly limit' : a.message);
/** What a call on a chain without head tracking depends on, as far as the gateway reads it: nothing it knows. */
/** What a filter's creation depends on: the head (never cached). */
const NEW_FILTER: CallShape = { kind: 'head', low: -1, high: -1, cacheable: false };
const methodOf = (m: RpcMember): string => (m.kind === 'call' ? m.method : (m.method ?? INVALID_METHOD));

/**
 * eth_subscribe and eth_unsubscribe on an EVM chain, Solana's `*Subscribe`/`*Unsubscribe`: a subscription lives on a socket, so over
 * HTTP the gateway answers them itself, uncharged, as geth does ("notifications not supported",
 * -32601), saying where to subscribe (docs/decisions.md, "Follow-ups of the EVM audit"). Over
 * the WebSocket the socket answers them before they reach this handler.
 */
const needsSocket = (chain: CallScope['chain'], method: string): boolean =>
  chain.protocol === 'jsonrpc'
    ? method === 'eth_subscribe' || method === 'eth_unsubscribe'
    : // Solana's pubsub: accountSubscribe, logsUnsubscribe… (endsWith, not a regex: it runs on every call, twice)
      chain.restFlavour === 'solana' && (method.endsWith('Subscribe') || method.endsWith('Unsubscribe'));

function socketOnlyMessage(chain: CallScope['chain'], method: string): string {
  if (chain.upstreams.some((u) => u.ws !== null)) {
    return `notifications not supported over HTTP: ${method} needs a WebSocket, on this same URL with wss:// (ws:// for http://): wss://<host>/${chain.id}/<token>`;
  }
  const poll = chain.protocol === 'jsonrpc' ? '; poll with eth_newBlockFilter or eth_newFilter and eth_getFilterChanges' : '';
  return `notifications not supported: ${chain.id} offers no subscriptions (its nodes have no WebSocket endpoint)${poll}`;
}

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

/** A batch: admitted as a whole (one cost per forwardable member), each granted member served as a single read would be. */
async function batchCall(scope: CallScope, members: RpcMember[]): Promise<Answer> {
  const { chain } = scope;
  const forwardable = members.filter((m): m is RpcCall => m.kind === 'call' && chain.isMethodAllowed(m.method) && !needsSocket(chain, m.method));
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
  const admission = scope.admit(allowed && !needsSocket(scope.chain, m.method) ? 1 : 0);
  return admission instanceof Promise ? admission.then((a) => admittedSingle(scope, m, allowed, a)) : admittedSingle(scope, m, allowed, admission);
}

function admittedSingle(scope: CallScope, m: RpcMember, allowed: boolean, admission: Admission): MaybePromise<Answer> {
  const { chain, pool } = scope;
  if (!admission.ok) return refusedRpc(admission, { kind: 'single', idText: m.idText ?? 'null' }, methodOf(m));
  if (m.kind === 'invalid') return singleError(admission, m, 400, m.idText, m.code, m.message);
  const idText = m.idText ?? 'null';
  if (!allowed) return singleError(admission, m, 403, idText, RpcCode.methodNotFound, deniedMessage(m.method, chain.id));
  if (needsSocket(chain, m.method)) return singleError(admission, m, 200, idText, RpcCode.methodNotFound, socketOnlyMessage(chain, m.method));
  if (admission.granted < 1) return singleError(admission, m, 429, idText, RpcCode.limitExceeded, limitMessage(admission), retryData(admission));
  if (usesFilter(m.method) || createsFilter(m.method)) return filterCall(scope, m, admission);
  if (chain.isWriteMethod(m.method)) {
    return pool.sendThen(
      { method: 'POST', path: scope.rpcPath ?? '', body: singleUpstreamBody(m), retriable: false, judge: judgeSingle, answerId: answerIdOf(m) },
      (outcome) => {
        pool.heads?.invalidate(rewritesHistory(m.method));
        return forwardedSingle(m, admission, outcome, 'miss');
      },
    );
  }
  // A wide eth_getLogs on a chain that splits them (docs/decisions.md "A wide eth_getLogs is split
  // into sub-ranges"): each sub-range a read of its own, their logs merged into one answer held to
  // the cap on a node's answer.
  const subParams = logsSplitOf(scope, m);
  if (subParams !== null) {
    // Every sub-call within the parent's time: the caller waits at most the chain's callTimeoutMs in all.
    const deadline = performance.now() + chain.callTimeoutMs;
    return readSplitLogs(m, subParams, admission, (sub) => read(scope, sub, admission, deadline), pool.maxResponseBytes, {
      deadline,
      callTimeoutMs: chain.callTimeoutMs,
    });
  }
  return read(scope, m, admission);
}

/**
 * The sub-calls' params of an eth_getLogs to split (null: it goes whole, or the chain splits none;
 * a notification has no answer to merge). Any other call costs a field read and a compare.
 */
function logsSplitOf(scope: CallScope, m: RpcCall): string[] | null {
  const split = scope.chain.getLogsSplit;
  if (split === null || m.method !== 'eth_getLogs' || m.idText === undefined) return null;
  return logsSubParams(m.paramsText, split, knownBlocksOf(scope.pool.heads, scope.chain.heads));
}

/**
 * A filter's call (docs/decisions.md, "Filters live on the node that made them" and "Follow-ups
 * of the EVM audit"): its creation's answer carries an id naming the node that made it and the
 * token that asked, and each call on that id by that token goes to that node alone, with the
 * node's own id, never retried nor hedged on another (eth_getFilterChanges hands over the
 * changes it returns: another node's answer would lose them). An id that is not the caller's
 * reaches no node: "filter not found", as a node says.
 */
function filterCall(scope: CallScope, m: RpcCall, admission: Admission): Promise<Answer> {
  const { pool } = scope;
  const tokenId = admission.ok ? admission.caller.tokenId : '';
  const found = usesFilter(m.method) ? filterRoute(m.paramsText, pool.filterKeys, tokenId) : 'none';
  // A filter of a node that now takes no call (a liar, on another network) is lost, as when a node forgets one: the caller makes another.
  if (found === 'unknown' || (found !== 'none' && pool.heads?.takesNoCall(found.node) === true)) return Promise.resolve(unknownFilter(m, admission));
  const route = found === 'none' ? null : found;
  const sent: RpcCall = route === null ? m : { ...m, paramsText: route.paramsText };
  const request = {
    method: 'POST' as const,
    path: scope.rpcPath ?? '',
    body: singleUpstreamBody(sent),
    retriable: route === null,
    pinned: route?.node,
    // A new filter on a node at the head (one behind would report late); the calls on one go to its node, wherever its head.
    shape: createsFilter(m.method) ? NEW_FILTER : undefined,
    judge: judgeSingle,
    answerId: answerIdOf(m),
  };
  return pool.sendThen(request, (outcome) => {
    const use: CacheUse = outcome.hedged ? 'hedged' : 'miss';
    if (outcome.ok && createsFilter(m.method)) {
      const key = pool.filterKeys[pool.chain.upstreams.findIndex((u) => u.label === outcome.upstream)];
      if (key !== undefined) return forwardedSingle(m, admission, { ...outcome, body: tagFilterAnswer(outcome.body, key, tokenId) }, use);
    }
    return forwardedSingle(m, admission, outcome, use);
  });
}

/**
 * A call on a filter id that is not the caller's (another token's, a guessed number, an id in
 * another form): the answer a node gives for a filter it does not hold, at 200, sent to no node.
 * Charged: it was admitted as a call, and a node would have answered it.
 */
function unknownFilter(m: RpcCall, admission: Admission): Answer {
  const d = draft(m.method, FILTER_NOT_FOUND.code, FILTER_NOT_FOUND.message);
  d.charged = true;
  const body = m.idText === undefined ? null : rpcError(m.idText, FILTER_NOT_FOUND.code, FILTER_NOT_FOUND.message);
  return { status: body === null ? 204 : 200, body, contentType: JSON_CONTENT_TYPE, admission, usage: [d] };
}

/** The id the node's answer carries: the one sent upstream. */
const answerIdOf = (m: RpcCall): string | undefined => (m.idIsFragile ? STAND_IN_ID : m.idText);

/** Where a read's answer may come from: its key (null: goes alone), the cache that may keep it, what it depends on. */
interface ReadPlan {
  key: string | null;
  cache: ResponseCache | null;
  shape: CallShape;
  epoch: number;
  /** Its key in the shared level, once it was looked up there (a final call missed in process); null otherwise. */
  sharedKey: string | null;
}

function planRead(scope: CallScope, m: RpcCall): ReadPlan {
  const { chain, pool } = scope;
  const heads = pool.heads;
  const shape = callShapeOf(heads, m.method, m.paramsText);
  const epoch = heads?.epoch ?? 0;
  const cache = heads !== null && mayKeep(shape, heads) ? pool.cache : null;
  const shared = m.idText !== undefined && (cache !== null || pool.coalesces) && isShareable(m.method);
  const key = shared ? readKey(chain.id, m.method, m.paramsText, shape, epoch, heads?.generation) : null;
  return { key, cache, shape, epoch, sharedKey: null };
}

/** Keeps a read's answer, given by node `upstream`, when it may be kept (see keepableResult). */
function keep(pool: CallScope['pool'], plan: ReadPlan, method: string, body: Buffer | string, upstream: string): void {
  const heads = pool.heads;
  if (plan.key === null || plan.cache === null || heads === null) return;
  const result = keepableResult(body, method, plan.shape, heads, plan.epoch, upstream);
  if (result === null) return;
  plan.cache.set(plan.key, result, plan.shape.kind === 'head' ? heads.tracking.pollMs * 2 : undefined);
  // Final (the shared level is asked only for calls that never change): for the other gateways, not awaited.
  const shared = plan.cache.shared;
  if (plan.sharedKey !== null && shared !== null && heads.sharesFinal(shared.ttlMs)) shared.set(plan.sharedKey, result);
}

/**
 * A read's kept result: from the process's cache, else, for a final call, from the shared level
 * if there is one and no identical call is in flight here to join (a result found there is kept
 * in process too). Undefined: nothing kept, or the call may not be kept.
 */
function lookUpKept(scope: CallScope, m: RpcCall, plan: ReadPlan): MaybePromise<string | undefined> {
  const { key, cache } = plan;
  if (key === null || cache === null) return undefined;
  const kept = cache.get(key);
  if (kept !== undefined) return kept;
  const shared = cache.shared ?? null;
  // A chain whose nodes rewound final blocks lately (a devnet): what the shared level holds for it may be of the dropped chain.
  if (shared === null || !neverChanges(plan.shape) || scope.pool.heads?.sharesFinal(shared.ttlMs) === false) return undefined;
  if (scope.pool.coalesces && scope.pool.waiting.has(key)) return undefined;
  plan.sharedKey = sharedKey(scope.chain.id, m.method, m.paramsText);
  if (plan.sharedKey === null) return undefined;
  const found = shared.get(plan.sharedKey);
  const fill = (result: string | undefined): string | undefined => {
    if (result !== undefined) cache.set(key, result);
    return result;
  };
  return found instanceof Promise ? found.then(fill) : fill(found);
}

/**
 * A read: from the cache when its answer was kept, else sharing the call of an identical read in
 * flight (coalescing), else its own call, whose answer the waiting callers share and the cache
 * may keep. Stateful calls (filters, subscriptions) and notifications go alone.
 */
function read(scope: CallScope, m: RpcCall, admission: Admission, deadline?: number): MaybePromise<Answer> {
  const plan = planRead(scope, m);
  const kept = lookUpKept(scope, m, plan);
  if (kept instanceof Promise)
    return kept.then((result) => (result === undefined ? sendRead(scope, m, admission, plan, deadline) : cachedAnswer(m, admission, result)));
  if (kept !== undefined) return cachedAnswer(m, admission, kept);
  return sendRead(scope, m, admission, plan, deadline);
}

/**
 * A read not answered from the cache: sharing an identical call in flight, or its own call.
 * `deadline` (performance.now(), ms): when its caller must have the answer (a split eth_getLogs'
 * sub-call, by its parent's); unset: the chain's callTimeoutMs.
 */
function sendRead(scope: CallScope, m: RpcCall, admission: Admission, plan: ReadPlan, deadline?: number): MaybePromise<Answer> {
  const { pool } = scope;
  const { key } = plan;
  let waiting: Waiter[] | null = null;
  if (key !== null && pool.coalesces) {
    const shared = pool.waiting.get(key);
    if (shared !== undefined) return new Promise((resolve) => shared.push((outcome) => resolve(forwardedSingle(m, admission, outcome, 'coalesced'))));
    waiting = [];
    pool.waiting.set(key, waiting);
  }
  return sendLed(scope, m, admission, plan, waiting, deadline);
}

/**
 * A read's own upstream call, its answer handed to the callers in `waiting` (its key's list in
 * `pool.waiting`; null: not shared) and kept when it may be. `behind`: an answer under the head
 * it already had (a batch member's), the caller's when no node at the head answers in time.
 */
function sendLed(
  scope: CallScope,
  m: RpcCall,
  admission: Admission,
  plan: ReadPlan,
  waiting: Waiter[] | null,
  deadline?: number,
  behind?: UpstreamAnswer,
): Promise<Answer> {
  const { pool } = scope;
  const { key } = plan;
  const request: UpstreamRequest = {
    method: 'POST',
    path: scope.rpcPath ?? '',
    body: singleUpstreamBody(m),
    retriable: true,
    shape: plan.shape,
    judge: judgeSingle,
    answerId: answerIdOf(m),
    deadline,
    headAnswer: pool.heads === null ? undefined : headAnswerOf(m.method, plan.shape),
    behind,
  };
  return pool.sendThen(request, (outcome) => {
    if (key !== null) {
      // After the caller whose call it is: its answer goes out first (pipelined calls on one connection are answered in order).
      if (waiting !== null) release(pool, key, waiting, () => outcome);
      if (outcome.ok && outcome.status === 200) keep(pool, plan, m.method, outcome.body, outcome.upstream);
    }
    return forwardedSingle(m, admission, outcome, outcome.hedged ? 'hedged' : 'miss');
  });
}

/** A read answered from the cache: a granted call (quota, limits, metering) with the caller's id and no upstream. */
function cachedAnswer(m: RpcCall, admission: Admission, resultText: string): Answer {
  return { status: 200, body: answerWithResult(m.idText ?? 'null', resultText), contentType: JSON_CONTENT_TYPE, admission, usage: [cacheHitDraft(m.method)] };
}

/** A single call's answer from what its upstream did; `use` says how it was served. */
function forwardedSingle(m: RpcCall, admission: Admission, outcome: UpstreamOutcome, use: CacheUse): Answer {
  const idText = m.idText ?? 'null';
  if (!outcome.ok) {
    const f = upstreamFailureCodes(outcome.kind);
    return withUpstreamAnswer(singleError(admission, m, f.status, idText, f.rpc, outcome.message), outcome, use, chargedFailure(outcome));
  }
  const isSuccess = outcome.status >= 200 && outcome.status < 300;
  if (m.idText === undefined && isSuccess) {
    return withUpstreamAnswer({ status: 204, body: null, contentType: JSON_CONTENT_TYPE, admission, usage: [draft(m.method, null, null)] }, outcome, use);
  }
  const isJson = startsLikeJson(outcome.body);
  const error = isJson ? rpcErrorOf(outcome.body) : null;
  if (!isJson || (!isSuccess && error === null)) {
    const message = `upstream ${outcome.upstream} sent an invalid answer (HTTP ${outcome.status})`;
    // The node's garbage: the gateway could not serve the call.
    return withUpstreamAnswer(singleError(admission, m, 502, idText, RpcCode.upstreamUnavailable, message), outcome, use, false);
  }
  // A caller sharing another's call gets the answer with its own id; so does an error, which a node may answer with a null id (judged this call's all the same).
  const ownId = use === 'coalesced' || (m.idIsFragile && m.idText !== undefined) || error !== null;
  return withUpstreamAnswer(
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

/** A granted call's answer: it used quota unless the gateway failed to serve it (`charged` false). */
function withUpstreamAnswer(answer: Answer, u: { upstreamMs: number | null; upstream: string | null }, use: CacheUse, charged = true): Answer {
  for (const d of answer.usage) withUpstream(d, u, use, charged);
  return answer;
}

/** A granted batch member's answer: its element (null: a notification, no element) and its usage draft. */
interface MemberServed {
  element: string | null;
  usage: UsageDraft;
}

/** An Answer made for one member (by the single call's code) as the member's part of the batch. */
function asMember(m: RpcCall, answer: Answer): MemberServed {
  const usage = answer.usage[0] as UsageDraft;
  usage.memberIndex = m.index;
  const body = answer.body;
  return { element: body === null ? null : typeof body === 'string' ? body : body.toString('utf8'), usage };
}

/** A member the gateway failed to answer (an exception of its own): -32603 for it alone. */
function unanswerable(m: RpcCall, err: unknown): MemberServed {
  const message = `the gateway could not answer this call: ${err instanceof Error ? err.message : String(err)}`;
  return {
    element: m.idText === undefined ? null : rpcError(m.idText, RpcCode.internalError, message),
    usage: draft(m.method, RpcCode.internalError, message, m.index),
  };
}

/** A member that leads an upstream call: sent in this batch's upstream batch, its answer shared with the callers waiting on its key. */
interface Leader {
  m: RpcCall;
  plan: ReadPlan;
  /** The callers waiting on its key, as set in `pool.waiting` (null: not coalesced). */
  waiting: Waiter[] | null;
}

type Waiter = (outcome: UpstreamOutcome) => void;

/**
 * Ends the wait on `key`, if `waiting` is still its list (released once, and never a later
 * call's list), and hands the waiting callers `outcome` after the current caller's answer.
 */
function release(pool: CallScope['pool'], key: string, waiting: Waiter[], outcome: () => UpstreamOutcome): void {
  if (pool.waiting.get(key) !== waiting) return;
  pool.waiting.delete(key);
  if (waiting.length === 0) return;
  const shared = outcome();
  setImmediate(() => {
    for (const w of waiting) w(shared);
  });
}

/**
 * The granted members of a batch, each served as a single read would be: from the cache, or
 * sharing an identical call in flight (another request's, or an earlier member of this batch),
 * and the rest sent upstream together as one batch (docs/decisions.md: one batch costs less
 * than singles). Writes and notifications go in that batch too, never shared or kept.
 */
async function serveMembers(
  scope: CallScope,
  calls: RpcCall[],
  admission: Admission,
): Promise<{ served: Map<number, MemberServed>; failure: UpstreamFailure | null }> {
  const { chain, pool } = scope;
  const served = new Map<number, MemberServed>();
  const sharing: Array<Promise<void>> = [];
  const upstream: RpcCall[] = [];
  const leaders: Leader[] = [];
  let writes = false;
  /** Not found in process: shares an identical call in flight, or leads one in this batch's upstream batch. */
  const route = (m: RpcCall, plan: ReadPlan): void => {
    const { key } = plan;
    if (key !== null && pool.coalesces) {
      const waiting = pool.waiting.get(key);
      if (waiting !== undefined) {
        const shared = new Promise<void>((resolve) =>
          waiting.push((outcome) => {
            served.set(m.index, asMember(m, forwardedSingle(m, admission, outcome, 'coalesced')));
            resolve();
          }),
        );
        sharing.push(shared);
        return;
      }
      const list: Waiter[] = [];
      pool.waiting.set(key, list);
      leaders.push({ m, plan, waiting: list });
    } else leaders.push({ m, plan, waiting: null });
    upstream.push(m);
  };
  /** Final members looked up in the shared level, answered or routed once every lookup is back. */
  const lookups: Array<{ m: RpcCall; plan: ReadPlan; found: Promise<string | undefined> }> = [];
  /** The answers of members sent alone (the chain's nodes take no batch, a filter's call, a split eth_getLogs). */
  const alone: Answer[] = [];
  let failure: UpstreamFailure | null;
  try {
    for (const m of calls) {
      if (!chain.upstreamBatches || usesFilter(m.method) || createsFilter(m.method) || logsSplitOf(scope, m) !== null) {
        // On its own: to a node that takes no batch, a filter's call to the node its filter is on (a batch goes to one node), a wide eth_getLogs split.
        sharing.push(sendAlone(scope, m, admission, served, alone));
        continue;
      }
      if (chain.isWriteMethod(m.method)) {
        writes = true;
        upstream.push(m);
        continue;
      }
      const plan = planRead(scope, m);
      const kept = lookUpKept(scope, m, plan);
      if (kept instanceof Promise) {
        lookups.push({ m, plan, found: kept });
        continue;
      }
      if (kept !== undefined) {
        served.set(m.index, asMember(m, cachedAnswer(m, admission, kept)));
        continue;
      }
      route(m, plan);
    }
    if (lookups.length > 0) {
      const results = await Promise.all(lookups.map((l) => l.found));
      for (const [i, { m, plan }] of lookups.entries()) {
        const result = results[i];
        if (result === undefined) route(m, plan);
        else served.set(m.index, asMember(m, cachedAnswer(m, admission, result)));
      }
    }
    const { again, deadline, ...forwarded } = upstream.length > 0 ? await forwardBatch(scope, upstream, leaders, writes, served) : NOTHING_FORWARDED;
    failure = forwarded.failure;
    // Each member asked again: its own call, which goes to a node at the head within the batch's time, its sharers still waiting on its key.
    for (const { leader, behind } of again) {
      const { m, plan, waiting } = leader;
      sharing.push(
        sendLed(scope, m, admission, plan, waiting, deadline, behind).then(
          (answer) => void served.set(m.index, asMember(m, answer)),
          (err: unknown) => void served.set(m.index, unanswerable(m, err)),
        ),
      );
    }
  } catch (err) {
    // Whatever went wrong, no caller waits on a call this batch will not answer.
    const message = `the gateway could not answer this call: ${err instanceof Error ? err.message : String(err)}`;
    const failed: UpstreamFailure = { ok: false, kind: 'unavailable', message, upstreamMs: null, upstream: null };
    for (const { plan, waiting } of leaders) if (plan.key !== null && waiting !== null) release(pool, plan.key, waiting, () => failed);
    throw err;
  }
  await Promise.all(sharing);
  // Every member sent alone (none in an upstream batch) and all failed alike: the batch keeps that status, as one failed whole.
  if (alone.length === calls.length) failure = failureOfAll(alone);
  return { served, failure };
}

/**
 * A batch member on a chain whose nodes take no batch (a Sui full node answers any batch with one
 * -32005 "Batched requests are not supported by this server", which every member then got, with
 * the gateway's own limit code): the single call it would be alone, a write never retried nor
 * hedged, a read shared or hedged as ever; or a filter's call (to its filter's node). Its answer is
 * kept in `alone` when given (a batch of members all sent alone keeps the nodes' failure status).
 */
function sendAlone(scope: CallScope, m: RpcCall, admission: Admission, served: Map<number, MemberServed>, alone: Answer[]): Promise<void> {
  return Promise.resolve()
    .then(() => admittedSingle(scope, m, true, admission))
    .then(
      (answer) => {
        alone.push(answer);
        const member = asMember(m, answer);
        // A notification gets no element, whatever befell it.
        served.set(m.index, m.idText === undefined ? { ...member, element: null } : member);
      },
      (err: unknown) => void served.set(m.index, unanswerable(m, err)),
    );
}

/** The nodes' failure, when it is every member sent alone's answer (the batch then keeps its status, as one sent whole). */
function failureOfAll(answers: Answer[]): UpstreamFailure | null {
  const first = answers[0];
  if (first === undefined || (first.status !== 502 && first.status !== 504)) return null;
  const kind = first.status === 504 ? 'timeout' : 'unavailable';
  const code = upstreamFailureCodes(kind).rpc;
  if (!answers.every((a) => a.status === first.status && a.usage[0]?.rpcErrorCode === code)) return null;
  return { ok: false, kind, message: first.usage[0]?.errorMessage ?? 'upstream failed', upstreamMs: null, upstream: null };
}

/** A batch sent upstream: its failure as a whole, if it failed so; its members to ask again alone, by the batch's deadline. */
interface ForwardedBatch {
  failure: UpstreamFailure | null;
  again: AskedAgain[];
  deadline: number;
}

const NOTHING_FORWARDED: ForwardedBatch = { failure: null, again: [], deadline: 0 };

/**
 * Sends `calls` upstream as one batch (routed by what all of them depend on), answers each, and
 * hands each leader's answer to the callers waiting on its key, but those to ask again.
 */
function forwardBatch(scope: CallScope, calls: RpcCall[], leaders: Leader[], writes: boolean, answered: Map<number, MemberServed>): Promise<ForwardedBatch> {
  const { pool } = scope;
  // The caller waits callTimeoutMs for the whole batch, members asked again included.
  const deadline = performance.now() + scope.chain.callTimeoutMs;
  // The judge splits the answer (checking its ids); the split of the answer that won is used again.
  let judged: { body: Buffer; answers: Map<number, MemberAnswer> | null } | null = null;
  const judge = (body: Buffer): Verdict => {
    const answers = splitBatchAnswer(body, calls);
    judged = { body, answers };
    return judgeBatch(answers);
  };
  const answersTo = (body: Buffer): Map<number, MemberAnswer> | null => (judged?.body === body ? judged.answers : splitBatchAnswer(body, calls));
  const headCalls = pool.heads === null ? [] : leadersAskingHead(leaders);
  // What the winning answer's head calls say, read once: for the node's head (headsIn), then for the members' answers.
  let seen: { body: Buffer; heads: LeaderHead[] } | null = null;
  const headsIn = (body: Buffer): LeaderHead[] => {
    if (seen?.body !== body) seen = { body, heads: headsInAnswers(answersTo(body), headCalls) };
    return seen.heads;
  };
  const request: UpstreamRequest = {
    method: 'POST',
    path: scope.rpcPath ?? '',
    body: batchUpstreamBody(calls),
    retriable: !writes,
    shape: pool.heads === null ? undefined : shapeOfAll(leaders.map((l) => l.plan.shape)),
    judge,
    headsIn: headCalls.length === 0 ? undefined : (body) => headsIn(body).map((h) => h.head),
    deadline,
  };
  const byMinContextSlot = pool.heads?.tracking.family === 'solana';
  return pool.sendThen(request, (outcome): ForwardedBatch => {
    if (writes) pool.heads?.invalidate(calls.some((c) => rewritesHistory(c.method)));
    const answers = !outcome.ok ? null : answersTo(outcome.body);
    const again: AskedAgain[] = [];
    if (outcome.ok && answers !== null) {
      const headOf = new Map(headCalls.length === 0 ? [] : headsIn(outcome.body).map(({ leader, head }) => [leader.m.index, head]));
      for (const leader of leaders) {
        const answer = answers.get(leader.m.index);
        if (answer === undefined) continue;
        // A head call answered under what is known is lifted as a single call's is, or asked again (docs/decisions.md, "The head never goes back within a poll interval").
        const head = headOf.get(leader.m.index);
        const verdict = head === undefined ? null : pool.underHead(head);
        if (verdict !== null && verdict !== 'again') {
          answers.set(leader.m.index, { text: verdict.text, error: null });
          continue;
        }
        // So is a Solana read whose node had not reached its minContextSlot (-32016), of a node at the best slot.
        const slotNotReached = byMinContextSlot && answer.error != null && isMinContextSlotNotReached(answer.error.code, answer.error.message);
        if (verdict === 'again' || slotNotReached) again.push({ leader, behind: { ...(outcome as UpstreamAnswer), body: Buffer.from(answer.text) } });
      }
    }
    const behind = new Set(again.map(({ leader }) => leader.m.index));
    const failure: UpstreamFailure | null = !outcome.ok
      ? outcome
      : answers === null
        ? {
            ok: false,
            kind: 'unavailable',
            message: `upstream ${outcome.upstream} sent an invalid answer (HTTP ${outcome.status})`,
            upstreamMs: outcome.upstreamMs,
            upstream: outcome.upstream,
          }
        : null;
    const use: CacheUse = outcome.hedged ? 'hedged' : 'miss';
    const unanswered = `upstream ${outcome.upstream} returned no answer for this call`;
    for (const m of calls) {
      // A `latest` block under the best head: asked again alone (serveMembers), its sharers waiting for that answer.
      if (behind.has(m.index)) continue;
      const answer = answers?.get(m.index);
      let served: MemberServed;
      // Each member the nodes failed (the whole batch, or one its answer left out) is the gateway's failure to serve it.
      let charged = true;
      if (failure !== null) {
        charged = chargedFailure(failure);
        const code = upstreamFailureCodes(failure.kind).rpc;
        served = { element: m.idText === undefined ? null : rpcError(m.idText, code, failure.message), usage: draft(m.method, code, failure.message, m.index) };
      } else if (m.idText === undefined) served = { element: null, usage: draft(m.method, null, null, m.index) };
      else if (answer === undefined) {
        charged = false;
        served = {
          element: rpcError(m.idText, RpcCode.upstreamUnavailable, unanswered),
          usage: draft(m.method, RpcCode.upstreamUnavailable, unanswered, m.index),
        };
      } else served = { element: answer.text, usage: memberDraft(m, answer.error) };
      withUpstream(served.usage, failure ?? outcome, use, charged);
      answered.set(m.index, served);
    }
    // The waiting callers are released before anything is kept: nothing that throws leaves them waiting.
    for (const { m, plan, waiting } of leaders) {
      if (plan.key === null || waiting === null || behind.has(m.index)) continue;
      const answer = answers?.get(m.index);
      // Each waiting caller gets this member's answer as a single call's (its id put back by forwardedSingle).
      release(pool, plan.key, waiting, () =>
        failure !== null
          ? failure
          : answer === undefined
            ? { ok: false, kind: 'unavailable', message: unanswered, upstreamMs: outcome.upstreamMs, upstream: outcome.upstream }
            : { ...(outcome as UpstreamAnswer), body: Buffer.from(answer.text) },
      );
    }
    for (const { m, plan } of leaders) {
      const answer = behind.has(m.index) ? undefined : answers?.get(m.index);
      if (outcome.ok && outcome.status === 200 && answer !== undefined && answer.error === null) keep(pool, plan, m.method, answer.text, outcome.upstream);
    }
    return { failure, again, deadline };
  });
}

/**
 * A batch member whose head call was answered under what is known, or (Solana) whose node had not
 * reached its minContextSlot: asked again alone, its answer (`behind`) the caller's if none better comes.
 */
interface AskedAgain {
  leader: Leader;
  behind: UpstreamAnswer;
}

/** A batch member that is a head call (`eth_blockNumber`, a `latest` block), and which. */
interface HeadCall {
  leader: Leader;
  kind: HeadAnswerKind;
}

function leadersAskingHead(leaders: Leader[]): HeadCall[] {
  const found: HeadCall[] = [];
  for (const leader of leaders) {
    const kind = headAnswerOf(leader.m.method, leader.plan.shape);
    if (kind !== undefined) found.push({ leader, kind });
  }
  return found;
}

/** A head call of a batch and the head its answer names. */
interface LeaderHead {
  leader: Leader;
  head: AnswerHead;
}

/** The heads a batch answer's head calls name (members answered with an error or no head left out). */
function headsInAnswers(answers: Map<number, MemberAnswer> | null, headCalls: HeadCall[]): LeaderHead[] {
  const heads: LeaderHead[] = [];
  if (answers === null) return heads;
  for (const { leader, kind } of headCalls) {
    const answer = answers.get(leader.m.index);
    const head = answer === undefined || answer.error !== null ? null : headOfAnswerText(answer.text, kind);
    if (head !== null) heads.push({ leader, head });
  }
  return heads;
}

/** A granted call's usage: whether it used quota, and how it was served. */
function withUpstream(d: UsageDraft, u: { upstreamMs: number | null; upstream: string | null }, use: CacheUse, charged: boolean): void {
  d.upstreamMs = u.upstreamMs;
  d.upstream = u.upstream;
  d.charged = charged;
  d.cache = use;
}

async function batch(scope: CallScope, members: RpcMember[], granted: Set<number>, admission: Admission): Promise<Answer> {
  const { chain } = scope;
  const calls = members.filter((m): m is RpcCall => m.kind === 'call' && granted.has(m.index));
  const { served, failure } = calls.length > 0 ? await serveMembers(scope, calls, admission) : { served: new Map<number, MemberServed>(), failure: null };

  const elements: string[] = [];
  const usage: UsageDraft[] = [];
  const local = (m: RpcMember, code: number, message: string, data?: unknown): void => {
    if (m.idText !== undefined) elements.push(rpcError(m.idText, code, message, data));
    usage.push(draft(methodOf(m), code, message, m.index));
  };
  for (const m of members) {
    const mine = served.get(m.index);
    if (mine !== undefined) {
      if (mine.element !== null) elements.push(mine.element);
      usage.push(mine.usage);
    } else if (m.kind === 'invalid') local(m, m.code, m.message);
    else if (!chain.isMethodAllowed(m.method)) local(m, RpcCode.methodNotFound, deniedMessage(m.method, chain.id));
    else if (needsSocket(chain, m.method)) local(m, RpcCode.methodNotFound, socketOnlyMessage(chain, m.method));
    else local(m, RpcCode.limitExceeded, limitMessage(admission), retryData(admission));
  }
  // A subscription answered here is answered as the node would: the batch was served.
  const answeredHere = members.some((m) => m.kind === 'call' && chain.isMethodAllowed(m.method) && needsSocket(chain, m.method));
  const failed = failure === null ? null : upstreamFailureCodes(failure.kind);
  // The failure's status only when no member got an answer: clients drop a whole batch answered 5xx.
  const failedAlone = failed !== null && !answeredHere && [...served.values()].every((s) => s.usage.rpcErrorCode === failed.rpc);
  const status = failedAlone ? failed.status : calls.length > 0 || answeredHere ? 200 : localBatchStatus(members, granted, chain);
  if (elements.length === 0) {
    const body = failed && failure ? rpcError('null', failed.rpc, failure.message) : null;
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
