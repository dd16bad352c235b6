/**
 * Soak: what the service keeps as traffic goes by, the way an operator running it for weeks
 * would see it. Starts the whole service (src/main.ts compiled, ROLE=all, embedded default, a
 * fake EVM node of this script's own over HTTP and WebSocket) with the inspector on loopback,
 * drives a varied workload in phases, and after each phase reads the live heap of the main
 * thread and of the storage thread after a full collection (HeapProfiler.collectGarbage, then
 * Runtime.getHeapUsage), the process's active handles (process.getActiveResourcesInfo()), its
 * RSS and its data directory's size. A heap snapshot of each thread after the first mixed
 * round and another after the last are diffed by constructor and by Map/Set (each named by
 * what holds it, `TokenCache.unknown`, and sized by its entries): what grows with traffic and
 * is not a bounded cache is a leak.
 *
 * The workload, from 5,000 client addresses (X-Forwarded-For, TRUST_PROXY=true):
 *   - HTTP: hundreds of tokens (SOAK_TOKENS, 300) calling reads and batches; unknown tokens,
 *     each new; Free tokens past their 5 req/s (429); denied methods (admin_*); a chain the Free
 *     plan does not include (403); unknown chains (404); reads at a final block in bodies padded
 *     to 64 KB (kept in the response cache); bodies over MAX_BODY_BYTES (413) and
 *     malformed JSON; calls the client aborts while the node is still answering; sockets cut
 *     mid-body; eth_newFilter then polls, uninstalled or left behind.
 *   - WebSocket: connections that subscribe (newHeads, logs with filters of their own) and call,
 *     then close, unsubscribe and close, or drop without a close frame; upgrades with unknown
 *     tokens.
 *   - Management API: log-ins and log-outs, wrong passwords and unknown emails from many
 *     addresses, bursts of 150 log-ins at once (past the password hashing queue: 503), the
 *     metrics API, CSV exports abandoned after their first chunk.
 *
 * Phases: http, ws and api alone (SOAK_PHASE_SECONDS each, 20), then SOAK_ROUNDS (3) mixed rounds
 * of SOAK_ROUND_SECONDS (30) each; the growth per 10,000 requests is taken between the end of
 * the first mixed round and the end of the last (the bounded caches are filled by then).
 * ~3.5 min by default; e.g. SOAK_ROUNDS=10 SOAK_ROUND_SECONDS=120 for a longer one.
 * SOAK_REV=<revision> runs the service built from another revision (the same workload before a fix).
 *
 *   npx tsx bench/soak.ts
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { join } from 'node:path';
import WebSocket, { WebSocketServer } from 'ws';
import { Processes, rssMb, runMain, timeLimit } from './lib/processes.js';
import { emit, log, round } from './lib/report.js';
import { buildRevision, type Service, startGateway } from './lib/services.js';

const COMMAND = 'npx tsx bench/soak.ts';
const PHASE_SECONDS = Number(process.env.SOAK_PHASE_SECONDS ?? 20);
const ROUND_SECONDS = Number(process.env.SOAK_ROUND_SECONDS ?? 30);
const ROUNDS = Math.max(2, Number(process.env.SOAK_ROUNDS ?? 3));
const TOKENS = Number(process.env.SOAK_TOKENS ?? 300);
/** HTTP calls in flight at once, WebSocket clients at once, management API clients at once. */
const HTTP_CLIENTS = Number(process.env.SOAK_HTTP_CLIENTS ?? 16);
const WS_CLIENTS = Number(process.env.SOAK_WS_CLIENTS ?? 6);
const API_CLIENTS = Number(process.env.SOAK_API_CLIENTS ?? 2);
/** Heap snapshots (two per thread, ~10 s each): SOAK_SNAPSHOTS=off leaves them out. */
const SNAPSHOTS = process.env.SOAK_SNAPSHOTS !== 'off';
/**
 * The response cache's cap (RESPONSE_CACHE_MB; 64 by default in service): small, so that the
 * reads of random addresses fill it before the first mixed round ends and what grows after is
 * not the cache filling up to its cap.
 */
const CACHE_MB = process.env.SOAK_RESPONSE_CACHE_MB ?? '4';
/**
 * LOGIN_WINDOW_SECONDS for the run (900 in service): a failed log-in's window, which the service
 * keeps until it ends (swept every minute), ends within the run, so what grows from round to round
 * is not the last 15 minutes' failures.
 */
const LOGIN_WINDOW_SECONDS = process.env.SOAK_LOGIN_WINDOW_SECONDS ?? '60';
/** SOAK_REV=<git revision>: the service built from that revision's committed tree (a before/after of a fix, same workload). */
const REV = process.env.SOAK_REV;
const ADMIN_TOKEN = 'soak-admin-token-0123456789';
const PASSWORD = 'correct horse battery';
const ADDRESSES = 5000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)] as T;
const randomIp = (): string => {
  const n = Math.floor(Math.random() * ADDRESSES);
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
};
const hex = (bytes: number): string => `0x${randomBytes(bytes).toString('hex')}`;

// ---------------------------------------------------------------------------------------------
// The fake node: JSON-RPC over HTTP and WebSocket, a head every second.

interface FakeNode {
  url: string;
  wsUrl: string;
  close(): Promise<void>;
}

async function startFakeNode(): Promise<FakeNode> {
  let head = 0x1000000;
  let filters = 0;
  const block = (n: number) => ({
    number: `0x${n.toString(16)}`,
    hash: `0x${n.toString(16).padStart(64, '0')}`,
    parentHash: `0x${(n - 1).toString(16).padStart(64, '0')}`,
    timestamp: `0x${(1_700_000_000 + n * 12).toString(16)}`,
    transactions: [],
  });
  const answer = (call: { id?: unknown; method?: unknown; params?: unknown }): { result: unknown; delayMs: number } => {
    const params = Array.isArray(call.params) ? call.params : [];
    switch (call.method) {
      case 'eth_chainId':
        return { result: '0x1', delayMs: 0 };
      case 'eth_blockNumber':
        return { result: `0x${head.toString(16)}`, delayMs: 0 };
      case 'eth_getBlockByNumber': {
        const tag = params[0];
        const n = tag === 'latest' ? head : tag === 'finalized' || tag === 'safe' ? head - 64 : typeof tag === 'string' ? Number.parseInt(tag, 16) : head;
        return { result: block(n), delayMs: 0 };
      }
      case 'eth_newFilter':
      case 'eth_newBlockFilter':
        filters++;
        return { result: `0x${filters.toString(16)}`, delayMs: 0 };
      case 'eth_getFilterChanges':
      case 'eth_getFilterLogs':
        return { result: [], delayMs: 0 };
      case 'eth_uninstallFilter':
        return { result: true, delayMs: 0 };
      case 'eth_call': {
        // A call the client will abort: the node takes its time.
        const data = (params[0] as { data?: string } | undefined)?.data ?? '';
        return { result: '0x', delayMs: data.startsWith('0xdead') ? 1500 : 0 };
      }
      default:
        return { result: '0x0', delayMs: 0 };
    }
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400).end();
        return;
      }
      const calls = Array.isArray(body) ? body : [body];
      let delayMs = 0;
      const out = calls.map((c: { id?: unknown }) => {
        const a = answer(c);
        delayMs = Math.max(delayMs, a.delayMs);
        return { jsonrpc: '2.0', id: c.id ?? null, result: a.result };
      });
      const text = JSON.stringify(Array.isArray(body) ? out : out[0]);
      const send = (): void => {
        if (res.destroyed) return;
        res.writeHead(200, { 'content-type': 'application/json' }).end(text);
      };
      if (delayMs > 0) setTimeout(send, delayMs);
      else send();
    });
  });
  server.keepAliveTimeout = 60_000;
  const wss = new WebSocketServer({ server });
  const newHeads = new Map<WebSocket, Set<string>>();
  let subscriptionIds = 0;
  wss.on('connection', (ws) => {
    newHeads.set(ws, new Set());
    ws.on('close', () => newHeads.delete(ws));
    ws.on('message', (data) => {
      let call: { id?: unknown; method?: string; params?: unknown[] };
      try {
        call = JSON.parse(data.toString()) as typeof call;
      } catch {
        return;
      }
      if (call.method === 'eth_subscribe') {
        const id = `0x${(++subscriptionIds).toString(16)}`;
        if (call.params?.[0] === 'newHeads') newHeads.get(ws)?.add(id);
        ws.send(JSON.stringify({ jsonrpc: '2.0', id: call.id, result: id }));
      } else if (call.method === 'eth_unsubscribe') {
        newHeads.get(ws)?.delete(String(call.params?.[0]));
        ws.send(JSON.stringify({ jsonrpc: '2.0', id: call.id, result: true }));
      } else {
        ws.send(JSON.stringify({ jsonrpc: '2.0', id: call.id, result: answer(call).result }));
      }
    });
  });
  const ticker = setInterval(() => {
    head++;
    const header = block(head);
    for (const [ws, ids] of newHeads) {
      for (const subscription of ids) {
        ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'eth_subscription', params: { subscription, result: header } }));
      }
    }
  }, 1000);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}`,
    close: async () => {
      clearInterval(ticker);
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The inspector: heap after a full collection, active resources, heap snapshots, on the main
// thread and on the storage thread (a worker: NodeWorker sessions).

type Listener = (params: Record<string, unknown>) => void;

class Inspector {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly listeners = new Map<string, Set<Listener>>();
  /** Worker sessions: their own ids and answers, over the main session. */
  private readonly workerPending = new Map<string, Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>>();
  private readonly workerListeners = new Map<string, Map<string, Set<Listener>>>();
  readonly workers: Array<{ sessionId: string; url: string; title: string }> = [];

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString()) as {
        id?: number;
        result?: unknown;
        error?: { message: string };
        method?: string;
        params?: Record<string, unknown>;
      };
      if (m.id !== undefined) {
        const p = this.pending.get(m.id);
        this.pending.delete(m.id);
        if (m.error) p?.reject(new Error(m.error.message));
        else p?.resolve(m.result);
        return;
      }
      if (m.method === 'NodeWorker.receivedMessageFromWorker') {
        const { sessionId, message } = m.params as { sessionId: string; message: string };
        const w = JSON.parse(message) as typeof m;
        if (w.id !== undefined) {
          const waiting = this.workerPending.get(sessionId);
          const p = waiting?.get(w.id);
          waiting?.delete(w.id);
          if (w.error) p?.reject(new Error(w.error.message));
          else p?.resolve(w.result);
        } else if (w.method) {
          for (const l of this.workerListeners.get(sessionId)?.get(w.method) ?? []) l(w.params ?? {});
        }
        return;
      }
      if (m.method === 'NodeWorker.attachedToWorker') {
        const { sessionId, workerInfo } = m.params as { sessionId: string; workerInfo: { url: string; title: string } };
        this.workers.push({ sessionId, url: workerInfo.url, title: workerInfo.title });
      }
      for (const l of this.listeners.get(m.method ?? '') ?? []) l(m.params ?? {});
    });
  }

  static async open(url: string): Promise<Inspector> {
    const ws = new WebSocket(url, { maxPayload: 1 << 30 });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const inspector = new Inspector(ws);
    await inspector.send('NodeWorker.enable', { waitForDebuggerOnStart: false });
    return inspector;
  }

  send<T = Record<string, unknown>>(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      if (sessionId === undefined) {
        this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
        this.ws.send(JSON.stringify({ id, method, params }));
        return;
      }
      let waiting = this.workerPending.get(sessionId);
      if (!waiting) {
        waiting = new Map();
        this.workerPending.set(sessionId, waiting);
      }
      waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.ws.send(
        JSON.stringify({ id: this.nextId++, method: 'NodeWorker.sendMessageToWorker', params: { sessionId, message: JSON.stringify({ id, method, params }) } }),
      );
    });
  }

  on(method: string, listener: Listener, sessionId?: string): () => void {
    let byMethod: Map<string, Set<Listener>>;
    if (sessionId === undefined) byMethod = this.listeners;
    else {
      byMethod = this.workerListeners.get(sessionId) ?? new Map();
      this.workerListeners.set(sessionId, byMethod);
    }
    const set = byMethod.get(method) ?? new Set();
    byMethod.set(method, set);
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Live heap (MB) after a full collection. */
  async liveHeapMb(sessionId?: string): Promise<number> {
    await this.send('HeapProfiler.collectGarbage', {}, sessionId);
    await this.send('HeapProfiler.collectGarbage', {}, sessionId);
    const usage = await this.send<{ usedSize: number }>('Runtime.getHeapUsage', {}, sessionId);
    return usage.usedSize / 1048576;
  }

  async evaluate<T>(expression: string, sessionId?: string): Promise<T> {
    const r = await this.send<{ result: { value: T }; exceptionDetails?: unknown }>('Runtime.evaluate', { expression, returnByValue: true }, sessionId);
    if (r.exceptionDetails) throw new Error(`evaluate failed: ${JSON.stringify(r.exceptionDetails)}`);
    return r.result.value;
  }

  async snapshot(sessionId?: string): Promise<string> {
    const chunks: string[] = [];
    const off = this.on('HeapProfiler.addHeapSnapshotChunk', (p) => chunks.push(p.chunk as string), sessionId);
    try {
      await this.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false, captureNumericValue: false }, sessionId);
    } finally {
      off();
    }
    return chunks.join('');
  }

  close(): void {
    this.ws.terminate();
  }
}

// ---------------------------------------------------------------------------------------------
// Heap snapshot summary: objects by constructor, and every Map and Set by what holds it.

interface SnapshotSummary {
  /** Count and self bytes by constructor (or kind, for strings, arrays, code...). */
  byKind: Map<string, { count: number; bytes: number }>;
  /** Count and self bytes by kind and what holds it, up to the nearest named object (`(string) ← Map ← TokenCache.unknown`). */
  byHolder: Map<string, { count: number; bytes: number }>;
  /** Entries of Maps and Sets by what holds them, summed over instances. */
  collections: Map<string, { instances: number; entries: number }>;
}

/** Constructors that say nothing of who holds them: the path to a holder goes on through them. */
const ANONYMOUS = new Set(['Map', 'Set', 'Array', 'Object', 'WeakMap', 'system', '(object)', '']);

function summarize(json: string): SnapshotSummary {
  const snap = JSON.parse(json) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } };
    nodes: number[];
    edges: number[];
    strings: string[];
  };
  const { meta } = snap.snapshot;
  const nf = meta.node_fields.length;
  const ef = meta.edge_fields.length;
  const nType = meta.node_fields.indexOf('type');
  const nName = meta.node_fields.indexOf('name');
  const nSize = meta.node_fields.indexOf('self_size');
  const nEdges = meta.node_fields.indexOf('edge_count');
  const eType = meta.edge_fields.indexOf('type');
  const eName = meta.edge_fields.indexOf('name_or_index');
  const eTo = meta.edge_fields.indexOf('to_node');
  const nodeTypes = meta.node_types[0];
  const edgeTypes = meta.edge_types[0];
  const { nodes, edges, strings } = snap;
  const count = nodes.length / nf;
  const firstEdge = new Uint32Array(count + 1);
  for (let i = 0, e = 0; i < count; i++) {
    firstEdge[i] = e;
    e += (nodes[i * nf + nEdges] as number) * ef;
    firstEdge[i + 1] = e;
  }
  const typeOf = (i: number): string => nodeTypes[nodes[i * nf + nType] as number] as string;
  const nameOf = (i: number): string => strings[nodes[i * nf + nName] as number] as string;
  const edgeName = (e: number): string => {
    const t = edgeTypes[edges[e + eType] as number];
    const v = edges[e + eName] as number;
    return t === 'element' || t === 'hidden' ? `[${v}]` : (strings[v] as string);
  };
  const kindOf = (i: number): string => {
    const type = typeOf(i);
    const name = nameOf(i);
    if (type === 'object' || type === 'native') return name.split(' ')[0] || '(object)';
    if (type === 'closure') return `closure ${name || '(anonymous)'}`;
    if (type === 'array') return `(array ${name})`;
    if (type === 'hidden' && name === 'system / Context') return '(scope)';
    if (type.includes('string')) return '(string)';
    return `(${type})`;
  };
  // Each node's first strong retainer, and the edge's name: who holds it.
  const retainer = new Int32Array(count).fill(-1);
  const retainerEdge = new Int32Array(count).fill(-1);
  for (let i = 0; i < count; i++) {
    for (let e = firstEdge[i] as number; e < (firstEdge[i + 1] as number); e += ef) {
      const edgeType = edgeTypes[edges[e + eType] as number];
      if (edgeType === 'weak' || edgeType === 'shortcut') continue;
      const to = (edges[e + eTo] as number) / nf;
      if (retainer[to] === -1 && i !== 0) {
        retainer[to] = i;
        retainerEdge[to] = e;
      }
    }
  }
  /** The path from a node up to the nearest holder with a name of its own: `Map ← TokenCache.unknown`. */
  const holderOf = (i: number): string => {
    const steps: string[] = [];
    let at = i;
    for (let depth = 0; depth < 40 && steps.length < 8; depth++) {
      const up = retainer[at] as number;
      if (up < 0) break;
      const kind = kindOf(up);
      const via = edgeName(retainerEdge[at] as number);
      at = up;
      // A string's parts, a table's or an array's elements: on to what holds the whole.
      if (kind === '(string)' || kind.startsWith('(array') || kind === '(hidden)') {
        if (steps.at(-1) !== kind) steps.push(kind);
        continue;
      }
      if (!ANONYMOUS.has(kind)) {
        steps.push(`${kind}.${via}`);
        break;
      }
      steps.push(/^\[\d+\]$/.test(via) ? kind : `${kind}.${via}`);
    }
    return steps.join(' ← ');
  };

  const byKind = new Map<string, { count: number; bytes: number }>();
  const byHolder = new Map<string, { count: number; bytes: number }>();
  const collections = new Map<string, { instances: number; entries: number }>();
  const add = (map: Map<string, { count: number; bytes: number }>, key: string, bytes: number): void => {
    const k = map.get(key) ?? { count: 0, bytes: 0 };
    k.count++;
    k.bytes += bytes;
    map.set(key, k);
  };
  for (let i = 0; i < count; i++) {
    const kind = kindOf(i);
    const bytes = nodes[i * nf + nSize] as number;
    add(byKind, kind, bytes);
    if (kind === '(code)' || kind === '(object shape)' || kind === '(synthetic)') continue;
    add(byHolder, `${kind} ← ${holderOf(i)}`, bytes);
    if (kind !== 'Map' && kind !== 'Set') continue;
    // The entries: the elements of its hash table (a Map's keys and values both count, so halved).
    let entries = 0;
    for (let e = firstEdge[i] as number; e < (firstEdge[i + 1] as number); e += ef) {
      if (edgeName(e) !== 'table') continue;
      const table = (edges[e + eTo] as number) / nf;
      for (let te = firstEdge[table] as number; te < (firstEdge[table + 1] as number); te += ef) {
        if (edgeTypes[edges[te + eType] as number] !== 'weak') entries++;
      }
    }
    if (kind === 'Map') entries = Math.floor(entries / 2);
    const label = `${kind} ← ${holderOf(i)}`;
    const c = collections.get(label) ?? { instances: 0, entries: 0 };
    c.instances++;
    c.entries += entries;
    collections.set(label, c);
  }
  return { byKind, byHolder, collections };
}

function grown(early: Map<string, { count: number; bytes: number }>, late: Map<string, { count: number; bytes: number }>, top: number): string[] {
  return [...late]
    .map(([key, l]) => {
      const e = early.get(key) ?? { count: 0, bytes: 0 };
      return { key, count: l.count - e.count, bytes: l.bytes - e.bytes, late: l.count };
    })
    .filter((d) => d.count > 0 && d.bytes > 0)
    .sort((a, b) => b.bytes - a.bytes)
    .slice(0, top)
    .map((d) => `  +${d.count} ${d.key} (+${round(d.bytes / 1024)} KB; ${d.late} now)`);
}

function diffSummaries(label: string, early: SnapshotSummary, late: SnapshotSummary): string[] {
  const lines = [`${label}: objects grown between the snapshots, by kind (self bytes)`, ...grown(early.byKind, late.byKind, 10)];
  lines.push(`${label}: objects grown, by what holds them`, ...grown(early.byHolder, late.byHolder, 20));
  const colls = [...late.collections]
    .map(([holder, l]) => {
      const e = early.collections.get(holder) ?? { instances: 0, entries: 0 };
      return { holder, entries: l.entries - e.entries, instances: l.instances - e.instances, late: l };
    })
    .filter((d) => d.entries > 0 || d.instances > 0)
    .sort((a, b) => b.entries - a.entries)
    .slice(0, 15);
  lines.push(`${label}: Maps and Sets grown (entries, instances)`);
  for (const d of colls) lines.push(`  ${d.holder}: +${d.entries} entries (${d.late.entries} now), +${d.instances} instances (${d.late.instances} now)`);
  return lines;
}

// ---------------------------------------------------------------------------------------------
// The workload.

interface Counts {
  requests: number;
  byOutcome: Map<string, number>;
}

const counts: Counts = { requests: 0, byOutcome: new Map() };
const tally = (outcome: string): void => {
  counts.requests++;
  counts.byOutcome.set(outcome, (counts.byOutcome.get(outcome) ?? 0) + 1);
};

interface World {
  url: string;
  wsBase: string;
  paidTokens: string[];
  freeTokens: string[];
  owners: Array<{ email: string; accessToken: string }>;
}

const rpc = (method: string, params: unknown[] = [], id: unknown = Math.floor(Math.random() * 1e6)): string =>
  JSON.stringify({ jsonrpc: '2.0', id, method, params });

async function call(world: World, path: string, body: string, options: { signal?: AbortSignal; headers?: Record<string, string> } = {}): Promise<number> {
  const res = await fetch(`${world.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-forwarded-for': randomIp(), ...options.headers },
    body,
    signal: options.signal,
  });
  await res.arrayBuffer();
  return res.status;
}

/** Sends half a body and cuts the socket. */
function cutMidBody(world: World, token: string): Promise<void> {
  const { hostname, port } = new URL(world.url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname, () => {
      socket.write(
        `POST /eth/${token} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\nX-Forwarded-For: ${randomIp()}\r\n\r\n{"jsonrpc":"2.0",`,
      );
      setTimeout(() => {
        socket.destroy();
        resolve();
      }, 20);
    });
    socket.on('error', () => resolve());
  });
}

const PADDING = ' '.repeat(64 * 1024);
const HUGE = `[${' '.repeat(1024 * 1024 + 4096)}]`;

/** One HTTP operation of the mix. */
async function httpOperation(world: World): Promise<void> {
  const r = Math.random();
  const token = pick(world.paidTokens);
  try {
    if (r < 0.48) {
      const status = await call(world, `/eth/${token}`, Math.random() < 0.5 ? rpc('eth_blockNumber') : rpc('eth_getBalance', [hex(20), 'latest']));
      tally(`read ${status}`);
    } else if (r < 0.5) {
      // A read at a final block (kept in the response cache), in a body padded to 64 KB.
      tally(`padded final read ${await call(world, `/eth/${token}`, `${rpc('eth_getBalance', [hex(20), '0x10'])}${PADDING}`)}`);
    } else if (r < 0.57) {
      const batch = `[${rpc('eth_blockNumber', [], 1)},${rpc('eth_chainId', [], 2)},${rpc('eth_getBalance', [hex(20), 'latest'], 3)}]`;
      tally(`batch ${await call(world, `/eth/${token}`, batch)}`);
    } else if (r < 0.65) {
      tally(`unknown token ${await call(world, `/eth/${randomBytes(16).toString('hex')}`, rpc('eth_blockNumber'))}`);
    } else if (r < 0.73) {
      tally(`free token ${await call(world, `/eth/${pick(world.freeTokens)}`, rpc('eth_blockNumber'))}`);
    } else if (r < 0.77) {
      tally(`denied method ${await call(world, `/eth/${token}`, rpc('admin_nodeInfo'))}`);
    } else if (r < 0.79) {
      tally(`chain not on plan ${await call(world, `/arb/${pick(world.freeTokens)}`, rpc('eth_blockNumber'))}`);
    } else if (r < 0.92) {
      tally(`unknown chain ${await call(world, `/nochain${Math.floor(Math.random() * 1000)}/${token}`, rpc('eth_blockNumber'))}`);
    } else if (r < 0.94) {
      tally(`huge body ${await call(world, `/eth/${token}`, HUGE)}`);
    } else if (r < 0.88) {
      tally(
        `malformed ${await call(world, `/eth/${token}`, `{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"${Math.random() < 0.5 ? '' : ',"params":[}'}`)}`,
      );
    } else if (r < 0.82) {
      try {
        await call(world, `/eth/${token}`, rpc('eth_call', [{ to: hex(20), data: `0xdead${randomBytes(4).toString('hex')}` }, 'latest']), {
          signal: AbortSignal.timeout(40 + Math.random() * 200),
        });
        tally('abort (answered first)');
      } catch {
        tally('aborted mid-call');
      }
    } else if (r < 0.84) {
      await cutMidBody(world, token);
      tally('cut mid-body');
    } else {
      // A filter: created, polled, then uninstalled, or left for the node to expire.
      const res = await fetch(`${world.url}/eth/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-forwarded-for': randomIp() },
        body: rpc('eth_newFilter', [{ address: hex(20), fromBlock: 'latest' }]),
      });
      const created = (await res.json()) as { result?: string };
      tally(`newFilter ${res.status}`);
      if (!created.result) return;
      for (let i = 0; i < 3; i++) tally(`filter poll ${await call(world, `/eth/${token}`, rpc('eth_getFilterChanges', [created.result]))}`);
      // Someone else's filter id, and one that never existed.
      tally(`filter of another ${await call(world, `/eth/${pick(world.paidTokens)}`, rpc('eth_getFilterChanges', [created.result]))}`);
      if (Math.random() < 0.5) tally(`uninstall ${await call(world, `/eth/${token}`, rpc('eth_uninstallFilter', [created.result]))}`);
    }
  } catch (e) {
    tally(`client error ${(e as Error).name}`);
  }
}

/** One WebSocket client's life: connect, subscribe, call, then leave one way or another. */
async function wsOperation(world: World): Promise<void> {
  const r = Math.random();
  const token = r < 0.1 ? randomBytes(16).toString('hex') : pick(world.paidTokens);
  const ws = new WebSocket(`${world.wsBase}/eth/${token}`, { headers: { 'x-forwarded-for': randomIp() } });
  const frames: Array<Record<string, unknown>> = [];
  ws.on('message', (d) => frames.push(JSON.parse(d.toString()) as Record<string, unknown>));
  try {
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade ${res.statusCode}`)));
    });
  } catch (e) {
    tally(`ws refused (${(e as Error).message})`);
    ws.terminate();
    return;
  }
  tally('ws open');
  let id = 1;
  const answerOf = async (n: number): Promise<Record<string, unknown> | undefined> => {
    for (let waited = 0; waited < 3000; waited += 20) {
      const f = frames.find((x) => x.id === n);
      if (f) return f;
      if (ws.readyState !== WebSocket.OPEN) return undefined;
      await sleep(20);
    }
    return undefined;
  };
  const subscriptions: string[] = [];
  const subscribe = async (params: unknown[]): Promise<void> => {
    const n = id++;
    ws.send(rpc('eth_subscribe', params, n));
    const a = await answerOf(n);
    tally(`ws subscribe ${a?.result ? 'ok' : 'refused'}`);
    if (typeof a?.result === 'string') subscriptions.push(a.result);
  };
  await subscribe(['newHeads']);
  if (Math.random() < 0.5) await subscribe(['logs', { address: hex(20) }]);
  for (let i = 0; i < 3; i++) {
    const n = id++;
    ws.send(rpc(i === 2 ? 'admin_peers' : 'eth_blockNumber', [], n));
    tally(`ws call ${(await answerOf(n)) ? 'answered' : 'unanswered'}`);
  }
  if (Math.random() < 0.3) {
    ws.send('{not json');
    tally('ws malformed');
  }
  await sleep(200 + Math.random() * 1500);
  const leave = Math.random();
  if (leave < 0.4) {
    // Dropped: no close frame, the TCP connection cut.
    ws.terminate();
    tally('ws dropped');
  } else {
    if (leave < 0.7) {
      for (const s of subscriptions) {
        const n = id++;
        ws.send(rpc('eth_unsubscribe', [s], n));
        await answerOf(n);
        tally('ws unsubscribe');
      }
    }
    ws.close(1000);
    await new Promise((r) => {
      ws.once('close', r);
      setTimeout(r, 2000);
    });
    tally('ws closed');
  }
}

async function login(world: World, email: string, password: string): Promise<{ status: number; cookie: string | null }> {
  const res = await fetch(`${world.url}/api/v1/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-forwarded-for': randomIp() },
    body: JSON.stringify({ email, password }),
  });
  await res.arrayBuffer();
  const cookie = res.headers.get('set-cookie')?.split(';')[0] ?? null;
  return { status: res.status, cookie };
}

/**
 * Log-ins with unknown emails, LOGIN_BURST at once: more than the password hashing queue takes
 * (64 waiting), so most are refused at once (503) and the rest fail (401).
 */
const LOGIN_BURST = 150;

/** One management API operation of the mix. */
async function apiOperation(world: World): Promise<void> {
  const r = Math.random();
  const owner = pick(world.owners);
  try {
    if (r < 0.01) {
      const burst = await Promise.all(
        Array.from({ length: LOGIN_BURST }, () => login(world, `burst-${randomBytes(6).toString('hex')}@example.com`, 'wrong password 123')),
      );
      for (const { status } of burst) tally(`burst login ${status}`);
    } else if (r < 0.25) {
      const { status, cookie } = await login(world, owner.email, PASSWORD);
      tally(`login ${status}`);
      if (!cookie) return;
      const list = await fetch(`${world.url}/api/v1/tokens`, { headers: { cookie } });
      await list.arrayBuffer();
      tally(`token list ${list.status}`);
      if (Math.random() < 0.7) {
        const out = await fetch(`${world.url}/api/v1/auth/logout`, { method: 'POST', headers: { cookie } });
        await out.arrayBuffer();
        tally(`logout ${out.status}`);
      }
    } else if (r < 0.5) {
      // A wrong password for a known email, or an unknown email, from anywhere.
      const email = Math.random() < 0.5 ? owner.email : `nobody-${randomBytes(6).toString('hex')}@example.com`;
      tally(`failed login ${(await login(world, email, 'wrong password 123')).status}`);
    } else if (r < 0.75) {
      const res = await fetch(`${world.url}/api/v1/metrics/user`, { headers: { authorization: `Bearer ${owner.accessToken}`, 'x-forwarded-for': randomIp() } });
      await res.arrayBuffer();
      tally(`metrics ${res.status}`);
    } else {
      // An export the client abandons after its first chunk.
      const controller = new AbortController();
      const res = await fetch(`${world.url}/api/v1/exports/usage.csv`, {
        headers: { authorization: `Bearer ${owner.accessToken}`, 'x-forwarded-for': randomIp() },
        signal: controller.signal,
      });
      tally(`export ${res.status}`);
      if (res.body) {
        const reader = res.body.getReader();
        await reader.read().catch(() => undefined);
      }
      controller.abort();
    }
  } catch (e) {
    tally(`client error ${(e as Error).name}`);
  }
}

/** Runs `operation` on `clients` loops until `seconds` pass. */
async function drive(seconds: number, clients: number, operation: () => Promise<void>): Promise<void> {
  const until = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < until) await operation();
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// Set-up: owners, tokens, through the management API as an integrator would.

async function api(
  world: Pick<World, 'url'>,
  method: string,
  path: string,
  body: unknown,
  headers: Record<string, string>,
): Promise<{ status: number; json: Record<string, unknown>; cookie: string | null }> {
  const res = await fetch(`${world.url}${path}`, {
    method,
    headers: { 'content-type': 'application/json', 'x-forwarded-for': randomIp(), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {}, cookie: res.headers.get('set-cookie')?.split(';')[0] ?? null };
}

async function setUp(url: string): Promise<World> {
  const world: World = { url, wsBase: url.replace(/^http/, 'ws'), paidTokens: [], freeTokens: [], owners: [] };
  const paidOwners = Math.max(1, Math.ceil(TOKENS / 30));
  for (let i = 0; i < paidOwners + 2; i++) {
    const email = `soak-${i}-${randomBytes(4).toString('hex')}@example.com`;
    const signed = await api(world, 'POST', '/api/v1/auth/signup', { email, password: PASSWORD }, {});
    if (signed.status !== 201 || !signed.cookie) throw new Error(`sign-up answered ${signed.status}: ${JSON.stringify(signed.json)}`);
    const accountId = signed.json.id as string;
    const access = await api(world, 'POST', '/api/v1/access-tokens', { name: 'soak' }, { cookie: signed.cookie });
    if (access.status !== 201) throw new Error(`access token answered ${access.status}: ${JSON.stringify(access.json)}`);
    const accessToken = access.json.token as string;
    world.owners.push({ email, accessToken });
    const paid = i < paidOwners;
    if (paid) {
      const plan = await api(world, 'PUT', `/api/v1/admin/accounts/${accountId}/plan`, { plan: 'unlimited' }, { authorization: `Bearer ${ADMIN_TOKEN}` });
      if (plan.status !== 200) throw new Error(`plan change answered ${plan.status}: ${JSON.stringify(plan.json)}`);
    }
    const n = paid ? Math.min(30, TOKENS - i * 30) : 2;
    for (let t = 0; t < n; t++) {
      const created = await api(world, 'POST', '/api/v1/tokens', { name: `soak ${t}` }, { authorization: `Bearer ${accessToken}` });
      if (created.status !== 201) throw new Error(`token answered ${created.status}: ${JSON.stringify(created.json)}`);
      (paid ? world.paidTokens : world.freeTokens).push(created.json.token as string);
    }
  }
  // The last token created reaches the gateway (its creation is projected, the cache hears it).
  const last = world.paidTokens.at(-1) as string;
  for (let i = 0; i < 100; i++) {
    if ((await call(world, `/eth/${last}`, rpc('eth_blockNumber'))) === 200) break;
    await sleep(200);
  }
  return world;
}

/**
 * Fills the response cache to its cap before the phases, so that what grows after is not the
 * cache filling: distinct reads at a final block, 100 to a batch, 1.2 times as many as the cap
 * holds (each counts ~220 B: key and answer as ResponseCache.set counts them).
 */
async function fillResponseCache(world: World): Promise<number> {
  const reads = Math.ceil(((Number(CACHE_MB) * 1048576) / 220) * 1.2);
  const batches = Math.ceil(reads / 100);
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      for (let b = next++; b < batches; b = next++) {
        const members = Array.from({ length: 100 }, (_, i) => rpc('eth_getBalance', [hex(20), '0x10'], i + 1));
        const status = await call(world, `/eth/${pick(world.paidTokens)}`, `[${members.join(',')}]`);
        if (status !== 200) throw new Error(`a batch filling the cache answered ${status}`);
      }
    }),
  );
  return batches * 100;
}

// ---------------------------------------------------------------------------------------------
// Readings.

interface Reading {
  phase: string;
  requests: number;
  mainMb: number;
  storageMb: number | null;
  rssMb: number;
  dataDirMb: number;
  resources: Record<string, number>;
  /** The service's own gauges (/metrics): sockets and subscriptions left open, tokens cached, records queued. */
  gauges: Record<string, number>;
}

const GAUGES = [
  'gateway_ws_connections',
  'gateway_ws_subscriptions',
  'gateway_ws_upstream_subscriptions',
  'gateway_cached_tokens',
  'gateway_usage_queue_depth',
];

/** The gauges of GAUGES, each summed over its labels. */
async function gauges(url: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out: Record<string, number> = Object.fromEntries(GAUGES.map((g) => [g, 0]));
  for (const line of text.split('\n')) {
    const m = /^(\w+)(?:\{[^}]*\})? (\S+)$/.exec(line);
    if (m && (m[1] as string) in out) out[m[1] as string] = (out[m[1] as string] as number) + Number(m[2]);
  }
  return out;
}

function dirBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += dirBytes(path);
    else {
      try {
        total += statSync(path).size;
      } catch {
        // gone meanwhile (a compaction)
      }
    }
  }
  return total;
}

async function read(inspector: Inspector, storage: string | undefined, pid: number, dataDir: string, url: string, phase: string): Promise<Reading> {
  // Sockets the phase left closing, usage records in flight: a moment to settle.
  await sleep(2500);
  const mainMb = await inspector.liveHeapMb();
  const storageMb = storage ? await inspector.liveHeapMb(storage) : null;
  const resources: Record<string, number> = {};
  for (const r of await inspector.evaluate<string[]>('process.getActiveResourcesInfo()')) resources[r] = (resources[r] ?? 0) + 1;
  const reading = {
    phase,
    requests: counts.requests,
    mainMb,
    storageMb,
    rssMb: rssMb(pid),
    dataDirMb: dirBytes(dataDir) / 1048576,
    resources,
    gauges: await gauges(url),
  };
  log(
    `${phase}: ${reading.requests} requests so far; live heap main ${round(mainMb)} MB, storage thread ${storageMb === null ? '-' : round(storageMb)} MB; RSS ${round(reading.rssMb)} MB; data dir ${round(reading.dataDirMb)} MB; active resources ${JSON.stringify(resources)}; ${JSON.stringify(reading.gauges)}`,
  );
  return reading;
}

async function main(): Promise<void> {
  timeLimit(60 + 3 * PHASE_SECONDS + ROUNDS * ROUND_SECONDS + 240);
  const processes = new Processes();
  const workDir = processes.workDir('bench-soak-');
  const node = await startFakeNode();
  let inspector: Inspector | null = null;
  try {
    const dataDir = join(workDir, 'data');
    const chainsFile = join(workDir, 'chains.json');
    const upstream = { url: node.url, ws: node.wsUrl, label: 'fake' };
    writeFileSync(
      chainsFile,
      JSON.stringify({
        chains: [
          { id: 'eth', name: 'Ethereum', protocol: 'jsonrpc', timeoutMs: 5000, headPollMs: 1000, upstreams: [upstream] },
          { id: 'arb', name: 'Arbitrum One', protocol: 'jsonrpc', timeoutMs: 5000, headPollMs: 1000, upstreams: [upstream] },
        ],
      }),
    );
    const plansFile = join(workDir, 'plans.json');
    writeFileSync(plansFile, JSON.stringify({ unlimited: { rps: 1_000_000 } }));
    const gateway: Service = await startGateway(processes, {
      dataDir,
      upstreamUrl: node.url,
      plansFile,
      nodeFlags: ['--inspect=127.0.0.1:0'],
      env: {
        CHAINS_CONFIG: chainsFile,
        UPSTREAM_ETH: undefined as unknown as string,
        ADMIN_TOKEN,
        TRUST_PROXY: 'true',
        SIGNUP_MAX_PER_ADDRESS: '1000',
        RESPONSE_CACHE_MB: CACHE_MB,
        LOGIN_WINDOW_SECONDS,
      },
      label: 'service (ROLE=all, inspector)',
      buildDir: REV ? await buildRevision(REV) : undefined,
    });
    const pid = gateway.process.child.pid as number;
    const inspectorUrl = /Debugger listening on (ws:\/\/\S+)/.exec(gateway.process.output())?.[1];
    if (!inspectorUrl) throw new Error(`no inspector URL in the output:\n${gateway.process.output()}`);
    inspector = await Inspector.open(inspectorUrl);
    await sleep(500);
    const storage = inspector.workers.find((w) => /storagethread|worker\.js/.test(w.url))?.sessionId ?? inspector.workers[0]?.sessionId;
    log(`inspector attached; workers: ${inspector.workers.map((w) => w.url).join(', ') || 'none'}`);

    const t0 = Date.now();
    const world = await setUp(gateway.url);
    log(
      `set up ${world.paidTokens.length} Unlimited and ${world.freeTokens.length} Free tokens of ${world.owners.length} owners in ${round((Date.now() - t0) / 1000)} s`,
    );
    const readings: Reading[] = [await read(inspector, storage, pid, dataDir, gateway.url, 'start')];
    const t1 = Date.now();
    const filled = await fillResponseCache(world);
    log(`filled the response cache (RESPONSE_CACHE_MB=${CACHE_MB}) with ${filled} final reads in ${round((Date.now() - t1) / 1000)} s`);
    readings.push(await read(inspector, storage, pid, dataDir, gateway.url, 'cache filled'));

    await drive(PHASE_SECONDS, HTTP_CLIENTS, () => httpOperation(world));
    readings.push(await read(inspector, storage, pid, dataDir, gateway.url, 'http alone'));
    await drive(PHASE_SECONDS, WS_CLIENTS, () => wsOperation(world));
    readings.push(await read(inspector, storage, pid, dataDir, gateway.url, 'ws alone'));
    await drive(PHASE_SECONDS, API_CLIENTS, () => apiOperation(world));
    readings.push(await read(inspector, storage, pid, dataDir, gateway.url, 'api alone'));

    const snapshots: Array<{ main: SnapshotSummary; storage: SnapshotSummary | null }> = [];
    const takeSnapshots = async (): Promise<void> => {
      if (!SNAPSHOTS || !inspector) return;
      const t = Date.now();
      const main = summarize(await inspector.snapshot());
      const store = storage ? summarize(await inspector.snapshot(storage)) : null;
      snapshots.push({ main, storage: store });
      log(`heap snapshots taken and summarized in ${round((Date.now() - t) / 1000)} s`);
    };
    for (let round_ = 1; round_ <= ROUNDS; round_++) {
      await Promise.all([
        drive(ROUND_SECONDS, HTTP_CLIENTS, () => httpOperation(world)),
        drive(ROUND_SECONDS, WS_CLIENTS, () => wsOperation(world)),
        drive(ROUND_SECONDS, API_CLIENTS, () => apiOperation(world)),
      ]);
      readings.push(await read(inspector, storage, pid, dataDir, gateway.url, `mixed round ${round_}`));
      if (round_ === 1 || round_ === ROUNDS) await takeSnapshots();
    }

    log(`outcomes: ${JSON.stringify(Object.fromEntries([...counts.byOutcome].sort((a, b) => b[1] - a[1])))}`);
    if (snapshots.length === 2) {
      const [early, late] = snapshots as [(typeof snapshots)[0], (typeof snapshots)[0]];
      for (const line of diffSummaries('main thread', early.main, late.main)) log(line);
      if (early.storage && late.storage) for (const line of diffSummaries('storage thread', early.storage, late.storage)) log(line);
    }

    const first = readings.find((r) => r.phase === 'mixed round 1') as Reading;
    const last = readings.at(-1) as Reading;
    const start = readings[0] as Reading;
    const per10k = (a: number, b: number): number => ((b - a) / (last.requests - first.requests)) * 10_000;
    const phases = readings.map((r) => `${r.phase} ${round(r.mainMb)}${r.storageMb === null ? '' : `+${round(r.storageMb)}`} MB`).join(', ');
    emit({
      name: 'soak_main_live_heap_after',
      target: null,
      result: round(last.mainMb),
      unit: 'MB',
      ratio: round(last.mainMb / start.mainMb),
      baseline: `the same process once set up ${round(start.mainMb)} MB`,
      command: COMMAND,
      method: `V8 heap used after HeapProfiler.collectGarbage on the service's main thread at the end of round ${ROUNDS} (${last.requests} requests in all); its caches full (the response cache at RESPONSE_CACHE_MB=${CACHE_MB}, filled before the phases; ${TOKENS} tokens cached)`,
    });
    emit({
      name: 'soak_main_heap_growth_per_10k_requests',
      target: null,
      result: round(per10k(first.mainMb, last.mainMb) * 1024),
      unit: 'KB',
      baseline: `live heap after a full collection (main thread + storage thread) by phase: ${phases}`,
      command: COMMAND,
      method: `V8 heap used after HeapProfiler.collectGarbage on the service's main thread, from the end of the first mixed round to the end of round ${ROUNDS} (${last.requests - first.requests} requests: HTTP calls of every outcome, WebSocket connections, frames and subscriptions, management API calls), ÷ requests × 10,000; ${TOKENS} tokens, ${ADDRESSES} client addresses`,
    });
    if (first.storageMb !== null && last.storageMb !== null) {
      emit({
        name: 'soak_storage_thread_heap_growth_per_10k_requests',
        target: null,
        result: round(per10k(first.storageMb, last.storageMb) * 1024),
        unit: 'KB',
        command: COMMAND,
        method: 'the same on the storage thread (stores, ingester, projector): V8 heap used after a full collection',
      });
    }
    // A heap snapshot leaves its own buffers in the process's RSS (glibc keeps them): with
    // snapshots, RSS is compared from the round after the first one.
    const rssFrom = SNAPSHOTS ? (readings.find((r) => r.phase === 'mixed round 2') as Reading) : first;
    emit({
      name: 'soak_rss_growth_per_10k_requests',
      target: null,
      result: round(((last.rssMb - rssFrom.rssMb) / (last.requests - rssFrom.requests)) * 10_000),
      unit: 'MB',
      baseline: `RSS ${round(start.rssMb)} MB once set up, ${round(rssFrom.rssMb)} MB at the end of ${rssFrom.phase}, ${round(last.rssMb)} MB at the end of ${last.phase}`,
      command: COMMAND,
      method: `VmRSS from the end of ${rssFrom.phase} to the end of round ${ROUNDS} (${last.requests - rssFrom.requests} requests), ÷ requests × 10,000${SNAPSHOTS ? ' (from round 2: the heap snapshot after round 1 raises RSS by its own buffers)' : ''}; data dir ${round(start.dataDirMb)} → ${round(last.dataDirMb)} MB (the usage log, by design)`,
    });
    log(`at the end: active resources ${JSON.stringify(last.resources)}; gauges ${JSON.stringify(last.gauges)}`);
    const parts = readdirSync(dataDir, { withFileTypes: true }).map((e) => {
      const path = join(dataDir, e.name);
      return `${e.name} ${round((e.isDirectory() ? dirBytes(path) : statSync(path).size) / 1048576)} MB`;
    });
    log(`data dir at the end: ${parts.join(', ')}`);
  } finally {
    inspector?.close();
    await processes.stopAll();
    await node.close();
  }
}

runMain(main);
