import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SuiJsonRpcClient } from '@mysten/sui/jsonRpc';
import { Ed25519Keypair } from '@mysten/sui/keypairs/ed25519';
import { Connection, Keypair, PublicKey, SystemProgram, Transaction } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { eventually } from '../support/eventually.js';
import { base58 } from '../support/fakeSolanaWsUpstream.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';
import { recordedCalls } from '../support/usageLog.js';

/**
 * An audit of Solana and Sui through the gateway as their own clients meet it (`Connection` of
 * @solana/web3.js, `SuiJsonRpcClient` of @mysten/sui), on the shipped registry with two nodes a
 * chain. The nodes are fakes that answer as the real ones do, down to their JSON-RPC servers'
 * rules: Agave's (jsonrpc-core) and Sui's (jsonrpsee) take an id that is null, a string or an
 * unsigned 64-bit integer, and answer anything else with a parse error under a null id.
 */

// --- Nodes ---------------------------------------------------------------------------------------

type Reply = { result: unknown } | { error: { code: number; message: string; data?: unknown } };
type Methods = Record<string, (params: unknown[]) => Reply>;

interface Node {
  url: string;
  /** The method of each call received (a batch's members one by one), in order. */
  methods: string[];
  /** HTTP requests received. */
  requests: number;
  /** Wait before answering a request holding this method (a slow node). */
  delayMs: Record<string, number>;
  /** Methods whose request the node reads, then drops the connection without an answer. */
  hangUpOn: Set<string>;
  close(): Promise<void>;
}

const U64_MAX = 18446744073709551615n;

/** An id jsonrpc-core and jsonrpsee take (their `Id`: Null, Num(u64), Str). */
function isNodeId(id: unknown, text: string): boolean {
  if (id === null || typeof id === 'string') return true;
  return typeof id === 'number' && /^(0|[1-9][0-9]*)$/.test(text) && BigInt(text) <= U64_MAX;
}

/** The id's JSON text as the caller wrote it, for an id that is a plain integer (JSON.parse would round it). */
function idTextOf(raw: string): string | null {
  const m = /"id"\s*:\s*(-?[0-9][0-9.eE+-]*)/.exec(raw);
  return m ? (m[1] as string) : null;
}

const PARSE_ERROR = { jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null };

/** What Sui's full node answers a batch (its axum_router: jsonrpsee's "batches not supported", under a null id). */
const BATCHES_NOT_SUPPORTED = { jsonrpc: '2.0', error: { code: -32005, message: 'Batched requests are not supported by this server' }, id: null };

/** `batches: false`: a Sui full node, which answers any batch with BATCHES_NOT_SUPPORTED. */
async function startNode(methods: Methods, options: { batches: boolean } = { batches: true }): Promise<Node> {
  const open = new Set<ServerResponse>();
  const answerOne = (call: unknown, raw: string | null): unknown => {
    const c = call as { id?: unknown; method?: unknown; params?: unknown };
    if (c.id !== undefined && !isNodeId(c.id, raw !== null && typeof c.id === 'number' ? (idTextOf(raw) ?? String(c.id)) : String(c.id))) return PARSE_ERROR;
    const fn = typeof c.method === 'string' ? methods[c.method] : undefined;
    const reply: Reply = fn ? fn(Array.isArray(c.params) ? c.params : []) : { error: { code: -32601, message: 'Method not found' } };
    return { jsonrpc: '2.0', ...reply, id: c.id ?? null };
  };
  const node: Node = {
    url: '',
    methods: [],
    requests: 0,
    delayMs: {},
    hangUpOn: new Set(),
    close: async () => {
      for (const res of open) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer(async (req: IncomingMessage, res) => {
    open.add(res);
    res.on('close', () => open.delete(res));
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    node.requests++;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(PARSE_ERROR));
      return;
    }
    if (Array.isArray(parsed) && !options.batches) {
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(BATCHES_NOT_SUPPORTED));
      return;
    }
    const calls = Array.isArray(parsed) ? parsed : [parsed];
    const names = calls.map((c) => String((c as { method?: unknown }).method));
    node.methods.push(...names);
    if (names.some((m) => node.hangUpOn.has(m))) {
      req.socket.destroy();
      return;
    }
    const wait = Math.max(0, ...names.map((m) => node.delayMs[m] ?? 0));
    if (wait > 0) await new Promise<void>((resolve) => setTimeout(resolve, wait));
    if (res.destroyed) return;
    const body = Array.isArray(parsed)
      ? parsed.filter((c) => (c as { id?: unknown }).id !== undefined).map((c) => answerOne(c, null))
      : (parsed as { id?: unknown }).id === undefined
        ? null
        : answerOne(parsed, text);
    res.writeHead(200, { 'content-type': 'application/json' }).end(body === null ? '' : JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  node.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return node;
}

// --- A Solana cluster, as two RPC nodes see it ---------------------------------------------------

type Commitment = 'processed' | 'confirmed' | 'finalized';

/** What the cluster holds: the slot at each commitment, balances at each, signatures seen. */
const SOL = {
  slot: { processed: 320_000_100, confirmed: 320_000_098, finalized: 320_000_068 } as Record<Commitment, number>,
  balances: new Map<string, Record<Commitment, number>>(),
  statuses: new Map<string, { slot: number; confirmationStatus: Commitment }>(),
  /** sendTransaction fails its preflight (the node's -32002) while set. */
  preflightError: null as string | null,
};
const API_VERSION = '2.2.14';
const SYSTEM_PROGRAM = '11111111111111111111111111111111';
const blockhashAt = (slot: number): string => base58(createHash('sha256').update(`blockhash-${slot}`).digest());

const commitmentOf = (config: unknown): Commitment => {
  const c = (config as { commitment?: unknown } | undefined)?.commitment;
  return c === 'processed' || c === 'confirmed' ? c : 'finalized';
};
const withContext = (commitment: Commitment, value: unknown): Reply => ({
  result: { context: { apiVersion: API_VERSION, slot: SOL.slot[commitment] }, value },
});

/** The first signature of a wire transaction (base64 or base58), base58 as the node answers it. */
function signatureOf(encoded: unknown, config: unknown): string | null {
  if (typeof encoded !== 'string') return null;
  const encoding = (config as { encoding?: unknown } | undefined)?.encoding;
  const bytes = encoding === 'base64' ? Buffer.from(encoded, 'base64') : null;
  if (bytes === null || bytes.length < 65 || bytes[0] === 0) return null;
  return base58(bytes.subarray(1, 65));
}

const SOLANA_METHODS: Methods = {
  getSlot: ([config]) => ({ result: SOL.slot[commitmentOf(config)] }),
  getBlockHeight: ([config]) => ({ result: SOL.slot[commitmentOf(config)] - 12_000_000 }),
  getBalance: ([pubkey, config]) => {
    if (typeof pubkey !== 'string') return { error: { code: -32602, message: 'Invalid params: invalid type: expected a string.' } };
    const c = commitmentOf(config);
    return withContext(c, SOL.balances.get(pubkey)?.[c] ?? 0);
  },
  getAccountInfo: ([pubkey, config]) => {
    const c = commitmentOf(config);
    const lamports = typeof pubkey === 'string' ? (SOL.balances.get(pubkey)?.[c] ?? 0) : 0;
    return withContext(c, lamports === 0 ? null : { data: ['', 'base64'], executable: false, lamports, owner: SYSTEM_PROGRAM, rentEpoch: 361, space: 0 });
  },
  getLatestBlockhash: ([config]) => {
    const c = commitmentOf(config);
    return withContext(c, { blockhash: blockhashAt(SOL.slot[c]), lastValidBlockHeight: SOL.slot[c] - 12_000_000 + 150 });
  },
  getBlock: ([slot, config]) => {
    const c = commitmentOf(config);
    if (typeof slot !== 'number' || slot > SOL.slot[c]) return { error: { code: -32004, message: `Block not available for slot ${String(slot)}` } };
    return {
      result: {
        blockHeight: slot - 12_000_000,
        blockTime: 1_750_000_000,
        blockhash: blockhashAt(slot),
        parentSlot: slot - 1,
        previousBlockhash: blockhashAt(slot - 1),
        signatures: [],
        rewards: [],
      },
    };
  },
  getSignatureStatuses: ([signatures]) => {
    if (!Array.isArray(signatures)) return { error: { code: -32602, message: 'Invalid params: invalid type: expected a sequence.' } };
    return withContext(
      'processed',
      signatures.map((s) => {
        const status = SOL.statuses.get(String(s));
        if (!status) return null;
        const finalized = status.confirmationStatus === 'finalized';
        return { slot: status.slot, confirmations: finalized ? null : 1, err: null, status: { Ok: null }, confirmationStatus: status.confirmationStatus };
      }),
    );
  },
  sendTransaction: ([tx, config]) => {
    const signature = signatureOf(tx, config);
    if (signature === null) return { error: { code: -32602, message: 'invalid transaction: Transaction failed to sanitize accounts offsets correctly' } };
    if (SOL.preflightError !== null) {
      return {
        error: {
          code: -32002,
          message: `Transaction simulation failed: ${SOL.preflightError}`,
          data: { accounts: null, err: 'BlockhashNotFound', innerInstructions: null, logs: [], replacementBlockhash: null, returnData: null, unitsConsumed: 0 },
        },
      };
    }
    SOL.statuses.set(signature, { slot: SOL.slot.processed, confirmationStatus: 'processed' });
    return { result: signature };
  },
  simulateTransaction: ([tx, config]) => {
    if (signatureOf(tx, { encoding: (config as { encoding?: unknown } | undefined)?.encoding }) === null) {
      return { error: { code: -32602, message: 'invalid transaction: failed to deserialize' } };
    }
    return withContext(commitmentOf(config), {
      err: null,
      logs: [`Program ${SYSTEM_PROGRAM} invoke [1]`, `Program ${SYSTEM_PROGRAM} success`],
      accounts: null,
      unitsConsumed: 150,
      returnData: null,
    });
  },
  requestAirdrop: ([pubkey, lamports]) => {
    if (typeof pubkey !== 'string' || typeof lamports !== 'number') return { error: { code: -32602, message: 'Invalid params' } };
    const signature = base58(createHash('sha512').update(`airdrop-${pubkey}-${lamports}`).digest());
    SOL.statuses.set(signature, { slot: SOL.slot.processed, confirmationStatus: 'processed' });
    return { result: signature };
  },
};

// --- A Sui network, as two full nodes see it -----------------------------------------------------

const suiAddress = (seed: string): string => `0x${createHash('sha256').update(seed).digest('hex')}`;
const SUI = {
  checkpoint: 187_042_571,
  owner: suiAddress('sui owner'),
  coin: { objectId: suiAddress('a coin'), version: 412_990_811, digest: '9Fo3W3HbhgkZ8Ea3r7r2iHq9Bd1ZgWxgAHxVwJqZq1Xk', balance: 12_000_000_000 },
  executed: new Map<string, { checkpoint: number }>(),
};
const transactionDigestOf = (bytes: string): string => base58(createHash('sha256').update(bytes).digest());

const SUI_METHODS: Methods = {
  sui_getLatestCheckpointSequenceNumber: () => ({ result: String(SUI.checkpoint) }),
  suix_getBalance: ([owner, coinType]) => ({
    result: {
      coinType: typeof coinType === 'string' ? coinType : '0x2::sui::SUI',
      coinObjectCount: owner === SUI.owner ? 1 : 0,
      totalBalance: owner === SUI.owner ? String(SUI.coin.balance) : '0',
      lockedBalance: {},
    },
  }),
  sui_getObject: ([id]) =>
    id === SUI.coin.objectId
      ? { result: { data: { objectId: SUI.coin.objectId, version: String(SUI.coin.version), digest: SUI.coin.digest } } }
      : { result: { error: { code: 'notExists', object_id: id } } },
  sui_dryRunTransactionBlock: ([bytes]) => {
    if (typeof bytes !== 'string') return { error: { code: -32602, message: 'Invalid params' } };
    return {
      result: {
        effects: {
          messageVersion: 'v1',
          status: { status: 'success' },
          gasUsed: { computationCost: '750000', storageCost: '1976000', storageRebate: '978120', nonRefundableStorageFee: '9880' },
        },
        events: [],
        objectChanges: [],
        balanceChanges: [{ owner: { AddressOwner: SUI.owner }, coinType: '0x2::sui::SUI', amount: '-1747880' }],
        input: {},
      },
    };
  },
  sui_executeTransactionBlock: ([bytes, signatures]) => {
    if (typeof bytes !== 'string' || !Array.isArray(signatures) || signatures.length === 0) return { error: { code: -32602, message: 'Invalid params' } };
    const digest = transactionDigestOf(bytes);
    SUI.executed.set(digest, { checkpoint: SUI.checkpoint + 1 });
    SUI.coin.version++;
    return { result: { digest, confirmedLocalExecution: false } };
  },
  sui_getTransactionBlock: ([digest]) => {
    const found = typeof digest === 'string' ? SUI.executed.get(digest) : undefined;
    if (!found) return { error: { code: -32602, message: `Could not find the referenced transaction [TransactionDigest(${String(digest)})].` } };
    return { result: { digest, checkpoint: String(found.checkpoint), timestampMs: '1750000000000' } };
  },
};

// --- The gateway ---------------------------------------------------------------------------------

let t: TestApp;
let base: string;
let sol: [Node, Node];
let sui: [Node, Node];
let caller: Caller;

beforeAll(async () => {
  sol = [await startNode(SOLANA_METHODS), await startNode(SOLANA_METHODS)];
  sui = [await startNode(SUI_METHODS, { batches: false }), await startNode(SUI_METHODS, { batches: false })];
  t = await startTestApp({ env: { UPSTREAM_SOL: sol.map((n) => n.url).join(','), UPSTREAM_SUI: sui.map((n) => n.url).join(',') } });
  base = (await listen(t)).url;
  caller = await newToken(t, { plan: 'unlimited' });
});
afterAll(async () => {
  await t?.close();
  await Promise.all([...(sol ?? []), ...(sui ?? [])].map((n) => n?.close()));
});

const solUrl = () => `${base}/sol/${caller.token}`;
const suiUrl = () => `${base}/sui/${caller.token}`;
const post = (url: string, body: string, contentType = 'application/json') => fetch(url, { method: 'POST', headers: { 'content-type': contentType }, body });
const seen = (nodes: Node[], method: string): number => nodes.reduce((n, node) => n + node.methods.filter((m) => m === method).length, 0);
type Caller = Awaited<ReturnType<typeof newToken>>;
/** A token of its own account: its usage log holds only the test's calls. */
const fresh = (): Promise<Caller> => newToken(t, { plan: 'professional' });
/** The account's usage records, once there are `count` of them (in the order the calls were answered). */
const records = async (o: Caller, count: number): Promise<UsageRecord[]> =>
  eventually(
    () => recordedCalls(t.runtime.store, o.accountId),
    (u) => u.length >= count,
    10_000,
  );
const pubkey = (seed: string): PublicKey => new PublicKey(createHash('sha256').update(seed).digest());

describe('ids, as Agave and Sui full nodes take them', () => {
  it.each([
    ['sol', 'getSlot'],
    ['sui', 'sui_getLatestCheckpointSequenceNumber'],
  ])('%s: a single call is answered under its own id, whatever its JSON type', async (chain, method) => {
    const url = chain === 'sol' ? solUrl() : suiUrl();
    const ids = ['0', '7', '-1', '-42', '"a-uuid-4b1e"', '""', '"é"', '"\\u0041"', 'null', '1.5', '1e2', '-0', '9007199254740993', '18446744073709551616'];
    for (const id of ids) {
      const res = await post(url, `{"jsonrpc":"2.0","id":${id},"method":"${method}","params":[]}`);
      const text = await res.text();
      expect({ id, status: res.status }).toEqual({ id, status: 200 });
      expect(text, `id ${id}`).toContain(`"id":${id}`);
      expect(JSON.parse(text), `id ${id}`).toHaveProperty('result');
    }
  });
});

describe('the clients, unchanged, against the gateway URL', () => {
  it("web3.js Connection: balances at its commitment, the latest blockhash, a simulation, a transaction sent, an airdrop, the signature's status; each call metered by its method", async () => {
    const o = await fresh();
    const connection = new Connection(`${base}/sol/${o.token}`, 'confirmed');
    const payer = Keypair.generate();
    const alice = pubkey('alice');
    SOL.balances.set(payer.publicKey.toBase58(), { processed: 5_000_000_000, confirmed: 5_000_000_000, finalized: 5_000_000_000 });
    SOL.balances.set(alice.toBase58(), { processed: 3, confirmed: 2, finalized: 1 });

    expect(await connection.getBalance(alice)).toBe(2);
    expect(await connection.getBalance(alice, 'processed')).toBe(3);
    expect(await connection.getBalance(alice, 'finalized')).toBe(1);
    const { blockhash, lastValidBlockHeight } = await connection.getLatestBlockhash();
    expect(blockhash).toBe(blockhashAt(SOL.slot.confirmed));
    const tx = new Transaction({ feePayer: payer.publicKey, blockhash, lastValidBlockHeight }).add(
      SystemProgram.transfer({ fromPubkey: payer.publicKey, toPubkey: alice, lamports: 1_000 }),
    );
    tx.sign(payer);
    const simulated = await connection.simulateTransaction(tx);
    expect(simulated.value).toMatchObject({ err: null, unitsConsumed: 150 });
    const sentBefore = seen(sol, 'sendTransaction');
    const signature = await connection.sendRawTransaction(tx.serialize());
    expect(signature).toBe(base58(tx.signature as Buffer));
    expect(seen(sol, 'sendTransaction')).toBe(sentBefore + 1);
    const airdrop = await connection.requestAirdrop(alice, 1_000_000_000);
    expect(airdrop).toEqual(expect.any(String));
    const statuses = await connection.getSignatureStatuses([signature, airdrop]);
    expect(statuses.value.map((s) => s?.confirmationStatus)).toEqual(['processed', 'processed']);

    expect((await records(o, 9)).map((r) => [r.chain, r.method, r.status, r.rpcErrorCode, r.charged])).toEqual(
      [
        'getBalance',
        'getBalance',
        'getBalance',
        'getLatestBlockhash',
        // web3.js's simulateTransaction of a legacy Transaction asks a blockhash of its own first.
        'getLatestBlockhash',
        'simulateTransaction',
        'sendTransaction',
        'requestAirdrop',
        'getSignatureStatuses',
      ].map((m) => ['sol', m, 200, null, true]),
    );
  });

  it('SuiJsonRpcClient: the checkpoint, a balance, an object, a dry run, a signed transaction executed and then found', async () => {
    const o = await fresh();
    const client = new SuiJsonRpcClient({ url: `${base}/sui/${o.token}`, network: 'mainnet' });
    expect(await client.getLatestCheckpointSequenceNumber()).toBe(String(SUI.checkpoint));
    expect(await client.getBalance({ owner: SUI.owner })).toMatchObject({ totalBalance: String(SUI.coin.balance), coinObjectCount: 1 });
    expect(await client.getObject({ id: SUI.coin.objectId })).toEqual({
      data: { objectId: SUI.coin.objectId, version: String(SUI.coin.version), digest: SUI.coin.digest },
    });
    const bytes = new Uint8Array(createHash('sha256').update('a sui transaction').digest());
    expect((await client.dryRunTransactionBlock({ transactionBlock: bytes })).effects.status).toEqual({ status: 'success' });
    const executedBefore = seen(sui, 'sui_executeTransactionBlock');
    const result = await client.signAndExecuteTransaction({ transaction: bytes, signer: Ed25519Keypair.generate() });
    expect(result.digest).toBe(transactionDigestOf(Buffer.from(bytes).toString('base64')));
    expect(seen(sui, 'sui_executeTransactionBlock')).toBe(executedBefore + 1);
    expect(await client.waitForTransaction({ digest: result.digest, pollInterval: 50 })).toMatchObject({
      digest: result.digest,
      checkpoint: String(SUI.checkpoint + 1),
    });

    expect((await records(o, 6)).map((r) => [r.chain, r.method, r.status, r.rpcErrorCode])).toEqual(
      [
        'sui_getLatestCheckpointSequenceNumber',
        'suix_getBalance',
        'sui_getObject',
        'sui_dryRunTransactionBlock',
        'sui_executeTransactionBlock',
        'sui_getTransactionBlock',
      ].map((m) => ['sui', m, 200, null]),
    );
  });
});

describe('reads at the head are never served from a cache', () => {
  it('Solana: a balance read at processed, confirmed or the default commitment, the slot and the blockhash follow the node each time', async () => {
    const connection = new Connection(solUrl());
    const bob = pubkey('bob');
    for (const lamports of [10, 20, 30]) {
      SOL.balances.set(bob.toBase58(), { processed: lamports + 2, confirmed: lamports + 1, finalized: lamports });
      SOL.slot.processed += 3;
      SOL.slot.confirmed += 3;
      SOL.slot.finalized += 3;
      expect(await connection.getBalance(bob, 'processed')).toBe(lamports + 2);
      expect(await connection.getBalance(bob, 'confirmed')).toBe(lamports + 1);
      expect(await connection.getBalance(bob)).toBe(lamports);
      expect((await connection.getAccountInfo(bob, 'confirmed'))?.lamports).toBe(lamports + 1);
      expect(await connection.getSlot('processed')).toBe(SOL.slot.processed);
      expect(await connection.getSlot()).toBe(SOL.slot.finalized);
      expect((await connection.getLatestBlockhash('confirmed')).blockhash).toBe(blockhashAt(SOL.slot.confirmed));
    }
    // A slot not final yet at the default commitment, then final: the node's later answer is the one served.
    const slot = SOL.slot.finalized + 1;
    const block = (commitment?: string) =>
      post(solUrl(), JSON.stringify({ jsonrpc: '2.0', id: 'b', method: 'getBlock', params: commitment ? [slot, { commitment }] : [slot] })).then((r) =>
        r.json(),
      );
    expect(await block()).toMatchObject({ error: { code: -32004 } });
    expect(await block('confirmed')).toMatchObject({ result: { blockhash: blockhashAt(slot) } });
    SOL.slot.finalized = slot;
    expect(await block()).toMatchObject({ result: { blockhash: blockhashAt(slot) } });
    const status = () => connection.getSignatureStatus(base58(createHash('sha512').update('landing').digest()));
    expect((await status()).value).toBeNull();
    SOL.statuses.set(base58(createHash('sha512').update('landing').digest()), { slot, confirmationStatus: 'confirmed' });
    expect((await status()).value?.confirmationStatus).toBe('confirmed');
  });

  it('Sui: an object read without a version is its head state; the latest checkpoint moves', async () => {
    const client = new SuiJsonRpcClient({ url: suiUrl(), network: 'mainnet' });
    for (let i = 0; i < 3; i++) {
      SUI.coin.version++;
      SUI.checkpoint++;
      expect((await client.getObject({ id: SUI.coin.objectId })).data?.version).toBe(String(SUI.coin.version));
      expect(await client.getLatestCheckpointSequenceNumber()).toBe(String(SUI.checkpoint));
    }
  });
});

describe('writes reach one node once, however slow or broken the node', () => {
  const rpcBody = (method: string, params: unknown[], id: unknown = 1) => JSON.stringify({ jsonrpc: '2.0', id, method, params });
  const signedTransfer = (): string => {
    const payer = Keypair.generate();
    const tx = new Transaction({ feePayer: payer.publicKey, blockhash: blockhashAt(SOL.slot.confirmed), lastValidBlockHeight: 1 }).add(
      SystemProgram.transfer({ fromPubkey: payer.publicKey, toPubkey: pubkey('carol'), lamports: 5 }),
    );
    tx.sign(payer);
    return tx.serialize().toString('base64');
  };
  const slowOn = (nodes: Node[], method: string, ms: number) => {
    for (const n of nodes) n.delayMs[method] = ms;
  };
  const hangUpOn = (nodes: Node[], method: string) => {
    for (const n of nodes) n.hangUpOn.add(method);
  };
  const heal = () => {
    for (const n of [...sol, ...sui]) {
      n.delayMs = {};
      n.hangUpOn.clear();
    }
  };

  beforeAll(async () => {
    // Enough answers for the pools' latency quantile, and reads for the hedge budget.
    for (let i = 0; i < 40; i++) await post(solUrl(), rpcBody('getSlot', []));
    for (let i = 0; i < 40; i++) await post(suiUrl(), rpcBody('sui_getLatestCheckpointSequenceNumber', []));
  });

  it('Solana: a slow read is hedged on the other node; a slow sendTransaction or requestAirdrop, alone or in a batch, is not', async () => {
    try {
      slowOn(sol, 'getAccountInfo', 600);
      const reads = seen(sol, 'getAccountInfo');
      expect((await post(solUrl(), rpcBody('getAccountInfo', [pubkey('alice').toBase58()]))).status).toBe(200);
      expect(seen(sol, 'getAccountInfo'), 'the control: a read is hedged').toBe(reads + 2);

      slowOn(sol, 'sendTransaction', 600);
      slowOn(sol, 'requestAirdrop', 600);
      const sent = seen(sol, 'sendTransaction');
      const tx = signedTransfer();
      const answer = await (await post(solUrl(), rpcBody('sendTransaction', [tx, { encoding: 'base64' }]))).json();
      expect(answer).toEqual({ jsonrpc: '2.0', result: expect.any(String), id: 1 });
      const airdrops = seen(sol, 'requestAirdrop');
      expect(await (await post(solUrl(), rpcBody('requestAirdrop', [pubkey('dave').toBase58(), 5]))).json()).toHaveProperty('result');
      const batch = await post(
        solUrl(),
        JSON.stringify([JSON.parse(rpcBody('getSlot', [])), JSON.parse(rpcBody('sendTransaction', [signedTransfer(), { encoding: 'base64' }], 2))]),
      );
      expect((await batch.json()).map((a: { id: number }) => a.id)).toEqual([1, 2]);
      const rest = await post(`${solUrl()}/sendTransaction`, JSON.stringify([signedTransfer(), { encoding: 'base64' }]));
      expect(await rest.json()).toEqual({ result: { signature: expect.any(String) } });
      expect(seen(sol, 'sendTransaction')).toBe(sent + 3);
      expect(seen(sol, 'requestAirdrop')).toBe(airdrops + 1);
    } finally {
      heal();
    }
  });

  it('Solana: a node that drops the connection after reading a sendTransaction fails the call; it is not tried on the other', async () => {
    try {
      hangUpOn(sol, 'getAccountInfo');
      const reads = seen(sol, 'getAccountInfo');
      await post(solUrl(), rpcBody('getAccountInfo', [pubkey('alice').toBase58()]));
      expect(seen(sol, 'getAccountInfo'), 'the control: a read is tried on the other node').toBe(reads + 2);
      heal();
      await post(solUrl(), rpcBody('getSlot', []));
      await post(solUrl(), rpcBody('getSlot', []));

      hangUpOn(sol, 'sendTransaction');
      const sent = seen(sol, 'sendTransaction');
      const res = await post(solUrl(), rpcBody('sendTransaction', [signedTransfer(), { encoding: 'base64' }], 'tx-1'));
      expect(res.status).toBe(502);
      expect(await res.json()).toEqual({ jsonrpc: '2.0', error: { code: expect.any(Number), message: expect.stringMatching(/upstream/) }, id: 'tx-1' });
      expect(seen(sol, 'sendTransaction')).toBe(sent + 1);
      // web3.js surfaces it as the failed send it is.
      await expect(new Connection(solUrl()).sendEncodedTransaction(signedTransfer())).rejects.toThrow(/502/);
      expect(seen(sol, 'sendTransaction')).toBe(sent + 2);
    } finally {
      heal();
    }
  });

  it('Sui: a slow or dropped sui_executeTransactionBlock reaches one node once; a slow read is hedged', async () => {
    const client = new SuiJsonRpcClient({ url: suiUrl(), network: 'mainnet' });
    const bytes = (seed: string) => new Uint8Array(createHash('sha256').update(seed).digest());
    try {
      slowOn(sui, 'sui_getObject', 600);
      const reads = seen(sui, 'sui_getObject');
      await client.getObject({ id: SUI.coin.objectId });
      expect(seen(sui, 'sui_getObject'), 'the control: a read is hedged').toBe(reads + 2);

      slowOn(sui, 'sui_executeTransactionBlock', 600);
      const executed = seen(sui, 'sui_executeTransactionBlock');
      await client.signAndExecuteTransaction({ transaction: bytes('slow'), signer: Ed25519Keypair.generate() });
      expect(seen(sui, 'sui_executeTransactionBlock')).toBe(executed + 1);
      heal();
      hangUpOn(sui, 'sui_executeTransactionBlock');
      await expect(client.signAndExecuteTransaction({ transaction: bytes('dropped'), signer: Ed25519Keypair.generate() })).rejects.toMatchObject({
        status: 502,
      });
      expect(seen(sui, 'sui_executeTransactionBlock')).toBe(executed + 2);
    } finally {
      heal();
    }
  });
});

describe('metering', () => {
  it("Solana: each batch member is metered by its method; the node's errors inside a 200 are metered as errors, with its code; a method off sol's list is the gateway's, uncharged", async () => {
    const o = await fresh();
    const url = `${base}/sol/${o.token}`;
    const payer = Keypair.generate();
    const tx = new Transaction({ feePayer: payer.publicKey, blockhash: blockhashAt(1), lastValidBlockHeight: 1 }).add(
      SystemProgram.transfer({ fromPubkey: payer.publicKey, toPubkey: pubkey('erin'), lamports: 5 }),
    );
    tx.sign(payer);
    const raw = tx.serialize().toString('base64');
    SOL.preflightError = 'Blockhash not found';
    try {
      const res = await post(
        url,
        JSON.stringify([
          { jsonrpc: '2.0', id: 'a', method: 'getSlot', params: [] },
          { jsonrpc: '2.0', id: 'b', method: 'getBalance', params: [42] },
          { jsonrpc: '2.0', id: 'c', method: 'getMaxShredInsertSlotz', params: [] },
          { jsonrpc: '2.0', id: 'd', method: 'sendTransaction', params: [raw, { encoding: 'base64' }] },
        ]),
      );
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual([
        { jsonrpc: '2.0', result: expect.any(Number), id: 'a' },
        { jsonrpc: '2.0', error: { code: -32602, message: expect.any(String) }, id: 'b' },
        { jsonrpc: '2.0', error: { code: -32601, message: 'Method not found: getMaxShredInsertSlotz is not available on sol' }, id: 'c' },
        { jsonrpc: '2.0', error: { code: -32002, message: 'Transaction simulation failed: Blockhash not found', data: expect.any(Object) }, id: 'd' },
      ]);
      // web3.js: the node's preflight failure, as it would have it from the node.
      await expect(new Connection(url).sendRawTransaction(tx.serialize())).rejects.toThrow(/Transaction simulation failed: Blockhash not found/);
    } finally {
      SOL.preflightError = null;
    }
    expect((await records(o, 5)).map((r) => [r.method, r.status, r.rpcErrorCode, r.charged])).toEqual([
      ['getSlot', 200, null, true],
      ['getBalance', 200, -32602, true],
      ['getMaxShredInsertSlotz', 200, -32601, false],
      ['sendTransaction', 200, -32002, true],
      ['sendTransaction', 200, -32002, true],
    ]);
  });

  it('Sui: a method outside its namespaces is refused with a JSON-RPC error, uncharged; a plan without sui says so', async () => {
    const o = await fresh();
    const res = await post(`${base}/sui/${o.token}`, JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'getSlot', params: [] }));
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({ jsonrpc: '2.0', error: { code: -32601, message: 'Method not found: getSlot is not available on sui' }, id: 3 });
    expect((await records(o, 1)).map((r) => [r.method, r.status, r.rpcErrorCode, r.charged])).toEqual([['getSlot', 403, -32601, false]]);

    const free = await newToken(t);
    const refused = await post(
      `${base}/sui/${free.token}`,
      JSON.stringify({ jsonrpc: '2.0', id: 'x', method: 'sui_getLatestCheckpointSequenceNumber', params: [] }),
    );
    expect(refused.status).toBe(403);
    expect(await refused.json()).toEqual({
      jsonrpc: '2.0',
      error: { code: expect.any(Number), message: 'The Free plan does not include the sui network.' },
      id: 'x',
    });
  });
});

describe('bad input', () => {
  const send = (body: string, contentType?: string) => post(solUrl(), body, contentType);

  it('malformed JSON, params that are not a list, a missing method: clear JSON-RPC errors at 400, the id echoed where there is one', async () => {
    const cases: Array<[string, number, number, unknown]> = [
      ['{"jsonrpc":"2.0","id":1,"method":"getSlot"', 400, -32700, null],
      ['{"jsonrpc":"2.0","id":"p","method":"getBalance","params":"4Nd1m"}', 400, -32602, 'p'],
      ['{"jsonrpc":"2.0","id":"m","params":[]}', 400, -32600, 'm'],
      ['{"jsonrpc":"2.0","id":{"a":1},"method":"getSlot"}', 400, -32600, null],
      ['[]', 400, -32600, null],
      ['', 400, -32700, null],
    ];
    for (const [body, status, code, id] of cases) {
      const res = await send(body);
      expect({ body, status: res.status }).toEqual({ body, status });
      expect(await res.json()).toEqual({ jsonrpc: '2.0', error: { code, message: expect.any(String) }, id });
    }
  });

  it('a batch over the limit is refused whole (413) with the limit named; a batch echoes each id as written', async () => {
    const big = JSON.stringify(Array.from({ length: 101 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'getSlot', params: [] })));
    const res = await send(big);
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({
      jsonrpc: '2.0',
      error: { code: -32600, message: 'Invalid Request: a batch of 101 calls exceeds the limit of 100' },
      id: null,
    });

    const ids = ['0', '-1', '"a"', 'null', '1.5', '"\\u00e9"', '18446744073709551616'];
    const text = await (await send(`[${ids.map((id) => `{"jsonrpc":"2.0","id":${id},"method":"getSlot","params":[]}`).join(',')}]`)).text();
    const answers = JSON.parse(text) as Array<{ result?: unknown }>;
    expect(answers.every((a) => a.result === SOL.slot.finalized)).toBe(true);
    for (const id of ids) expect(text).toContain(`"id":${id}`);
  });

  it('a body that is not JSON by its Content-Type is refused with 415; text/plain (what skips a CORS preflight) is read', async () => {
    const call = '{"jsonrpc":"2.0","id":"ct","method":"getSlot","params":[]}';
    const xml = await send(call, 'application/xml');
    expect(xml.status).toBe(415);
    expect(await xml.json()).toEqual({ jsonrpc: '2.0', error: { code: -32600, message: 'Unsupported media type: send application/json' }, id: 'ct' });
    const plain = await send(call, 'text/plain;charset=UTF-8');
    expect(await plain.json()).toEqual({ jsonrpc: '2.0', result: SOL.slot.finalized, id: 'ct' });
  });
});

describe('Sui batches, which Sui full nodes refuse', () => {
  it('a batch is answered member by member in its order, each member sent to a node alone and metered by its method', async () => {
    const o = await fresh();
    const requestsBefore = sui.reduce((n, node) => n + node.requests, 0);
    const res = await post(
      `${base}/sui/${o.token}`,
      JSON.stringify([
        { jsonrpc: '2.0', id: 1, method: 'sui_getLatestCheckpointSequenceNumber', params: [] },
        { jsonrpc: '2.0', id: 'balance', method: 'suix_getBalance', params: [SUI.owner] },
        { jsonrpc: '2.0', method: 'sui_getLatestCheckpointSequenceNumber', params: [] },
        { jsonrpc: '2.0', id: -7, method: 'sui_getObject', params: [SUI.coin.objectId] },
        { jsonrpc: '2.0', id: 4, method: 'sui_getTransactionBlock', params: ['nowhere'] },
        { jsonrpc: '2.0', id: 5, method: 'getSlot', params: [] },
      ]),
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual([
      { jsonrpc: '2.0', result: String(SUI.checkpoint), id: 1 },
      { jsonrpc: '2.0', result: expect.objectContaining({ totalBalance: String(SUI.coin.balance) }), id: 'balance' },
      { jsonrpc: '2.0', result: { data: expect.objectContaining({ objectId: SUI.coin.objectId }) }, id: -7 },
      { jsonrpc: '2.0', error: { code: -32602, message: expect.stringContaining('Could not find the referenced transaction') }, id: 4 },
      { jsonrpc: '2.0', error: { code: -32601, message: 'Method not found: getSlot is not available on sui' }, id: 5 },
    ]);
    // Four calls of their own (the notification too); the method outside Sui's namespaces reached no node.
    expect(sui.reduce((n, node) => n + node.requests, 0)).toBe(requestsBefore + 5);
    expect((await records(o, 6)).map((r) => [r.method, r.status, r.rpcErrorCode, r.charged])).toEqual([
      ['sui_getLatestCheckpointSequenceNumber', 200, null, true],
      ['suix_getBalance', 200, null, true],
      ['sui_getLatestCheckpointSequenceNumber', 200, null, true],
      ['sui_getObject', 200, null, true],
      ['sui_getTransactionBlock', 200, -32602, true],
      ['getSlot', 200, -32601, false],
    ]);
  });

  it('a batch holding sui_executeTransactionBlock sends it once; the nodes stay in rotation however many batches come', async () => {
    const bytes = Buffer.from(createHash('sha256').update('batched transaction').digest()).toString('base64');
    const executed = seen(sui, 'sui_executeTransactionBlock');
    for (let i = 0; i < 4; i++) {
      const res = await post(
        suiUrl(),
        JSON.stringify([
          { jsonrpc: '2.0', id: 1, method: 'sui_getLatestCheckpointSequenceNumber', params: [] },
          ...(i === 0 ? [{ jsonrpc: '2.0', id: 2, method: 'sui_executeTransactionBlock', params: [bytes, ['AQID']] }] : []),
        ]),
      );
      expect((await res.json())[0]).toEqual({ jsonrpc: '2.0', result: String(SUI.checkpoint), id: 1 });
    }
    expect(seen(sui, 'sui_executeTransactionBlock')).toBe(executed + 1);
    expect(t.runtime.gateway?.pools.health().sui?.map((h) => h.healthy)).toEqual([true, true]);
  });

  it('a batch whose every member the nodes fail keeps the failure status (502), each member with its error', async () => {
    for (const n of sui) n.hangUpOn.add('sui_getLatestCheckpointSequenceNumber');
    try {
      const res = await post(
        suiUrl(),
        JSON.stringify([
          { jsonrpc: '2.0', id: 1, method: 'sui_getLatestCheckpointSequenceNumber', params: [] },
          { jsonrpc: '2.0', id: 2, method: 'sui_getLatestCheckpointSequenceNumber', params: [[]] },
        ]),
      );
      expect(res.status).toBe(502);
      expect(await res.json()).toEqual([
        { jsonrpc: '2.0', error: { code: -32010, message: expect.stringMatching(/upstream/) }, id: 1 },
        { jsonrpc: '2.0', error: { code: -32010, message: expect.stringMatching(/upstream/) }, id: 2 },
      ]);
    } finally {
      for (const n of sui) n.hangUpOn.clear();
    }
  });
});
