import type { CallShape } from './evmCalls.js';

/**
 * What a Solana call depends on, for routing by slot (heads.ts follows Solana nodes' slots): the
 * node's newest state, no lagging node (`recent`); where the call names a slot (a block's, or a
 * `minContextSlot`), preferably a node whose slot is known to have reached it (`high`); whether it
 * is a head call (`getSlot` at `processed`, `confirmed` or `finalized`); and whether its answer
 * may be kept once final (`cacheable`: a block's, a block time, at a finalized slot; a
 * transaction, once the slot its answer names is finalized). Pure.
 */

/** A call on a Solana chain that names no slot. */
export const RECENT_CALL: CallShape = { kind: 'recent', low: -1, high: -1, cacheable: false };

/** `getSlot` at the commitments the gateway follows: its answer is the node's head, or its finalized slot. */
const PROCESSED_SLOT_CALL: CallShape = { kind: 'recent', low: -1, high: -1, cacheable: false, headAnswer: 'slot' };
const CONFIRMED_SLOT_CALL: CallShape = { kind: 'recent', low: -1, high: -1, cacheable: false, headAnswer: 'confirmedSlot' };
const FINALIZED_SLOT_CALL: CallShape = { kind: 'recent', low: -1, high: -1, cacheable: false, headAnswer: 'finalizedSlot' };

/** Methods whose first param is a slot (getBlocks: a range's start, its end the second). */
const SLOT_FIRST = new Set(['getBlock', 'getBlockTime', 'getBlockCommitment', 'getBlocks', 'getBlocksWithLimit']);

/**
 * Methods answered the same for ever once the slot they name is finalized. Not getBlocks: a node
 * whose ledger starts after the range's start answers a shorter list, or none, and no error.
 */
const FINAL_AT_SLOT = new Set(['getBlock', 'getBlockTime']);

/** A transaction by its signature: the same for ever once the slot its answer names is finalized (keepableResult reads it). */
const TRANSACTION_CALL: CallShape = { kind: 'recent', low: -1, high: -1, cacheable: true };

/** The shape of Solana call `method` with these params (JSON text); only params that may name a slot are read. */
export function solanaShapeOf(method: string, paramsText: string | undefined): CallShape {
  if (method === 'getTransaction') return TRANSACTION_CALL;
  const slotFirst = SLOT_FIRST.has(method);
  if (paramsText === undefined || (!slotFirst && method !== 'getSlot' && !paramsText.includes('minContextSlot'))) {
    return method === 'getSlot' ? FINALIZED_SLOT_CALL : RECENT_CALL;
  }
  let params: unknown;
  try {
    params = JSON.parse(paramsText);
  } catch {
    return RECENT_CALL;
  }
  if (!Array.isArray(params)) return RECENT_CALL;
  if (method === 'getSlot') {
    const commitment = commitmentOf(params[0]);
    return commitment === 'processed'
      ? PROCESSED_SLOT_CALL
      : commitment === 'confirmed'
        ? CONFIRMED_SLOT_CALL
        : commitment === 'finalized'
          ? FINALIZED_SLOT_CALL
          : RECENT_CALL;
  }
  let high = slotFirst && isSlot(params[0]) ? params[0] : -1;
  if (method === 'getBlocks' && isSlot(params[1])) high = Math.max(high, params[1]);
  for (const p of params) {
    const min = typeof p === 'object' && p !== null ? (p as { minContextSlot?: unknown }).minContextSlot : undefined;
    if (isSlot(min)) high = Math.max(high, min);
  }
  if (high < 0) return RECENT_CALL;
  return { kind: 'recent', low: -1, high, cacheable: FINAL_AT_SLOT.has(method) && isSlot(params[0]) };
}

const isSlot = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** A call's commitment (its config object's), Agave's default `finalized` when it names none; the deprecated names mapped. */
function commitmentOf(config: unknown): string {
  const named = typeof config === 'object' && config !== null ? (config as { commitment?: unknown }).commitment : undefined;
  if (named === undefined) return 'finalized';
  if (named === 'recent') return 'processed';
  if (named === 'single' || named === 'singleGossip') return 'confirmed';
  if (named === 'max' || named === 'root') return 'finalized';
  return typeof named === 'string' ? named : '';
}

/** Agave's answer to a call whose `minContextSlot` the node has not reached (JSON-RPC error -32016). */
export function isMinContextSlotNotReached(code: number | null | undefined, message: string | null | undefined): boolean {
  return code === -32016 && typeof message === 'string' && /minimum context slot/i.test(message);
}
