import type { CallShape } from './evmCalls.js';

/**
 * What a Solana call depends on, for routing by slot (heads.ts follows Solana nodes' slots): the
 * node's newest state, no lagging node (`recent`), and where the call names a `minContextSlot`,
 * preferably a node whose slot is known to have reached it (`high`). Pure.
 */

/** A call on a Solana chain that names no slot. */
export const RECENT_CALL: CallShape = { kind: 'recent', low: -1, high: -1, cacheable: false };

const MIN_CONTEXT_SLOT = /"minContextSlot"\s*:\s*([0-9]{1,16})[\s,}]/;

/** The shape of a Solana call with these params (JSON text); only params naming `minContextSlot` are read. */
export function solanaShapeOf(paramsText: string | undefined): CallShape {
  if (paramsText === undefined || !paramsText.includes('minContextSlot')) return RECENT_CALL;
  const found = MIN_CONTEXT_SLOT.exec(paramsText);
  const slot = found === null ? Number.NaN : Number(found[1]);
  return Number.isSafeInteger(slot) ? { kind: 'recent', low: -1, high: slot, cacheable: false } : RECENT_CALL;
}

/** Agave's answer to a call whose `minContextSlot` the node has not reached (JSON-RPC error -32016). */
export function isMinContextSlotNotReached(code: number | null | undefined, message: string | null | undefined): boolean {
  return code === -32016 && typeof message === 'string' && /minimum context slot/i.test(message);
}
