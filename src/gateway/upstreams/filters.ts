import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { Upstream } from '../chains.js';
import { documentStart, objectMembers } from '../jsonScan.js';

/**
 * EVM filters (eth_newFilter, eth_newBlockFilter, eth_newPendingTransactionFilter) are state of
 * the one node that made them: a poll answered by another node is "filter not found", or
 * another caller's filter where nodes number them 0x1, 0x2… (ganache, Nethermind, Hardhat).
 * The filter id the caller gets names its node and its caller: `0x` + a tag of 8 hex digits + the
 * node's own id's digits, the tag a keyed hash of the calling token's id and the node's id under
 * a key of the node's configuration (its label, URL and headers: so a reordered config keeps it,
 * and a caller cannot compute it for a node whose address it does not know). A call that uses
 * the id is sent to the node whose tag it carries for the calling token, with the node's own
 * id; an id that carries no tag of this caller's reaches no node (docs/decisions.md, "Follow-ups
 * of the EVM audit"). With a secret shared by the gateways (FILTER_ID_SECRET), the key is also
 * keyed by it, so no caller can compute a tag even for a node whose URL is public
 * (docs/decisions.md, "A secret in the filter ids' key"). No state in the gateway: any instance
 * (with the same secret) routes a poll, and a restart loses nothing. Pure.
 */

const CREATES = new Set(['eth_newFilter', 'eth_newBlockFilter', 'eth_newPendingTransactionFilter']);
const USES = new Set(['eth_getFilterChanges', 'eth_getFilterLogs', 'eth_uninstallFilter']);

/** Whether a method creates a filter (its answer's id gets the node's tag). */
export const createsFilter = (method: string): boolean => CREATES.has(method);
/** Whether a method acts on a filter by its id (sent to the node that holds it). */
export const usesFilter = (method: string): boolean => USES.has(method);

/** What a node answers for a filter it does not hold (geth's code and words): the answer to an id that is not the caller's. */
export const FILTER_NOT_FOUND = { code: -32000, message: 'filter not found' } as const;

/** Hex digits of a tag: ~32 bits, so a guessed tag is right about once in 4 billion tries. */
const TAG_DIGITS = 8;

/**
 * The key of each node's tags, in order: a hash of what the configuration says of it (label,
 * URL, headers: a provider's key, Basic credentials), none of which a caller is shown but the
 * label; with `secret` (FILTER_ID_SECRET, the same on every gateway), an HMAC of the same under
 * it, which no caller can compute whatever it knows of the node. Without one, the plain hash, as
 * before the setting existed: the filters made then are still found.
 */
export function filterKeys(upstreams: ReadonlyArray<Pick<Upstream, 'label' | 'url' | 'headers'>>, secret: string | null): Buffer[] {
  return upstreams.map((u) => {
    const headers = Object.entries(u.headers)
      .map(([name, value]): [string, string] => [name.toLowerCase(), value])
      .sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
    const node = JSON.stringify(['chain-gateway filter id', u.label, u.url.href, headers]);
    return (secret === null ? createHash('sha256') : createHmac('sha256', secret)).update(node).digest();
  });
}

/**
 * The tag of filter `digits` (the node's id, without 0x) made by token `tokenId` on the node of
 * `key` (the digits in either case). Its first digit is never 0: web3.js (v4) reads a filter id as
 * a number and sends it back as `0x` + its digits without leading zeros, in lower case.
 */
export function filterTag(key: Buffer, tokenId: string, digits: string): string {
  const hex = createHmac('sha256', key).update(`${tokenId}\u0000${digits.toLowerCase()}`).digest('hex');
  return hex.charCodeAt(0) === 0x30 ? `1${hex.slice(1, TAG_DIGITS)}` : hex.slice(0, TAG_DIGITS);
}

const NODE_ID = /^"0x([0-9a-fA-F]{1,128})"$/;
const TAGGED_ID = new RegExp(`^0x([1-9a-f][0-9a-f]{${TAG_DIGITS - 1}})([0-9a-fA-F]{1,128})$`);

/**
 * A node's answer to a filter's creation with the id tagged for the caller and the node (`key`);
 * unchanged when it is not a result holding a hex id (an error, or a node with ids of another
 * form, which no call can then use: none is known).
 */
export function tagFilterAnswer(body: Buffer, key: Buffer, tokenId: string): Buffer {
  const text = body.toString('utf8');
  try {
    const span = objectMembers(text, documentStart(text)).get('result');
    if (span === undefined) return body;
    const digits = NODE_ID.exec(text.slice(span[0], span[1]))?.[1];
    if (digits === undefined) return body;
    return Buffer.from(`${text.slice(0, span[0])}"0x${filterTag(key, tokenId, digits)}${digits}"${text.slice(span[1])}`);
  } catch {
    return body;
  }
}

/**
 * Where a call on a filter goes: `none` when it names no filter (no params, or `[]`: the node
 * says what is missing), the node (its index among `keys`, the pool's nodes in order) and the
 * params with the node's own id when the id carries the tag `tokenId` got from that node, and
 * `unknown` otherwise (another caller's id, a guessed one, an id in another form: ganache takes
 * `1` and `"0x01"` for its filter 0x1): answered as the node answers an unknown filter, sent to
 * no node. Cost: one HMAC per node of the pool.
 */
export function filterRoute(
  paramsText: string | undefined,
  keys: readonly Buffer[],
  tokenId: string,
): { node: number; paramsText: string } | 'none' | 'unknown' {
  if (paramsText === undefined) return 'none';
  let params: unknown;
  try {
    params = JSON.parse(paramsText);
  } catch {
    return 'unknown';
  }
  if (Array.isArray(params) && params.length === 0) return 'none';
  if (!Array.isArray(params) || typeof params[0] !== 'string') return 'unknown';
  const match = TAGGED_ID.exec(params[0]);
  if (match === null) return 'unknown';
  const given = Buffer.from(match[1] as string);
  const digits = match[2] as string;
  for (const [node, key] of keys.entries()) {
    if (timingSafeEqual(Buffer.from(filterTag(key, tokenId, digits)), given)) {
      return { node, paramsText: JSON.stringify([`0x${digits}`, ...params.slice(1)]) };
    }
  }
  return 'unknown';
}
