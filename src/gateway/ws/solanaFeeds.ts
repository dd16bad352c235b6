import { randomInt } from 'node:crypto';
import type { Chain } from '../chains.js';
import { RpcCode } from '../errors.js';
import { type ChainFeeds, type FeedRefusal, type OpenedFeed, type PubSubDialect, passthrough, SharedFeeds } from './pubsub.js';
import { UpstreamSocket, type UpstreamSocketLog } from './upstreamSocket.js';

/**
 * Solana's pubsub (`slotSubscribe`, `accountSubscribe`, `logsSubscribe` and their unsubscribes),
 * one upstream subscription per distinct (kind, params) shared by every client (pubsub.ts), with
 * the node's shapes: integer subscription ids, `<kind>Notification` frames, and an unknown id's
 * unsubscribe answered with -32602 "Invalid subscription id.".
 */

type SolanaKind = 'slot' | 'account' | 'logs';

const SUBSCRIBE: Record<string, SolanaKind> = { slotSubscribe: 'slot', accountSubscribe: 'account', logsSubscribe: 'logs' };
const UNSUBSCRIBE = new Set(['slotUnsubscribe', 'accountUnsubscribe', 'logsUnsubscribe']);
/** The other subscription methods a Solana node has (programSubscribe, signatureSubscribe, rootSubscribe…): refused, not sent over HTTP. */
const OTHER_SUBSCRIPTION_METHOD = /^[a-z][A-Za-z]*(Subscribe|Unsubscribe)$/;
const SUPPORTED = 'slotSubscribe, accountSubscribe and logsSubscribe';

/** Client subscription ids: random integers below 2^48, exact as JavaScript numbers. */
const MAX_SUBSCRIPTION_ID = 2 ** 48;

export const SOLANA_PUBSUB: PubSubDialect = {
  roleOf(method) {
    if (SUBSCRIBE[method] !== undefined) return 'subscribe';
    if (UNSUBSCRIBE.has(method)) return 'unsubscribe';
    return OTHER_SUBSCRIPTION_METHOD.test(method) ? 'unsupported' : null;
  },
  newSubscriptionId(taken) {
    let id = String(randomInt(1, MAX_SUBSCRIPTION_ID));
    while (taken(id)) id = String(randomInt(1, MAX_SUBSCRIPTION_ID));
    return id;
  },
  unsubscribeIdOf: (params) => (Array.isArray(params) && params.length === 1 && Number.isSafeInteger(params[0]) ? String(params[0]) : null),
  notSubscribed: (malformed) =>
    malformed
      ? { code: RpcCode.invalidParams, message: 'Invalid params: an unsubscribe takes [subscriptionId], the integer its subscribe answered' }
      : { code: RpcCode.invalidParams, message: 'Invalid subscription id.' },
  // @solana/web3.js sends {"jsonrpc":"2.0","method":"ping"} every 5 s; an Agave node reads it and answers nothing.
  keepAlive: 'ping',
  feedsFor: (chain, log) => new SolanaFeeds(chain, log),
};

const COMMITMENTS = new Set(['processed', 'confirmed', 'finalized']);
const ENCODINGS = new Set(['base58', 'base64', 'base64+zstd', 'jsonParsed', 'binary']);
const BASE58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

/** A public key as Solana writes it: base58 of exactly 32 bytes. */
function isPubkey(value: unknown): value is string {
  if (typeof value !== 'string' || value.length < 32 || value.length > 44) return false;
  let n = 0n;
  for (const c of value) {
    const digit = BASE58.indexOf(c);
    if (digit < 0) return false;
    n = n * 58n + BigInt(digit);
  }
  // Each leading '1' is a zero byte.
  let zeros = 0;
  while (value[zeros] === '1') zeros++;
  const hex = n === 0n ? '' : n.toString(16);
  return zeros + Math.ceil(hex.length / 2) === 32;
}

/**
 * A config object with only `allowed` keys, each valid: rebuilt in a fixed key order without
 * absent keys (so equal configs share a feed); null when empty; a string says what is wrong.
 */
function configOf(value: unknown, allowed: Record<string, Set<string>>, method: string): Record<string, string> | null | string {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) return `the ${method} config must be an object`;
  const given = value as Record<string, unknown>;
  for (const key of Object.keys(given))
    if (allowed[key] === undefined) return `${key.slice(0, 64)} is not supported in the ${method} config (${Object.keys(allowed).join(', ')} are)`;
  const out: Record<string, string> = {};
  for (const [key, values] of Object.entries(allowed)) {
    const v = given[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string' || !values.has(v)) return `${key} must be one of ${[...values].join(', ')}`;
    out[key] = v;
  }
  return Object.keys(out).length === 0 ? null : out;
}

/** A subscribe call's params, validated and normalized (the node's params and the feed's key), or what is wrong. */
function parseParams(kind: SolanaKind, params: unknown): unknown[] | { error: string } {
  const list = params === undefined || params === null ? [] : params;
  if (!Array.isArray(list)) return { error: 'params must be an array' };
  if (kind === 'slot') return list.length === 0 ? [] : { error: 'slotSubscribe takes no params' };
  if (kind === 'account') {
    if (list.length < 1 || list.length > 2) return { error: 'accountSubscribe takes [pubkey, {encoding?, commitment?}?]' };
    if (!isPubkey(list[0])) return { error: 'accountSubscribe takes a base58 public key (32 bytes) first' };
    const config = configOf(list[1], { encoding: ENCODINGS, commitment: COMMITMENTS }, 'accountSubscribe');
    if (typeof config === 'string') return { error: config };
    return config === null ? [list[0]] : [list[0], config];
  }
  if (list.length < 1 || list.length > 2) return { error: 'logsSubscribe takes [filter, {commitment?}?]' };
  const filter = list[0];
  let normalized: unknown;
  if (filter === 'all' || filter === 'allWithVotes') normalized = filter;
  else if (typeof filter === 'object' && filter !== null && !Array.isArray(filter) && Object.keys(filter).length === 1 && 'mentions' in filter) {
    const mentions = (filter as { mentions: unknown }).mentions;
    // Solana nodes take exactly one address here ("Only 1 address supported").
    if (!Array.isArray(mentions) || mentions.length !== 1 || !isPubkey(mentions[0]))
      return { error: 'logsSubscribe mentions takes exactly one base58 public key: {"mentions": [pubkey]}' };
    normalized = { mentions: [mentions[0]] };
  } else return { error: 'logsSubscribe takes "all", "allWithVotes" or {"mentions": [pubkey]} as its filter' };
  const config = configOf(list[1], { commitment: COMMITMENTS }, 'logsSubscribe');
  if (typeof config === 'string') return { error: config };
  return config === null ? [normalized] : [normalized, config];
}

/** The slot a notification's result names (`slot`, or `context.slot`). */
function slotOf(result: unknown): unknown {
  if (typeof result !== 'object' || result === null) return undefined;
  const r = result as { slot?: unknown; context?: { slot?: unknown } };
  return r.slot ?? r.context?.slot;
}

/**
 * What a resubscription may deliver twice (a node sending a slot again, or another node behind
 * the first): the same slot (and parent); an account's change at the same slot; the same
 * transaction's logs at the same slot.
 */
const KEY_OF: Record<SolanaKind, (result: unknown) => string | null> = {
  slot: (r) => (typeof slotOf(r) === 'number' ? `${slotOf(r)}:${(r as { parent?: unknown }).parent}` : null),
  account: (r) => (typeof slotOf(r) === 'number' ? String(slotOf(r)) : null),
  logs: (r) => {
    const signature = (r as { value?: { signature?: unknown } } | null)?.value?.signature;
    return typeof slotOf(r) === 'number' && typeof signature === 'string' ? `${slotOf(r)}:${signature}` : null;
  },
};

/** The feeds of one Solana chain, over one UpstreamSocket to its nodes' pubsub endpoints. */
class SolanaFeeds implements ChainFeeds {
  private readonly socket: UpstreamSocket;
  private readonly feeds = new SharedFeeds();

  constructor(chain: Chain, log: UpstreamSocketLog) {
    this.socket = UpstreamSocket.forChain(chain, log);
  }

  open(method: string, params: unknown): OpenedFeed | FeedRefusal {
    const kind = SUBSCRIBE[method];
    if (kind === undefined) return { error: `Method not found: ${method.slice(0, 64)} is not offered here (${SUPPORTED} are)`, code: RpcCode.methodNotFound };
    const parsed = parseParams(kind, params);
    if (!Array.isArray(parsed)) return { error: `Invalid params: ${parsed.error}`, code: RpcCode.invalidParams };
    const feed = this.feeds.get(`${kind}:${JSON.stringify(parsed)}`, () =>
      passthrough(this.socket, { method, params: parsed, unsubscribeMethod: `${kind}Unsubscribe` }, KEY_OF[kind]),
    );
    return { feed, notification: `${kind}Notification`, usageMethod: `${kind}Notification` };
  }

  get upstreamSubscriptions(): number {
    return this.socket.subscriptions;
  }

  close(): void {
    this.socket.close();
    this.feeds.clear();
  }
}
