import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';

/**
 * An EVM node on a loopback port, over HTTP and WebSocket, that the test drives: `mine()` makes a
 * block and sends its header to every `newHeads` subscriber (shapes as geth's), `drop()` cuts
 * every WebSocket connection, and `quiet` mines without notifying (the blocks a client misses
 * while the gateway reconnects). Answers eth_chainId, net_version, eth_blockNumber, eth_getBlockByNumber,
 * eth_subscribe("newHeads") and eth_unsubscribe; anything else gets -32601.
 */
export interface FakeWsUpstream {
  httpUrl: string;
  wsUrl: string;
  /** WebSocket connections accepted so far (a reconnect is one more). */
  connectionsAccepted: number;
  /** eth_subscribe calls handled so far (as it answers: a slow one counts once answered, and not if its connection closed first). */
  subscribeCalls: number;
  /**
   * eth_subscribe calls handled so far on connections other than the gateway's head tracker's
   * (which carries the head-poll header): its client feeds'. The tracker follows the heads while
   * the chain has calls or subscriptions.
   */
  feedSubscribeCalls: number;
  /**
   * newHeads subscriptions the node holds now. The gateway's head tracker holds one of its own
   * (src/gateway/upstreams/newHeads.ts), so a subscribe call seen is not yet a client feed's.
   */
  liveSubscriptions(): number;
  /** The methods of the calls received over HTTP so far, in order. */
  httpMethods: string[];
  /** Mines one block; its header goes to each newHeads subscription unless `quiet`. */
  mine(options?: { quiet?: boolean }): Block;
  /** Terminates every WebSocket connection (the node restarting, or the network cut). */
  drop(): void;
  /** Sends the latest head again to a new subscription at once, as some providers do. */
  replayLatestOnSubscribe: boolean;
  /** Answers the next eth_subscribe calls this much later (a node busy for a while); 0: at once. */
  subscribeAnswerDelayMs: number;
  /** What eth_chainId says (0x539, ganache's, unless set): another network's node behind the same URL. */
  chainId: string;
  /** Answers every HTTP call with a 503 while set (a node restarting). */
  httpDown: boolean;
  close(): Promise<void>;
}

export interface Block {
  number: string;
  hash: string;
  parentHash: string;
  [field: string]: unknown;
}

const ZERO_HASH = `0x${'0'.repeat(64)}`;

function blockAt(n: number, parentHash: string): Block {
  const hash = `0x${createHash('sha256').update(`block ${n}`).digest('hex')}`;
  return {
    number: `0x${n.toString(16)}`,
    hash,
    parentHash,
    sha3Uncles: '0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347',
    miner: `0x${'00'.repeat(20)}`,
    stateRoot: ZERO_HASH,
    transactionsRoot: ZERO_HASH,
    receiptsRoot: ZERO_HASH,
    logsBloom: `0x${'00'.repeat(256)}`,
    difficulty: '0x0',
    gasLimit: '0x1c9c380',
    gasUsed: '0x0',
    timestamp: `0x${(1_700_000_000 + n * 12).toString(16)}`,
    extraData: '0x',
    mixHash: ZERO_HASH,
    nonce: '0x0000000000000000',
    baseFeePerGas: '0x7',
    totalDifficulty: '0x0',
    size: '0x220',
    transactions: [],
    uncles: [],
  };
}

/** A header as geth's newHeads sends it: the block without its body and totals. */
function headerOf(block: Block): Record<string, unknown> {
  const { transactions: _t, uncles: _u, totalDifficulty: _d, size: _s, ...header } = block;
  return header;
}

export async function startFakeWsUpstream(): Promise<FakeWsUpstream> {
  const chain: Block[] = [blockAt(0, ZERO_HASH)];
  const subscriptions = new Map<string, WebSocket>();
  let nextSubscription = 1;

  /** What a call sends after its answer, in the same turn (so in the same TCP chunk, as a node may). */
  const followUps: Array<() => void> = [];
  /** The head tracker's connections (the head-poll header on their upgrade). */
  const trackers = new WeakSet<WebSocket>();
  const answer = (method: string, params: unknown[], socket: WebSocket | null): { result?: unknown; error?: { code: number; message: string } } => {
    if (method === 'eth_chainId') return { result: fake.chainId };
    if (method === 'net_version') return { result: BigInt(fake.chainId).toString() };
    if (method === 'eth_blockNumber') return { result: (chain.at(-1) as Block).number };
    if (method === 'eth_getBlockByNumber') {
      const tag = params[0];
      const block = tag === 'latest' ? chain.at(-1) : typeof tag === 'string' ? chain[Number.parseInt(tag, 16)] : undefined;
      return { result: block ?? null };
    }
    if (socket && method === 'eth_subscribe' && params[0] === 'newHeads') {
      fake.subscribeCalls++;
      if (!trackers.has(socket)) fake.feedSubscribeCalls++;
      const id = `0x${(nextSubscription++).toString(16)}`;
      subscriptions.set(id, socket);
      if (fake.replayLatestOnSubscribe) followUps.push(() => notify(id, socket, chain.at(-1) as Block));
      return { result: id };
    }
    if (socket && method === 'eth_unsubscribe') return { result: subscriptions.delete(String(params[0])) };
    return { error: { code: -32601, message: `the method ${method} does not exist/is not available` } };
  };

  const notify = (id: string, socket: WebSocket, block: Block) => {
    if (socket.readyState === WebSocket.OPEN)
      socket.send(JSON.stringify({ jsonrpc: '2.0', method: 'eth_subscription', params: { subscription: id, result: headerOf(block) } }));
  };

  const reply = (text: string, socket: WebSocket | null): string => {
    const call = JSON.parse(text) as { id: unknown; method: string; params?: unknown[] };
    return JSON.stringify({ jsonrpc: '2.0', id: call.id, ...answer(call.method, call.params ?? [], socket) });
  };

  const server: Server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (fake.httpDown) {
        res.statusCode = 503;
        res.end();
        return;
      }
      res.setHeader('content-type', 'application/json');
      const text = Buffer.concat(chunks).toString('utf8');
      fake.httpMethods.push((JSON.parse(text) as { method: string }).method);
      res.end(reply(text, null));
    });
  });
  const wss = new WebSocketServer({ server });
  wss.on('connection', (socket, req) => {
    fake.connectionsAccepted++;
    if (req.headers[HEAD_POLL_HEADER] !== undefined) trackers.add(socket);
    socket.on('message', (data) => {
      const text = data.toString();
      // A slow subscribe is handled late as a whole: a node has no subscription before it answers one.
      const send = () => {
        if (socket.readyState !== WebSocket.OPEN) return;
        socket.send(reply(text, socket));
        for (const followUp of followUps.splice(0)) followUp();
      };
      if (fake.subscribeAnswerDelayMs > 0 && text.includes('"eth_subscribe"')) setTimeout(send, fake.subscribeAnswerDelayMs);
      else send();
    });
    socket.on('close', () => {
      for (const [id, s] of subscriptions) if (s === socket) subscriptions.delete(id);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  const fake: FakeWsUpstream = {
    httpUrl: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}`,
    connectionsAccepted: 0,
    subscribeCalls: 0,
    feedSubscribeCalls: 0,
    liveSubscriptions: () => subscriptions.size,
    replayLatestOnSubscribe: false,
    subscribeAnswerDelayMs: 0,
    chainId: '0x539',
    httpDown: false,
    httpMethods: [],
    mine(options = {}) {
      const parent = chain.at(-1) as Block;
      const block = blockAt(chain.length, parent.hash);
      chain.push(block);
      if (!options.quiet) for (const [id, socket] of subscriptions) notify(id, socket, block);
      return block;
    },
    drop() {
      for (const socket of wss.clients) socket.terminate();
      subscriptions.clear();
    },
    async close() {
      for (const socket of wss.clients) socket.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return fake;
}
