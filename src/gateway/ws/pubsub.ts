import { Observable, share, tap } from 'rxjs';
import type { Chain } from '../chains.js';
import type { NodeVerdicts, UpstreamSocket, UpstreamSocketLog, UpstreamSubscription } from './upstreamSocket.js';

/**
 * What the EVM and Solana subscriptions have in common: a chain's dialect (which calls the socket
 * answers itself, what a subscription id looks like) and its feeds, each an rxjs Observable
 * `share()`d by every client of the same (kind, params), over the chain's one UpstreamSocket.
 */

/** One notification's result as JSON text, the same for every client of its feed. */
export type FeedItem = string;

/**
 * What a feed emits besides its items: the node has its subscription (LIVE, on each connection),
 * so every notification from then on reaches the feed's clients; or the connection that held it
 * dropped (NOT_LIVE) until the next LIVE. A client joining a feed live now gets LIVE at once. A
 * client's subscribe is answered only on LIVE (or after a bound): answered earlier, a block made
 * while the node was still being asked, or asked again after a drop, would reach nobody.
 */
export const LIVE: unique symbol = Symbol('live');
export const NOT_LIVE: unique symbol = Symbol('not live');

/** What a feed's Observable emits: items, LIVE and NOT_LIVE. */
export type FeedEvent = FeedItem | typeof LIVE | typeof NOT_LIVE;

/** A subscribe answer waits for LIVE at most the chain's node timeout, and never more than this. */
const LIVE_WAIT_MAX_MS = 5_000;

/** How long a chain's clients' subscribe answers wait for LIVE at most. */
export const liveWithinMsOf = (chain: Chain): number => Math.min(chain.timeoutMs, LIVE_WAIT_MAX_MS);

/** A subscription a client may open: its shared feed, and how its notifications are named. */
export interface OpenedFeed {
  /** Completes when the node ends the subscription itself: each client's subscription ends with it, without an unsubscribe. */
  feed: Observable<FeedEvent>;
  /** The `method` of its notification frames: `eth_subscription`, `slotNotification`… */
  notification: string;
  /** What each delivered notification is metered as. */
  usageMethod: string;
}

/** Why a subscribe call cannot be served: a JSON-RPC error. */
export interface FeedRefusal {
  error: string;
  code: number;
}

/** A chain's feeds over its one upstream socket (made for the chain's first subscription). */
export interface ChainFeeds {
  /** The shared feed for a subscribe call (`eth_subscribe`, `slotSubscribe`…) and its params, or why there is none. */
  open(method: string, params: unknown): OpenedFeed | FeedRefusal;
  /** Distinct upstream subscriptions open now. */
  readonly upstreamSubscriptions: number;
  close(): void;
}

/** What a WebSocket does with a call itself: open a subscription, end one, or refuse a subscription method it does not offer. */
export type CallRole = 'subscribe' | 'unsubscribe' | 'unsupported';

/** The answer to ending a subscription this connection does not hold: `false` (EVM nodes) or an error (Solana's). */
export type NotSubscribed = { result: false } | { code: number; message: string };

/** How a chain's clients subscribe: the method names, the subscription ids, the feeds behind them. */
export interface PubSubDialect {
  /** What the socket does with a call of this method; null: an ordinary call, answered as over HTTP. */
  roleOf(method: string): CallRole | null;
  /** A fresh subscription id for a client, as JSON text, that `taken` does not hold. */
  newSubscriptionId(taken: (idText: string) => boolean): string;
  /** The id an unsubscribe call names, as JSON text (as `newSubscriptionId` made it); null when its params hold none. */
  unsubscribeIdOf(params: unknown): string | null;
  /** The answer to unsubscribing an id the connection does not hold; `malformed`: the params held no id at all. */
  notSubscribed(malformed: boolean): NotSubscribed;
  /**
   * The method of the clients' heartbeat, if the chain's clients send one: a notification (no id)
   * of it only keeps the socket alive, as on the chain's nodes: no answer, not forwarded, not metered.
   */
  keepAlive?: string;
  /**
   * Calls the chain's clients send with an id as a heartbeat (viem's WebSocket transport asks
   * `net_version` every 30 s), whose answers never change on a chain: once the socket has the
   * node's answer, one such call per heartbeat interval is answered from it, metered, uncharged.
   */
  heartbeatCalls?: readonly string[];
  /** `verdicts`: head tracking's word on each node, for the chain's socket to choose one. */
  feedsFor(chain: Chain, log: UpstreamSocketLog, verdicts: NodeVerdicts): ChainFeeds;
}

/** Recent items remembered per feed to drop what a resubscription delivers twice. */
const RECENT = 256;

/**
 * The items a feed sent lately, each with the state it was last sent in (a log's `removed`), in
 * a small map that forgets the oldest. An item sent again in the same state is a repeat (a
 * resubscription's); in another state it is news (a log reorged out, then back in: geth sends
 * all three, and a client that missed the last would hold a canonical log as removed).
 */
export class Recent {
  private readonly states = new Map<string, string>();
  /** Whether `key` was last sent in `state`; if not, it is remembered so. */
  repeats(key: string, state = ''): boolean {
    if (this.states.get(key) === state) return true;
    this.states.delete(key);
    this.states.set(key, state);
    if (this.states.size > RECENT) this.states.delete(this.states.keys().next().value as string);
    return false;
  }
}

/** An item's identity for the repeat check, and its state: the same identity in another state is sent. */
export interface ItemKey {
  id: string;
  state?: string;
}

/**
 * Feeds by key, each `share()`d: the first client's subscription makes it (and opens the node's),
 * every later one joins it; when the last client leaves (refCount 0) the node's is cancelled and
 * the feed forgotten, so a later subscribe makes it anew. A feed is made and kept only when a
 * client subscribes: a subscribe call refused after its feed was looked up (over the cap, the rate
 * limit, a client gone) holds nothing, or each distinct filter would be kept for the process's life.
 */
export class SharedFeeds {
  private readonly feeds = new Map<string, SharedFeed>();

  get(key: string, make: () => Observable<FeedEvent>): Observable<FeedEvent> {
    return new Observable<FeedEvent>((subscriber) => {
      let feed = this.feeds.get(key);
      if (!feed) {
        const made: SharedFeed = { events: new Observable<FeedEvent>(), live: false };
        // A feed that ends (a one-shot subscription's last notification) is forgotten as one nobody holds.
        made.events = make().pipe(
          tap((event) => {
            if (event === LIVE) made.live = true;
            else if (event === NOT_LIVE) made.live = false;
          }),
          share({
            resetOnRefCountZero: () => this.forget(key, made),
            resetOnComplete: () => this.forget(key, made),
            resetOnError: () => this.forget(key, made),
          }),
        );
        this.feeds.set(key, made);
        feed = made;
      }
      // Joined after the node answered: LIVE was shared before, so this client gets it now.
      const joinedLive = feed.live;
      const subscription = feed.events.subscribe(subscriber);
      if (joinedLive) subscriber.next(LIVE);
      return subscription;
    });
  }

  clear(): void {
    this.feeds.clear();
  }

  /** rxjs resets the share at once after this (an Observable that emits at once). */
  private forget(key: string, feed: SharedFeed): Observable<void> {
    if (this.feeds.get(key) === feed) this.feeds.delete(key);
    return new Observable<void>((s) => s.next());
  }
}

/** One shared feed: its events, and whether the node holds its subscription now (LIVE, not NOT_LIVE, came last). */
interface SharedFeed {
  events: Observable<FeedEvent>;
  live: boolean;
}

/** The node refused a feed's subscription: each client's subscription ends with an error notification. */
export class FeedRefused extends Error {}

/** Delivers a notification's result (parsed, and as JSON text) to a feed as if the node had sent it. */
export type Deliver = (result: unknown, text: string) => void;

/**
 * The node's notifications as they come, as the node wrote them; `keyOf` names an item so that
 * one delivered again in the same state (after a resubscription) is dropped; null: no such check. `isLast` names the
 * notification after which the node ends the subscription itself (Solana's signatureSubscribe):
 * the feed completes with it, so every client's subscription ends. `watch`, called when the feed
 * opens, may deliver what the node will not send (a status reached while the socket was down);
 * it returns its teardown. A last item the feed fetched itself leaves the node's subscription
 * open there, so the gateway cancels it.
 */
export function passthrough(
  socket: UpstreamSocket,
  request: UpstreamSubscription,
  keyOf: ((result: unknown) => ItemKey | null) | null,
  isLast?: (result: unknown) => boolean,
  watch?: (deliver: Deliver) => () => void,
): Observable<FeedEvent> {
  return new Observable<FeedEvent>((subscriber) => {
    const recent = new Recent();
    // The node ends a subscription whose last notification came: asking it to cancel one would only get an error.
    let endedByNode = false;
    const deliver = (result: unknown, text: string, sentByNode: boolean): void => {
      if (subscriber.closed) return;
      const key = keyOf?.(result) ?? null;
      if (key !== null && recent.repeats(key.id, key.state)) return;
      subscriber.next(text);
      if (isLast?.(result)) {
        endedByNode = sentByNode;
        subscriber.complete();
      }
    };
    const cancel = socket.subscribe(
      request,
      (result, text) => deliver(result, text, true),
      (message) => subscriber.error(new FeedRefused(message)),
      (live) => subscriber.next(live ? LIVE : NOT_LIVE),
    );
    const unwatch = watch?.((result, text) => deliver(result, text, false));
    return () => {
      unwatch?.();
      cancel(endedByNode);
    };
  });
}
