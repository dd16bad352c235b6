import WebSocket from 'ws';
import type { Chain, Upstream } from '../chains.js';
import type { ChainHeads } from '../upstreams/heads.js';
import { rawResultOf } from './rawJson.js';

/** Where the upstream socket tells what happened to it (the gateway's logger fits). */
export interface UpstreamSocketLog {
  warn(details: object, message: string): void;
}

/** How to ask the node for one subscription and to cancel it: `eth_subscribe`/`eth_unsubscribe`, Solana's `slotSubscribe`/`slotUnsubscribe`… */
export interface UpstreamSubscription {
  method: string;
  params: unknown[];
  unsubscribeMethod: string;
}

/** A node's subscription id: a hex string on EVM nodes, an integer on Solana's. */
type UpstreamId = string | number;

/** A notification's result, parsed, and its JSON text as the node wrote it (what clients get). */
type OnResult = (result: unknown, text: string) => void;

/** The node answered with a JSON-RPC error (not a dropped socket or a timeout). */
class UpstreamRefusal extends Error {}

/** The node did not answer a call within the chain's timeout. */
class UpstreamTimeout extends Error {}

/** The node refused a subscription (its error message): it will not be asked again. */
type OnRefused = (message: string) => void;

/**
 * true: the node answered the subscription with its id (on each connection), so every
 * notification from then on is delivered; false: the connection that held it dropped, and the
 * node has none until the next true.
 */
type OnLive = (live: boolean) => void;

/** One subscription the gateway wants from the node, kept across reconnects. */
interface Wanted {
  request: UpstreamSubscription;
  onResult: OnResult;
  onRefused: OnRefused;
  onLive: OnLive;
  /** The node's id for it on the current connection; null until it answered. */
  upstreamId: UpstreamId | null;
}

interface Pending {
  /** Called synchronously with the answer: a subscription's id must be known before the next frame, which may be its first notification. */
  answered: (err: Error | null, result: unknown) => void;
  timer: NodeJS.Timeout;
}

/** What an answer arriving after its call's timeout still needs done (a subscription the node made late is cancelled there). */
type LateAnswer = (result: unknown) => void;

/**
 * What head tracking says of a node, for the socket to choose one, best first: `good`, at the
 * head; `unknown`, not answering its polls, or not polled yet; `behind`, lagging; `none`, it takes
 * no call (a liar, on another network).
 */
export type NodeStanding = 'good' | 'unknown' | 'behind' | 'none';

/** Head tracking's verdicts, as the socket reads them. */
export interface NodeVerdicts {
  standing(node: Upstream): NodeStanding;
  /** Node `node`'s head as head tracking last polled it; null: not known (or not followed). */
  headOf(node: Upstream): number | null;
  /** Keeps the verdicts current while subscriptions rest on them (head polls stop a minute after a chain's last call). */
  touch(): void;
}

/** Every node good, nothing to keep going: a chain whose heads are not followed. */
export const NO_VERDICTS: NodeVerdicts = { standing: () => 'good', headOf: () => null, touch: () => undefined };

/** A chain's verdicts, from its head tracking (none: every node good). */
export function verdictsOf(chain: Chain, heads: ChainHeads | null): NodeVerdicts {
  if (heads === null) return NO_VERDICTS;
  return {
    standing: (node) => {
      const index = chain.upstreams.indexOf(node);
      const status = heads.upstreams[index]?.status;
      return heads.takesNoCall(index) ? 'none' : status === 'lagging' ? 'behind' : status === 'ok' ? 'good' : 'unknown';
    },
    headOf: (node) => heads.upstreams[chain.upstreams.indexOf(node)]?.head ?? null,
    touch: () => heads.touch(),
  };
}

/** How often an open socket reads its node's standing (and keeps the verdicts current). */
const VERDICT_CHECK_MS = 1_000;
/** Checks in a row a node stays `behind` while another is `good` before the socket leaves it (a node a block too far behind for a moment stays). */
const BEHIND_CHECKS_TO_LEAVE = 3;

/** A node whose connection failed is tried after the others this long (then, from a lagging node, tried again). */
const UNREACHABLE_MS = 30_000;

/** Timed-out subscribe calls whose late answer a connection still waits for, at most. */
const MAX_LATE_ANSWERS = 1_000;

const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;
/** An upstream frame larger than this is refused by ws (a block header or a log is a few KB). */
const MAX_UPSTREAM_FRAME_BYTES = 16 * 1024 * 1024;

/**
 * One chain's WebSocket to its nodes, shared by every subscription of the chain: one connection
 * per gateway process, whatever the number of clients. It opens with the first subscription and
 * closes with the last. When it drops it reconnects, to the next node with a WebSocket endpoint
 * when there are several (after a backoff from 100 ms to 5 s), and subscribes again to all it
 * had; `onReconnect` lets the feeds fetch what they missed meanwhile. Any notification frame (a
 * `method` and `params.subscription`: `eth_subscription`, `slotNotification`…) goes to the
 * subscription of that id. Head tracking's verdicts choose the node: one that takes no call (a
 * liar, one on another network) is never connected to, and left as soon as it is found so (at
 * its next frame or the next second's check), delivering nothing more of it; a lagging one only
 * when no node is at the head, and left for one that is after 3 s. While it has subscriptions the
 * socket keeps the chain's heads followed.
 */
export class UpstreamSocket {
  private socket: WebSocket | null = null;
  private open = false;
  private next = 0;
  private nextRequestId = 1;
  private reconnectMs = RECONNECT_MIN_MS;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private closed = false;
  /** A connection was open before: the next open is a reconnect (the feeds fetch what they missed). */
  private hadConnection = false;
  private readonly wanted = new Set<Wanted>();
  private readonly byUpstreamId = new Map<UpstreamId, Wanted>();
  private readonly pending = new Map<number, Pending>();
  /** Calls timed out on this connection whose late answer still needs handling, by request id. */
  private readonly lateAnswers = new Map<number, LateAnswer>();
  /** The node of the current connection; null while none. */
  private node: Upstream | null = null;
  private verdictTimer: NodeJS.Timeout | null = null;
  /** Checks in a row the current node was `behind` while another was `good`. */
  private behindChecks = 0;
  /** When each node's last connection failed before it opened (ms): tried after the others for UNREACHABLE_MS. */
  private readonly failedAt = new Map<Upstream, number>();

  constructor(
    private readonly nodes: Upstream[],
    private readonly timeoutMs: number,
    private readonly log: UpstreamSocketLog,
    private readonly verdicts: NodeVerdicts = NO_VERDICTS,
  ) {}

  /** The socket a chain's feeds share: over its upstreams that have a WebSocket URL. */
  static forChain(chain: Chain, log: UpstreamSocketLog, verdicts?: NodeVerdicts): UpstreamSocket {
    return new UpstreamSocket(
      chain.upstreams.filter((u) => u.ws !== null),
      chain.timeoutMs,
      log,
      verdicts,
    );
  }

  /**
   * Asks the node for a subscription; `onResult` gets each notification's result, across
   * reconnects, until the returned function is called: it cancels the subscription on the node,
   * unless told the node ended it itself (Solana's signature subscriptions end with their status).
   * A node that answers the subscribe call with an error (on the first connection or a later one)
   * ends it: `onRefused` gets the node's message, and it is not asked for again. `onLive(true)` is
   * called each time the node answers it with its id (once per connection), `onLive(false)` each
   * time the connection that held it drops.
   */
  subscribe(request: UpstreamSubscription, onResult: OnResult, onRefused: OnRefused, onLive: OnLive = () => undefined): (endedByNode?: boolean) => void {
    const wanted: Wanted = { request, onResult, onRefused, onLive, upstreamId: null };
    this.wanted.add(wanted);
    if (this.open) this.sendSubscribe(wanted);
    else this.connect();
    return (endedByNode = false) => this.unsubscribe(wanted, endedByNode);
  }

  /** A call over the socket (what a feed fetches after a reconnect); rejects if the socket drops first. */
  request(method: string, params: unknown[]): Promise<unknown> {
    return new Promise((resolve, reject) => this.call(method, params, (err, result) => (err ? reject(err) : resolve(result))));
  }

  private call(method: string, params: unknown[], answered: Pending['answered'], late?: LateAnswer): void {
    const socket = this.socket;
    if (!socket || !this.open) {
      answered(new Error('upstream socket not connected'), undefined);
      return;
    }
    const id = this.nextRequestId++;
    const timer = setTimeout(() => {
      this.pending.delete(id);
      if (late !== undefined) {
        this.lateAnswers.set(id, late);
        // A node that never answers them, on a connection other feeds keep up: the oldest are forgotten.
        if (this.lateAnswers.size > MAX_LATE_ANSWERS) this.lateAnswers.delete(this.lateAnswers.keys().next().value as number);
      }
      answered(new UpstreamTimeout(`upstream ${method} timed out after ${this.timeoutMs} ms`), undefined);
    }, this.timeoutMs);
    this.pending.set(id, { answered, timer });
    socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
  }

  /** The head of the node this socket is (or was last) on, as head tracking last polled it; null: not known. */
  nodeHead(): number | null {
    return this.node === null ? null : this.verdicts.headOf(this.node);
  }

  /** Subscriptions the node is asked for now (one per distinct kind and filter). */
  get subscriptions(): number {
    return this.wanted.size;
  }

  onReconnect: () => void = () => undefined;

  close(): void {
    this.closed = true;
    this.wanted.clear();
    this.disconnect();
  }

  private unsubscribe(wanted: Wanted, endedByNode: boolean): void {
    if (!this.wanted.delete(wanted)) return;
    if (wanted.upstreamId !== null) {
      this.byUpstreamId.delete(wanted.upstreamId);
      if (this.open && !endedByNode) this.request(wanted.request.unsubscribeMethod, [wanted.upstreamId]).catch(() => undefined);
    }
    if (this.wanted.size === 0) this.disconnect();
  }

  private connect(): void {
    if (this.socket || this.closed || this.reconnectTimer) return;
    this.verdicts.touch();
    const node = this.nextNode();
    if (node === null) {
      // Every node takes no call now: asked again after the backoff, as after a drop.
      this.retryLater();
      return;
    }
    this.node = node;
    const url = node.ws as URL;
    const socket = new WebSocket(url, { headers: node.headers, maxPayload: MAX_UPSTREAM_FRAME_BYTES, handshakeTimeout: this.timeoutMs });
    this.socket = socket;
    const reconnected = this.hadConnection;
    socket.on('open', () => {
      this.open = true;
      this.failedAt.delete(node);
      this.reconnectMs = RECONNECT_MIN_MS;
      this.behindChecks = 0;
      this.verdictTimer = setInterval(() => this.checkNode(), VERDICT_CHECK_MS);
      this.verdictTimer.unref();
      for (const w of this.wanted) this.sendSubscribe(w);
      if (reconnected) this.onReconnect();
      this.hadConnection = true;
    });
    socket.on('message', (data, isBinary) => {
      if (!isBinary) this.received(socket, data.toString());
    });
    socket.on('error', (err) => this.log.warn({ err: err.message, upstream: node.label }, 'upstream websocket failed'));
    socket.on('close', () => this.dropped(socket));
  }

  private dropped(socket: WebSocket): void {
    if (this.socket !== socket) return;
    if (!this.open && this.node !== null) this.failedAt.set(this.node, Date.now());
    this.socket = null;
    this.open = false;
    this.stopChecks();
    this.byUpstreamId.clear();
    for (const w of this.wanted) {
      if (w.upstreamId !== null) w.onLive(false);
      w.upstreamId = null;
    }
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.answered(new Error('upstream socket closed'), undefined);
      this.pending.delete(id);
    }
    this.lateAnswers.clear();
    if (this.closed || this.wanted.size === 0) return;
    this.next++;
    this.retryLater();
  }

  /**
   * The next node in turn of the best standing (at the head, else not known, else lagging), those
   * whose connection failed lately after the others; null when every node takes no call.
   */
  private nextNode(): Upstream | null {
    for (const reachable of [true, false]) {
      for (const wanted of ['good', 'unknown', 'behind'] as const) {
        for (let i = 0; i < this.nodes.length; i++) {
          const node = this.nodes[(this.next + i) % this.nodes.length] as Upstream;
          if (this.failedLately(node) === reachable || this.verdicts.standing(node) !== wanted) continue;
          this.next += i;
          return node;
        }
      }
    }
    return null;
  }

  /** Each second while open: the verdicts kept current, and the node left when it takes no call, or lags while another is at the head. */
  private checkNode(): void {
    this.verdicts.touch();
    const node = this.node;
    if (node === null || !this.open) return;
    const standing = this.verdicts.standing(node);
    if (standing === 'none') {
      this.leave('takes no call now (a liar, or on another network)');
      return;
    }
    // Left only for a node known at the head (not one unknown, maybe down) that could be connected to.
    const anotherAhead = standing === 'behind' && this.nodes.some((n) => n !== node && !this.failedLately(n) && this.verdicts.standing(n) === 'good');
    this.behindChecks = anotherAhead ? this.behindChecks + 1 : 0;
    if (this.behindChecks >= BEHIND_CHECKS_TO_LEAVE) this.leave('lags behind another node that is at the head');
  }

  /** Leaves the current node for the next one (its subscriptions asked again there), saying why once. */
  private leave(why: string): void {
    const socket = this.socket;
    if (socket === null) return;
    this.log.warn({ upstream: this.node?.label }, `upstream websocket node ${why}: moving to another`);
    // Dropped now: frames it already sent are not read, and its close is not a second drop.
    this.dropped(socket);
    socket.terminate();
  }

  /** Whether a connection to `node` failed before opening within UNREACHABLE_MS. */
  private failedLately(node: Upstream): boolean {
    const at = this.failedAt.get(node);
    return at !== undefined && Date.now() - at < UNREACHABLE_MS;
  }

  private stopChecks(): void {
    if (this.verdictTimer !== null) clearInterval(this.verdictTimer);
    this.verdictTimer = null;
  }

  private retryLater(): void {
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect();
    }, this.reconnectMs);
    this.reconnectMs = Math.min(RECONNECT_MAX_MS, this.reconnectMs * 2);
  }

  private disconnect(): void {
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    const socket = this.socket;
    this.socket = null;
    this.open = false;
    this.stopChecks();
    this.hadConnection = false;
    this.byUpstreamId.clear();
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.answered(new Error('upstream socket closed'), undefined);
    }
    this.pending.clear();
    this.lateAnswers.clear();
    socket?.terminate();
  }

  private sendSubscribe(wanted: Wanted): void {
    const { method, params, unsubscribeMethod } = wanted.request;
    this.call(
      method,
      params,
      (err, id) => {
        if (err !== null || !(typeof id === 'string' || typeof id === 'number')) {
          const message = err?.message ?? `answered ${JSON.stringify(id)}`;
          this.log.warn({ err: message, params }, `upstream ${method} failed`);
          // A dropped socket or a timeout is asked again on the next connection; a refusal would be refused again.
          if ((err instanceof UpstreamRefusal || err === null) && this.wanted.has(wanted)) {
            this.unsubscribe(wanted, true);
            wanted.onRefused(message);
          }
          // A timed-out subscribe would never be asked again while this socket stays up (its late answer
          // is dropped, so the node's heads go to no one): the socket is ended and the next one asks.
          if (err instanceof UpstreamTimeout && this.wanted.has(wanted)) this.socket?.terminate();
          return;
        }
        if (!this.wanted.has(wanted)) {
          this.request(unsubscribeMethod, [id]).catch(() => undefined);
          return;
        }
        wanted.upstreamId = id;
        this.byUpstreamId.set(id, wanted);
        wanted.onLive(true);
      },
      this.cancelLate(unsubscribeMethod),
    );
  }

  /**
   * What a subscribe's answer after its timeout does: the node made it on a connection kept up (no
   * client wanted it any more, or the socket would have been ended), so it would stream to no one.
   * Made apart from sendSubscribe's scope, whose `wanted` (its filter, its feed) it need not keep.
   */
  private cancelLate(unsubscribeMethod: string): LateAnswer {
    return (lateId) => {
      if (typeof lateId === 'string' || typeof lateId === 'number') this.request(unsubscribeMethod, [lateId]).catch(() => undefined);
    };
  }

  private received(socket: WebSocket, text: string): void {
    // A socket left or dropped: what it still had in its buffers reaches no one.
    if (socket !== this.socket) return;
    const node = this.node;
    if (node !== null && this.verdicts.standing(node) === 'none') {
      // Found lying or on another network since the socket opened: nothing more of it reaches a client.
      this.leave('takes no call now (a liar, or on another network)');
      return;
    }
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (typeof message !== 'object' || message === null) return;
    const m = message as {
      id?: unknown;
      result?: unknown;
      error?: { message?: unknown };
      method?: unknown;
      params?: { subscription?: unknown; result?: unknown };
    };
    if (typeof m.id === 'number') {
      const p = this.pending.get(m.id);
      if (!p) {
        const late = this.lateAnswers.get(m.id);
        this.lateAnswers.delete(m.id);
        if (late !== undefined && !m.error) late(m.result);
        return;
      }
      this.pending.delete(m.id);
      clearTimeout(p.timer);
      if (m.error) p.answered(new UpstreamRefusal(String(m.error.message ?? 'upstream error')), undefined);
      else p.answered(null, m.result);
      return;
    }
    const subscription = m.params?.subscription;
    if (typeof m.method !== 'string' || !(typeof subscription === 'string' || typeof subscription === 'number')) return;
    const wanted = this.byUpstreamId.get(subscription);
    const result = m.params?.result;
    if (wanted) wanted.onResult(result, rawResultOf(text) ?? JSON.stringify(result ?? null));
  }
}
