import { type IncomingMessage, STATUS_CODES } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import type { PlanCatalog } from '../../domain/plans.js';
import { type ChangeFeed, FEED_RESUMED } from '../../infra/changefeed/port.js';
import { MemoryConnectionCounter } from '../../infra/wsconnections/memory.js';
import type { ConnectionCounter, ConnectionVerdict } from '../../infra/wsconnections/port.js';
import { INVALIDATION_TOPIC } from '../../projections/runner.js';
import type { Admission, Caller } from '../admission.js';
import { type Answer, type CallScope, localError, refusedRpc } from '../answer.js';
import type { ChainCalls, ChainResponse } from '../chainCalls.js';
import type { Chain } from '../chains.js';
import { JSON_CONTENT_TYPE, RpcCode, rpcError } from '../errors.js';
import { EVM_PUBSUB } from './feeds.js';
import type { ChainFeeds, FeedRefusal, OpenedFeed, PubSubDialect } from './pubsub.js';
import { Session, type SessionHost, WS_CLOSE } from './session.js';
import { SOLANA_PUBSUB } from './solanaFeeds.js';
import { verdictsOf } from './upstreamSocket.js';

export { WS_CLOSE } from './session.js';

export interface WebSocketOptions {
  /** Where token changes arrive (the token cache's invalidations): a revoked or disabled token's sockets close. */
  feed: ChangeFeed;
  plans: PlanCatalog;
  /** Where the plan's `ws_connections` cap is counted: Redis across instances, this process by default. */
  connections?: ConnectionCounter;
  /** Unread bytes a client may have queued before its socket is closed (1008), besides its subscriptions' allowance. */
  maxSendBufferBytes?: number;
  /**
   * Unread bytes allowed on top of `maxSendBufferBytes` for each subscription the socket holds: one
   * block's notifications leave at once, one per subscription, before the client can read any.
   */
  sendBufferPerSubscriptionBytes?: number;
  /** A ping this often; a socket that did not answer the previous one is cut off. */
  pingEveryMs?: number;
  /** A socket with no subscription that sent nothing for this long is closed (4000). */
  idleTimeoutMs?: number;
}

/** Live WebSocket connections and subscriptions of one token on this instance. */
export interface TokenSockets {
  tokenId: string;
  accountId: string;
  connections: number;
  subscriptions: number;
}

export interface WebSocketStats {
  connections: number;
  subscriptions: number;
  /** Subscriptions the nodes serve (one per distinct chain, kind and filter). */
  upstreamSubscriptions: number;
  byToken: TokenSockets[];
}

/** What a socket's upgrade is metered as when refused (a known token's refusal is metered, as over HTTP). */
const UPGRADE_METHOD = 'websocket';

interface TokenEntry {
  accountId: string;
  sessions: Set<Session>;
  subscriptions: number;
}

/** How a chain's clients subscribe over WebSocket: EVM's eth_subscribe, Solana's pubsub; null: no WebSocket (Sui, passthrough REST). */
function pubSubOf(chain: Chain): PubSubDialect | null {
  if (!chain.acceptsJsonRpc) return null;
  if (chain.protocol === 'jsonrpc') return EVM_PUBSUB;
  return chain.restFlavour === 'solana' ? SOLANA_PUBSUB : null;
}

/**
 * WebSocket on the chain port: `ws://HOST/<chain>/<token>` (or the token as Bearer on the
 * upgrade). The upgrade is admitted as a call (at cost 0): refused with the status and body an
 * HTTP call would get. Each instance tracks its sockets per token, closes a token's sockets when
 * the change feed says the token changed and it is no longer admitted, and pings them.
 */
export class WebSocketGateway implements SessionHost {
  private readonly server: WebSocketServer;
  private readonly feeds = new Map<string, ChainFeeds>();
  private readonly tokens = new Map<string, TokenEntry>();
  private readonly sessions = new Set<Session>();
  private subscriptionCount = 0;
  private readonly timer: NodeJS.Timeout;
  private unsubscribe: Promise<() => Promise<void>> | null = null;
  readonly maxSendBufferBytes: number;
  readonly sendBufferPerSubscriptionBytes: number;
  readonly freeHeartbeatEveryMs: number;
  private readonly idleTimeoutMs: number;
  private readonly connections: ConnectionCounter;
  /** `close` was called: a connection counted after it is released and its socket destroyed, never opened. */
  private closing = false;

  constructor(
    readonly calls: ChainCalls,
    readonly nextId: () => string,
    private readonly options: WebSocketOptions,
  ) {
    this.maxSendBufferBytes = options.maxSendBufferBytes ?? 1024 * 1024;
    // A newHeads notification is ~0.6–1.6 KB (a header with its logs bloom), a log ~0.5–1.5 KB: 4 KiB holds a block's for each.
    this.sendBufferPerSubscriptionBytes = options.sendBufferPerSubscriptionBytes ?? 4 * 1024;
    // A client's heartbeat as often as the gateway's own ping is free; 80 %: a 30 s one arrives a little early or late.
    this.freeHeartbeatEveryMs = Math.floor((options.pingEveryMs ?? 30_000) * 0.8);
    this.idleTimeoutMs = options.idleTimeoutMs ?? 300_000;
    this.connections = options.connections ?? new MemoryConnectionCounter();
    // A frame over the body limit closes with 1009; ws checks it while the frame arrives.
    this.server = new WebSocketServer({ noServer: true, maxPayload: calls.limits.maxBodyBytes, perMessageDeflate: false, clientTracking: false });
    this.timer = setInterval(() => this.keepAlive(), options.pingEveryMs ?? 30_000);
    this.timer.unref();
    this.unsubscribe = options.feed.subscribe(INVALIDATION_TOPIC, (message) => this.tokenChanged(message));
  }

  /** An Upgrade on a chain route: admitted like a call, then handed to ws; refused with the HTTP answer otherwise. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, ip: string): void {
    socket.on('error', () => socket.destroy());
    const url = req.url ?? '/';
    const authorization = req.headers.authorization;
    const call = {
      method: 'POST',
      url,
      headers: authorization === undefined ? {} : { authorization },
      body: undefined,
      ip,
      id: this.nextId(),
      arrivedAt: performance.now(),
      connection: socket,
    };
    let admitted: Admission | null = null;
    let pubsub: PubSubDialect | null = null;
    this.calls.serveWith(
      call,
      (scope, credentials) => {
        const refuse = (status: number, rpcCode: number, message: string) =>
          localError(scope, { shape: 'rpc', status, rpcCode, restCode: 'invalid_request', message, method: UPGRADE_METHOD });
        pubsub = pubSubOf(scope.chain);
        if (pubsub === null) return refuse(400, RpcCode.invalidRequest, `${scope.chain.id} has no WebSocket endpoint`);
        if (credentials.segments.length > 0)
          return refuse(404, RpcCode.invalidRequest, `WebSocket is served on /${scope.chain.id}/<token>, with no path after the token`);
        const admission = scope.admit(0);
        const answer = (a: Admission): Answer => {
          if (!a.ok) return refusedRpc(a, null, UPGRADE_METHOD);
          admitted = a;
          return { status: 101, body: null, contentType: JSON_CONTENT_TYPE, admission: a, usage: [] };
        };
        return admission instanceof Promise ? admission.then(answer) : answer(admission);
      },
      (response) => {
        const a = admitted as Admission | null;
        const dialect = pubsub as PubSubDialect | null;
        if (response.status !== 101 || a === null || !a.ok || dialect === null) return refuseUpgrade(socket, response);
        if (socket.destroyed) return;
        const cap = this.connectionCap(a.caller);
        const counted = (verdict: ConnectionVerdict): void => {
          if (!verdict.granted) {
            const body = rpcError('null', RpcCode.limitExceeded, `Too many WebSocket connections for this token: at most ${cap} at once`);
            refuseUpgrade(socket, { status: 429, headers: { ...response.headers, 'content-type': JSON_CONTENT_TYPE }, body });
            return;
          }
          // Held until the TCP connection closes, whichever way: a handshake ws aborts, a client gone while Redis answered, or the session's end.
          if (socket.destroyed || this.closing) {
            verdict.release();
            socket.destroy();
            return;
          }
          socket.once('close', verdict.release);
          this.server.handleUpgrade(req, socket, head, (ws) => this.opened(new Session(ws, this, dialect, url, authorization, ip, a.caller)));
        };
        // The counter never rejects (it fails open); a bug there or in opening the session must not leave the client hanging.
        this.connections
          .acquire(a.caller.tokenId, cap)
          .then(counted)
          .catch((err: unknown) => {
            this.calls.log.error({ err }, 'WebSocket upgrade failed');
            socket.destroy();
          });
      },
    );
  }

  /** The shared feed for a subscribe call (`method`, `params`) on the scope's chain, in the session's dialect. */
  feedFor(scope: CallScope, dialect: PubSubDialect, method: string, params: unknown): OpenedFeed | FeedRefusal {
    const chain = scope.chain;
    const name = method.slice(0, 64);
    if (!chain.upstreams.some((u) => u.ws !== null))
      return { error: `${name} is not available on ${chain.id}: its nodes have no WebSocket endpoint`, code: RpcCode.methodNotFound };
    if (!chain.isMethodAllowed(method)) return { error: `Method not found: ${name} is not available on ${chain.id}`, code: RpcCode.methodNotFound };
    let feeds = this.feeds.get(chain.id);
    if (!feeds) {
      feeds = dialect.feedsFor(chain, { warn: (details, message) => this.calls.log.error(details, message) }, verdictsOf(chain, scope.pool.heads));
      this.feeds.set(chain.id, feeds);
    }
    return feeds.open(method, params);
  }

  subscriptionCap(caller: Caller): number | null {
    return caller.plan === undefined ? null : this.options.plans[caller.plan].ws_subscriptions;
  }

  subscriptionsChanged(session: Session, delta: number): void {
    this.subscriptionCount += delta;
    const entry = this.tokens.get(session.caller.tokenId);
    if (entry) entry.subscriptions += delta;
  }

  closed(session: Session): void {
    if (!this.sessions.delete(session)) return;
    const entry = this.tokens.get(session.caller.tokenId);
    if (!entry) return;
    entry.sessions.delete(session);
    if (entry.sessions.size === 0) this.tokens.delete(session.caller.tokenId);
  }

  stats(): WebSocketStats {
    let upstreamSubscriptions = 0;
    for (const f of this.feeds.values()) upstreamSubscriptions += f.upstreamSubscriptions;
    const byToken = [...this.tokens].map(([tokenId, e]) => ({ tokenId, accountId: e.accountId, connections: e.sessions.size, subscriptions: e.subscriptions }));
    return { connections: this.sessions.size, subscriptions: this.subscriptionCount, upstreamSubscriptions, byToken };
  }

  /** The process is stopping: every socket closes with 1001, the nodes' sockets too. */
  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.timer);
    for (const s of this.sessions) s.close(WS_CLOSE.goingAway, 'server shutting down');
    for (const f of this.feeds.values()) f.close();
    this.feeds.clear();
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    await (await unsubscribe)?.();
  }

  private opened(session: Session): void {
    this.sessions.add(session);
    const { tokenId, accountId } = session.caller;
    let entry = this.tokens.get(tokenId);
    if (!entry) {
      entry = { accountId, sessions: new Set(), subscriptions: 0 };
      this.tokens.set(tokenId, entry);
    }
    entry.sessions.add(session);
  }

  private connectionCap(caller: Caller): number | null {
    return caller.plan === undefined ? null : this.options.plans[caller.plan].ws_connections;
  }

  /**
   * `token:<id>` or `account:<id>` changed: each of its sockets is admitted again (the token
   * cache dropped the entry, so this reads the read model) and closed if refused. After the
   * token cache's own listener has run: it subscribed first, and this waits a turn besides.
   */
  private tokenChanged(message: string): void {
    const [kind, id] = message.split(':', 2) as [string, string];
    const affected: Session[] = [];
    if (message === FEED_RESUMED) for (const e of this.tokens.values()) affected.push(...e.sessions);
    else if (kind === 'token') affected.push(...(this.tokens.get(id)?.sessions ?? []));
    else if (kind === 'account') for (const e of this.tokens.values()) if (e.accountId === id) affected.push(...e.sessions);
    if (affected.length === 0) return;
    setImmediate(() => {
      for (const session of affected) this.recheck(session);
    });
  }

  /**
   * Closes the socket if its token is refused now; otherwise the session takes the token as it
   * is now: a plan changed since the upgrade sets the cap on its next subscribe calls (it kept
   * the upgrade's plan's for the socket's life: 10 after an upgrade to 50, none after a downgrade
   * from Unlimited).
   */
  private recheck(session: Session): void {
    let refusal: Admission | null = null;
    let caller: Caller | null = null;
    this.calls.serveWith(
      session.request(undefined),
      (scope) => {
        const admission = scope.admit(0);
        const answer = (a: Admission): Answer => {
          if (!a.ok && a.status !== 429) refusal = a;
          else caller = a.caller;
          return { status: 200, body: null, contentType: JSON_CONTENT_TYPE, admission: a, usage: [] };
        };
        return admission instanceof Promise ? admission.then(answer) : answer(admission);
      },
      () => {
        const r = refusal as Admission | null;
        if (r !== null && !r.ok) session.close(r.status === 401 ? WS_CLOSE.unauthorized : WS_CLOSE.forbidden, r.message);
        const c = caller as Caller | null;
        if (c !== null && c.tokenId === session.caller.tokenId) session.caller = c;
      },
    );
  }

  private keepAlive(): void {
    const idleBefore = performance.now() - this.idleTimeoutMs;
    for (const session of this.sessions) {
      if (!session.alive) {
        session.socket.terminate();
        continue;
      }
      if (session.subscriptions.size === 0 && session.lastHeardAt < idleBefore) {
        session.close(WS_CLOSE.idle, 'idle timeout');
        continue;
      }
      session.alive = false;
      session.socket.ping();
    }
  }
}

/** The refused upgrade's HTTP answer, as a call would get it, and the connection closed. */
export function refuseUpgrade(socket: Duplex, response: ChainResponse): void {
  if (socket.destroyed) return;
  const body = response.body ?? '';
  const headers = { ...response.headers, 'content-length': String(Buffer.byteLength(body)), connection: 'close' };
  const head = [`HTTP/1.1 ${response.status} ${STATUS_CODES[response.status] ?? ''}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)].join('\r\n');
  socket.end(`${head}\r\n\r\n${body}`);
}
