import type { HeadTracking } from '../chains.js';
import { type CallShape, shapeOf } from './evmCalls.js';
import { solanaShapeOf } from './solanaCalls.js';

/** A call on a chain whose heads are not followed: nothing is known of what it depends on. */
const UNFOLLOWED_CALL: CallShape = { kind: 'other', low: -1, high: -1, cacheable: false };

/**
 * The shape of call `method` with these params (JSON text) on a chain whose heads are followed as
 * `heads` says (null: not followed), read by the chain's family: EVM by block, Solana by slot. Pure.
 */
export function callShapeOf(heads: { readonly tracking: HeadTracking } | null, method: string, paramsText: string | undefined): CallShape {
  if (heads === null) return UNFOLLOWED_CALL;
  return heads.tracking.family === 'solana' ? solanaShapeOf(method, paramsText) : shapeOf(method, paramsText);
}
