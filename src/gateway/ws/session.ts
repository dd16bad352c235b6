import type { IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Subscription } from 'rxjs';
import WebSocket from 'ws';
import type { MaybePromise } from '../../domain/maybePromise.js';
import type { Admission, Caller } from '../admission.js';
import { type Answer, type CallScope, draft, localError, refusedRpc, retryData } from '../answer.js';
import type { ChainCalls, ChainRequest, ChainResponse } from '../chainCalls.js';
import { JSON_CONTENT_TYPE, RpcCode, rpcError } from '../errors.js';
import { parseJsonRpc, type RpcMember } from '../jsonrpc.js';
import { arrayElements, documentStart, objectMembers, type Span } from '../jsonScan.js';
import {
  type CallRole,
  type FeedEvent,
  type FeedItem,
  type FeedRefusal,
  LIVE,
  liveWithinMsOf,
  NOT_LIVE,
  type OpenedFeed,
  type PubSubDialect,
} from './pubsub.js';

/** Close codes a client may see, documented for clients (docs: "WebSocket close codes"). */
export const WS_CLOSE = {
  /** The gateway is shutting down. */
  goingAway: 1001,
  /** A binary frame: the gateway speaks JSON-RPC in text frames. */
  unsupportedData: 1003,
  /** The client does not read: its send buffer passed the bound (1 MiB, plus 4 KiB for each of its subscriptions). */
  policyViolation: 1008,
  /** A frame larger than the body limit (ws closes with it itself). */
  messageTooBig: 1009,
  /** No call, no subscription and no frame for the idle timeout. */
  idle: 4000,
  /** The token is no longer valid: revoked, expired or unknown. */
  unauthorized: 4001,
  /** The token was disabled, or the chain left its plan. */
  forbidden: 4003,
  /** The monthly quota is exhausted: each subscription ended with an error notification first. */
  quotaExhausted: 4029,
} as const;

/** What a session needs of the gateway that holds it. */
export interface SessionHost {
  readonly calls: ChainCalls;
  nextId(): string;
  /** The shared feed for a subscribe call on the scope's chain, or why there is none. */
  feedFor(scope: CallScope, dialect: PubSubDialect, method: string, params: unknown): OpenedFeed | FeedRefusal;
  subscriptionCap(caller: Caller): number | null;
  maxSendBufferBytes: number;
  /** Unread bytes allowed on top of maxSendBufferBytes for each subscription the socket holds. */
  sendBufferPerSubscriptionBytes: number;
  /** A heartbeat call (PubSubDialect.heartbeatCalls) is uncharged at most this often per socket. */
  freeHeartbeatEveryMs: number;
  subscriptionsChanged(session: Session, delta: number): void;
  closed(session: Session): void;
}

/** A close frame's reason holds at most 123 bytes of UTF-8: ws throws on a longer one. */
const MAX_CLOSE_REASON_BYTES = 123;

/**
 * The reason cut to what a close frame holds, on a character boundary. A reason can carry an
 * operator's text (the plan's name in "The <plan> plan does not include…"): a long or non-ASCII
 * one made ws throw, in a callback where nothing catches it, and left the socket open.
 */
function closeReason(reason: string): string {
  if (Buffer.byteLength(reason) <= MAX_CLOSE_REASON_BYTES) return reason;
  let bytes = 0;
  let cut = '';
  for (const ch of reason) {
    bytes += Buffer.byteLength(ch);
    if (bytes > MAX_CLOSE_REASON_BYTES) break;
    cut += ch;
  }
  return cut;
}

/** Subscriptions a connection holds at most, whatever the plan (an unlimited plan included): each is memory on the gateway. */
const HARD_SUBSCRIPTION_CAP = 10_000;

interface Pending {
  frame: string | Buffer | null;
  done: boolean;
  /** What follows once the frames before it are sent: the connection's end after a refused notification. */
  after?: () => void;
}

/** A subscribe call's reply: the subscription to open once its answer was sent. */
interface Opening {
  /** The client's subscription id, as JSON text. */
  id: string;
  opened: OpenedFeed;
  /** How long its answer waits for the node at most (the chain's node timeout, at most 5 s): a node down meanwhile does not hold the client. */
  liveWithinMs: number;
}

/**
 * Where a subscribe or unsubscribe call's answer goes: sent alone, or kept for its batch's answer.
 * `start` sends what the subscription's feed gave before its answer, once the answer was sent (null: nothing to send).
 */
type LocalReply = (body: string | Buffer | null, start: (() => void) | null) => void;

/** A client's live subscription: to its feed, and its notifications' method (for the error one at the end). */
interface Live {
  subscription: Subscription;
  notification: string;
  /** Its answer has left: the client knows its id, and frames for it may follow. */
  answered: boolean;
  /** The bound on the wait for the node (cleared once answered, or when the socket ends). */
  bound: NodeJS.Timeout;
}

/**
 * One client's WebSocket: its JSON-RPC calls go through ChainCalls as calls over HTTP do (same
 * validation, limits and metering: a synthetic POST of the upgrade's URL and Authorization);
 * subscribe and unsubscribe calls (the chain's dialect: eth_subscribe, or Solana's slotSubscribe…)
 * are answered here. Notifications leave in the order their feed gave them, each admitted and
 * metered as one call (`eth_subscription:<kind>`, `slotNotification`…).
 */
export class Session {
  /** By the client's subscription id as JSON text. */
  readonly subscriptions = new Map<string, Live>();
  /** Notifications admitted and metered, waiting for the ones before them. */
  private readonly outbox: Pending[] = [];
  private readonly headers: IncomingHttpHeaders;
  /** eth_subscribe calls past the cap check and not yet answered: they count against the cap, or calls sent together would all pass it. */
  private opening = 0;
  private closing = false;
  /**
   * The most subscriptions this socket held since its send buffer was last within the base bound:
   * a backlog built while it held them keeps their allowance (a client unsubscribing while it reads
   * a block's burst is not cut off by the answer to its eth_unsubscribe).
   */
  private allowedSubscriptions = 0;
  /** performance.now() of the client's last frame (a call or a pong). */
  lastHeardAt = performance.now();
  /** Bytes of notifications held for subscriptions whose answers have not left (their batch waits for a slower member). */
  private heldBytes = 0;
  /** The node's answers to the dialect's heartbeat calls on this socket, as result JSON text by method. */
  private readonly heartbeatAnswers = new Map<string, string>();
  /** performance.now() of the last heartbeat call answered uncharged. */
  private freeHeartbeatAt = Number.NEGATIVE_INFINITY;
  alive = true;

  constructor(
    readonly socket: WebSocket,
    private readonly host: SessionHost,
    private readonly dialect: PubSubDialect,
    /** The upgrade's URL (chain and token). */
    private readonly url: string,
    authorization: string | undefined,
    private readonly ip: string,
    /** The token as last admitted: its plan's subscription cap (the gateway's re-admission after a change refreshes it). */
    public caller: Caller,
  ) {
    this.headers = authorization === undefined ? { 'content-type': JSON_CONTENT_TYPE } : { 'content-type': JSON_CONTENT_TYPE, authorization };
    socket.on('message', (data, isBinary) => this.received(data as Buffer, isBinary));
    socket.on('pong', () => {
      this.alive = true;
    });
    socket.on('close', () => this.ended());
    socket.on('error', () => this.failed());
  }

  /** Ends the connection with a documented code; a client that does not read is cut off a second later. */
  close(code: number, reason: string): void {
    if (this.closing) return;
    this.closing = true;
    this.stopSubscriptions();
    this.socket.close(code, closeReason(reason));
    setTimeout(() => this.socket.terminate(), 1000).unref();
  }

  /**
   * ws closes a socket after a protocol error (a frame over maxPayload: 1009, invalid UTF-8…)
   * itself, then waits 30 s for a close frame it no longer reads: cut off a second later instead.
   */
  private failed(): void {
    if (this.closing) return;
    this.closing = true;
    this.stopSubscriptions();
    setTimeout(() => this.socket.terminate(), 1000).unref();
  }

  /** A synthetic call carrying the upgrade's credentials. */
  request(body: Buffer | undefined): ChainRequest {
    return {
      method: 'POST',
      url: this.url,
      headers: this.headers,
      body,
      ip: this.ip,
      id: this.host.nextId(),
      arrivedAt: performance.now(),
      connection: this.socket,
    };
  }

  private received(data: Buffer, isBinary: boolean): void {
    this.lastHeardAt = performance.now();
    if (this.closing) return;
    if (isBinary) {
      this.close(WS_CLOSE.unsupportedData, 'binary frames are not accepted: send JSON-RPC as text');
      return;
    }
    const local = localCall(data, this.dialect);
    if (local === null) {
      const batch = subscriptionBatch(data, this.dialect, this.host.calls.limits.maxBatch);
      if (batch !== null) this.batch(batch);
      else this.serve(data);
      return;
    }
    // The client's heartbeat: it was heard (lastHeardAt), nothing else.
    if (local.role === 'keepAlive') return;
    // A notification (no id) gets no answer, as JSON-RPC has it.
    this.answerLocally(data, local, (body, start) => {
      if (local.idText !== undefined) this.send(body);
      start?.();
    });
  }

  /**
   * A call ChainCalls answers, but a heartbeat call (viem's `net_version` every 30 s): charged as
   * any call, each would take ~86,400 calls a month per idle socket (86 % of Free's quota). One
   * per heartbeat interval is answered from the node's answer this socket already had, metered
   * and uncharged; more often, or before the node answered one, it is an ordinary call.
   */
  private serve(data: Buffer): void {
    const heartbeat = heartbeatCall(data, this.dialect);
    if (heartbeat === null) {
      this.host.calls.serve(this.request(data), (response) => this.send(response.body));
      return;
    }
    const kept = this.heartbeatAnswers.get(heartbeat.method);
    const now = performance.now();
    if (kept !== undefined && now - this.freeHeartbeatAt >= this.host.freeHeartbeatEveryMs) {
      this.freeHeartbeatAt = now;
      this.answerHeartbeat(data, heartbeat, kept);
      return;
    }
    this.host.calls.serve(this.request(data), (response) => {
      const result = kept === undefined && response.status === 200 ? stringResultOf(response.body) : null;
      if (result !== null) this.heartbeatAnswers.set(heartbeat.method, result);
      this.send(response.body);
    });
  }

  private answerHeartbeat(data: Buffer, call: HeartbeatCall, resultText: string): void {
    const handler = (scope: CallScope): MaybePromise<Answer> => {
      const answered = (a: Admission): Answer => {
        if (!a.ok) return refusedRpc(a, { kind: 'single', idText: call.idText }, call.method);
        const usage = draft(call.method, null, null);
        usage.cache = 'hit';
        return {
          status: 200,
          body: `{"jsonrpc":"2.0","id":${call.idText},"result":${resultText}}`,
          contentType: JSON_CONTENT_TYPE,
          admission: a,
          usage: [usage],
        };
      };
      const admission = scope.admit(0);
      return admission instanceof Promise ? admission.then(answered) : answered(admission);
    };
    this.host.calls.serveWith(this.request(data), handler, (response) => this.send(response.body));
  }

  /** A subscribe or unsubscribe call: a subscription method the gateway does not offer takes the subscribe path, where feedFor refuses it (-32601). */
  private answerLocally(data: Buffer, call: LocalCall, reply: LocalReply): void {
    if (call.role === 'unsubscribe') this.unsubscribe(data, call, reply);
    else this.subscribe(data, call, reply);
  }

  /**
   * A batch with subscribe or unsubscribe calls (geth takes them in a batch too): each such member
   * is answered here as a single call would be (admitted and metered on its own), the other
   * members go through ChainCalls as one batch, and the answers leave in one frame, in the
   * members' order; each subscription's notifications follow it.
   */
  private batch({ text, spans, members, calls }: SubscriptionBatch): void {
    const local = new Map<number, { body: string | Buffer | null; start: (() => void) | null }>();
    const others = members.filter((_, i) => calls[i] === null);
    let answered: string[] | null = others.length === 0 ? [] : null;
    const finish = (): void => {
      if (answered === null || local.size < members.length - others.length) return;
      const fromBatch = answered;
      const elements: string[] = [];
      for (const m of members) {
        const mine = local.get(m.index);
        if (mine !== undefined) {
          if (mine.body !== null && m.idText !== undefined) elements.push(mine.body.toString());
        } else if (m.idText !== undefined && fromBatch.length > 0) elements.push(fromBatch.shift() as string);
      }
      elements.push(...fromBatch);
      if (elements.length > 0) this.send(`[${elements.join(',')}]`);
      for (const m of members) local.get(m.index)?.start?.();
    };
    for (const [i, m] of members.entries()) {
      const call = calls[i];
      if (call === null || call === undefined) continue;
      const span = spans[m.index] as Span;
      this.answerLocally(Buffer.from(text.slice(span[0], span[1])), call, (body, start) => {
        local.set(m.index, { body, start });
        finish();
      });
    }
    if (others.length > 0) {
      const body = `[${others.map((m) => text.slice(...(spans[m.index] as Span))).join(',')}]`;
      this.host.calls.serve(this.request(Buffer.from(body)), (response) => {
        answered = elementsOf(response.body);
        finish();
      });
    } else finish();
  }

  private subscribe(data: Buffer, call: LocalCall, reply: LocalReply): void {
    let opening: Opening | null = null;
    let reserved = false;
    const handler = (scope: CallScope): MaybePromise<Answer> => {
      const idText = call.idText ?? 'null';
      const ids = { kind: 'single' as const, idText };
      const issue = (status: number, rpcCode: number, message: string) =>
        localError(scope, { shape: 'rpc', status, rpcCode, restCode: 'invalid_request', message, method: call.method, ids });
      // Its answer alone names the subscription: one opened for a notification would be charged notifications the client cannot match.
      if (call.idText === undefined)
        return issue(
          400,
          RpcCode.invalidRequest,
          `Invalid Request: ${call.method.slice(0, 64)} sent as a notification (no id) opens nothing: its answer carries the subscription id`,
        );
      const found = this.host.feedFor(scope, this.dialect, call.method, call.params);
      if ('error' in found) return issue(found.code === RpcCode.invalidParams ? 400 : 405, found.code, found.error);
      const cap = Math.min(this.host.subscriptionCap(this.caller) ?? HARD_SUBSCRIPTION_CAP, HARD_SUBSCRIPTION_CAP);
      if (this.subscriptions.size + this.opening >= cap)
        return issue(429, RpcCode.limitExceeded, `Too many subscriptions on this connection: at most ${cap} at once`);
      this.opening++;
      reserved = true;
      const admitted = (a: Admission): Answer => {
        if (!a.ok) return refusedRpc(a, ids, call.method);
        if (a.granted < 1) {
          return {
            status: 429,
            body: rpcError(idText, RpcCode.limitExceeded, 'Limit exceeded: this call was refused by the rate or monthly limit', retryData(a)),
            contentType: JSON_CONTENT_TYPE,
            admission: a,
            usage: [draft(call.method, RpcCode.limitExceeded, 'limit exceeded')],
          };
        }
        const id = this.dialect.newSubscriptionId((taken) => this.subscriptions.has(taken));
        opening = { id, opened: found, liveWithinMs: liveWithinMsOf(scope.chain) };
        const usage = draft(call.method, null, null);
        usage.charged = true;
        return { status: 200, body: `{"jsonrpc":"2.0","id":${idText},"result":${id}}`, contentType: JSON_CONTENT_TYPE, admission: a, usage: [usage] };
      };
      const admission = scope.admit(1);
      return admission instanceof Promise ? admission.then(admitted) : admitted(admission);
    };
    this.host.calls.serveWith(this.request(data), handler, (response) => {
      if (reserved) this.opening--;
      const o = opening as Opening | null;
      if (o === null || response.status !== 200) reply(response.body, null);
      else this.join(o, (release) => reply(response.body, release));
    });
  }

  /**
   * A granted subscription joins its feed before its answer is sent, and `answer` is called once
   * the node has the subscription (the feed's LIVE), refused or ended it, or the feed's bound
   * passed (a node down: the subscription is served once one is back). What the feed gives before
   * the answer has left is held, and sent by `release`, after it. Answered before the node had it,
   * a head made meanwhile would never reach the client.
   */
  private join(o: Opening, answer: (release: () => void) => void): void {
    if (this.closing) return;
    let held: Array<() => void> | null = [];
    let heldBytes = 0;
    const later = (deliver: () => void): void => {
      if (held === null) deliver();
      else held.push(deliver);
    };
    // A feed live already answers inside feed.subscribe, before `live` below is made.
    const release = (): void => {
      if (live !== null) live.answered = true;
      const queued = held ?? [];
      held = null;
      this.heldBytes -= heldBytes;
      heldBytes = 0;
      for (const deliver of queued) deliver();
    };
    // `answer` is called once; its answer leaves later (release).
    let answerCalled = false;
    const ready = (): void => {
      if (answerCalled) return;
      answerCalled = true;
      clearTimeout(bound);
      answer(release);
    };
    const bound = setTimeout(ready, o.liveWithinMs);
    bound.unref();
    // A feed the node ended (a signature's one notification was its last): the id is free, as on the node.
    let live: Live | null = null;
    let ended = false;
    const end = (): void => {
      ended = true;
      ready();
      if (live === null || this.subscriptions.get(o.id) !== live) return;
      this.subscriptions.delete(o.id);
      this.host.subscriptionsChanged(this, -1);
    };
    // The client hears why its subscription ended in the subscription's own notification, after what it held.
    const endWithError = (code: number, message: string): void => {
      later(() =>
        this.sendAfterNotifications(
          `{"jsonrpc":"2.0","method":"${o.opened.notification}","params":{"subscription":${o.id},"error":{"code":${code},"message":${JSON.stringify(message)}}}}`,
        ),
      );
      end();
    };
    const refused = (err: unknown): void =>
      endWithError(RpcCode.upstreamUnavailable, `The node refused the subscription: ${err instanceof Error ? err.message.slice(0, 200) : 'unknown error'}`);
    // What waits for an answer is memory the client cannot drain: held as its send buffer would be, no more.
    let cut = false;
    const overflowed = (): void => {
      cut = true;
      live?.subscription.unsubscribe();
      endWithError(
        RpcCode.limitExceeded,
        `Subscription ended: the notifications this socket held while answers waited (the rest of a batch, or the node) passed ${this.host.maxSendBufferBytes} bytes; subscribe outside a batch with slow calls`,
      );
    };
    const next = (event: FeedEvent): void => {
      if (event === LIVE) ready();
      else if (event === NOT_LIVE || cut) return;
      else if (held === null) this.notify(o.id, o.opened, event);
      else {
        const bytes = Buffer.byteLength(event);
        if (this.heldBytes + bytes > this.host.maxSendBufferBytes) {
          overflowed();
          return;
        }
        heldBytes += bytes;
        this.heldBytes += bytes;
        held.push(() => this.notify(o.id, o.opened, event));
      }
    };
    const subscription = o.opened.feed.subscribe({ next, complete: end, error: refused });
    if (cut) subscription.unsubscribe();
    if (ended) return;
    live = { subscription, notification: o.opened.notification, answered: held === null, bound };
    this.subscriptions.set(o.id, live);
    this.host.subscriptionsChanged(this, 1);
  }

  /** An unsubscribe call; as a notification (no id) it is done too, unanswered. */
  private unsubscribe(data: Buffer, call: LocalCall, reply: LocalReply): void {
    const id = this.dialect.unsubscribeIdOf(call.params);
    const idText = call.idText ?? 'null';
    const handler = (scope: CallScope): MaybePromise<Answer> => {
      const answered = (a: Admission): Answer => {
        if (!a.ok) return refusedRpc(a, { kind: 'single', idText }, call.method);
        const answer = (status: number, body: string, code: number | null, message: string | null): Answer => ({
          status,
          body,
          contentType: JSON_CONTENT_TYPE,
          admission: a,
          usage: [draft(call.method, code, message)],
        });
        // Another connection's id is not this one's: answered as an id that never was.
        const live = id === null ? undefined : this.subscriptions.get(id);
        if (live !== undefined && id !== null) {
          live.subscription.unsubscribe();
          this.subscriptions.delete(id);
          this.host.subscriptionsChanged(this, -1);
          return answer(200, `{"jsonrpc":"2.0","id":${idText},"result":true}`, null, null);
        }
        const refusal = this.dialect.notSubscribed(id === null);
        if ('result' in refusal) return answer(200, `{"jsonrpc":"2.0","id":${idText},"result":false}`, null, null);
        return answer(400, rpcError(idText, refusal.code, refusal.message), refusal.code, refusal.message);
      };
      const admission = scope.admit(0);
      return admission instanceof Promise ? admission.then(answered) : answered(admission);
    };
    this.host.calls.serveWith(this.request(data), handler, (response) => reply(response.body, null));
  }

  /** One notification for one of this client's subscriptions: admitted (one call against the quota), metered, then sent in order. */
  private notify(subscriptionId: string, opened: OpenedFeed, item: FeedItem): void {
    if (this.closing) return;
    const slot: Pending = { frame: null, done: false };
    this.outbox.push(slot);
    let refusal: Admission | null = null;
    const method = opened.usageMethod;
    const handler = (scope: CallScope): MaybePromise<Answer> => {
      const admitted = (a: Admission): Answer => {
        const frame = `{"jsonrpc":"2.0","method":"${opened.notification}","params":{"subscription":${subscriptionId},"result":${item}}}`;
        const usage = draft(method, null, null);
        if (a.ok && a.granted > 0) {
          usage.charged = true;
          return { status: 200, body: frame, contentType: JSON_CONTENT_TYPE, admission: a, usage: [usage] };
        }
        // A push cannot be asked again later: one refused by the rate limit alone, or while the limits
        // cannot be checked (fail-closed), is delivered, uncharged.
        if (!a.ok && (a.code === 'rate_limited' || a.code === 'limits_unavailable'))
          return { status: 200, body: frame, contentType: JSON_CONTENT_TYPE, admission: a, usage: [usage] };
        refusal = a;
        const error = `{"jsonrpc":"2.0","method":"${opened.notification}","params":{"subscription":${subscriptionId},"error":{"code":${RpcCode.limitExceeded},"message":${JSON.stringify(a.ok ? 'limit exceeded' : a.message)}}}}`;
        return {
          status: a.ok ? 429 : a.status,
          body: error,
          contentType: JSON_CONTENT_TYPE,
          admission: a,
          usage: [draft(method, RpcCode.limitExceeded, a.ok ? 'limit exceeded' : a.message)],
        };
      };
      const admission = scope.admit(1);
      return admission instanceof Promise ? admission.then(admitted) : admitted(admission);
    };
    this.host.calls.serveWith(this.request(undefined), handler, (response: ChainResponse) => {
      const r = refusal as Admission | null;
      slot.done = true;
      // A refused notification is not sent: the connection ends after the notifications before it,
      // and on the quota every subscription, this one included, gets its error once (it got two).
      if (r === null) slot.frame = response.body;
      else if (!r.ok && r.status !== 429) slot.after = () => this.close(r.status === 401 ? WS_CLOSE.unauthorized : WS_CLOSE.forbidden, r.message);
      else slot.after = () => this.quotaExhausted();
      this.flush();
    });
  }

  /** Every subscription ends with an error notification, then the socket closes. */
  private quotaExhausted(): void {
    if (this.closing) return;
    // One not answered yet gets none: its id is not the client's (the 4029 close says why).
    for (const [id, { notification, answered }] of this.subscriptions) {
      if (!answered) continue;
      this.send(
        `{"jsonrpc":"2.0","method":"${notification}","params":{"subscription":${id},"error":{"code":${RpcCode.limitExceeded},"message":"The monthly request limit is reached."}}}`,
      );
    }
    this.close(WS_CLOSE.quotaExhausted, 'monthly request limit reached');
  }

  /** A frame that leaves after the notifications before it, which may still be being admitted. */
  private sendAfterNotifications(frame: string): void {
    if (this.closing) return;
    this.outbox.push({ frame, done: true });
    this.flush();
  }

  private flush(): void {
    while (this.outbox.length > 0 && (this.outbox[0] as Pending).done) {
      const { frame, after } = this.outbox.shift() as Pending;
      this.send(frame);
      after?.();
    }
  }

  /**
   * Sends a frame unless the client has more than its bound still unread: then the connection ends
   * (1008). The bound is the base (1 MiB) plus an allowance for each subscription it holds: a block's
   * notifications leave at once, one per subscription: 10,000 newHeads subscriptions queue 10–16 MB
   * in one go, unread only because the client has not had a turn to read them yet. The frame's
   * own size does not count: an answer larger than the bound (eth_getLogs, a block with its
   * transactions) goes out as over HTTP. The memory held is the bound plus one frame.
   */
  private send(frame: string | Buffer | null): void {
    if (frame === null || this.socket.readyState !== WebSocket.OPEN) return;
    const buffered = this.socket.bufferedAmount;
    const base = this.host.maxSendBufferBytes;
    const held = this.subscriptions.size;
    this.allowedSubscriptions = buffered <= base ? held : Math.max(this.allowedSubscriptions, held);
    const bound = base + this.allowedSubscriptions * this.host.sendBufferPerSubscriptionBytes;
    if (buffered > bound) {
      this.close(WS_CLOSE.policyViolation, `send buffer over ${bound} bytes: the client does not read`);
      return;
    }
    // Text frames always: an upstream's answer arrives as a Buffer, which ws would send as a binary frame (web3.js cannot read those).
    this.socket.send(frame, { binary: false });
  }

  private stopSubscriptions(): void {
    const n = this.subscriptions.size;
    for (const s of this.subscriptions.values()) {
      s.subscription.unsubscribe();
      clearTimeout(s.bound);
    }
    this.subscriptions.clear();
    this.outbox.length = 0;
    if (n > 0) this.host.subscriptionsChanged(this, -n);
  }

  private ended(): void {
    this.closing = true;
    this.stopSubscriptions();
    this.host.closed(this);
  }
}

interface LocalCall {
  method: string;
  role: CallRole | 'keepAlive';
  params: unknown;
  /** The call's id as JSON text (`null` too, a call as in JSON-RPC); undefined: a notification. */
  idText: string | undefined;
}

interface HeartbeatCall {
  method: string;
  idText: string;
}

/** The longest heartbeat call looked at: viem's `net_version` with a 10-digit id is ~60 bytes. */
const MAX_HEARTBEAT_CALL_BYTES = 256;

/** A single call, with an id and no params, of one of the dialect's heartbeat methods; null for anything else. */
function heartbeatCall(data: Buffer, dialect: PubSubDialect): HeartbeatCall | null {
  const methods = dialect.heartbeatCalls;
  if (methods === undefined || data.length > MAX_HEARTBEAT_CALL_BYTES || !methods.some((m) => data.indexOf(m) >= 0)) return null;
  const text = data.toString('utf8');
  const call = singleCallIn(text);
  if (call === null || !methods.includes(call.method)) return null;
  const { method, params, id } = call;
  if (!(typeof id === 'string' || typeof id === 'number' || id === null)) return null;
  if (!(params === undefined || params === null || (Array.isArray(params) && params.length === 0))) return null;
  return { method, idText: rawIdText(text, id) };
}

/** A single answer's result when it is a JSON string (`"0x539"`, `"1337"`), as JSON text; null otherwise. */
function stringResultOf(body: string | Buffer | null): string | null {
  if (body === null || body.length > MAX_HEARTBEAT_CALL_BYTES) return null;
  try {
    const answer = JSON.parse(body.toString()) as { result?: unknown; error?: unknown };
    return typeof answer.result === 'string' && answer.error === undefined ? JSON.stringify(answer.result) : null;
  } catch {
    return null;
  }
}

/** A frame's text as one JSON-RPC 2.0 call object (not a batch): its method, and its params and id as parsed; null for anything else. */
function singleCallIn(text: string): { method: string; params: unknown; id: unknown } | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const { method, params, id, jsonrpc } = value as { method?: unknown; params?: unknown; id?: unknown; jsonrpc?: unknown };
  return typeof method === 'string' && jsonrpc === '2.0' ? { method, params, id } : null;
}

/** The longest heartbeat frame looked at: web3.js's is 33 bytes. */
const MAX_KEEP_ALIVE_BYTES = 128;

/**
 * Whether a frame may call a subscribe or unsubscribe method: the common part of their names
 * (eth_subscribe, slotUnsubscribe…), or an escape, which may spell any name ("eth_s\u0075bscribe"
 * is eth_subscribe to a JSON parser, and went to the node as an ordinary call).
 */
function mayNameSubscription(data: Buffer): boolean {
  return data.indexOf('ubscribe') >= 0 || data.indexOf('\\u') >= 0;
}

/**
 * A single subscribe or unsubscribe call of the dialect (answered here), or the dialect's
 * heartbeat (dropped here); null for everything else (ChainCalls answers it).
 */
function localCall(data: Buffer, dialect: PubSubDialect): LocalCall | null {
  // Most frames are other calls: look for the common part of the method names (eth_subscribe, slotUnsubscribe…) before parsing anything.
  const keepAlive = dialect.keepAlive;
  const maybeKeepAlive = keepAlive !== undefined && data.length <= MAX_KEEP_ALIVE_BYTES && data.indexOf(keepAlive) >= 0;
  if (!maybeKeepAlive && !mayNameSubscription(data)) return null;
  const text = data.toString('utf8');
  const call = singleCallIn(text);
  if (call === null) return null;
  const { method, params, id } = call;
  if (method === keepAlive && id === undefined) return { method, role: 'keepAlive', params, idText: undefined };
  const role = dialect.roleOf(method);
  if (role === null) return null;
  // An id of another type is the JSON-RPC path's -32600, with no node call.
  if (!(typeof id === 'string' || typeof id === 'number' || id === null || id === undefined)) return null;
  return { method, role, params, idText: id === undefined ? undefined : rawIdText(text, id) };
}

/**
 * The call's id as the client wrote it, as over HTTP: serialized again, an integer beyond 2^53
 * changed (12345678901234567890 came back as 12345678901234567000), 1e400 came back as null,
 * 1.0 as 1, and a client matching answers by id never saw its subscribe call answered.
 */
function rawIdText(text: string, id: unknown): string {
  const span = objectMembers(text, documentStart(text)).get('id');
  return span === undefined ? JSON.stringify(id) : text.slice(span[0], span[1]);
}

/** A batch frame, read, with where each member is in its text. */
interface SubscriptionBatch {
  text: string;
  spans: Span[];
  members: RpcMember[];
  /** Each member as the socket answers it, in the members' order; null: ChainCalls answers it. */
  calls: Array<LocalCall | null>;
}

/**
 * A batch with at least one subscribe or unsubscribe call of the dialect (its members read as
 * over HTTP, within the batch limit); null for anything else (ChainCalls answers it, a batch
 * over the limit or unreadable included).
 */
function subscriptionBatch(data: Buffer, dialect: PubSubDialect, maxBatch: number): SubscriptionBatch | null {
  if (!mayNameSubscription(data)) return null;
  const parsed = parseJsonRpc(data, maxBatch);
  if (parsed.kind !== 'batch') return null;
  const calls = parsed.members.map((m) => localOf(m, dialect));
  if (calls.every((c) => c === null)) return null;
  const text = data.toString('utf8');
  return { text, spans: arrayElements(text, documentStart(text)), members: parsed.members, calls };
}

/** A batch member the socket answers itself, as `localCall` reads a single call; null: ChainCalls answers it. */
function localOf(m: RpcMember, dialect: PubSubDialect): LocalCall | null {
  if (m.kind !== 'call') return null;
  const role = dialect.roleOf(m.method);
  if (role === null) return null;
  return { method: m.method, role, params: m.paramsText === undefined ? undefined : (JSON.parse(m.paramsText) as unknown), idText: m.idText };
}

/** The answers in a batch's answer, as JSON text each (one error for the whole batch is one). */
function elementsOf(body: string | Buffer | null): string[] {
  const text = body === null ? '' : body.toString();
  if (text.trim() === '') return [];
  const start = documentStart(text);
  if (text.charCodeAt(start) !== 0x5b) return [text];
  return arrayElements(text, start).map(([from, to]) => text.slice(from, to));
}
