import { randomBytes } from 'node:crypto';
import { Observable } from 'rxjs';
import type { Chain } from '../chains.js';
import { RpcCode } from '../errors.js';
import {
  type ChainFeeds,
  type FeedEvent,
  type FeedItem,
  type FeedRefusal,
  FeedRefused,
  type ItemKey,
  LIVE,
  NOT_LIVE,
  type OpenedFeed,
  type PubSubDialect,
  passthrough,
  Recent,
  SharedFeeds,
} from './pubsub.js';
import { type NodeVerdicts, UpstreamSocket, type UpstreamSocketLog } from './upstreamSocket.js';

/**
 * EVM subscriptions (`eth_subscribe`), one upstream subscription per distinct (chain, kind,
 * filter), shared by every client (pubsub.ts). A notification's result reaches every client as
 * the node wrote it; a head fetched to fill a gap is serialized once for all of them.
 */

type SubscriptionKind = 'newHeads' | 'logs' | 'newPendingTransactions';

/** A subscription request as a client sent it, validated: its kind, and its filter normalized (the feed's key). */
interface FeedRequest {
  kind: SubscriptionKind;
  /** The `logs` filter with lowercase hex, or null. */
  filter: LogFilter | null;
}

interface LogFilter {
  address?: string | string[];
  topics?: Array<string | null | Array<string | null>>;
}

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const TOPIC = /^0x[0-9a-fA-F]{64}$/;
/** Addresses one logs filter may name (geth allows more, but each is work on every block). */
const MAX_ADDRESSES = 1000;

/** The `eth_subscribe` params as a feed request, or why they are invalid (a JSON-RPC -32602). */
function parseSubscribeParams(params: unknown): FeedRequest | { error: string } {
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

interface Head {
  number: bigint;
  hash: string;
}

/** Heads a feed fetches at most to fill a gap after a reconnect (older ones are not worth a burst to every client). */
const MAX_GAP_FILL = 128;
/** Blocks whose logs a feed asks for at most after a reconnect (providers refuse wide ranges; older ones are not worth a burst). */
const MAX_LOG_GAP_BLOCKS = 1_000;
/** Blocks per eth_getLogs of that refill: an unfiltered feed's answer for many blocks of a busy chain could pass the 16 MB frame bound. */
const LOG_GAP_CHUNK_BLOCKS = 25;
/** Blocks under the node's polled head the refill starts at: its last notifications may still have been on their way. */
const LOG_GAP_MARGIN_BLOCKS = 2;
/** Heights a heads feed remembers the hash it sent at. */
const RECENT_HEIGHTS = 256;

/** `eth_subscribe` and `eth_unsubscribe`; ids are 16 random bytes in hex; an unknown id unsubscribes to `false`, as on geth. */
export const EVM_PUBSUB: PubSubDialect = {
  roleOf: (method) => (method === 'eth_subscribe' ? 'subscribe' : method === 'eth_unsubscribe' ? 'unsubscribe' : null),
  newSubscriptionId: () => `"0x${randomBytes(16).toString('hex')}"`,
  unsubscribeIdOf: (params) => (Array.isArray(params) && typeof params[0] === 'string' ? JSON.stringify(params[0]) : null),
  notSubscribed: () => ({ result: false }),
  heartbeatCalls: ['net_version', 'eth_chainId'],
  feedsFor: (chain, log, verdicts) => new EvmFeeds(chain, log, verdicts),
};

const EVM_SUBSCRIBE = { method: 'eth_subscribe', unsubscribeMethod: 'eth_unsubscribe' };

/**
 * The feeds of one EVM chain, over one UpstreamSocket. `newHeads` has no gap and no duplicate
 * across reconnects: heads the node skipped are fetched (eth_getBlockByNumber) and delivered in
 * order before the one that revealed the gap, and a head already delivered (same hash) is dropped.
 */
class EvmFeeds implements ChainFeeds {
  private readonly socket: UpstreamSocket;
  private readonly feeds = new SharedFeeds();

  constructor(
    chain: Chain,
    private readonly log: UpstreamSocketLog,
    verdicts: NodeVerdicts,
  ) {
    this.socket = UpstreamSocket.forChain(chain, log, verdicts);
  }

  open(method: string, params: unknown): OpenedFeed | FeedRefusal {
    if (method !== 'eth_subscribe') return { error: `Method not found: ${method.slice(0, 64)}`, code: RpcCode.methodNotFound };
    const request = parseSubscribeParams(params);
    if ('error' in request) return { error: `Invalid params: ${request.error}`, code: RpcCode.invalidParams };
    return {
      feed: this.feed(request),
      notification: 'eth_subscription',
      usageMethod: `eth_subscription:${request.kind}`,
    };
  }

  /** The shared feed for a request: the same Observable for the same kind and filter while anyone holds it. */
  private feed(request: FeedRequest): Observable<FeedEvent> {
    const key = request.filter === null ? request.kind : `${request.kind}:${JSON.stringify(request.filter)}`;
    return this.feeds.get(key, () => {
      if (request.kind === 'newHeads') return this.heads();
      if (request.kind === 'logs') return this.logs(request.filter);
      return passthrough(this.socket, { ...EVM_SUBSCRIBE, params: [request.kind] }, null);
    });
  }

  /** Distinct upstream subscriptions open now. */
  get upstreamSubscriptions(): number {
    return this.socket.subscriptions;
  }

  close(): void {
    this.socket.close();
    this.feeds.clear();
  }

  /**
   * A logs feed: the node's logs as it sends them, and, once the socket to the node is back after
   * a drop, the logs of the blocks made meanwhile (eth_getLogs from the head of the node it was on
   * at the drop, in ranges of LOG_GAP_CHUNK_BLOCKS, MAX_LOG_GAP_BLOCKS in all), delivered before any
   * later one. The client's own socket stayed up: nothing would tell it what it missed. What was
   * sent already is dropped (Recent); a gap not filled (the socket dropped again, an error) is
   * asked again, from its start, at the next reconnect.
   */
  private logs(filter: LogFilter | null): Observable<FeedEvent> {
    return new Observable<FeedEvent>((subscriber) => {
      const recent = new Recent();
      // The first block whose logs may be missing; null: none (live since, or no head known at the drop).
      let gapFrom: number | null = null;
      let live = false;
      let queue: Promise<void> = Promise.resolve();
      const deliver = (result: unknown, text: string): void => {
        const key = logKey(result);
        if (key !== null && recent.repeats(key.id, key.state)) return;
        subscriber.next(text);
      };
      /** Asks the logs of the gap from `from`; rejects when a call failed (the socket dropped again, an error). */
      const refill = async (from: number): Promise<void> => {
        const latest = Number(await this.socket.request('eth_blockNumber', []));
        if (!Number.isSafeInteger(latest) || latest < from) return;
        if (latest - from + 1 > MAX_LOG_GAP_BLOCKS) {
          this.log.warn(
            { from, latest },
            `logs of blocks ${from}-${latest} made while the node's socket was down are not asked for: more than ${MAX_LOG_GAP_BLOCKS} blocks`,
          );
          return;
        }
        for (let low = from; low <= latest; low += LOG_GAP_CHUNK_BLOCKS) {
          const high = Math.min(latest, low + LOG_GAP_CHUNK_BLOCKS - 1);
          const range = { ...(filter ?? {}), fromBlock: `0x${low.toString(16)}`, toBlock: `0x${high.toString(16)}` };
          const logs = await this.socket.request('eth_getLogs', [range]);
          if (!Array.isArray(logs)) throw new Error('eth_getLogs answered no list');
          for (const log of logs) deliver(log, JSON.stringify(log));
        }
      };
      const params: unknown[] = filter === null ? ['logs'] : ['logs', filter];
      return this.socket.subscribe(
        { ...EVM_SUBSCRIBE, params },
        (result, text) => {
          queue = queue.then(() => deliver(result, text)).catch(() => undefined);
        },
        (message) => subscriber.error(new FeedRefused(message)),
        (isLive) => {
          live = isLive;
          if (!isLive) {
            // A little under the node's polled head: its last notifications may have been on their way.
            const head = this.socket.nodeHead();
            if (head !== null) gapFrom = Math.min(gapFrom ?? head, Math.max(0, head - LOG_GAP_MARGIN_BLOCKS));
          } else if (gapFrom !== null) {
            const from = gapFrom;
            // Before the notifications of the new subscription: they are of later blocks.
            queue = queue
              .then(() => refill(from))
              .then(
                () => {
                  // Dropped again meanwhile: the next reconnect asks from the same start.
                  if (live && gapFrom === from) gapFrom = null;
                },
                (err: unknown) =>
                  this.log.warn(
                    { from, err: err instanceof Error ? err.message : String(err) },
                    "logs missed while the node's socket was down: asking failed; asked again at the next reconnect",
                  ),
              );
          }
          subscriber.next(isLive ? LIVE : NOT_LIVE);
        },
      );
    });
  }

  private heads(): Observable<FeedEvent> {
    return new Observable<FeedEvent>((subscriber) => {
      // The hash last sent at each recent height. A head is a repeat only when it is the one last sent at its
      // height: a node's replay after a reconnect (up to date, or a few blocks behind) is dropped, and a chain
      // going back to a block sent before (A, B, A) sends it again.
      const sentAt = new Map<bigint, string>();
      const isRepeat = (head: Head): boolean => sentAt.get(head.number) === head.hash;
      let last: Head | null = null;
      // Heads are handled one after another: a gap's fetch finishes before the next head is looked at.
      let queue: Promise<void> = Promise.resolve();
      const deliver = (header: FeedItem, head: Head): void => {
        // A chain gone back to a lower head: what was sent above it is not the chain's any more.
        for (const n of sentAt.keys()) if (n > head.number) sentAt.delete(n);
        sentAt.delete(head.number);
        sentAt.set(head.number, head.hash);
        if (sentAt.size > RECENT_HEIGHTS) sentAt.delete(sentAt.keys().next().value as bigint);
        last = head;
        subscriber.next(header);
      };
      const handle = async (result: unknown, text: string): Promise<void> => {
        const head = headOf(result);
        if (!head || isRepeat(head)) return;
        if (last !== null && head.number > last.number + 1n && head.number - last.number <= BigInt(MAX_GAP_FILL)) {
          for (let n = last.number + 1n; n < head.number; n++) {
            const block = await this.socket.request('eth_getBlockByNumber', [`0x${n.toString(16)}`, false]).catch(() => null);
            const missed = headOf(block);
            if (!missed || isRepeat(missed)) continue;
            deliver(JSON.stringify(headerOf(block as Record<string, unknown>)), missed);
          }
        }
        deliver(text, head);
      };
      return this.socket.subscribe(
        { ...EVM_SUBSCRIBE, params: ['newHeads'] },
        (result, text) => {
          queue = queue.then(() => handle(result, text)).catch(() => undefined);
        },
        (message) => subscriber.error(new FeedRefused(message)),
        (live) => subscriber.next(live ? LIVE : NOT_LIVE),
      );
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

/**
 * A log's identity and state: the same log delivered again in the state it was last sent in (after
 * a resubscription) is dropped; removed (reorged out), or back in after that, it is sent.
 */
function logKey(result: unknown): ItemKey | null {
  if (typeof result !== 'object' || result === null) return null;
  const { blockHash, logIndex, removed } = result as { blockHash?: unknown; logIndex?: unknown; removed?: unknown };
  return typeof blockHash === 'string' && typeof logIndex === 'string' ? { id: `${blockHash}:${logIndex}`, state: String(removed === true) } : null;
}
