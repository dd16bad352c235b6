import { randomInt } from 'node:crypto';
import type { Chain } from '../chains.js';
import { RpcCode } from '../errors.js';
import { type ChainFeeds, type Deliver, type FeedRefusal, type OpenedFeed, type PubSubDialect, passthrough, SharedFeeds } from './pubsub.js';
import { type NodeVerdicts, UpstreamSocket, type UpstreamSocketLog } from './upstreamSocket.js';

/**
 * Solana's pubsub (`slotSubscribe`, `rootSubscribe`, `slotsUpdatesSubscribe`, `accountSubscribe`,
 * `logsSubscribe`, `programSubscribe`, `signatureSubscribe` and their unsubscribes), one upstream
 * subscription per distinct (kind, params) shared by every client (pubsub.ts), with the node's
 * shapes: integer subscription ids, `<kind>Notification` frames, and an unknown id's unsubscribe
 * answered with -32602 "Invalid subscription id.". A signature subscription is one-shot, as on the
 * node: its notification of the transaction's status (not a `"receivedSignature"` one) is its
 * last; the node ends it, and so does the gateway for every client of it, without an unsubscribe
 * from them.
 */

type SolanaKind = 'slot' | 'root' | 'slotsUpdates' | 'account' | 'logs' | 'program' | 'signature';

const SUBSCRIBE: Record<string, SolanaKind> = {
  slotSubscribe: 'slot',
  rootSubscribe: 'root',
  slotsUpdatesSubscribe: 'slotsUpdates',
  accountSubscribe: 'account',
  logsSubscribe: 'logs',
  programSubscribe: 'program',
  signatureSubscribe: 'signature',
};
const UNSUBSCRIBE = new Set(Object.values(SUBSCRIBE).map((kind) => `${kind}Unsubscribe`));
/**
 * The other subscription methods a Solana node has (blockSubscribe, voteSubscribe: a node serves
 * them only when started with unstable flags, so most do not): refused, not sent over HTTP.
 */
const OTHER_SUBSCRIPTION_METHOD = /^[a-z][A-Za-z]*(Subscribe|Unsubscribe)$/;
const SUPPORTED = 'slotSubscribe, rootSubscribe, slotsUpdatesSubscribe, accountSubscribe, logsSubscribe, programSubscribe and signatureSubscribe';

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
  feedsFor: (chain, log, verdicts) => new SolanaFeeds(chain, log, verdicts),
};

const COMMITMENTS = new Set(['processed', 'confirmed', 'finalized']);
const ENCODINGS = new Set(['base58', 'base64', 'base64+zstd', 'jsonParsed', 'binary']);
const BASE58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

/** A public key as Solana writes it: base58 of exactly 32 bytes. */
const isPubkey = (value: unknown): value is string => isBase58Of(value, 32);
/** A transaction signature as Solana writes it: base58 of exactly 64 bytes. */
const isSignature = (value: unknown): value is string => isBase58Of(value, 64);

/** Base58 of exactly `bytes` bytes (each leading zero byte a '1', so at least `bytes` characters). */
function isBase58Of(value: unknown, bytes: number): value is string {
  if (typeof value !== 'string' || value.length < bytes || value.length > Math.ceil((bytes * Math.log(256)) / Math.log(58))) return false;
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
  return zeros + Math.ceil(hex.length / 2) === bytes;
}

/** What a config key takes: one of these strings; a boolean (`false`, the node's default, dropped); programSubscribe's filters. */
type Check = Set<string> | 'flag' | 'filters';

/** Filters one programSubscribe takes at most, and the bytes one memcmp compares at most (Agave's limits). */
const MAX_FILTERS = 4;
const MAX_MEMCMP_BYTES = 128;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** programSubscribe's `filters`, each `{dataSize}` or `{memcmp: {offset, bytes, encoding?}}`, rebuilt in a fixed key order; a string says what is wrong. */
function filtersOf(value: unknown): unknown[] | string {
  const wrong = `filters must be an array of at most ${MAX_FILTERS} filters, each {"dataSize": n} or {"memcmp": {"offset": n, "bytes": "…", "encoding"?: "base58" | "base64"}}`;
  if (!Array.isArray(value) || value.length > MAX_FILTERS) return wrong;
  const out: unknown[] = [];
  for (const filter of value as unknown[]) {
    if (typeof filter !== 'object' || filter === null || Array.isArray(filter) || Object.keys(filter).length !== 1) return wrong;
    const { dataSize, memcmp } = filter as { dataSize?: unknown; memcmp?: unknown };
    if (dataSize !== undefined) {
      if (!Number.isSafeInteger(dataSize) || (dataSize as number) < 0) return wrong;
      out.push({ dataSize });
      continue;
    }
    if (typeof memcmp !== 'object' || memcmp === null || Array.isArray(memcmp)) return wrong;
    const { offset, bytes, encoding, ...rest } = memcmp as { offset?: unknown; bytes?: unknown; encoding?: unknown };
    if (Object.keys(rest).length > 0 || !Number.isSafeInteger(offset) || (offset as number) < 0 || typeof bytes !== 'string') return wrong;
    if (encoding === 'base64') {
      if (!BASE64.test(bytes) || Buffer.from(bytes, 'base64').length > MAX_MEMCMP_BYTES) return wrong;
    } else if (encoding === undefined || encoding === null || encoding === 'base58') {
      if (![...bytes].every((c) => BASE58.includes(c)) || bytes.length > Math.ceil((MAX_MEMCMP_BYTES * Math.log(256)) / Math.log(58))) return wrong;
    } else return wrong;
    out.push({ memcmp: encoding === undefined || encoding === null ? { offset, bytes } : { offset, bytes, encoding } });
  }
  return out;
}

/**
 * A config object with only `allowed` keys, each valid: rebuilt in a fixed key order without
 * absent keys (so equal configs share a feed); null when empty; a string says what is wrong.
 */
function configOf(value: unknown, allowed: Record<string, Check>, method: string): Record<string, unknown> | null | string {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) return `the ${method} config must be an object`;
  const given = value as Record<string, unknown>;
  for (const key of Object.keys(given))
    if (allowed[key] === undefined) return `${key.slice(0, 64)} is not supported in the ${method} config (${Object.keys(allowed).join(', ')} are)`;
  const out: Record<string, unknown> = {};
  for (const [key, check] of Object.entries(allowed)) {
    const v = given[key];
    if (v === undefined || v === null) continue;
    if (check === 'flag') {
      if (typeof v !== 'boolean') return `${key} must be true or false`;
      if (v) out[key] = v;
    } else if (check === 'filters') {
      const filters = filtersOf(v);
      if (typeof filters === 'string') return filters;
      out[key] = filters;
    } else {
      if (typeof v !== 'string' || !check.has(v)) return `${key} must be one of ${[...check].join(', ')}`;
      out[key] = v;
    }
  }
  return Object.keys(out).length === 0 ? null : out;
}

/** A subscribe call's params, validated and normalized (the node's params and the feed's key), or what is wrong. */
function parseParams(kind: SolanaKind, params: unknown): unknown[] | { error: string } {
  const list = params === undefined || params === null ? [] : params;
  if (!Array.isArray(list)) return { error: 'params must be an array' };
  if (kind === 'slot' || kind === 'root' || kind === 'slotsUpdates') return list.length === 0 ? [] : { error: `${kind}Subscribe takes no params` };
  if (kind === 'account') {
    if (list.length < 1 || list.length > 2) return { error: 'accountSubscribe takes [pubkey, {encoding?, commitment?}?]' };
    if (!isPubkey(list[0])) return { error: 'accountSubscribe takes a base58 public key (32 bytes) first' };
    const config = configOf(list[1], { encoding: ENCODINGS, commitment: COMMITMENTS }, 'accountSubscribe');
    if (typeof config === 'string') return { error: config };
    return config === null ? [list[0]] : [list[0], config];
  }
  if (kind === 'program') {
    if (list.length < 1 || list.length > 2) return { error: 'programSubscribe takes [programId, {encoding?, commitment?, filters?}?]' };
    if (!isPubkey(list[0])) return { error: 'programSubscribe takes a base58 program id (32 bytes) first' };
    const config = configOf(list[1], { encoding: ENCODINGS, commitment: COMMITMENTS, filters: 'filters' }, 'programSubscribe');
    if (typeof config === 'string') return { error: config };
    return config === null ? [list[0]] : [list[0], config];
  }
  if (kind === 'signature') {
    if (list.length < 1 || list.length > 2) return { error: 'signatureSubscribe takes [signature, {commitment?, enableReceivedNotification?}?]' };
    if (!isSignature(list[0])) return { error: 'signatureSubscribe takes a base58 transaction signature (64 bytes) first' };
    const config = configOf(list[1], { commitment: COMMITMENTS, enableReceivedNotification: 'flag' }, 'signatureSubscribe');
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

/** A notification result's `value`. */
const resultValue = (result: unknown): unknown => (typeof result === 'object' && result !== null ? (result as { value?: unknown }).value : undefined);

/**
 * What a resubscription may deliver twice (a node sending a slot again, or another node behind
 * the first): the same slot (and parent); the same root; the same update (type) of the same slot;
 * an account's change at the same slot; the same transaction's logs at the same slot; a program's
 * account changed at the same slot; a signature's `"receivedSignature"`.
 */
const KEY_OF: Record<SolanaKind, (result: unknown) => string | null> = {
  slot: (r) => (typeof slotOf(r) === 'number' ? `${slotOf(r)}:${(r as { parent?: unknown }).parent}` : null),
  root: (r) => (typeof r === 'number' ? String(r) : null),
  slotsUpdates: (r) => {
    const type = (r as { type?: unknown } | null)?.type;
    return typeof slotOf(r) === 'number' && typeof type === 'string' ? `${slotOf(r)}:${type}` : null;
  },
  account: (r) => (typeof slotOf(r) === 'number' ? String(slotOf(r)) : null),
  logs: (r) => {
    const signature = (r as { value?: { signature?: unknown } } | null)?.value?.signature;
    return typeof slotOf(r) === 'number' && typeof signature === 'string' ? `${slotOf(r)}:${signature}` : null;
  },
  program: (r) => {
    const pubkey = (resultValue(r) as { pubkey?: unknown } | undefined)?.pubkey;
    return typeof slotOf(r) === 'number' && typeof pubkey === 'string' ? `${slotOf(r)}:${pubkey}` : null;
  },
  signature: (r) => (resultValue(r) === 'receivedSignature' ? 'received' : null),
};

/** The node ends a signature subscription after its status notification (any but `"receivedSignature"`). */
const isSignatureStatus = (result: unknown): boolean => resultValue(result) !== 'receivedSignature';

/** Commitments in the order a transaction reaches them. */
const COMMITMENT_RANK: Record<string, number> = { processed: 0, confirmed: 1, finalized: 2 };

/**
 * A signature's status notification, as the node writes it, from a getSignatureStatuses answer
 * for it, if the status reached `commitment`; else null.
 */
function statusNotificationOf(answer: unknown, commitment: string): { result: unknown; text: string } | null {
  if (typeof answer !== 'object' || answer === null) return null;
  const { context, value } = answer as { context?: { slot?: unknown }; value?: unknown };
  const status = Array.isArray(value) ? (value[0] as { confirmationStatus?: unknown; err?: unknown } | null | undefined) : null;
  if (typeof context?.slot !== 'number' || typeof status !== 'object' || status === null) return null;
  const reached = COMMITMENT_RANK[String(status.confirmationStatus)];
  if (reached === undefined || reached < (COMMITMENT_RANK[commitment] as number)) return null;
  const result = { context: { slot: context.slot }, value: { err: status.err ?? null } };
  return { result, text: JSON.stringify(result) };
}

/** The feeds of one Solana chain, over one UpstreamSocket to its nodes' pubsub endpoints. */
class SolanaFeeds implements ChainFeeds {
  private readonly socket: UpstreamSocket;
  private readonly feeds = new SharedFeeds();
  /** What each open signature feed does after a reconnect. */
  private readonly onReconnect = new Set<() => void>();

  constructor(chain: Chain, log: UpstreamSocketLog, verdicts: NodeVerdicts) {
    this.socket = UpstreamSocket.forChain(chain, log, verdicts);
    this.socket.onReconnect = () => {
      for (const fetch of [...this.onReconnect]) fetch();
    };
  }

  /**
   * After each reconnect, a signature feed asks the node for the signature's status: the node
   * notifies only statuses reached after a subscribe, so one reached while the socket was down
   * would never come. A status at the subscription's commitment (the node's default: finalized)
   * is delivered as the node's notification would be, which ends the feed.
   */
  private fetchStatusOnReconnect(params: unknown[]): (deliver: Deliver) => () => void {
    const commitment = (params[1] as { commitment?: string } | undefined)?.commitment ?? 'finalized';
    return (deliver) => {
      const fetch = () => {
        this.socket
          .request('getSignatureStatuses', [[params[0]], { searchTransactionHistory: false }])
          .then((answer) => {
            const notification = statusNotificationOf(answer, commitment);
            if (notification !== null) deliver(notification.result, notification.text);
          })
          // The socket dropped again: the next reconnect asks again.
          .catch(() => undefined);
      };
      this.onReconnect.add(fetch);
      return () => this.onReconnect.delete(fetch);
    };
  }

  open(method: string, params: unknown): OpenedFeed | FeedRefusal {
    const kind = SUBSCRIBE[method];
    if (kind === undefined) return { error: `Method not found: ${method.slice(0, 64)} is not offered here (${SUPPORTED} are)`, code: RpcCode.methodNotFound };
    const parsed = parseParams(kind, params);
    if (!Array.isArray(parsed)) return { error: `Invalid params: ${parsed.error}`, code: RpcCode.invalidParams };
    const feed = this.feeds.get(`${kind}:${JSON.stringify(parsed)}`, () =>
      passthrough(
        this.socket,
        { method, params: parsed, unsubscribeMethod: `${kind}Unsubscribe` },
        (result) => {
          const id = KEY_OF[kind](result);
          return id === null ? null : { id };
        },
        kind === 'signature' ? isSignatureStatus : undefined,
        kind === 'signature' ? this.fetchStatusOnReconnect(parsed) : undefined,
      ),
    );
    return { feed, notification: `${kind}Notification`, usageMethod: `${kind}Notification` };
  }

  get upstreamSubscriptions(): number {
    return this.socket.subscriptions;
  }

  close(): void {
    this.socket.close();
    this.feeds.clear();
    this.onReconnect.clear();
  }
}
