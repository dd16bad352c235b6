import { createHash } from 'node:crypto';
import { documentStart, objectMembers } from '../jsonScan.js';

/**
 * EVM filters (eth_newFilter, eth_newBlockFilter, eth_newPendingTransactionFilter) are state of
 * the one node that made them: a poll answered by another node is "filter not found", or
 * another caller's filter where nodes number them 0x1, 0x2… (ganache, Nethermind, Hardhat).
 * The filter id the caller gets names its node: `0x` + a tag of 4 hex digits (from the node's
 * label, so a reordered config keeps it) + the node's own id's digits. The calls that use the
 * id are sent to that node alone, with the node's own id. No state in the gateway: any
 * instance routes a poll, and a restart loses nothing. Pure.
 */

const CREATES = new Set(['eth_newFilter', 'eth_newBlockFilter', 'eth_newPendingTransactionFilter']);
const USES = new Set(['eth_getFilterChanges', 'eth_getFilterLogs', 'eth_uninstallFilter']);

/** Whether a method creates a filter (its answer's id gets the node's tag). */
export const createsFilter = (method: string): boolean => CREATES.has(method);
/** Whether a method acts on a filter by its id (sent to the node that holds it). */
export const usesFilter = (method: string): boolean => USES.has(method);

const tagOf = (text: string): string => createHash('sha256').update(text).digest('hex').slice(0, 4);

/**
 * The tags of a chain's nodes, in order: 4 hex digits of their label's hash (a label another
 * node's tag already took, one in 65,536, hashes again with a count).
 */
export function filterTags(labels: readonly string[]): string[] {
  const tags: string[] = [];
  for (const label of labels) {
    let tag = tagOf(label);
    for (let n = 1; tags.includes(tag); n++) tag = tagOf(`${label}\u0000${n}`);
    tags.push(tag);
  }
  return tags;
}

const NODE_ID = /^"0x([0-9a-fA-F]{1,128})"$/;
const TAGGED_ID = /^0x([0-9a-f]{4})([0-9a-fA-F]{1,128})$/;

/**
 * A node's answer to a filter's creation with the id tagged as the node's; unchanged when it is
 * not a result holding a hex id (an error, or a node with ids of another form: polls of those
 * go to any node, as before).
 */
export function tagFilterAnswer(body: Buffer, tag: string): Buffer {
  const text = body.toString('utf8');
  try {
    const span = objectMembers(text, documentStart(text)).get('result');
    if (span === undefined) return body;
    const digits = NODE_ID.exec(text.slice(span[0], span[1]))?.[1];
    if (digits === undefined) return body;
    return Buffer.from(`${text.slice(0, span[0])}"0x${tag}${digits}"${text.slice(span[1])}`);
  } catch {
    return body;
  }
}

/**
 * Where a call on a filter goes: the index of the node its id names (among `tags`, the pool's
 * nodes in order) and its params with the node's own id; null when the id names no node of the
 * pool (not one the gateway gave): the call goes as it is.
 */
export function filterRoute(paramsText: string | undefined, tags: readonly string[]): { node: number; paramsText: string } | null {
  if (paramsText === undefined) return null;
  let params: unknown;
  try {
    params = JSON.parse(paramsText);
  } catch {
    return null;
  }
  if (!Array.isArray(params) || typeof params[0] !== 'string') return null;
  const match = TAGGED_ID.exec(params[0]);
  if (match === null) return null;
  const node = tags.indexOf(match[1] as string);
  if (node < 0) return null;
  return { node, paramsText: JSON.stringify([`0x${match[2]}`, ...params.slice(1)]) };
}
