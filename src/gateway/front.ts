import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import type { FastifyServerFactory } from 'fastify';
import { readRawBody } from './body.js';
import { type ChainCalls, type ChainRequest, type ChainResponse, chainIdOf } from './chainCalls.js';
import { JSON_CONTENT_TYPE, RpcCode, rpcError } from './errors.js';
import { refuseUpgrade, WebSocketGateway, type WebSocketOptions } from './ws/gateway.js';

/**
 * The HTTP server of a process that serves chain calls: known chains' GET and POST calls are
 * answered here, on node:http, through ChainCalls; every other request goes on to fastify (the
 * management API, health checks, preflights, unknown chains). A chain call is the hot path,
 * thousands a second: here it skips fastify's routing, request and reply objects, hooks and
 * content-type parsing, which measured as much CPU as auth, limits and metering together
 * (docs/decisions.md, "Chain calls on node:http"). Given to fastify as its `serverFactory`; the
 * gateway routes plugin starts it (`serve`) and puts it in `drain` as the app closes.
 */
export class ChainFront {
  private calls: ChainCalls | null = null;
  /** Chain calls are metered one by one: their request lines are written at debug only (as src/server.ts does for fastify's). */
  private logRequests = false;
  /** The server is closing: calls on connections still open are served, the last one on each closing it. */
  private draining = false;
  /** While draining, per connection, calls taken since the drain began and not answered yet (pipelined ones). */
  private readonly takenInDrain = new WeakMap<object, number>();
  /** WebSocket upgrades on the chain routes (src/gateway/ws), once serving. */
  sockets: WebSocketGateway | null = null;

  constructor(
    private readonly options: {
      /** One proxy in front (TRUST_PROXY): the client is the address it added, the last of X-Forwarded-For (as fastifyTrustProxy has fastify read it). */
      trustProxy: boolean;
      /** The request ids fastify's `genReqId` gives too: one sequence for both. */
      nextId: () => string;
      /** Absent: upgrades are refused (the connection closed). */
      webSockets?: WebSocketOptions;
    },
  ) {}

  serve(calls: ChainCalls): void {
    this.calls = calls;
    this.logRequests = calls.log.level === 'debug' || calls.log.level === 'trace';
    if (this.options.webSockets) this.sockets = new WebSocketGateway(calls, this.options.nextId, this.options.webSockets);
  }

  /**
   * The server is closing: calls still arriving on open connections are served and metered as
   * ever (an answer is never sent for a known token without its usage record), and the answer
   * to a connection's last call closes it, so clients move on and the drain ends. Not every
   * answer: node drops the answers still queued behind a closing one (pipelined calls), and
   * those calls would be metered but never answered.
   */
  drain(): void {
    this.draining = true;
    // A socket would hold the server open: each closes with 1001 (clients reconnect elsewhere).
    void this.sockets?.close();
  }

  readonly serverFactory: FastifyServerFactory = (fastifyHandler, opts): Server => {
    // What fastify does with a server it creates itself: node:http's options (its timeouts for slow clients among them), then its own.
    const server = createServer(serverOptionsOf(opts), (req, res) => {
      toOriginForm(req);
      if (!this.take(req, res, false)) fastifyHandler(req, res);
    });
    // `Expect: 100-continue` (curl's for a body over 1 KB): what node would answer, except that a
    // chain call whose declared body is over the limit gets its 413 without a 100 first, so the
    // client does not send a body the gateway will not read (docs/decisions.md, "Odd but legal HTTP on chain calls").
    server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
      toOriginForm(req);
      if (!this.take(req, res, true)) {
        res.writeContinue();
        fastifyHandler(req, res);
      }
    });
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      toOriginForm(req);
      if (this.sockets === null) socket.destroy();
      else if (this.draining) {
        // An answer still due on this connection says `Connection: close` and node closes it after: the client sends the upgrade again elsewhere.
        if ((socket as Duplex & { _httpMessage?: unknown })._httpMessage == null) refuseUpgradeWhileDraining(socket);
      } else this.sockets.upgrade(req, socket, head, this.clientIp(req));
    });
    const option = (name: string): number | undefined => (typeof opts[name] === 'number' ? opts[name] : undefined);
    server.keepAliveTimeout = option('keepAliveTimeout') ?? server.keepAliveTimeout;
    server.requestTimeout = option('requestTimeout') ?? server.requestTimeout;
    server.setTimeout(option('connectionTimeout') ?? 0);
    const maxRequests = option('maxRequestsPerSocket');
    if (maxRequests) server.maxRequestsPerSocket = maxRequests;
    return server;
  };

  /**
   * Serves `req` if it is a known chain's GET or POST call; false leaves it to fastify.
   * `expectsContinue`: the client waits for a 100 before it sends the body (node has sent none).
   */
  private take(req: IncomingMessage, res: ServerResponse, expectsContinue: boolean): boolean {
    const calls = this.calls;
    const method = req.method;
    if (calls === null || (method !== 'POST' && method !== 'GET')) return false;
    const url = req.url ?? '/';
    if (!calls.isKnownChain(chainIdOf(url))) return false;
    const call: ChainRequest = {
      method,
      url,
      headers: req.headers,
      body: undefined,
      ip: this.clientIp(req),
      id: this.options.nextId(),
      arrivedAt: performance.now(),
      connection: req.socket,
    };
    if (this.logRequests) calls.log.debug({ reqId: call.id, req: { method, url, ip: call.ip } }, 'incoming request');
    const socket = req.socket;
    const takenInDrain = this.draining;
    if (takenInDrain) this.takenInDrain.set(socket, (this.takenInDrain.get(socket) ?? 0) + 1);
    const answer = (response: ChainResponse): void => {
      if (this.draining && this.lastOnConnection(socket, takenInDrain)) response.headers.connection = 'close';
      writeSafely(res, response, (err) => calls.failed(call, err));
      if (this.logRequests) {
        const responseTime = performance.now() - call.arrivedAt;
        calls.log.debug({ reqId: call.id, res: { statusCode: response.status }, responseTime }, 'request completed');
      }
    };
    if (method === 'GET') {
      if (expectsContinue) res.writeContinue();
      req.resume(); // a GET's body, if any, is not read (as fastify does)
      calls.serve(call, answer);
      return true;
    }
    // Over the limit by its Content-Length: readRawBody answers 413 without reading it, and the client need not send it.
    if (expectsContinue && !(Number(req.headers['content-length']) > calls.limits.maxBodyBytes)) res.writeContinue();
    readRawBody(req, req.headers['content-length'], calls.limits.maxBodyBytes, (err, body) => {
      if (err) {
        // A caller that hung up mid-body is gone, not failed: nobody to answer, nothing to log.
        if (req.destroyed) res.destroy();
        else answer(calls.failed(call, err));
        return;
      }
      call.body = body;
      calls.serve(call, answer);
    });
    return true;
  }

  /** Whether an answer during the drain is the last its connection waits for: no call taken since is unanswered. */
  private lastOnConnection(socket: object, takenInDrain: boolean): boolean {
    let pending = this.takenInDrain.get(socket) ?? 0;
    if (takenInDrain) this.takenInDrain.set(socket, --pending);
    return pending === 0;
  }

  /** The last X-Forwarded-For entry: a proxy that appends (nginx's `$proxy_add_x_forwarded_for`) keeps what the client wrote before it. */
  private clientIp(req: IncomingMessage): string {
    if (this.options.trustProxy) {
      const forwarded = req.headers['x-forwarded-for'];
      if (typeof forwarded === 'string') {
        const last = forwarded.slice(forwarded.lastIndexOf(',') + 1).trim();
        if (last !== '') return last;
      }
    }
    return req.socket.remoteAddress ?? '';
  }
}

/**
 * fastify's `trustProxy` for TRUST_PROXY: the socket's peer (hop 0) only, so `request.ip` is the
 * address that proxy added, as the front's. (`true` trusts every hop: the client's own first entry;
 * a hop count, `1`, trusts none in this fastify: it cannot check the peer, so it fails closed.)
 */
export const fastifyTrustProxy = (trustProxy: boolean): ((address: string, hop: number) => boolean) | false =>
  trustProxy ? (_address, hop) => hop === 0 : false;

/**
 * An absolute-form request target (`POST http://host/eth/gk_… HTTP/1.1`, what a client talking to
 * a proxy sends, and which a server must accept, RFC 9112 §3.2.2) as its origin form, the path and
 * query: node hands it on as written, and the chain was read from `http:`. The authority is not
 * checked (the gateway answers whatever Host it is called by).
 */
function toOriginForm(req: IncomingMessage): void {
  const url = req.url;
  if (url === undefined || url.charCodeAt(0) === 47 /* / */) return;
  const match = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(url);
  if (match === null) return;
  const rest = url.slice(match[0].length);
  req.url = rest.charCodeAt(0) === 47 ? rest : `/${rest}`;
}

/**
 * An upgrade on a connection still open while the server closes: a 503 that says so, and the
 * connection closed (as the answer to each call of the drain), so the client connects again,
 * to another instance. Not admitted nor metered: no socket was opened, nothing was served.
 */
function refuseUpgradeWhileDraining(socket: Duplex): void {
  socket.on('error', () => socket.destroy());
  const body = rpcError('null', RpcCode.internalError, 'The gateway is shutting down: connect again');
  refuseUpgrade(socket, { status: 503, headers: { 'content-type': JSON_CONTENT_TYPE, 'retry-after': '1' }, body });
  // A client that does not close its side would hold the drain.
  setTimeout(() => socket.destroy(), 1000).unref();
}

/**
 * fastify's `clientErrorHandler`, for bytes that are not a request (400), a client too slow (408)
 * or headers too large (431): answered as fastify does and the connection closed, but only once
 * the answer still due on it has gone. A pipelined call ahead of the bad bytes was admitted and
 * metered; fastify's own handler wrote the refusal into the middle of its answer, or cut it off.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, message] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Client Timeout']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Exceeded maximum allowed HTTP header size']
        : [400, 'Client Error'];
  let refused = false;
  const refuse = (): void => {
    if (refused) return;
    refused = true;
    if (socket.writable) {
      const body = JSON.stringify({ error: STATUS_CODES[status], message, statusCode: status });
      socket.write(
        `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
  // node's response on this socket, if one is still being written (an internal field, as in node's own clientError default),
  // to a request read whole: the bad bytes came after it. A request cut off in its own body is the one refused, at once.
  const due = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (due && !due.writableFinished && due.req.complete) due.once('finish', refuse).once('close', refuse);
  else refuse();
}

/** fastify's `http` option: what it gives node:http's createServer. */
function serverOptionsOf(opts: Record<string, unknown>): ServerOptions {
  const http = opts.http;
  return typeof http === 'object' && http !== null ? (http as ServerOptions) : {};
}

/**
 * Writes an answer; one node:http refuses (a header value it will not send) becomes the call's
 * 500, and if even that cannot be written the connection is closed: never an exception out of
 * a promise callback, which would stop the process.
 */
function writeSafely(res: ServerResponse, response: ChainResponse, failed: (err: unknown) => ChainResponse): void {
  try {
    write(res, response);
  } catch (err) {
    try {
      write(res, failed(err));
    } catch {
      res.destroy();
    }
  }
}

function write(res: ServerResponse, response: ChainResponse): void {
  const { body, headers } = response;
  if (body !== null) headers['content-length'] = String(typeof body === 'string' ? Buffer.byteLength(body) : body.length);
  res.writeHead(response.status, headers);
  res.end(body ?? undefined);
}
