import WebSocket from 'ws';
import { blockNumberOf, blockTimeOf } from './evmCalls.js';

/**
 * One upstream's head pushed over its WebSocket, instead of waiting for the next poll: an EVM
 * node's headers (`eth_subscribe("newHeads")`, each header's number and hash), a Solana node's
 * slots (`slotSubscribe`, each slot as the node processes it; no hash). `live` while the
 * subscription stands; a dropped connection, a refused subscription or a failed handshake makes
 * it not live (the head tracker polls that node meanwhile) and it tries again, waiting longer
 * each time (1 s doubling to 30 s), until stopped.
 */

export interface PushedHead {
  number: number;
  hash: string | null;
  /** The block's time (ms), where the header says it (EVM's `timestamp`); null otherwise. */
  time: number | null;
}

export interface PushedHeadsHandlers {
  head(head: PushedHead): void;
}

/** How a chain family's nodes push heads: the subscribe call (id 1), its notifications' method, and the head a notification's `result` is. */
export interface HeadPushDialect {
  subscribe: string;
  notification: string;
  headOf(result: unknown): PushedHead | null;
}

export const HEAD_PUSH_DIALECTS: Record<'evm' | 'solana', HeadPushDialect> = {
  evm: {
    subscribe: '{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}',
    notification: 'eth_subscription',
    headOf(result) {
      const header = result as { number?: unknown; hash?: unknown; timestamp?: unknown } | null | undefined;
      const number = blockNumberOf(header?.number);
      return number === null ? null : { number, hash: typeof header?.hash === 'string' ? header.hash : null, time: blockTimeOf(header?.timestamp) };
    },
  },
  solana: {
    subscribe: '{"jsonrpc":"2.0","id":1,"method":"slotSubscribe"}',
    notification: 'slotNotification',
    headOf(result) {
      const slot = (result as { slot?: unknown } | null | undefined)?.slot;
      return typeof slot === 'number' && Number.isSafeInteger(slot) && slot >= 0 ? { number: slot, hash: null, time: null } : null;
    },
  },
};

const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;
/** A header is well under this; anything larger is not one. */
const MAX_FRAME_BYTES = 256 * 1024;

export class PushedHeads {
  private socket: WebSocket | null = null;
  /** The node's id for the subscription (EVM: a string; Solana: a number); null while none stands. */
  private subscription: string | number | null = null;
  private retryMs = FIRST_RETRY_MS;
  private retryTimer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly url: URL,
    private readonly headers: Record<string, string>,
    private readonly timeoutMs: number,
    private readonly dialect: HeadPushDialect,
    private readonly on: PushedHeadsHandlers,
  ) {
    this.connect();
  }

  /** Whether heads arrive by push now. */
  get live(): boolean {
    return this.subscription !== null;
  }

  stop(): void {
    this.stopped = true;
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.subscription = null;
    this.socket?.terminate();
    this.socket = null;
  }

  private connect(): void {
    const socket = new WebSocket(this.url, { headers: this.headers, maxPayload: MAX_FRAME_BYTES, handshakeTimeout: this.timeoutMs });
    this.socket = socket;
    socket.on('open', () => socket.send(this.dialect.subscribe));
    socket.on('message', (data, isBinary) => this.read(isBinary ? null : data.toString()));
    // 'close' follows every 'error'.
    socket.on('error', () => undefined);
    socket.on('close', () => this.lost(socket));
  }

  private read(text: string | null): void {
    let message: unknown;
    try {
      message = text === null ? null : JSON.parse(text);
    } catch {
      message = null;
    }
    if (typeof message !== 'object' || message === null) return;
    const m = message as { id?: unknown; result?: unknown; error?: unknown; method?: unknown; params?: { subscription?: unknown; result?: unknown } };
    if (m.id === 1 && this.subscription === null) {
      // The node does not offer the subscription: it is polled, and asked again later.
      if (typeof m.result !== 'string' && typeof m.result !== 'number') {
        this.socket?.close();
        return;
      }
      this.subscription = m.result;
      this.retryMs = FIRST_RETRY_MS;
      return;
    }
    if (m.method !== this.dialect.notification || this.subscription === null || m.params?.subscription !== this.subscription) return;
    const head = this.dialect.headOf(m.params?.result);
    if (head !== null) this.on.head(head);
  }

  private lost(socket: WebSocket): void {
    if (socket !== this.socket) return;
    this.socket = null;
    this.subscription = null;
    if (this.stopped) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (!this.stopped) this.connect();
    }, this.retryMs);
    this.retryTimer.unref();
    this.retryMs = Math.min(MAX_RETRY_MS, this.retryMs * 2);
  }
}
