import { cutText } from '../domain/storableText.js';

/**
 * The method label of usage roll-ups. JSON-RPC methods are a small set of names; REST
 * passthrough records whole paths, which carry addresses, hashes and heights
 * (`cosmos/bank/v1beta1/balances/cosmos1…`). Counting per raw path would make one roll-up per
 * address, so segments that identify something become `{id}`: the label names the endpoint.
 * The raw method stays in the per-request rows and the recent errors.
 */
const MAX_SEGMENTS = 12;
const MAX_LABEL = 120;

const DIGITS = /^\d+$/;
const HEX = /^(0x)?[0-9a-fA-F]{16,}$/;
const HEX_PREFIXED = /^0x[0-9a-fA-F]*$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const HAS_DIGIT = /\d/;
/** Path words are short: version tags (`v1beta1`) and names (`delegation_responses`) have no long mix of letters and digits. */
const LONG_TOKEN = 20;

/** True for a path segment that names one item rather than an endpoint. */
export function isIdentifierSegment(segment: string): boolean {
  if (segment === '') return false;
  if (DIGITS.test(segment) || HEX.test(segment) || HEX_PREFIXED.test(segment) || UUID.test(segment)) return true;
  // Base58 (Solana, TRON), bech32 (cosmos1…, sei1…), kaspa:… addresses, base64 hashes.
  if (segment.length >= LONG_TOKEN && HAS_DIGIT.test(segment)) return true;
  // Percent-encoded values (an address or a query put in the path) are never endpoint names.
  return segment.includes('%') || segment.includes('=');
}

/** The bounded label a method or REST path is counted under. */
export function methodLabel(method: string): string {
  const trimmed = method.trim();
  if (trimmed === '') return '(none)';
  if (!trimmed.includes('/')) return cutText(isIdentifierSegment(trimmed) ? '{id}' : trimmed, MAX_LABEL);
  const segments = trimmed.split('/').filter((s) => s !== '');
  const kept = segments.slice(0, MAX_SEGMENTS).map((s) => (isIdentifierSegment(s) ? '{id}' : s));
  if (segments.length > MAX_SEGMENTS) kept.push('…');
  // cutText: half an emoji is text PostgreSQL's jsonb refuses (src/domain/storableText.ts).
  return cutText(kept.join('/'), MAX_LABEL);
}
