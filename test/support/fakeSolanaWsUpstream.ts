import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';

/**
 * A Solana node on a loopback port, JSON-RPC over HTTP and its pubsub over WebSocket, that the
 * test drives, with a real node's shapes: subscribe calls answer an integer id (from 0),
 * notifications are `{"jsonrpc":"2.0","method":"<kind>Notification","params":{"result":…,
 * "subscription":<id>}}`, any `*Unsubscribe` ends any id (as Agave's do), an unknown id gets
 * -32602 "Invalid subscription id.". `nextSlot()` makes a slot (and roots the one `ROOT_DEPTH` behind:
 * root and slotsUpdates notifications), `deadSlot()` a fork's slot the node failed to replay, `changeAccount()` (account and
 * program subscriptions), `transaction()` and `receiveSignature()`/`processSignature()` notify the
 * matching subscriptions (a signature's status notification ends its subscriptions, as on the node),
 * `drop()` cuts every WebSocket connection. Over HTTP: getSlot, getHealth, getVersion, getBalance
 * (the lamports `changeAccount` last set, else 0), getLatestBlockhash (one per slot), getBlockHeight
 * (the slot) and getSignatureStatuses (what `processSignature` set, else null), a batch of them member by
 * member; anything else gets -32601. The gateway's own head tracking (its polls, and its
 * `slotSubscribe` connection, both marked with the head poll's header) is left out of what the
 * fake records: connections, calls and subscriptions are the callers'.
 */
export interface FakeSolanaWsUpstream {
  httpUrl: string;
  wsUrl: string;
  /** WebSocket connections accepted so far (a reconnect is one more). */
  connectionsAccepted: number;
  /** The method of every call received over HTTP, in order (the gateway's own head polls left out). */
  httpMethods: string[];
  /** Every call received over a WebSocket that is not a subscribe or an unsubscribe, in order. */
  socketCalls: Array<{ method: string; params: unknown[] }>;
  /** Every subscribe call received, in order. */
  subscribeCalls: Array<{ method: string; params: unknown[] }>;
  /** Every unsubscribe call received, in order. */
  unsubscribeCalls: Array<{ method: string; params: unknown[] }>;
  /** Subscriptions open now, on every connection. */
  readonly activeSubscriptions: number;
  /**
   * Makes the next slot: a slotNotification to each slot subscription, a rootNotification (its new
   * root) to each root subscription, and to each slotsUpdates subscription the slot's
   * firstShredReceived, completed, createdBank (parent), frozen (stats), then the new root's root.
   */
  nextSlot(): SlotInfo;
  /** A slot after the current one, on a fork the node failed to replay: a `dead` slotsUpdatesNotification (with `err`). */
  deadSlot(err: string): SlotUpdate;
  /** Every slot update made so far (by nextSlot and deadSlot), in order, whether a subscription was open or not. */
  slotUpdatesMade: SlotUpdate[];
  /**
   * An account changed at the current slot: an accountNotification to each subscription of its pubkey,
   * a programNotification to each subscription of its owner whose filters (dataSize, memcmp) it passes.
   */
  changeAccount(pubkey: string, account: { lamports: number; data?: Buffer; owner?: string }): void;
  /** The node received a transaction: "receivedSignature" to each subscription of its signature that enabled it. */
  receiveSignature(signature: string): void;
  /**
   * A transaction processed at the current slot: its status to each subscription of its signature,
   * which ends them (no unsubscribe), unless `keepSubscriptions` (a misbehaving node, to show the
   * gateway ends them itself); getSignatureStatuses answers it from now on, at `confirmationStatus`
   * (default confirmed). With no subscription open (a dropped socket) it only records the status.
   */
  processSignature(
    signature: string,
    options?: { err?: unknown; keepSubscriptions?: boolean; confirmationStatus?: 'processed' | 'confirmed' | 'finalized' },
  ): void;
  /** A transaction at the current slot: a logsNotification to each logs subscription it matches. */
  transaction(tx: { signature: string; mentions: string[]; logs: string[]; err?: unknown; vote?: boolean }): void;
  /** Terminates every WebSocket connection (the node restarting, or the network cut). */
  drop(): void;
  close(): Promise<void>;
}

export interface SlotInfo {
  parent: number;
  root: number;
  slot: number;
}

/** A slotsUpdatesNotification's result, as Agave writes it (its SlotUpdate, tagged by `type`, camelCase). */
export type SlotUpdate =
  | { type: 'firstShredReceived' | 'completed' | 'optimisticConfirmation' | 'root'; slot: number; timestamp: number }
  | { type: 'createdBank'; slot: number; parent: number; timestamp: number }
  | { type: 'frozen'; slot: number; timestamp: number; stats: SlotTransactionStats }
  | { type: 'dead'; slot: number; timestamp: number; err: string };

export interface SlotTransactionStats {
  numTransactionEntries: number;
  numSuccessfulTransactions: number;
  numFailedTransactions: number;
  maxTransactionsPerEntry: number;
}

const BASE58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

export function base58(bytes: Uint8Array): string {
  let n = 0n;
  for (const b of bytes) n = n * 256n + BigInt(b);
  let out = '';
  while (n > 0n) {
    out = BASE58[Number(n % 58n)] + out;
    n /= 58n;
  }
  for (const b of bytes) {
    if (b !== 0) break;
    out = `1${out}`;
  }
  return out;
}

const SYSTEM_PROGRAM = '11111111111111111111111111111111';
/** A rent-exempt account's rentEpoch, u64::MAX, written as the node writes it: beyond 2^53, so not as a JavaScript number. */
export const RENT_EXEMPT_EPOCH = '18446744073709551615';
const RENT_EXEMPT_PLACEHOLDER = '"rentEpoch":"u64::MAX"';
/** Slots between the root and the tip, about what a mainnet node shows. */
const ROOT_DEPTH = 32;
const API_VERSION = '2.1.21';
/** What the fake says each frozen slot held. */
const FROZEN_STATS: SlotTransactionStats = {
  numTransactionEntries: 64,
  numSuccessfulTransactions: 1200,
  numFailedTransactions: 35,
  maxTransactionsPerEntry: 64,
};
/** Blocks a blockhash stays valid for (MAX_PROCESSING_AGE). */
const BLOCKHASH_VALIDITY = 150;

/** The blockhash the fake gives a slot: base58 of 32 bytes, as a node writes it. */
export const blockhashOf = (slot: number): string => base58(createHash('sha256').update(`blockhash-${slot}`).digest());

interface Sub {
  id: number;
  socket: WebSocket;
  kind: 'slot' | 'root' | 'slotsUpdates' | 'account' | 'logs' | 'program' | 'signature';
  params: unknown[];
}

type Reply = { result: unknown } | { error: { code: number; message: string } };

type Filter = { dataSize: number } | { memcmp: { offset: number; bytes: string; encoding?: 'base58' | 'base64' } };

function base58Decode(text: string): Buffer {
  let n = 0n;
  for (const c of text) n = n * 58n + BigInt(BASE58.indexOf(c));
  const hex = n === 0n ? '' : n.toString(16);
  const zeros = text.length - text.replace(/^1+/, '').length;
  return Buffer.concat([Buffer.alloc(zeros), Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex')]);
}

/** A program subscription's filters, as a node applies them to an account's data. */
function passesFilters(data: Buffer, filters: Filter[] | undefined): boolean {
  return (filters ?? []).every((f) => {
    if ('dataSize' in f) return data.length === f.dataSize;
    const bytes = f.memcmp.encoding === 'base64' ? Buffer.from(f.memcmp.bytes, 'base64') : base58Decode(f.memcmp.bytes);
    return data.subarray(f.memcmp.offset, f.memcmp.offset + bytes.length).equals(bytes);
  });
}

export async function startFakeSolanaWsUpstream(): Promise<FakeSolanaWsUpstream> {
  let slot = 1000;
  let nextId = 0;
  const subs = new Map<number, Sub>();
  /** The gateway's own head-tracking connections (marked as its head polls are): left out of what the fake records. */
  const headSockets = new Set<WebSocket>();
  const balances = new Map<string, number>();
  const statuses = new Map<string, { slot: number; err: unknown; confirmationStatus: string }>();

  const invalidParams = (message: string): Reply => ({ error: { code: -32602, message } });

  const call = (method: string, params: unknown[], socket: WebSocket | null): Reply => {
    if (method === 'getSlot') return { result: slot };
    if (method === 'getHealth') return { result: 'ok' };
    if (method === 'getVersion') return { result: { 'solana-core': API_VERSION, 'feature-set': 1416569292 } };
    const context = { apiVersion: API_VERSION, slot };
    if (method === 'getBalance')
      return typeof params[0] === 'string' ? { result: { context, value: balances.get(params[0]) ?? 0 } } : invalidParams('Invalid params: missing pubkey.');
    if (method === 'getLatestBlockhash')
      return { result: { context, value: { blockhash: blockhashOf(slot), lastValidBlockHeight: slot + BLOCKHASH_VALIDITY } } };
    if (method === 'getBlockHeight') return { result: slot };
    if (method === 'getSignatureStatuses') {
      if (!Array.isArray(params[0])) return invalidParams('Invalid params: invalid type: expected a sequence.');
      const value = (params[0] as unknown[]).map((signature) => {
        const status = statuses.get(String(signature));
        if (status === undefined) return null;
        const { err } = status;
        return {
          slot: status.slot,
          confirmations: slot - status.slot,
          err,
          status: err === null ? { Ok: null } : { Err: err },
          confirmationStatus: status.confirmationStatus,
        };
      });
      return { result: { context, value } };
    }
    if (socket !== null) {
      const kinds: Record<string, Sub['kind']> = {
        slotSubscribe: 'slot',
        rootSubscribe: 'root',
        slotsUpdatesSubscribe: 'slotsUpdates',
        accountSubscribe: 'account',
        logsSubscribe: 'logs',
        programSubscribe: 'program',
        signatureSubscribe: 'signature',
      };
      const kind = kinds[method] ?? null;
      if (kind !== null) {
        if (!headSockets.has(socket)) fake.subscribeCalls.push({ method, params });
        if ((kind === 'account' || kind === 'program' || kind === 'signature') && typeof params[0] !== 'string')
          return invalidParams('Invalid params: invalid type: expected a string.');
        if (kind === 'logs' && params[0] === undefined) return invalidParams('Invalid params: missing field `filter`.');
        const id = nextId++;
        subs.set(id, { id, socket, kind, params });
        return { result: id };
      }
      if (method.endsWith('Unsubscribe')) {
        if (!headSockets.has(socket)) fake.unsubscribeCalls.push({ method, params });
        const id = params[0];
        if (typeof id !== 'number' || !subs.has(id)) return invalidParams('Invalid subscription id.');
        subs.delete(id);
        return { result: true };
      }
    }
    return { error: { code: -32601, message: 'Method not found' } };
  };

  type Message = { id: unknown; method: string; params?: unknown[] };
  const reply = (text: string, socket: WebSocket | null, headPoll = false): string => {
    const parsed = JSON.parse(text) as Message | Message[];
    // A batch (Agave takes them over HTTP): each member answered in its order.
    return Array.isArray(parsed) ? `[${parsed.map((m) => replyTo(m, socket, headPoll)).join(',')}]` : replyTo(parsed, socket, headPoll);
  };
  const replyTo = (message: Message, socket: WebSocket | null, headPoll: boolean): string => {
    if (socket === null) {
      if (!headPoll) fake.httpMethods.push(message.method);
    } else if (!headSockets.has(socket) && !message.method.endsWith('Subscribe') && !message.method.endsWith('Unsubscribe'))
      fake.socketCalls.push({ method: message.method, params: message.params ?? [] });
    return JSON.stringify({ jsonrpc: '2.0', ...call(message.method, message.params ?? [], socket), id: message.id });
  };

  const notify = (sub: Sub, result: unknown) => {
    if (sub.socket.readyState === WebSocket.OPEN)
      sub.socket.send(
        JSON.stringify({ jsonrpc: '2.0', method: `${sub.kind}Notification`, params: { result, subscription: sub.id } }).replace(
          RENT_EXEMPT_PLACEHOLDER,
          `"rentEpoch":${RENT_EXEMPT_EPOCH}`,
        ),
      );
  };

  const slotUpdate = (update: SlotUpdate): SlotUpdate => {
    fake.slotUpdatesMade.push(update);
    for (const sub of subs.values()) if (sub.kind === 'slotsUpdates') notify(sub, update);
    return update;
  };

  const server: Server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(reply(Buffer.concat(chunks).toString('utf8'), null, req.headers[HEAD_POLL_HEADER] !== undefined));
    });
  });
  const wss = new WebSocketServer({ server });
  wss.on('connection', (socket, req) => {
    if (req.headers[HEAD_POLL_HEADER] !== undefined) headSockets.add(socket);
    else fake.connectionsAccepted++;
    socket.on('message', (data) => socket.send(reply(data.toString(), socket)));
    socket.on('close', () => {
      headSockets.delete(socket);
      for (const [id, s] of subs) if (s.socket === socket) subs.delete(id);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  const fake: FakeSolanaWsUpstream = {
    httpUrl: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}`,
    connectionsAccepted: 0,
    httpMethods: [],
    socketCalls: [],
    subscribeCalls: [],
    unsubscribeCalls: [],
    get activeSubscriptions() {
      return [...subs.values()].filter((sub) => !headSockets.has(sub.socket)).length;
    },
    slotUpdatesMade: [],
    nextSlot() {
      slot++;
      const info = { parent: slot - 1, root: Math.max(0, slot - ROOT_DEPTH), slot };
      for (const sub of subs.values()) if (sub.kind === 'slot') notify(sub, info);
      for (const sub of subs.values()) if (sub.kind === 'root') notify(sub, info.root);
      const timestamp = Date.now();
      slotUpdate({ type: 'firstShredReceived', slot, timestamp });
      slotUpdate({ type: 'completed', slot, timestamp });
      slotUpdate({ type: 'createdBank', slot, parent: info.parent, timestamp });
      slotUpdate({ type: 'frozen', slot, timestamp, stats: FROZEN_STATS });
      slotUpdate({ type: 'root', slot: info.root, timestamp });
      return info;
    },
    deadSlot(err) {
      return slotUpdate({ type: 'dead', slot: slot + 1, timestamp: Date.now(), err });
    },
    changeAccount(pubkey, account) {
      const data = account.data ?? Buffer.alloc(0);
      const owner = account.owner ?? SYSTEM_PROGRAM;
      balances.set(pubkey, account.lamports);
      for (const sub of subs.values()) {
        const ofAccount = sub.kind === 'account' && sub.params[0] === pubkey;
        const ofProgram =
          sub.kind === 'program' && sub.params[0] === owner && passesFilters(data, (sub.params[1] as { filters?: Filter[] } | undefined)?.filters);
        if (!ofAccount && !ofProgram) continue;
        const encoding = (sub.params[1] as { encoding?: string } | undefined)?.encoding ?? 'binary';
        // "binary" (the default) is the legacy form: a bare base58 string; jsonParsed falls back to base64 for data no parser knows.
        const encoded = encoding === 'binary' ? base58(data) : encoding === 'base58' ? [base58(data), 'base58'] : [data.toString('base64'), 'base64'];
        const value = { lamports: account.lamports, owner, data: encoded, executable: false, rentEpoch: 'u64::MAX', space: data.length };
        notify(sub, { context: { slot }, value: ofAccount ? value : { pubkey, account: value } });
      }
    },
    receiveSignature(signature) {
      for (const sub of subs.values())
        if (
          sub.kind === 'signature' &&
          sub.params[0] === signature &&
          (sub.params[1] as { enableReceivedNotification?: boolean } | undefined)?.enableReceivedNotification
        )
          notify(sub, { context: { slot }, value: 'receivedSignature' });
    },
    processSignature(signature, options = {}) {
      const err = options.err ?? null;
      statuses.set(signature, { slot, err, confirmationStatus: options.confirmationStatus ?? 'confirmed' });
      for (const [id, sub] of subs) {
        if (sub.kind !== 'signature' || sub.params[0] !== signature) continue;
        notify(sub, { context: { slot }, value: { err } });
        if (options.keepSubscriptions !== true) subs.delete(id);
      }
    },
    transaction(tx) {
      for (const sub of subs.values()) {
        if (sub.kind !== 'logs') continue;
        const filter = sub.params[0];
        const matches =
          filter === 'allWithVotes' ||
          (filter === 'all' && tx.vote !== true) ||
          (typeof filter === 'object' && filter !== null && tx.mentions.includes((filter as { mentions: string[] }).mentions[0] as string));
        if (matches) notify(sub, { context: { slot }, value: { signature: tx.signature, err: tx.err ?? null, logs: tx.logs } });
      }
    },
    drop() {
      for (const socket of wss.clients) socket.terminate();
      subs.clear();
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
