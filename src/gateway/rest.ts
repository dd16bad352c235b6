import { type Answer, type CallScope, cacheHitDraft, chargedFailure, draft, localError, refusedRest, type UsageDraft } from './answer.js';
import { judgeSingle, keepableResult, mayKeep, readKey } from './cache/rpcReads.js';
import { AUTH_QUERY_PARAMS } from './credentials.js';
import { errorInBody } from './errorBody.js';
import { JSON_CONTENT_TYPE, RpcCode, restError, upstreamFailureCodes } from './errors.js';
import { decodeUtf8, errorInfoFrom } from './jsonrpc.js';
import { arrayElements, documentStart, JsonScanError, objectMembers } from './jsonScan.js';
import type { UpstreamAnswer, UpstreamFailure, UpstreamRequest } from './upstream.js';
import { callShapeOf } from './upstreams/callShape.js';
import type { CallShape } from './upstreams/evmCalls.js';
import { headAnswerOf } from './upstreams/headAnswers.js';
import type { ChainHeads } from './upstreams/heads.js';

/**
 * REST calls: `GET|POST /<chain>/<token>/<method_or_path…>`.
 * - passthrough (trx, atom, sei, kas): method, path, query and body go to the node's REST API
 *   as sent, and its answer comes back as it is.
 * - solana, sui: the first segment names a JSON-RPC method; further segments, the query and the
 *   body give its params; the node's result comes back as `{"result": …}` (Solana scalars get a
 *   name: `{"result":{"blockHeight":N}}`).
 */

export interface RestRequest {
  httpMethod: 'GET' | 'POST';
  /** Path segments after the token, percent-encoded as sent. */
  segments: string[];
  /** Raw query string, without `?`. */
  query: string;
  body: Buffer | null;
  contentType: string | undefined;
  /**
   * `x-cosmos-block-height`: a Cosmos LCD answers at that height instead of the latest. Passed on
   * to the node (passthrough only): dropped, a historical query got the latest state as if it
   * were the height's.
   */
  blockHeight?: string;
}

/** Solana methods whose result is a bare scalar, and the name it gets in the REST answer. */
const SOLANA_RESULT_NAMES: Record<string, string> = {
  getBlockHeight: 'blockHeight',
  getSlot: 'slot',
  getTransactionCount: 'transactionCount',
  getFirstAvailableBlock: 'slot',
  minimumLedgerSlot: 'slot',
  getMaxRetransmitSlot: 'slot',
  getMaxShredInsertSlot: 'slot',
  getBlockTime: 'timestamp',
  getGenesisHash: 'genesisHash',
  getHealth: 'health',
  getSlotLeader: 'leader',
  getMinimumBalanceForRentExemption: 'lamports',
  sendTransaction: 'signature',
  requestAirdrop: 'signature',
};

const METHOD_NAME = /^[A-Za-z][A-Za-z0-9_]{0,99}$/;
/**
 * `;` too: Jetty (java-tron) and other servlet servers route `/wallet/x;p=1` as `/wallet/x`, so a
 * path parameter would take a denied endpoint past the deny list.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it rejects
const UNSAFE_SEGMENT = /[/\\;\u0000-\u001f\u007f]/;

function decodeSegments(segments: string[]): string[] | null {
  const out: string[] = [];
  for (const s of segments) {
    let d: string;
    try {
      d = decodeURIComponent(s);
    } catch {
      return null;
    }
    if (d === '' || d === '.' || d === '..' || UNSAFE_SEGMENT.test(d)) return null;
    out.push(d);
  }
  return out;
}

function stripAuthParams(query: string): string {
  if (query === '') return '';
  return query
    .split('&')
    .filter((pair) => {
      const key = pair.split('=', 1)[0] ?? '';
      let name: string;
      try {
        name = decodeURIComponent(key.replace(/\+/g, ' '));
      } catch {
        return true;
      }
      return !AUTH_QUERY_PARAMS.has(name.toLowerCase());
    })
    .join('&');
}

export async function handleRest(scope: CallScope, req: RestRequest): Promise<Answer> {
  const decoded = decodeSegments(req.segments);
  if (decoded === null) {
    return localError(scope, {
      shape: 'rest',
      status: 400,
      rpcCode: RpcCode.invalidRequest,
      restCode: 'invalid_path',
      message: 'the path has an empty, relative or malformed segment, or a path parameter (;)',
      method: req.segments.join('/').slice(0, 200),
    });
  }
  return scope.chain.restFlavour === 'passthrough' ? passthrough(scope, req, decoded) : rpcOverRest(scope, req, decoded);
}

/** The usage draft of a call the limiter granted and sent upstream: it used quota unless the gateway failed to serve it (`charged` false). */
function forwardedDraft(
  method: string,
  rpcErrorCode: number | null,
  errorMessage: string | null,
  outcome: { upstreamMs: number | null; upstream: string | null; hedged?: boolean },
  charged = true,
): UsageDraft {
  const d = draft(method, rpcErrorCode, errorMessage);
  d.upstreamMs = outcome.upstreamMs;
  d.upstream = outcome.upstream;
  d.charged = charged;
  d.cache = outcome.hedged ? 'hedged' : 'miss';
  return d;
}

function failureAnswer(outcome: UpstreamFailure, method: string, admission: Answer['admission']): Answer {
  const f = upstreamFailureCodes(outcome.kind);
  const d = forwardedDraft(method, null, outcome.message, outcome, chargedFailure(outcome));
  return { status: f.status, body: restError(f.rest, outcome.message), contentType: JSON_CONTENT_TYPE, admission, usage: [d] };
}

/** A short reason for an upstream REST error, for metering. */
function upstreamErrorMessage(answer: UpstreamAnswer): string {
  const text = answer.body.subarray(0, 2048).toString('utf8');
  try {
    const v: unknown = JSON.parse(text);
    if (v && typeof v === 'object') {
      for (const key of ['message', 'Error', 'error', 'detail']) {
        const m = (v as Record<string, unknown>)[key];
        if (typeof m === 'string') return m.slice(0, 500);
      }
    }
  } catch {
    // not JSON: the status says enough
  }
  return `HTTP ${answer.status}`;
}

async function passthrough(scope: CallScope, req: RestRequest, decoded: string[]): Promise<Answer> {
  const { chain, pool } = scope;
  const path = decoded.join('/');
  if (!chain.isPathAllowed(path)) {
    return localError(scope, {
      shape: 'rest',
      status: 404,
      rpcCode: RpcCode.methodNotFound,
      restCode: 'not_found',
      message: `/${path} is not an endpoint of ${chain.id}`,
      method: path,
    });
  }
  const admission = await scope.admit(1);
  if (!admission.ok) return refusedRest(admission, path);
  if (admission.granted < 1) return limitAnswer(admission, path);
  const query = stripAuthParams(req.query);
  const hasBody = req.httpMethod === 'POST' && req.body !== null && req.body.length > 0;
  const outcome = await pool.send({
    method: req.httpMethod,
    path: query === '' ? req.segments.join('/') : `${req.segments.join('/')}?${query}`,
    body: hasBody ? (req.body as Buffer) : undefined,
    contentType: req.contentType ?? 'application/json',
    headers: req.blockHeight === undefined ? undefined : { 'x-cosmos-block-height': req.blockHeight },
    retriable: req.httpMethod === 'GET' || chain.isReadOnlyPost(path),
  });
  if (!outcome.ok) return failureAnswer(outcome, path, admission);
  // A node that reports errors inside a 200 (java-tron): metered as an error, its answer passed on as it is.
  const errorInside = outcome.status < 400 && chain.errorBody !== null ? errorInBody(chain.errorBody, outcome.body) : null;
  const d =
    errorInside !== null
      ? forwardedDraft(path, RpcCode.nodeError, errorInside, outcome)
      : forwardedDraft(path, null, outcome.status >= 400 ? upstreamErrorMessage(outcome) : null, outcome);
  return { status: outcome.status, body: outcome.body, contentType: outcome.contentType ?? JSON_CONTENT_TYPE, admission, usage: [d] };
}

/** What a call sent as JSON-RPC on a followed chain adds to its request: its shape, its head answer (Solana's getSlot), its answer judged as a JSON-RPC call's. */
function followedRequest(
  heads: ChainHeads,
  method: string,
  paramsText: string,
): Pick<UpstreamRequest, 'headAnswer' | 'judge' | 'answerId'> & { shape: CallShape } {
  const shape = callShapeOf(heads, method, paramsText);
  return { shape, headAnswer: headAnswerOf(method, shape), judge: judgeSingle, answerId: '1' };
}

function limitAnswer(admission: Extract<Answer['admission'], { ok: true }>, method: string): Answer {
  const message = 'this call was refused by the rate or monthly limit';
  const extra = admission.retryAfterSeconds === null ? undefined : { retryAfter: admission.retryAfterSeconds };
  return { status: 429, body: restError('rate_limited', message, extra), contentType: JSON_CONTENT_TYPE, admission, usage: [draft(method, null, message)] };
}

/** A query value that is JSON (number, true, an object…) is taken as JSON; anything else as a string. */
function queryValueText(value: string): string {
  try {
    JSON.parse(value);
    return value.trim();
  } catch {
    return JSON.stringify(value);
  }
}

type ParamsResult = { ok: true; text: string } | { ok: false; message: string };

/** Positional params from the path, `params=[…]` and the body; other query keys form a config object. */
export function buildParams(args: string[], query: string, body: Buffer | null): ParamsResult {
  const parts = args.map((a) => JSON.stringify(a));
  const config = new Map<string, string>();
  const pushArray = (text: string, what: string): string | null => {
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      return `${what} is not valid JSON`;
    }
    if (!Array.isArray(v)) return `${what} must be a JSON array`;
    const start = documentStart(text);
    for (const [s, e] of arrayElements(text, start)) parts.push(text.slice(s, e));
    return null;
  };
  for (const [key, value] of new URLSearchParams(query)) {
    if (AUTH_QUERY_PARAMS.has(key.toLowerCase())) continue;
    if (key === 'params') {
      const problem = pushArray(value, 'the params query parameter');
      if (problem) return { ok: false, message: problem };
    } else config.set(key, queryValueText(value));
  }
  if (body !== null && body.length > 0) {
    const text = decodeUtf8(body);
    if (text === null) return { ok: false, message: 'the body is not valid UTF-8' };
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      return { ok: false, message: 'the body is not valid JSON' };
    }
    const start = documentStart(text);
    if (Array.isArray(v)) {
      const problem = pushArray(text, 'the body');
      if (problem) return { ok: false, message: problem };
    } else if (v && typeof v === 'object' && Object.hasOwn(v, 'params')) {
      const span = objectMembers(text, start).get('params');
      const problem = span ? pushArray(text.slice(span[0], span[1]), 'params in the body') : 'params missing';
      if (problem) return { ok: false, message: problem };
    } else if (v && typeof v === 'object') {
      parts.push(text.slice(start).trim());
    } else return { ok: false, message: 'the body must be a JSON object or array' };
  }
  if (config.size > 0) parts.push(`{${[...config].map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`);
  return { ok: true, text: `[${parts.join(',')}]` };
}

/** REST status and code for a node's JSON-RPC error. */
function restStatusFor(code: number | null): { status: number; code: string } {
  if (code === RpcCode.methodNotFound) return { status: 404, code: 'method_not_found' };
  if (code === RpcCode.invalidParams || code === RpcCode.invalidRequest) return { status: 400, code: 'invalid_params' };
  return { status: 400, code: 'rpc_error' };
}

async function rpcOverRest(scope: CallScope, req: RestRequest, decoded: string[]): Promise<Answer> {
  const { chain, pool } = scope;
  const [method = '', ...args] = decoded;
  const bad = (status: number, restCode: string, message: string, headers?: Record<string, string>): Promise<Answer> =>
    localError(scope, { shape: 'rest', status, rpcCode: RpcCode.invalidRequest, restCode, message, method: method.slice(0, 100), headers });
  if (!METHOD_NAME.test(method)) return bad(400, 'invalid_method', 'the first path segment must be a method name');
  // Not one of the chain's methods (a typo): the JSON-RPC form's words; one of them outside the REST form: that.
  if (!chain.isMethodAllowed(method)) return bad(404, 'method_not_found', `Method not found: ${method} is not available on ${chain.id}`);
  if (!chain.isRestMethodAllowed(method)) return bad(404, 'method_not_found', `${method} is not available over REST on ${chain.id}`);
  if (req.httpMethod === 'GET' && chain.isWriteMethod(method)) {
    return bad(405, 'use_post', `${method} submits data: use POST`, { allow: 'POST' });
  }
  const params = buildParams(args, req.query, req.httpMethod === 'POST' ? req.body : null);
  if (!params.ok) return bad(400, 'invalid_params', params.message);
  const admission = await scope.admit(1);
  if (!admission.ok) return refusedRest(admission, method);
  if (admission.granted < 1) return limitAnswer(admission, method);
  const resultName = chain.restFlavour === 'solana' ? SOLANA_RESULT_NAMES[method] : undefined;
  // A followed chain (Solana, by slot): no node lagging behind it, and one past the call's minContextSlot first; its answers judged as a JSON-RPC call's.
  const followed = pool.heads === null ? null : followedRequest(pool.heads, method, params.text);
  // A final answer (Solana's finalized blocks and transactions) comes from the cache, as over JSON-RPC.
  const kept = followed === null ? null : keptRead(scope, method, params.text, followed.shape);
  const hit = kept?.cache.get(kept.key);
  if (hit !== undefined)
    return { status: 200, body: restResultBody(hit, resultName), contentType: JSON_CONTENT_TYPE, admission, usage: [cacheHitDraft(method)] };
  const outcome = await pool.send({
    method: 'POST',
    path: '',
    body: `{"jsonrpc":"2.0","id":1,"method":${JSON.stringify(method)},"params":${params.text}}`,
    retriable: !chain.isWriteMethod(method),
    ...followed,
  });
  if (!outcome.ok) return failureAnswer(outcome, method, admission);
  const answer = restAnswerFromRpc(outcome, resultName);
  if (kept !== null && outcome.status === 200 && answer.status === 200) {
    const result = keepableResult(outcome.body, method, kept.shape, kept.heads, kept.epoch, outcome.upstream);
    if (result !== null) kept.cache.set(kept.key, result);
  }
  const d = forwardedDraft(method, answer.rpcErrorCode, answer.errorMessage, outcome, !answer.invalid);
  return { status: answer.status, body: answer.body, contentType: JSON_CONTENT_TYPE, admission, usage: [d] };
}

/** Where a REST read's answer may be kept: the pool's cache and the read's key (null: it may not be kept now). */
function keptRead(scope: CallScope, method: string, paramsText: string, shape: CallShape) {
  const { pool, chain } = scope;
  const heads = pool.heads;
  if (heads === null || pool.cache === null || !mayKeep(shape, heads)) return null;
  return { cache: pool.cache, heads, shape, epoch: heads.epoch, key: readKey(chain.id, method, paramsText, shape, heads.epoch, heads.generation) };
}

interface RestFromRpc {
  status: number;
  body: string;
  rpcErrorCode: number | null;
  errorMessage: string | null;
  /** The node's answer was not JSON-RPC: the gateway could not serve the call (502, uncharged). */
  invalid: boolean;
}

/** Turns a node's JSON-RPC answer into the REST answer, the result kept as the node wrote it. */
export function restAnswerFromRpc(outcome: UpstreamAnswer, resultName: string | undefined): RestFromRpc {
  const invalid = (): RestFromRpc => {
    const message = `upstream ${outcome.upstream} sent an invalid answer (HTTP ${outcome.status})`;
    return { status: 502, body: restError('upstream_unavailable', message), rpcErrorCode: RpcCode.upstreamUnavailable, errorMessage: message, invalid: true };
  };
  const text = outcome.body.toString('utf8');
  try {
    const start = documentStart(text);
    if (text.charCodeAt(start) !== 0x7b) return invalid();
    const members = objectMembers(text, start);
    const errorSpan = members.get('error');
    const errorText = errorSpan ? text.slice(errorSpan[0], errorSpan[1]) : 'null';
    if (errorText !== 'null') {
      const info = errorInfoFrom(errorText);
      const mapped = restStatusFor(info.code);
      const parsed: unknown = JSON.parse(errorText);
      const data = parsed && typeof parsed === 'object' && 'data' in parsed ? { data: (parsed as { data: unknown }).data } : {};
      const message = info.message ?? 'the node answered with an error';
      return {
        status: mapped.status,
        body: restError(mapped.code, message, { rpcCode: info.code, ...data }),
        rpcErrorCode: info.code,
        errorMessage: message,
        invalid: false,
      };
    }
    const resultSpan = members.get('result');
    if (!resultSpan) return invalid();
    const body = restResultBody(text.slice(resultSpan[0], resultSpan[1]), resultName);
    return { status: 200, body, rpcErrorCode: null, errorMessage: null, invalid: false };
  } catch (err) {
    if (err instanceof JsonScanError || err instanceof SyntaxError) return invalid();
    throw err;
  }
}

/** A REST answer's body around a JSON-RPC result: a bare value under the method's name where it has one (Solana's `{"result":{"slot":…}}`). */
function restResultBody(result: string, resultName: string | undefined): string {
  const isScalar = !result.startsWith('{') && !result.startsWith('[');
  return resultName !== undefined && isScalar ? `{"result":{${JSON.stringify(resultName)}:${result}}}` : `{"result":${result}}`;
}
