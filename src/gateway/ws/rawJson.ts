import { documentStart, JsonScanError, objectMembers } from '../jsonScan.js';

/**
 * A notification's `params.result` as the node wrote it, cut from the frame's text: parsed and
 * serialized again, an integer beyond 2^53 would change (a Solana account's `rentEpoch` is
 * u64::MAX, 18446744073709551615, which would come out as 18446744073709552000, no u64 at all).
 * The text must be valid JSON (the caller parsed it already); null when there is no such member.
 */
export function rawResultOf(text: string): string | null {
  try {
    const start = documentStart(text);
    if (text.charCodeAt(start) !== 0x7b /* { */) return null;
    const params = objectMembers(text, start).get('params');
    if (params === undefined || text.charCodeAt(params[0]) !== 0x7b) return null;
    const result = objectMembers(text, params[0]).get('result');
    return result === undefined ? null : text.slice(result[0], result[1]);
  } catch (error) {
    if (error instanceof JsonScanError) return null;
    throw error;
  }
}
