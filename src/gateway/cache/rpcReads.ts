import { type MemberAnswer, type RpcErrorInfo, rpcErrorOf } from '../jsonrpc.js';
import { documentStart, objectMembers } from '../jsonScan.js';
import type { Verdict } from '../upstream.js';
import { blockOfResult, type CallShape } from '../upstreams/evmCalls.js';
import type { ChainHeads } from '../upstreams/heads.js';
import { isMinContextSlotNotReached } from '../upstreams/solanaCalls.js';

/**
 * JSON-RPC reads and the nodes' answers to them: the key identical calls share (in flight and in
 * the cache), whether an answer is a valid one to the call sent, and whether it may be kept.
 * Pure, except for reading the tracked heads.
 */

/**
 * The key of a read: chain, method, params as the caller wrote them and, for a call that
 * depends on the head, the head's epoch (answers from before the head moved are other keys);
 * for any other, the heads' generation (answers kept as final before a node rewound them are).
 */
export function readKey(chainId: string, method: string, paramsText: string | undefined, shape: CallShape, epoch: number, generation = 0): string {
  const context = shape.kind === 'head' || shape.kind === 'volatile' ? epoch : `g${generation}`;
  // No params is `[]` to a node (ethers sends `[]`, other clients leave them out): one key.
  return `${chainId}\u0001${method}\u0001${paramsText ?? '[]'}\u0001${context}`;
}

/**
 * Whether an answer to a call of this shape, once kept, can never change: a static answer, one at
 * a final block number or by a final block's hash, a Solana one at a finalized slot
 * (keepableResult judges finality). These may be
 * shared between gateway instances (sharedCache.ts); answers kept for the current head may not.
 */
export const neverChanges = (shape: CallShape): boolean =>
  shape.kind === 'static' || shape.kind === 'number' || shape.kind === 'hash' || (shape.kind === 'recent' && shape.cacheable);

/** A node's answer to a call it could not serve for lack of old state (a pruned full node). */
const ARCHIVE_ERRORS = ['missing trie node', 'header not found', 'historical state', 'state is not available', 'pruned'];

/**
 * Whether a node's error message says it lacks old state: one of ARCHIVE_ERRORS in the message
 * itself (not in `data`), and not a revert, whose message carries the contract's own reason
 * (`execution reverted: …`), whatever words that holds.
 */
function asksForArchive(message: string | null | undefined): boolean {
  if (message === null || message === undefined) return false;
  const lower = message.toLowerCase();
  if (lower.startsWith('execution reverted') || lower.startsWith('reverted')) return false;
  return ARCHIVE_ERRORS.some((e) => lower.includes(e));
}

/**
 * A node's error about the call's own size or range (eth_getLogs over too many blocks or results,
 * an answer over the node's cap): every node would say the same, so it is the node's answer even
 * under a capacity code (Infura's -32005 "query returned more than 10000 results").
 */
const CALL_TOO_LARGE = [
  'returned more than',
  'block range',
  'range too large',
  'range is too large',
  'range too wide',
  'range is too wide',
  'limit the query to',
  'response size',
  'too many results',
  'max results',
  'query exceeds',
  'response too large',
  'is too big',
  'blocks distance',
  'logs over more',
  'try paginating',
  // A batch over the node's size ("too many requests in batch" is not a rate limit).
  'batch size',
  'batch too large',
  'batch is too large',
  'batch limit',
  'batch request limit',
  'in batch',
  'in a batch',
];

/**
 * A node's words for refusing a call for want of capacity: its provider's rate limit, quota or plan
 * (Infura's "daily request count exceeded, request rate limited", Alchemy's "compute units per
 * second capacity", QuickNode's "request limit reached", Solana RPC pools' "Too many requests for a
 * specific RPC call"). Another node (another provider) may well answer.
 */
const NODE_BUSY = [
  'rate limit',
  'rate exceeded',
  'too many requests',
  'quota',
  'request limit',
  'requests limited to',
  'under too much load',
  'capacity limit',
  'compute units per second',
  'limit for your current plan',
  'reached the free tier',
];

/**
 * Whether a node's error says the node is busy: code 429 (Solana RPC pools answer so inside a 200)
 * or one of NODE_BUSY in its message, and not a complaint about the call's size (CALL_TOO_LARGE),
 * not a revert (a contract's own reason may say anything), and not the OP Stack sequencer's limit
 * on one sender (every node forwards to the same sequencer: the sender's limit, not the node's).
 */
export function refusesForCapacity(error: RpcErrorInfo): boolean {
  const message = error.message;
  if (message === null || message === '') return error.code === 429;
  const lower = message.toLowerCase();
  if (lower.startsWith('execution reverted') || lower.startsWith('reverted') || lower.includes('sender is over rate limit')) return false;
  if (CALL_TOO_LARGE.some((e) => lower.includes(e))) return false;
  return error.code === 429 || NODE_BUSY.some((e) => lower.includes(e));
}

/** The verdict on a node's error: it lacks old state, it is busy, or its answer stands (the caller's to read). */
function judgeError(error: RpcErrorInfo | null | undefined): Verdict {
  if (error === null || error === undefined) return 'ok';
  if (asksForArchive(error.message)) return 'archive';
  if (isMinContextSlotNotReached(error.code, error.message)) return 'behind';
  return refusesForCapacity(error) ? 'busy' : 'ok';
}

/**
 * Where `"id":<idText>` ends in a single answer, when it is found by a byte scan of its first
 * 256 bytes before any `{` or `[` (a top-level member, as nodes write it before the result);
 * -1 when that scan does not settle it. A loop in JavaScript: no string to search for is built
 * per call, and no native call is made.
 */
function idEnd(body: Buffer, idText: string): number {
  const limit = Math.min(body.length - 5, 256);
  for (let i = 1; i < limit; i++) {
    const c = body[i];
    if (c === 0x7b || c === 0x5b) return -1;
    // "id":
    if (c !== 0x22 || body[i + 1] !== 0x69 || body[i + 2] !== 0x64 || body[i + 3] !== 0x22 || body[i + 4] !== 0x3a) continue;
    const start = i + 5;
    for (let k = 0; k < idText.length; k++) {
      const code = idText.charCodeAt(k);
      if (code > 0x7f || body[start + k] !== code) return -1;
    }
    const after = body[start + idText.length];
    return after === 0x2c || after === 0x7d ? start + idText.length : -1;
  }
  return -1;
}

/** Whether `"result":` follows byte `at` after a comma: the answer is a result, not an error. */
function resultFollows(body: Buffer, at: number): boolean {
  if (body[at] !== 0x2c) return false;
  for (let k = 0; k < RESULT_KEY.length; k++) if (body[at + 1 + k] !== RESULT_KEY[k]) return false;
  return true;
}

const RESULT_KEY = Buffer.from('"result":');

/**
 * Whether the answer, read properly, answers the call sent with `idText`: for when the byte search
 * (`idEnd`) did not find it. An error with a null id counts: the node did not say which call it
 * answers (ganache so answers a failed call whose id is 0 or ""), and on this call's own request
 * it can only be this one; another call's answer would carry another id.
 */
function answersCall(body: Buffer, idText: string): boolean {
  try {
    const text = body.toString('utf8');
    const members = objectMembers(text, documentStart(text));
    const span = members.get('id');
    if (span === undefined) return false;
    const id = text.slice(span[0], span[1]);
    if (id === idText) return true;
    const error = members.get('error');
    return id === 'null' && error !== undefined && text.slice(error[0], error[1]) !== 'null';
  } catch {
    return false;
  }
}

/**
 * Judges a node's answer to a single call sent with id `sentIdText` (undefined: a notification,
 * which an empty answer fits): not a JSON object, or another call's id (an error's null id is
 * not one), is a failed node (another one is tried, nothing is kept); an error saying
 * the node lacks old state asks for an archive node; one refusing the call for want of capacity
 * (a rate limit inside a 200) is a busy node. Only an answer holding an error has its message read.
 */
export function judgeSingle(body: Buffer, sentIdText: string | undefined): Verdict {
  const start = firstByte(body);
  // A notification: a JSON-RPC 2.0 node (geth) answers nothing, with an empty body.
  if (start === -1 && sentIdText === undefined) return 'ok';
  // Not an object, or one cut short (a proxy or node that ended the answer early, in a well-formed HTTP message).
  if (start !== 0x7b || lastByte(body) !== 0x7d) return 'bad';
  const end = sentIdText === undefined ? -1 : idEnd(body, sentIdText);
  if (sentIdText !== undefined && end < 0 && !answersCall(body, sentIdText)) return 'bad';
  // `"id":…,"result":` (as nodes write it): no search of the whole answer for an error.
  if (end > 0 && resultFollows(body, end)) return 'ok';
  return judgeError(rpcErrorOf(body));
}

/**
 * Judges a node's answer to a batch, as split by splitBatchAnswer (null: not a batch answer, or
 * an answer under an id that is not one of the calls sent): a failed node (another one is
 * tried, nothing is kept), a call that asks for an archive node, or a busy node when any member
 * was refused for want of capacity (a provider's limit often cuts a batch part way: another node
 * may answer it whole; the pool re-sends no batch holding a write).
 */
export function judgeBatch(answers: ReadonlyMap<number, MemberAnswer> | null): Verdict {
  if (answers === null) return 'bad';
  let busy = false;
  for (const a of answers.values()) {
    const verdict = judgeError(a.error);
    if (verdict === 'archive') return 'archive';
    if (verdict === 'busy') busy = true;
  }
  return busy ? 'busy' : 'ok';
}

const isBlank = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

function firstByte(body: Buffer): number {
  for (let i = 0; i < body.length; i++) if (!isBlank(body[i] as number)) return body[i] as number;
  return -1;
}

function lastByte(body: Buffer): number {
  for (let i = body.length - 1; i >= 0; i--) if (!isBlank(body[i] as number)) return body[i] as number;
  return -1;
}

/**
 * The result an answer may be kept with, as JSON text; null when it may not: an error, a null
 * result, data not yet final (by the finalized block of `upstream`, the node that answered: see
 * ChainHeads.finalizedBy), or an answer that depends on a head that moved while it was asked or
 * that `upstream` had not reached.
 */
export function keepableResult(
  body: Buffer | string,
  method: string,
  shape: CallShape,
  heads: ChainHeads,
  epochAsked: number,
  upstream: string,
): string | null {
  if (!shape.cacheable || !heads.saidChainNetwork(upstream)) return null;
  let resultText: string;
  try {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    const members = objectMembers(text, documentStart(text));
    const error = members.get('error');
    if (error !== undefined && text.slice(error[0], error[1]) !== 'null') return null;
    const span = members.get('result');
    if (span === undefined) return null;
    resultText = text.slice(span[0], span[1]);
  } catch {
    return null;
  }
  if (resultText === 'null') return null;
  switch (shape.kind) {
    case 'static':
      return resultText;
    case 'head':
      // Kept for every caller until the head moves: only the head's own answer (not a node's a few blocks behind).
      if (heads.best === null || heads.epoch !== epochAsked || !heads.isAtBest(upstream)) return null;
      // A node ahead of the tracked head: the head moved and the next poll will say so.
      return method !== 'eth_blockNumber' || resultText === `"0x${heads.best.toString(16)}"` ? resultText : null;
    case 'number': {
      const finalized = heads.finalizedBy(upstream);
      return finalized !== null && shape.high <= finalized ? resultText : null;
    }
    case 'recent': {
      // Solana: final once the slot it is of is finalized, the one the call names (getBlock…) or, where it names none, its answer's (getTransaction).
      const finalized = heads.finalizedBy(upstream);
      const slot = shape.high >= 0 ? shape.high : slotOfResultText(resultText);
      return finalized !== null && slot !== null && slot <= finalized ? resultText : null;
    }
    case 'hash': {
      const finalized = heads.finalizedBy(upstream);
      if (finalized === null) return null;
      // The scans that judged the answer do not read into the result: it may still be malformed.
      let result: unknown;
      try {
        result = JSON.parse(resultText);
      } catch {
        return null;
      }
      const block = blockOfResult(result);
      return block !== null && block <= finalized ? resultText : null;
    }
    default:
      return null;
  }
}

/** Whether an answer to a call of this shape could be kept now: no key is built, and no lookup made, for one that could not. */
export function mayKeep(shape: CallShape, heads: ChainHeads): boolean {
  if (!shape.cacheable) return false;
  if (shape.kind === 'head') return heads.best !== null;
  if (shape.kind === 'number' || shape.kind === 'recent') return heads.finalized !== null && shape.high <= heads.finalized;
  return shape.kind === 'static' || heads.finalized !== null;
}

/** The `slot` a Solana result names (a transaction's), or null. */
function slotOfResultText(resultText: string): number | null {
  let result: unknown;
  try {
    result = JSON.parse(resultText);
  } catch {
    return null;
  }
  const slot = typeof result === 'object' && result !== null ? (result as { slot?: unknown }).slot : undefined;
  return typeof slot === 'number' && Number.isSafeInteger(slot) && slot >= 0 ? slot : null;
}

/** A kept result as the answer to a caller's id. */
export const answerWithResult = (idText: string, resultText: string): string => `{"jsonrpc":"2.0","id":${idText},"result":${resultText}}`;
