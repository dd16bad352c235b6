import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HEAD_POLL_HEADER } from '../../src/gateway/upstream.js';

/**
 * Small loopback HTTP servers that answer like real chain nodes (shapes taken from the nodes'
 * public documentation), count the calls they get, and can be told to misbehave: answer 500,
 * answer late, answer garbage, or drop the connection.
 */

export interface ReceivedCall {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** wrongId: answers as told, under another call's id. */
export type FakeMode = 'ok' | 'fail' | 'slow' | 'garbage' | 'hangup' | 'slowBody' | 'wrongId';

export interface FakeReply {
  status?: number;
  body: unknown;
  /** Sent as is when set (otherwise `body` is JSON-encoded). */
  raw?: string;
  contentType?: string;
}

export interface FakeUpstream {
  url: string;
  /** Callers' calls; the gateway's own head polls are in `headPolls`. */
  calls: ReceivedCall[];
  headPolls: ReceivedCall[];
  /** Extra wait before answering in the `ok` mode (a node's latency), per call. */
  latency?: (call: ReceivedCall) => number;
  mode: FakeMode;
  /** Delay of the `slow` mode. */
  delayMs: number;
  /** Changes an answer's text before it is sent, in the `ok` mode (a node writing broken JSON). */
  rewrite?: (body: string, call: ReceivedCall) => string;
  reset(): void;
  close(): Promise<void>;
}

type Route = (call: ReceivedCall) => FakeReply;

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Waits ms, or less if the answer is closed first (the caller gave up, or the fake is closing). */
function stall(res: ServerResponse, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    res.once('close', done);
    function done(): void {
      clearTimeout(timer);
      res.off('close', done);
      resolve();
    }
  });
}

export async function startFake(route: Route): Promise<FakeUpstream> {
  const open = new Set<ServerResponse>();
  const fake: FakeUpstream = {
    url: '',
    calls: [],
    headPolls: [],
    mode: 'ok',
    delayMs: 1_000,
    reset() {
      fake.calls.length = 0;
      fake.headPolls.length = 0;
      fake.mode = 'ok';
    },
    close: async () => {
      for (const res of open) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer(async (req, res) => {
    open.add(res);
    res.on('close', () => open.delete(res));
    const call: ReceivedCall = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, body: await readBody(req) };
    if (req.headers[HEAD_POLL_HEADER] === undefined) fake.calls.push(call);
    else fake.headPolls.push(call);
    if (fake.mode === 'hangup') {
      req.socket.destroy();
      return;
    }
    if (fake.mode === 'slow') await stall(res, fake.delayMs);
    const wait = fake.mode === 'ok' ? (fake.latency?.(call) ?? 0) : 0;
    if (wait > 0) await stall(res, wait);
    if (res.destroyed) return;
    if (fake.mode === 'fail') {
      res.writeHead(500, { 'content-type': 'text/plain' }).end('internal error');
      return;
    }
    if (fake.mode === 'garbage') {
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>');
      return;
    }
    const reply = route(call);
    if (fake.mode === 'wrongId' && reply.body !== null && typeof reply.body === 'object' && !Array.isArray(reply.body)) {
      reply.body = { ...(reply.body as object), id: 987654 };
    }
    const text = reply.raw ?? JSON.stringify(reply.body);
    const body = fake.mode === 'ok' && fake.rewrite ? fake.rewrite(text, call) : text;
    res.writeHead(reply.status ?? 200, { 'content-type': reply.contentType ?? 'application/json' });
    if (fake.mode === 'slowBody') {
      // Headers and half the body at once, the rest after delayMs: a node that stalls mid-answer.
      res.write(body.slice(0, body.length >> 1));
      await stall(res, fake.delayMs);
      if (res.destroyed) return;
      res.end(body.slice(body.length >> 1));
      return;
    }
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return fake;
}

/** A loopback URL nothing listens on: connections are refused. */
export async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}

// --- JSON-RPC nodes -------------------------------------------------------------------------

interface RpcRequest {
  jsonrpc?: unknown;
  id?: unknown;
  method?: unknown;
  params?: unknown;
}

type RpcResult = { result: unknown } | { error: { code: number; message: string } };
type MethodTable = Record<string, (params: unknown) => RpcResult>;

const methodNotFound = (method: unknown): RpcResult => ({ error: { code: -32601, message: `Method not found: ${String(method)}` } });

/** A JSON-RPC 2.0 node over a method table; batches are answered in reverse order, as a node may. */
function jsonRpcRoute(methods: MethodTable): Route {
  const answer = (req: RpcRequest): unknown => {
    const fn = typeof req.method === 'string' ? methods[req.method] : undefined;
    const outcome = fn ? fn(req.params) : methodNotFound(req.method);
    return { jsonrpc: '2.0', ...outcome, id: req.id ?? null };
  };
  return (call) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(call.body);
    } catch {
      return { body: { jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null } };
    }
    // Nothing to answer (only notifications): 200 and an empty body, as geth does.
    if (Array.isArray(parsed)) {
      const answers = (parsed as RpcRequest[]).filter((r) => r.id !== undefined).map(answer);
      return answers.length === 0 ? { body: null, raw: '' } : { body: answers.reverse() };
    }
    if (typeof parsed === 'object' && parsed !== null && (parsed as RpcRequest).id === undefined) return { body: null, raw: '' };
    return { body: answer(parsed as RpcRequest) };
  };
}

export const EVM_TX_HASH = `0x${'ab'.repeat(32)}`;

/** An EVM node that knows a handful of methods; anything else answers `null`. */
export function startEvmFake(): Promise<FakeUpstream> {
  const methods: MethodTable = new Proxy(
    {
      eth_blockNumber: () => ({ result: '0x10' }),
      eth_chainId: () => ({ result: '0x539' }),
      eth_getBalance: () => ({ result: '0xde0b6b3a7640000' }),
      eth_sendRawTransaction: () => ({ result: EVM_TX_HASH }),
      eth_call: () => ({ error: { code: 3, message: 'execution reverted' } }),
    } as MethodTable,
    { get: (target, key: string) => target[key] ?? (() => ({ result: null })) },
  );
  return startFake(jsonRpcRoute(methods));
}

export const SOLANA = {
  blockHeight: 289_012_345,
  slot: 301_234_567,
  finalizedSlot: 301_234_535,
  lamports: 709_301_491_443,
  apiVersion: '2.1.21',
  /** mainnet-beta's. */
  genesisHash: '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d',
};

/**
 * A Solana node: getBlockHeight and getSlot answer bare integers, getBalance a context/value pair.
 * `slot`: its slot at `processed` (`getSlot` at `finalized`, the default: as far under it as SOLANA's).
 * `transactions`: the slot of each signature getTransaction knows (null for any other).
 */
export function startSolanaFake(
  slot: () => number = () => SOLANA.slot,
  transactions: Record<string, number> = {},
  /** The cluster it is on, by its genesis hash (`getGenesisHash`): mainnet-beta's unless given. */
  genesisHash: string = SOLANA.genesisHash,
): Promise<FakeUpstream> {
  // Agave's default commitment is `finalized`.
  const commitmentOf = (params: unknown): unknown => (Array.isArray(params) ? (params[0] as { commitment?: unknown } | undefined)?.commitment : undefined);
  const finalized = (params: unknown): boolean => commitmentOf(params) === undefined || commitmentOf(params) === 'finalized';
  return startFake(
    jsonRpcRoute({
      getBlockHeight: () => ({ result: SOLANA.blockHeight }),
      // Confirmed a slot under processed, finalized ~32.
      getSlot: (params) => ({
        result: finalized(params) ? slot() - (SOLANA.slot - SOLANA.finalizedSlot) : commitmentOf(params) === 'confirmed' ? slot() - 1 : slot(),
      }),
      getHealth: () => ({ result: 'ok' }),
      getGenesisHash: () => ({ result: genesisHash }),
      // A block up to its slot (every slot has one here); past it, Agave's "not available".
      getBlock: (params) => {
        const at = Array.isArray(params) ? params[0] : undefined;
        if (typeof at !== 'number') return { error: { code: -32602, message: 'Invalid params: missing slot' } };
        if (at > slot()) return { error: { code: -32004, message: `Block not available for slot ${at}` } };
        return {
          result: {
            blockHeight: at - 12_222_222,
            blockTime: null,
            blockhash: `block${at}`,
            parentSlot: at - 1,
            previousBlockhash: `block${at - 1}`,
            transactions: [],
          },
        };
      },
      getVersion: () => ({ result: { 'feature-set': 1725507508, 'solana-core': SOLANA.apiVersion } }),
      getTransaction: (params) => {
        const signature = Array.isArray(params) ? params[0] : undefined;
        const at = typeof signature === 'string' ? transactions[signature] : undefined;
        if (at === undefined || at > slot()) return { result: null };
        return { result: { slot: at, blockTime: 1_732_000_000, meta: { err: null, fee: 5000 }, transaction: { signatures: [signature] }, version: 0 } };
      },
      getBalance: (params) => {
        if (!Array.isArray(params) || typeof params[0] !== 'string') return { error: { code: -32602, message: 'Invalid params: missing pubkey' } };
        const minContextSlot = (params[1] as { minContextSlot?: unknown } | undefined)?.minContextSlot;
        // Agave's answer when the node's slot is under the one the caller saw.
        if (typeof minContextSlot === 'number' && minContextSlot > slot())
          return { error: { code: -32016, message: 'Minimum context slot has not been reached', data: { contextSlot: slot() } } };
        return { result: { context: { apiVersion: SOLANA.apiVersion, slot: slot() }, value: SOLANA.lamports } };
      },
      sendTransaction: () => ({ result: '5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW' }),
    }),
  );
}

export const SUI = { checkpoint: '143498509' };

/** A Sui full node: sequence numbers are decimal strings. */
export function startSuiFake(): Promise<FakeUpstream> {
  return startFake(
    jsonRpcRoute({
      sui_getLatestCheckpointSequenceNumber: () => ({ result: SUI.checkpoint }),
      sui_getChainIdentifier: () => ({ result: '35834a8a' }),
      suix_getReferenceGasPrice: () => ({ result: '750' }),
      sui_getObject: (params) => ({ result: { data: { objectId: Array.isArray(params) ? params[0] : null, version: '1' } } }),
    }),
  );
}

const SUI_ADDRESS = /^0x[0-9a-f]{1,64}$/i;
/** Sui object ids and addresses as the node writes them: lowercase, 32 bytes, `0x`-prefixed. */
const suiAddress = (id: string): string => `0x${id.slice(2).toLowerCase().padStart(64, '0')}`;

const SUI_OWNER = suiAddress('0x7d20dcdb2bca4f508ea9613994683eb4e76e9c4ed371169677c1be02aaf0b58e');
const SUI_COIN = '0x2::coin::Coin<0x2::sui::SUI>';
const USDC = '0xdba34672e30cb065b1f93e3ab55318768fd6fef66c15942c9f7cb846e2f900e7::usdc::USDC';

/** A Move object with every field the node can show: which ones it sends depends on the call's options. */
function moveObject(objectId: string, version: string, digest: string, type: string, fields: Record<string, unknown>) {
  return {
    objectId,
    version,
    digest,
    type,
    owner: { AddressOwner: SUI_OWNER },
    previousTransaction: 'DHb3mgUTRvK6CaqbbWFQ7Q5Cb4Dd7rDdEfzWqhrMqsKT',
    storageRebate: '988000',
    content: { dataType: 'moveObject', type, hasPublicTransfer: true, fields: { id: { id: objectId }, ...fields } },
  };
}

/** What the Sui node fake holds (shapes from Sui's OpenRPC spec, crates/sui-open-rpc/spec/openrpc.json). */
export const SUI_NODE = {
  checkpoint: '187042571',
  owner: SUI_OWNER,
  balances: {
    '0x2::sui::SUI': { coinType: '0x2::sui::SUI', coinObjectCount: 3, totalBalance: '12500000000', lockedBalance: {}, fundsInAddressBalance: '0' },
    [USDC]: { coinType: USDC, coinObjectCount: 1, totalBalance: '250000000', lockedBalance: {}, fundsInAddressBalance: '0' },
  } as Record<string, unknown>,
  usdc: USDC,
  objects: {
    suiCoin: moveObject(
      suiAddress('0x5b0f1b8e4de95d1a8a1c3bc8d2d3f3fa0b4a8e3b7c2d19e6f04a71c5e8d3b2a1'),
      '412990811',
      '9Fo3W3HbhgkZ8Ea3r7r2iHq9Bd1ZgWxgAHxVwJqZq1Xk',
      SUI_COIN,
      {
        balance: '12000000000',
      },
    ),
    usdcCoin: moveObject(
      suiAddress('0x1c3e85bb0c2f4a6d98e7a4cf1e2b3d4a5f60718293a4b5c6d7e8f90a1b2c3d4e'),
      '398114027',
      'Gq7WbQ4V1Xy3kGZ6mRrP2sEJd8nHtYcL5uVfN9aKx2Bw',
      `0x2::coin::Coin<${USDC}>`,
      {
        balance: '250000000',
      },
    ),
  },
};

type SuiObjectData = ReturnType<typeof moveObject>;

/** Which fields of an object the node sends for `SuiObjectDataOptions` (objectId, version and digest always). */
function shownFields(o: SuiObjectData, options: unknown): Record<string, unknown> {
  const show = (name: string): boolean => Boolean(options && typeof options === 'object' && (options as Record<string, unknown>)[name] === true);
  const data: Record<string, unknown> = { objectId: o.objectId, version: o.version, digest: o.digest };
  if (show('showType')) data.type = o.type;
  if (show('showOwner')) data.owner = o.owner;
  if (show('showPreviousTransaction')) data.previousTransaction = o.previousTransaction;
  if (show('showStorageRebate')) data.storageRebate = o.storageRebate;
  if (show('showContent')) data.content = o.content;
  return data;
}

/** `SuiObjectResponse`: the object's data, or the `notExists` error the node answers inside the result. */
function objectResponse(id: string, options: unknown): unknown {
  const objectId = suiAddress(id);
  const found = Object.values(SUI_NODE.objects).find((o) => o.objectId === objectId);
  return found ? { data: shownFields(found, options) } : { error: { code: 'notExists', object_id: objectId } };
}

const invalidParams = (message: string): RpcResult => ({ error: { code: -32602, message: `Invalid params: ${message}` } });

/**
 * A Sui full node for Sui's own SDK: the latest checkpoint, balances, objects one at a time and
 * several at once, each shaped by the options the SDK sends, as the node does.
 */
export function startSuiNodeFake(): Promise<FakeUpstream> {
  const params = (p: unknown): unknown[] => (Array.isArray(p) ? p : []);
  // As Sui's full node (jsonrpsee without batches): any batch gets one error under a null id.
  const refuseBatches =
    (route: Route): Route =>
    (call) =>
      call.body.trimStart().startsWith('[')
        ? { body: { jsonrpc: '2.0', error: { code: -32005, message: 'Batched requests are not supported by this server' }, id: null } }
        : route(call);
  return startFake(
    refuseBatches(
      jsonRpcRoute({
        sui_getLatestCheckpointSequenceNumber: () => ({ result: SUI_NODE.checkpoint }),
        suix_getBalance: (p) => {
          const [owner, coinType] = params(p);
          if (typeof owner !== 'string' || !SUI_ADDRESS.test(owner)) return invalidParams('owner must be a Sui address');
          const type = typeof coinType === 'string' ? coinType : '0x2::sui::SUI';
          const empty = { coinType: type, coinObjectCount: 0, totalBalance: '0', lockedBalance: {}, fundsInAddressBalance: '0' };
          return { result: suiAddress(owner) === SUI_NODE.owner ? (SUI_NODE.balances[type] ?? empty) : empty };
        },
        sui_getObject: (p) => {
          const [id, options] = params(p);
          if (typeof id !== 'string' || !SUI_ADDRESS.test(id)) return invalidParams('object_id must be an object id');
          return { result: objectResponse(id, options) };
        },
        sui_multiGetObjects: (p) => {
          const [ids, options] = params(p);
          if (!Array.isArray(ids) || !ids.every((id) => typeof id === 'string' && SUI_ADDRESS.test(id))) return invalidParams('object_ids must be object ids');
          return { result: ids.map((id: string) => objectResponse(id, options)) };
        },
      }),
    ),
  );
}

// --- REST nodes -----------------------------------------------------------------------------

export const TRON = {
  blockID: '0000000003fe266bf6b6d392f654dc2e5011601546ed04623d9fcc4e9d439a25',
  number: 66_987_627,
};

/** A java-tron HTTP API: `/wallet/…` answers 200 JSON; unknown paths 404. */
export function startTronFake(): Promise<FakeUpstream> {
  return startFake((call) => {
    const path = call.url.split('?')[0];
    if (path === '/wallet/getnowblock' || path === '/walletsolidity/getnowblock') {
      return {
        body: {
          blockID: TRON.blockID,
          block_header: {
            raw_data: {
              number: TRON.number,
              txTrieRoot: 'f8156964cc3e5793a368f938a18ea45c02bd48fe3a412f7091ce8d9ef56df174',
              witness_address: '41e7860196ad5b5718c1d6326babab039b70b8c1cd',
              parentHash: '0000000003fe266a65d5194c947f6f7a059d4646c8e9a5293226bc7fdcfc775e',
              version: 34,
              timestamp: 1_777_445_307_000,
            },
            witness_signature: '55a29981b2ba121613788de5d1b6bd87579ef63479f4fbb7bc99b1c7217694',
          },
        },
      };
    }
    if (path === '/wallet/broadcasttransaction') return { body: { result: true, txid: 'c'.repeat(64) } };
    if (path === '/wallet/getaccount') return { body: JSON.parse(call.body || '{}') };
    return { status: 404, raw: 'Not Found', body: null, contentType: 'text/plain' };
  });
}

export const COSMOS = { chainId: 'cosmoshub-4', height: '24123456' };

/** A Cosmos SDK LCD (gRPC gateway): latest block, and grpc-gateway errors for unknown paths. */
export function startCosmosFake(): Promise<FakeUpstream> {
  return startFake((call) => {
    const path = call.url.split('?')[0];
    if (path === '/cosmos/base/tendermint/v1beta1/blocks/latest') {
      const blockId = {
        hash: 'q83YWXqkrSc3Y5ZWSkq8Qg2sT1ZJbG3cb3lDWZN6Ixo=',
        part_set_header: { total: 1, hash: 'f1zvTtHyDQfT8Sh5rZmI5q7NvOCpSzR1Kb/hbkvF9ho=' },
      };
      const header = {
        version: { block: '11', app: '0' },
        chain_id: COSMOS.chainId,
        height: COSMOS.height,
        time: '2025-01-01T00:00:00.000000000Z',
        last_block_id: blockId,
        proposer_address: 'hU8WrPrq8c7O9e5x1QqNNeDgTMo=',
      };
      return {
        body: {
          block_id: blockId,
          block: {
            header,
            data: { txs: [] },
            evidence: { evidence: [] },
            last_commit: { height: String(Number(COSMOS.height) - 1), round: 0, block_id: blockId, signatures: [] },
          },
          sdk_block: {
            header: { ...header, proposer_address: 'cosmosvalcons1s483vp7pyt4fnvqkhlns5ty5x9h8xn9gxxr8pg' },
            data: { txs: [] },
            evidence: { evidence: [] },
          },
        },
      };
    }
    if (path === '/cosmos/tx/v1beta1/txs' && call.method === 'POST') return { body: { tx_response: { height: '0', txhash: 'D'.repeat(64), code: 0 } } };
    return { status: 501, body: { code: 12, message: 'Not Implemented', details: [] } };
  });
}

export const KASPA = { networkName: 'kaspa-mainnet', blockCount: '260890', virtualDaaScore: '19989141' };

/** The Kaspa REST server (FastAPI): `/info/blockdag`, and `{"detail":"Not Found"}` otherwise. */
export function startKaspaFake(): Promise<FakeUpstream> {
  return startFake((call) => {
    const path = call.url.split('?')[0];
    if (path === '/info/blockdag') {
      return {
        body: {
          networkName: KASPA.networkName,
          blockCount: KASPA.blockCount,
          headerCount: KASPA.blockCount,
          tipHashes: ['78273854a739e3e379dfd34a262bbe922400d8e360e30e3f31228519a334350a'],
          difficulty: 3870677677777.2,
          pastMedianTime: '1656455670700',
          virtualParentHashes: ['78273854a739e3e379dfd34a262bbe922400d8e360e30e3f31228519a334350a'],
          pruningPointHash: '5d32a9403273a34b6551b84340a1459ddde2ae6ba59a47987a6374340ba41d5d',
          virtualDaaScore: KASPA.virtualDaaScore,
        },
      };
    }
    return { status: 404, body: { detail: 'Not Found' } };
  });
}

// --- An EVM chain that moves ------------------------------------------------------------------

export interface FakeBlock {
  number: number;
  hash: string;
  parentHash: string;
  transactions: string[];
}

const hex = (n: number): string => `0x${n.toString(16)}`;
const hash32 = (seed: string): string => `0x${createHash('sha256').update(seed).digest('hex')}`;

/**
 * One EVM chain several fake nodes can serve: blocks with one transaction each, a head that
 * advances, a finalized block `finalityDepth` under the head, and reorgs that replace the last
 * blocks (new hashes, new transactions). State answers (balance, call, code, storage) name the
 * block they were read at, so a test can tell a stale answer from a fresh one.
 */
export class FakeEvmChain {
  readonly blocks: FakeBlock[] = [];
  private forks = 0;
  /** Block 0's time (s); a block every 12 s after it. Old (November 2023) unless set: `headAt` makes the head current. */
  genesisTime = 1_700_000_000;

  constructor(
    height: number,
    readonly finalityDepth = 8,
  ) {
    for (let n = 0; n <= height; n++) this.blocks.push(this.makeBlock(n));
  }

  get head(): number {
    return this.blocks.length - 1;
  }

  /** Times the blocks so that the head's is `ms` (a current head: Date.now()). */
  headAt(ms: number): void {
    this.genesisTime = Math.floor(ms / 1000) - this.head * 12;
  }

  timeOf(n: number): number {
    return this.genesisTime + n * 12;
  }

  get finalized(): number {
    return Math.max(0, this.head - this.finalityDepth);
  }

  advance(count = 1): void {
    for (let i = 0; i < count; i++) this.blocks.push(this.makeBlock(this.blocks.length));
  }

  /** Replaces the last `depth` blocks (never final ones) with blocks of another fork. */
  reorg(depth: number): FakeBlock[] {
    if (depth > this.finalityDepth) throw new Error('a reorg deeper than finality');
    this.forks++;
    const replaced = this.blocks.splice(this.blocks.length - depth, depth);
    for (const old of replaced) this.blocks.push(this.makeBlock(old.number));
    return replaced;
  }

  block(n: number): FakeBlock | undefined {
    return this.blocks[n];
  }

  blockByHash(hash: string): FakeBlock | undefined {
    return this.blocks.find((b) => b.hash === hash);
  }

  transaction(hash: string): { tx: string; block: FakeBlock } | undefined {
    for (const block of this.blocks) if (block.transactions.includes(hash)) return { tx: hash, block };
    return undefined;
  }

  private makeBlock(n: number): FakeBlock {
    const parent = this.blocks[n - 1];
    const hash = hash32(`block ${n} fork ${this.forks}`);
    return { number: n, hash, parentHash: parent?.hash ?? `0x${'00'.repeat(32)}`, transactions: [hash32(`tx in ${hash}`)] };
  }
}

export interface EvmNodeFake extends FakeUpstream {
  /** honest; liar: claims a head 10^9 blocks ahead; behind: serves as if `lagBlocks` behind. */
  behaviour: 'honest' | 'liar' | 'behind';
  lagBlocks: number;
  /** What `eth_syncing` says: an object (its progress) while true, `false` otherwise. */
  syncing: boolean;
  /** A full node: state older than this many blocks under its head answers "missing trie node". */
  historyBlocks: number | null;
  /** What `eth_chainId` says (0x2a unless set): another network's node behind the same URL. */
  chainId: string;
}

const STATE_METHODS = new Set(['eth_getBalance', 'eth_call', 'eth_getCode', 'eth_getStorageAt', 'eth_getTransactionCount']);
const STATE_BLOCK_PARAM: Record<string, number> = { eth_getBalance: 1, eth_call: 1, eth_getCode: 1, eth_getTransactionCount: 1, eth_getStorageAt: 2 };

/** An EVM node serving `chain` (see FakeEvmChain), as geth answers. */
export async function startEvmNodeFake(chain: FakeEvmChain): Promise<EvmNodeFake> {
  let node: EvmNodeFake;
  const headOf = (): number => (node.behaviour === 'behind' ? Math.max(0, chain.head - node.lagBlocks) : chain.head);
  const blockAt = (tag: unknown): FakeBlock | null => {
    const head = headOf();
    if (node.behaviour === 'liar' && (tag === 'latest' || tag === 'finalized')) {
      const n = head + 1_000_000_000;
      return { number: n, hash: hash32(`lie ${n}`), parentHash: hash32('lie'), transactions: [] };
    }
    const n =
      tag === 'latest' || tag === 'pending' || tag === undefined
        ? head
        : tag === 'finalized' || tag === 'safe'
          ? Math.max(0, head - chain.finalityDepth)
          : tag === 'earliest'
            ? 0
            : typeof tag === 'string'
              ? Number.parseInt(tag, 16)
              : Number.NaN;
    return Number.isInteger(n) && n <= head ? (chain.block(n) ?? null) : null;
  };
  const blockJson = (b: FakeBlock | null | undefined, full: unknown) =>
    b
      ? {
          number: hex(b.number),
          hash: b.hash,
          parentHash: b.parentHash,
          timestamp: hex(chain.timeOf(b.number)),
          transactions: full === true ? b.transactions.map((h) => ({ hash: h, blockNumber: hex(b.number), blockHash: b.hash })) : b.transactions,
        }
      : null;
  const params = (p: unknown): unknown[] => (Array.isArray(p) ? p : []);
  const state =
    (method: string) =>
    (p: unknown): RpcResult => {
      const args = params(p);
      const block = blockAt(args[STATE_BLOCK_PARAM[method] as number] ?? 'latest');
      if (block === null) return { error: { code: -32000, message: 'header not found' } };
      if (node.historyBlocks !== null && block.number < headOf() - node.historyBlocks)
        return { error: { code: -32000, message: `missing trie node ${block.hash.slice(2, 10)} (path )` } };
      return { result: hash32(`${method} ${JSON.stringify(args[0])} at ${block.hash}`) };
    };
  const methods: MethodTable = {
    eth_chainId: () => ({ result: node.chainId }),
    net_version: () => ({ result: BigInt(node.chainId).toString() }),
    eth_blockNumber: () => ({ result: hex(blockAt('latest')?.number ?? 0) }),
    eth_syncing: () => ({ result: node.syncing ? { startingBlock: '0x0', currentBlock: hex(headOf()), highestBlock: hex(chain.head) } : false }),
    eth_getBlockByNumber: (p) => ({ result: blockJson(blockAt(params(p)[0]), params(p)[1]) }),
    eth_getBlockByHash: (p) => {
      const b = chain.blockByHash(String(params(p)[0]));
      return { result: b && b.number <= headOf() ? blockJson(b, params(p)[1]) : null };
    },
    eth_getTransactionByHash: (p) => {
      const found = chain.transaction(String(params(p)[0]));
      return { result: found ? { hash: found.tx, blockNumber: hex(found.block.number), blockHash: found.block.hash } : null };
    },
    eth_getTransactionReceipt: (p) => {
      const found = chain.transaction(String(params(p)[0]));
      return { result: found ? { transactionHash: found.tx, blockNumber: hex(found.block.number), blockHash: found.block.hash, status: '0x1' } : null };
    },
    eth_getLogs: (p) => {
      const filter = (params(p)[0] ?? {}) as { fromBlock?: unknown; toBlock?: unknown };
      const from = blockAt(filter.fromBlock ?? 'latest');
      const to = blockAt(filter.toBlock ?? 'latest');
      if (!from || !to) return { result: [] };
      return {
        result: chain.blocks
          .slice(from.number, to.number + 1)
          .map((b) => ({ blockNumber: hex(b.number), blockHash: b.hash, transactionHash: b.transactions[0], logIndex: '0x0' })),
      };
    },
    ...Object.fromEntries([...STATE_METHODS].map((m) => [m, state(m)])),
  };
  node = Object.assign(await startFake(jsonRpcRoute(methods)), {
    behaviour: 'honest' as const,
    lagBlocks: 0,
    syncing: false,
    historyBlocks: null,
    chainId: '0x2a',
  });
  return node;
}
