import { Observable, share } from 'rxjs';
import type { Chain } from '../chains.js';
import { UpstreamSocket, type UpstreamSocketLog } from './upstreamSocket.js';

/**
 * What clients subscribe to, one upstream subscription per distinct (chain, kind, filter):
 * each is an rxjs Observable made `share()`d, so the first client's subscription opens the
 * node's and every later one joins it; when the last client leaves (refCount 0) the node's is
 * cancelled and the feed forgotten. A notification's result is serialized once, here, for all
 * its clients.
 */

export type SubscriptionKind = 'newHeads' | 'logs' | 'newPendingTransactions';

/** A subscription request as a client sent it, validated: its kind, and its filter normalized (the feed's key). */
export interface FeedRequest {
  kind: SubscriptionKind;
  /** The `logs` filter with lowercase hex, or null. */
  filter: LogFilter | null;
}

export interface LogFilter {
  address?: string | string[];
  topics?: Array<string | null | Array<string | null>>;
}

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const TOPIC = /^0x[0-9a-fA-F]{64}$/;
/** Addresses one logs filter may name (geth allows more, but each is work on every block). */
const MAX_ADDRESSES = 1000;

/** The `eth_subscribe` params as a feed request, or why they are invalid (a JSON-RPC -32602). */
export function parseSubscribeParams(params: unknown): FeedRequest | { error: string } {
  if (!Array.isArray(params) || params.length === 0 || typeof params[0] !== 'string')
    return { error: 'eth_subscribe takes ["newHeads"], ["logs", filter?] or ["newPendingTransactions"]' };
  const [kind, filter] = params as [string, unknown];
  if (kind === 'newHeads' || kind === 'newPendingTransactions') {
    // geth accepts `newPendingTransactions` with a boolean (full transactions); nothing else takes a second parameter.
    if (params.length > 1 && !(kind === 'newPendingTransactions' && typeof filter === 'boolean' && filter === false))
      return { error: `${kind} takes no filter` };
    return { kind, filter: null };
  }
  if (kind !== 'logs') return { error: `unsupported subscription "${kind.slice(0, 64)}": newHeads, logs or newPendingTransactions` };
  if (params.length > 2) return { error: 'logs takes one filter object' };
  if (filter === undefined || filter === null) return { kind, filter: {} };
  if (typeof filter !== 'object' || Array.isArray(filter)) return { error: 'the logs filter must be an object with address and/or topics' };
  const out: LogFilter = {};
  for (const [key, value] of Object.entries(filter)) {
    if (key === 'address') {
      if (typeof value === 'string' && ADDRESS.test(value)) out.address = value.toLowerCase();
      else if (Array.isArray(value) && value.length <= MAX_ADDRESSES && value.every((a) => typeof a === 'string' && ADDRESS.test(a))) {
        out.address = (value as string[]).map((a) => a.toLowerCase());
      } else return { error: 'filter.address must be an address or an array of addresses (0x and 40 hex digits)' };
    } else if (key === 'topics') {
      if (!Array.isArray(value) || value.length > 4) return { error: 'filter.topics must be an array of at most 4 positions' };
      const topics: NonNullable<LogFilter['topics']> = [];
      for (const position of value as unknown[]) {
        if (position === null) topics.push(null);
        else if (typeof position === 'string' && TOPIC.test(position)) topics.push(position.toLowerCase());
        else if (Array.isArray(position) && position.length <= MAX_ADDRESSES && position.every((t) => t === null || (typeof t === 'string' && TOPIC.test(t)))) {
          topics.push((position as Array<string | null>).map((t) => (t === null ? null : t.toLowerCase())));
        } else return { error: 'each filter.topics position must be null, a topic (0x and 64 hex digits) or an array of them' };
      }
      out.topics = topics;
    } else return { error: `filter.${key.slice(0, 64)} is not supported on a logs subscription (address and topics are)` };
  }
  return { kind, filter: out };
}

/** One notification's result, serialized once for every client of its feed. */
export type FeedItem = string;

interface Head {
  number: bigint;
  hash: string;
}

/** Heads a feed fetches at most to fill a gap after a reconnect (older ones are not worth a burst to every client). */
const MAX_GAP_FILL = 128;
/** Recent heads and logs remembered per feed to drop what a resubscription delivers twice. */
const RECENT = 256;

/** A small insertion-ordered set that forgets its oldest entries. */
class Recent {
  private readonly keys = new Set<string>();
  has(key: string): boolean {
    return this.keys.has(key);
  }
  add(key: string): void {
    this.keys.add(key);
    if (this.keys.size > RECENT) this.keys.delete(this.keys.values().next().value as string);
  }
}

/**
 * The feeds of one chain, over one UpstreamSocket. `newHeads` has no gap and no duplicate
 * across reconnects: heads the node skipped are fetched (eth_getBlockByNumber) and delivered in
 * order before the one that revealed the gap, and a head already delivered (same hash) is dropped.
 */
export class ChainFeeds {
  private readonly socket: UpstreamSocket;
  private readonly feeds = new Map<string, Observable<FeedItem>>();

  constructor(chain: Chain, log: UpstreamSocketLog) {
    this.socket = new UpstreamSocket(
      chain.upstreams.filter((u) => u.ws !== null),
      chain.timeoutMs,
      log,
    );
  }

  /** The shared feed for a request: the same Observable for the same kind and filter while anyone holds it. */
  feed(request: FeedRequest): Observable<FeedItem> {
    const key = request.filter === null ? request.kind : `${request.kind}:${JSON.stringify(request.filter)}`;
    let feed = this.feeds.get(key);
    if (!feed) {
      const source = request.kind === 'newHeads' ? this.heads() : this.passthrough(request, request.kind === 'logs' ? logKey : null);
      feed = source.pipe(share({ resetOnRefCountZero: () => this.forget(key) }));
      this.feeds.set(key, feed);
    }
    return feed;
  }

  /** Distinct upstream subscriptions open now. */
  get upstreamSubscriptions(): number {
    return this.socket.subscriptions;
  }

  close(): void {
    this.socket.close();
    this.feeds.clear();
  }

  /** The last client left: a later subscribe makes the feed anew. rxjs resets the share at once after this (an Observable that completes at once). */
  private forget(key: string): Observable<void> {
    this.feeds.delete(key);
    return new Observable<void>((s) => s.next());
  }

  private passthrough(request: FeedRequest, keyOf: ((result: unknown) => string | null) | null): Observable<FeedItem> {
    const params: unknown[] = request.filter === null ? [request.kind] : [request.kind, request.filter];
    return new Observable<FeedItem>((subscriber) => {
      const recent = new Recent();
      return this.socket.subscribe(params, (result) => {
        const key = keyOf?.(result) ?? null;
        if (key !== null) {
          if (recent.has(key)) return;
          recent.add(key);
        }
        subscriber.next(JSON.stringify(result));
      });
    });
  }

  private heads(): Observable<FeedItem> {
    return new Observable<FeedItem>((subscriber) => {
      const recent = new Recent();
      let last: Head | null = null;
      // Heads are handled one after another: a gap's fetch finishes before the next head is looked at.
      let queue: Promise<void> = Promise.resolve();
      const deliver = (header: object, head: Head): void => {
        recent.add(head.hash);
        last = head;
        subscriber.next(JSON.stringify(header));
      };
      const handle = async (result: unknown): Promise<void> => {
        const head = headOf(result);
        if (!head || recent.has(head.hash)) return;
        if (last !== null && head.number > last.number + 1n && head.number - last.number <= BigInt(MAX_GAP_FILL)) {
          for (let n = last.number + 1n; n < head.number; n++) {
            const block = await this.socket.request('eth_getBlockByNumber', [`0x${n.toString(16)}`, false]).catch(() => null);
            const missed = headOf(block);
            if (!missed || recent.has(missed.hash)) continue;
            deliver(headerOf(block as Record<string, unknown>), missed);
          }
        }
        deliver(result as object, head);
      };
      return this.socket.subscribe(['newHeads'], (result) => {
        queue = queue.then(() => handle(result)).catch(() => undefined);
      });
    });
  }
}

function headOf(value: unknown): Head | null {
  if (typeof value !== 'object' || value === null) return null;
  const { number, hash } = value as { number?: unknown; hash?: unknown };
  if (typeof number !== 'string' || typeof hash !== 'string' || !/^0x[0-9a-f]+$/i.test(number)) return null;
  return { number: BigInt(number), hash };
}

/** A block as a newHeads notification shows it: its header, without the transactions and uncles lists. */
function headerOf(block: Record<string, unknown>): object {
  const { transactions: _transactions, uncles: _uncles, totalDifficulty: _td, size: _size, ...header } = block;
  return header;
}

/** A log's identity: the same log delivered again after a resubscription is dropped; a removed (reorged) one is not the same. */
function logKey(result: unknown): string | null {
  if (typeof result !== 'object' || result === null) return null;
  const { blockHash, logIndex, removed } = result as { blockHash?: unknown; logIndex?: unknown; removed?: unknown };
  return typeof blockHash === 'string' && typeof logIndex === 'string' ? `${blockHash}:${logIndex}:${removed === true}` : null;
}
