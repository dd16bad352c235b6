import type { HeadAnswerKind } from './headAnswers.js';

/**
 * What an EVM JSON-RPC read depends on, from its method and params: the head (`latest`, no block
 * argument), an explicit block number, a block or transaction hash, or nothing that changes.
 * Routing (lagging and archive nodes) and the response cache both read it. Pure.
 */

/**
 * static: nothing that changes on one chain (`eth_chainId`); head: `latest` or no block argument;
 * volatile: `pending`, `safe`, `finalized` (may change without the head moving); number: explicit
 * block numbers `low`..`high`; hash: a block or transaction hash (final once its block is);
 * other: an unknown method or params not read here (routed anywhere, never cached); recent: a
 * call on a chain followed by slot (Solana), which reads the node's newest state (no lagging
 * node; the nodes within the lag are all as good: slots move too fast to prefer the one polled
 * highest), never cached.
 */
export type CallKind = 'static' | 'head' | 'volatile' | 'number' | 'hash' | 'other' | 'recent';

export interface CallShape {
  kind: CallKind;
  low: number;
  high: number;
  /** Whether an answer may be kept (subject to the kind's finality rule). */
  cacheable: boolean;
  /** The block argument is the `finalized` or `safe` tag (a volatile call whose answer names the node's block of that level). */
  blockTag?: 'finalized' | 'safe';
  /** A head call not read from its method alone (Solana's `getSlot`, by its commitment). */
  headAnswer?: HeadAnswerKind;
}

const OTHER: CallShape = { kind: 'other', low: -1, high: -1, cacheable: false };
const STATIC: CallShape = { kind: 'static', low: -1, high: -1, cacheable: true };
const HEAD_CACHED: CallShape = { kind: 'head', low: -1, high: -1, cacheable: true };
const HEAD_UNCACHED: CallShape = { kind: 'head', low: -1, high: -1, cacheable: false };
const VOLATILE: CallShape = { kind: 'volatile', low: -1, high: -1, cacheable: false };
const FINALIZED_TAG: CallShape = { kind: 'volatile', low: -1, high: -1, cacheable: false, blockTag: 'finalized' };
const SAFE_TAG: CallShape = { kind: 'volatile', low: -1, high: -1, cacheable: false, blockTag: 'safe' };
const HASH_CACHED: CallShape = { kind: 'hash', low: -1, high: -1, cacheable: true };
const HASH_UNCACHED: CallShape = { kind: 'hash', low: -1, high: -1, cacheable: false };

/**
 * Methods read here: where their block argument is (-1: none; the head), and whether an answer may
 * be cached. `eth_estimateGas` and the fee methods depend on the head but are estimates the
 * node may change at will: routed like head calls, never cached.
 */
interface MethodSpec {
  blockParam: number;
  cacheable: boolean;
  byHash?: boolean;
  isStatic?: boolean;
  isLogs?: boolean;
}

const METHODS = new Map<string, MethodSpec>([
  ['eth_chainId', { blockParam: -1, cacheable: true, isStatic: true }],
  ['net_version', { blockParam: -1, cacheable: true, isStatic: true }],
  ['eth_blockNumber', { blockParam: -1, cacheable: true }],
  ['eth_gasPrice', { blockParam: -1, cacheable: false }],
  ['eth_maxPriorityFeePerGas', { blockParam: -1, cacheable: false }],
  ['eth_blobBaseFee', { blockParam: -1, cacheable: false }],
  ['eth_feeHistory', { blockParam: 1, cacheable: false }],
  ['eth_estimateGas', { blockParam: 1, cacheable: false }],
  ['eth_getBlockByNumber', { blockParam: 0, cacheable: true }],
  ['eth_getBlockTransactionCountByNumber', { blockParam: 0, cacheable: true }],
  ['eth_getTransactionByBlockNumberAndIndex', { blockParam: 0, cacheable: true }],
  ['eth_getUncleByBlockNumberAndIndex', { blockParam: 0, cacheable: true }],
  ['eth_getUncleCountByBlockNumber', { blockParam: 0, cacheable: true }],
  ['eth_getBlockReceipts', { blockParam: 0, cacheable: true }],
  ['eth_getBalance', { blockParam: 1, cacheable: true }],
  ['eth_getCode', { blockParam: 1, cacheable: true }],
  ['eth_getTransactionCount', { blockParam: 1, cacheable: true }],
  ['eth_call', { blockParam: 1, cacheable: true }],
  ['eth_getStorageAt', { blockParam: 2, cacheable: true }],
  ['eth_getProof', { blockParam: 2, cacheable: true }],
  ['eth_getLogs', { blockParam: -1, cacheable: true, isLogs: true }],
  ['eth_getBlockByHash', { blockParam: -1, cacheable: true, byHash: true }],
  ['eth_getTransactionByHash', { blockParam: -1, cacheable: true, byHash: true }],
  ['eth_getTransactionReceipt', { blockParam: -1, cacheable: true, byHash: true }],
  ['eth_getBlockTransactionCountByHash', { blockParam: -1, cacheable: true, byHash: true }],
  ['eth_getTransactionByBlockHashAndIndex', { blockParam: -1, cacheable: true, byHash: true }],
  ['eth_getUncleByBlockHashAndIndex', { blockParam: -1, cacheable: true, byHash: true }],
  ['eth_getUncleCountByBlockHash', { blockParam: -1, cacheable: true, byHash: true }],
]);

/**
 * A devnet's control calls (ganache, hardhat, anvil): they may rewind blocks the node called
 * final (evm_revert, *_reset) or change state without a new block (hardhat_setBalance).
 */
export const rewritesHistory = (method: string): boolean => /^(evm|hardhat|anvil)_/.test(method);

/** Calls whose answers depend on state kept by one node (filters, subscriptions): never shared between callers. */
const STATEFUL = /filter|subscribe/i;

const shareable = new Map<string, boolean>();
/** Methods remembered: bounded, since a chain that allows `*` lets callers send any name. */
const SHAREABLE_REMEMBERED = 1_000;

/** One Map lookup per call (the pattern is tested once per method name). */
export function isShareable(method: string): boolean {
  const known = shareable.get(method);
  if (known !== undefined) return known;
  const answer = !STATEFUL.test(method);
  if (shareable.size < SHAREABLE_REMEMBERED) shareable.set(method, answer);
  return answer;
}

const HEX_QUANTITY = /^0x(0|[1-9a-f][0-9a-f]{0,12})$/i;

/** A block quantity (`0x…`, at most 2^52) as a number, or null. */
export function blockNumberOf(value: unknown): number | null {
  if (typeof value !== 'string' || !HEX_QUANTITY.test(value)) return null;
  return Number.parseInt(value.slice(2), 16);
}

/** A block's `timestamp` (seconds, a quantity) as ms, or null. */
export function blockTimeOf(value: unknown): number | null {
  const seconds = blockNumberOf(value);
  return seconds === null ? null : seconds * 1000;
}

function blockArgument(value: unknown, spec: MethodSpec): CallShape {
  if (value === undefined || value === 'latest') return spec.cacheable ? HEAD_CACHED : HEAD_UNCACHED;
  if (value === 'finalized') return FINALIZED_TAG;
  if (value === 'safe') return SAFE_TAG;
  if (value === 'pending') return VOLATILE;
  if (value === 'earliest') return { kind: 'number', low: 0, high: 0, cacheable: spec.cacheable };
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    // EIP-1898: { blockNumber } or { blockHash, requireCanonical }.
    const o = value as Record<string, unknown>;
    if (typeof o.blockHash === 'string') return HASH_UNCACHED;
    return blockArgument(o.blockNumber, spec);
  }
  const n = blockNumberOf(value);
  return n === null ? OTHER : { kind: 'number', low: n, high: n, cacheable: spec.cacheable };
}

function logsShape(filter: unknown): CallShape {
  if (typeof filter !== 'object' || filter === null || Array.isArray(filter)) return OTHER;
  const f = filter as Record<string, unknown>;
  // The answer names no block to judge its finality by when it is empty: kept only by number.
  if (typeof f.blockHash === 'string') return HASH_UNCACHED;
  const spec = METHODS.get('eth_getLogs') as MethodSpec;
  const from = blockArgument(f.fromBlock, spec);
  const to = blockArgument(f.toBlock, spec);
  if (from.kind === 'other' || to.kind === 'other') return OTHER;
  if (from.kind === 'volatile' || to.kind === 'volatile') return VOLATILE;
  if (from.kind === 'number' && to.kind === 'number') {
    return { kind: 'number', low: Math.min(from.low, to.low), high: Math.max(from.high, to.high), cacheable: true };
  }
  // A range open at the head: its lowest block still decides whether an archive node is needed.
  return from.kind === 'number' ? { kind: 'head', low: from.low, high: -1, cacheable: true } : HEAD_CACHED;
}

/** What a call depends on. Only methods in the table have their params read (a small JSON.parse). */
export function shapeOf(method: string, paramsText: string | undefined): CallShape {
  const spec = METHODS.get(method);
  if (spec === undefined) return OTHER;
  if (spec.isStatic) return STATIC;
  if (spec.blockParam < 0 && !spec.byHash && !spec.isLogs) return spec.cacheable ? HEAD_CACHED : HEAD_UNCACHED;
  let params: unknown;
  try {
    params = paramsText === undefined ? [] : JSON.parse(paramsText);
  } catch {
    return OTHER;
  }
  if (!Array.isArray(params)) return OTHER;
  if (spec.byHash) return typeof params[0] === 'string' ? (spec.cacheable ? HASH_CACHED : HASH_UNCACHED) : OTHER;
  if (spec.isLogs) return logsShape(params[0]);
  return blockArgument(params[spec.blockParam], spec);
}

/**
 * What calls sent together (a batch) depend on, for routing: the head when any of them does, the
 * oldest block any of them asks (an archive node for old state) and the newest (a node that has
 * it). Never cacheable: a batch's answer is kept member by member.
 */
export function shapeOfAll(shapes: readonly CallShape[]): CallShape {
  let head = false;
  let recent = false;
  let numbered = false;
  let low = -1;
  let high = -1;
  for (const s of shapes) {
    if (s.kind === 'head' || s.kind === 'volatile') head = true;
    else if (s.kind === 'number' || s.kind === 'hash') numbered = true;
    else if (s.kind === 'recent') recent = true;
    if (s.low >= 0 && (low < 0 || s.low < low)) low = s.low;
    if (s.high > high) high = s.high;
  }
  return { kind: head ? 'head' : numbered ? 'number' : recent ? 'recent' : 'other', low, high, cacheable: false };
}

/**
 * The block a hash-addressed answer lies in (a block's `number`, a transaction's or receipt's
 * `blockNumber`), or null: not yet mined, not found, or not an object.
 */
export function blockOfResult(result: unknown): number | null {
  if (typeof result !== 'object' || result === null || Array.isArray(result)) return null;
  const r = result as Record<string, unknown>;
  return blockNumberOf(r.blockNumber) ?? blockNumberOf(r.number);
}
