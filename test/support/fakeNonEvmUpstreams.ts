import { type FakeReply, type FakeUpstream, type ReceivedCall, startFake } from './fakeUpstreams.js';

/**
 * Fakes of the REST nodes behind the passthrough chains, closer to the real servers than
 * fakeUpstreams.ts's: how each routes a path (Jetty's path parameters for java-tron, FastAPI's
 * routes for Kaspa, grpc-gateway's for a Cosmos LCD), and each one's own error shapes and statuses.
 */

const pathAndQuery = (url: string): { path: string; query: URLSearchParams } => {
  const q = url.indexOf('?');
  return { path: q < 0 ? url : url.slice(0, q), query: new URLSearchParams(q < 0 ? '' : url.slice(q + 1)) };
};

const jsonBody = (call: ReceivedCall): Record<string, unknown> => {
  try {
    const v: unknown = JSON.parse(call.body || '{}');
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
};

// --- java-tron (FullNode HTTP API on Jetty) ---------------------------------------------------

export const TRON_NODE = {
  address: 'TZ4UXDV5ZhNW7fb2AMSbgfAEZ7hWsnYS2g',
  balance: 2_386_492_011,
  txid: '7c2d4206c03a883dd9066d620335dc1be272a8dc733cfa3f6d10308faa37facc',
  /** What the node answers for the private-key endpoints the gateway must never reach. */
  signed: { signature: ['0b7fe3c5a1f2...'], txID: 'signed-with-a-private-key' },
  /** A deployed contract (USDT's address): triggerconstantcontract on anything else fails validation. */
  contract: 'TR7NHqjeKQxGTCi8q8ZY4pxL8otSzgjLj6t',
  /** The Ethereum-compatible JSON-RPC (`/jsonrpc`): mainnet's chain id and a head block. */
  chainId: '0x2b6653dc',
  blockNumber: 66_987_627,
  clientVersion: 'TRON/v4.7.7/Linux/Java1.8/GreatVoyage-v4.7.6',
};

/** java-tron prints a `Return`'s message as hex of its UTF-8 bytes unless the call asked `visible: true`. */
const tronMessage = (text: string, visible: unknown): string => (visible === true ? text : Buffer.from(text, 'utf8').toString('hex'));

type JsonRpcReply = { jsonrpc: '2.0'; id: unknown; result: unknown } | { jsonrpc: '2.0'; id: unknown; error: { code: number; message: string; data?: string } };

/** One call to java-tron's `/jsonrpc` (jsonrpc4j): its answer in jsonrpc4j's member order. */
function tronJsonRpc(call: unknown): JsonRpcReply {
  const { id = null, method, params = [] } = (call ?? {}) as { id?: unknown; method?: unknown; params?: unknown[] };
  const result = (value: unknown): JsonRpcReply => ({ jsonrpc: '2.0', id, result: value });
  const error = (code: number, message: string, data?: string): JsonRpcReply => ({
    jsonrpc: '2.0',
    id,
    error: data === undefined ? { code, message } : { code, message, data },
  });
  switch (method) {
    case 'eth_chainId':
    case 'net_version':
      return result(TRON_NODE.chainId);
    case 'eth_blockNumber':
      return result(`0x${TRON_NODE.blockNumber.toString(16)}`);
    case 'web3_clientVersion':
      return result(TRON_NODE.clientVersion);
    case 'eth_getBalance':
    case 'eth_getCode': {
      const address = params[0];
      if (typeof address !== 'string' || !/^0x[0-9a-fA-F]{40}$/.test(address)) return error(-32602, 'invalid address hash value', '{}');
      return result(method === 'eth_getBalance' ? `0x${TRON_NODE.balance.toString(16)}` : '0x');
    }
    case 'eth_sendRawTransaction':
      return error(-32601, 'the method eth_sendRawTransaction does not exist/is not available', '{}');
    default:
      return error(-32601, 'method not found');
  }
}

/**
 * Jetty maps a servlet on the path without its segments' `;` parameters (`/wallet/x;p=1` is
 * `/wallet/x`), and a wrong path is its HTML 404. java-tron's errors are 200 with `{"Error": …}`,
 * or a `Return` whose code is not SUCCESS (broadcasttransaction's at the top, the transaction
 * builders' and triggerconstantcontract's under `result`). `/jsonrpc` is its Ethereum-compatible
 * JSON-RPC (jsonrpc4j), as TronGrid serves it beside the HTTP API.
 */
export function startJavaTronFake(): Promise<FakeUpstream> {
  return startFake((call): FakeReply => {
    const raw = pathAndQuery(call.url);
    const path = raw.path
      .split('/')
      .map((s) => s.split(';', 1)[0])
      .join('/');
    const args = call.method === 'POST' ? jsonBody(call) : Object.fromEntries(raw.query);
    switch (path) {
      case '/wallet/getaccount':
      case '/walletsolidity/getaccount':
        if (args.address !== TRON_NODE.address) return { body: { Error: 'class java.lang.IllegalArgumentException : Invalid address' } };
        return { body: { address: TRON_NODE.address, balance: TRON_NODE.balance, create_time: 1_577_836_800_000 } };
      case '/walletsolidity/gettransactioninfobyid':
        return { body: { id: args.value, blockNumber: 66_987_627, receipt: { net_usage: 345 } } };
      case '/wallet/broadcasttransaction': {
        const signatures = args.signature;
        if (!Array.isArray(signatures) || signatures.length === 0) {
          const message = tronMessage('Validate signature error: miss sig or contract', false);
          return { body: { code: 'SIGERROR', txid: TRON_NODE.txid, message } };
        }
        return { body: { result: true, txid: TRON_NODE.txid } };
      }
      case '/wallet/triggerconstantcontract':
        if (args.contract_address !== TRON_NODE.contract) {
          return { body: { result: { code: 'CONTRACT_VALIDATE_ERROR', message: tronMessage('No contract or not a valid smart contract', args.visible) } } };
        }
        return {
          body: {
            result: { result: true },
            energy_used: 936,
            constant_result: ['0000000000000000000000000000000000000000000000000000000000000006'],
            transaction: { ret: [{}], visible: args.visible === true, txID: TRON_NODE.txid },
          },
        };
      case '/jsonrpc': {
        if (call.method !== 'POST') return { status: 405, body: null, raw: '', contentType: 'text/plain' };
        let request: unknown;
        try {
          request = JSON.parse(call.body);
        } catch {
          return { body: { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'JSON parse error' } } };
        }
        return { body: Array.isArray(request) ? request.map(tronJsonRpc) : tronJsonRpc(request) };
      }
      case '/wallet/gettransactionsign':
      case '/wallet/easytransferbyprivate':
      case '/wallet/generateaddress':
        return { body: TRON_NODE.signed };
      default:
        return {
          status: 404,
          body: null,
          raw: `<html><body><h2>HTTP ERROR 404 Not Found</h2><p>URI: ${path}</p></body></html>`,
          contentType: 'text/html;charset=iso-8859-1',
        };
    }
  });
}

// --- Kaspa REST server (kaspa-rest-server, FastAPI) --------------------------------------------

export const KASPA_NODE = {
  address: 'kaspa:qqkqkzjvr7zwxxmjxjkmxxdwju9kjs6e9u82uh59z07vgaks6gg62v8707g73',
  balance: 4_120_000_000,
  lowHash: '78273854a739e3e379dfd34a262bbe922400d8e360e30e3f31228519a334350a',
  transactionId: 'b3ff2a2d64a2f8b2f6b2a6e6a4e1ab3ef8cf1b1e9b7e0d3a3f5ec0a5b6d8c1e2',
};

/** FastAPI: a route's path parameters, `{"detail": …}` errors, and 422 with a list of problems for a bad body. */
export function startKaspaRestFake(): Promise<FakeUpstream> {
  return startFake((call): FakeReply => {
    const { path, query } = pathAndQuery(call.url);
    if (call.method === 'POST' && path === '/transactions') {
      const body = jsonBody(call);
      if (typeof body.transaction !== 'object' || body.transaction === null) {
        return { status: 422, body: { detail: [{ loc: ['body', 'transaction'], msg: 'field required', type: 'value_error.missing' }] } };
      }
      return { status: 201, body: { transactionId: KASPA_NODE.transactionId } };
    }
    if (call.method === 'GET' && path === '/blocks') {
      if (query.get('lowHash') === null) {
        return { status: 422, body: { detail: [{ loc: ['query', 'lowHash'], msg: 'field required', type: 'value_error.missing' }] } };
      }
      return { body: { blockHashes: [query.get('lowHash'), 'a1b2'.repeat(16)] } };
    }
    if (call.method === 'GET' && path === '/blocks-from-bluescore') {
      return { body: [{ header: { blueScore: query.get('blueScore'), hash: KASPA_NODE.lowHash }, transactions: [] }] };
    }
    const balance = /^\/addresses\/([^/]+)\/balance$/.exec(path);
    if (call.method === 'GET' && balance) {
      const address = decodeURIComponent(balance[1] as string);
      if (address !== KASPA_NODE.address) return { status: 400, body: { detail: `Invalid address: ${address}` } };
      return { body: { address, balance: KASPA_NODE.balance } };
    }
    return { status: 404, body: { detail: 'Not Found' } };
  });
}

// --- Cosmos SDK LCD (grpc-gateway) ---------------------------------------------------------------

export const COSMOS_NODE = {
  address: 'cosmos1fl48vsnmsdzcv85q5d2q4z5ajdha8yu34mf0eh',
  latestHeight: '24123456',
  /** The address's uatom at the latest height, and at an older one (`x-cosmos-block-height`). */
  balanceNow: '1000000',
  balanceAt: { '24000000': '750000' } as Record<string, string>,
};

/**
 * grpc-gateway: `{"code": <gRPC code>, "message", "details"}` errors with their HTTP mapping (3 →
 * 400, 5 → 404, 12 → 501); a query at an older height with the `x-cosmos-block-height` header.
 */
export function startCosmosLcdFake(): Promise<FakeUpstream> {
  return startFake((call): FakeReply => {
    const { path } = pathAndQuery(call.url);
    const balances = /^\/cosmos\/bank\/v1beta1\/balances\/([^/]+)$/.exec(path);
    if (call.method === 'GET' && balances) {
      const address = balances[1] as string;
      if (!/^cosmos1[02-9ac-hj-np-z]{38}$/.test(address)) {
        return { status: 400, body: { code: 3, message: `decoding bech32 failed: invalid address ${address}`, details: [] } };
      }
      const height = call.headers['x-cosmos-block-height'];
      const amount = typeof height === 'string' ? COSMOS_NODE.balanceAt[height] : COSMOS_NODE.balanceNow;
      if (amount === undefined) return { status: 400, body: { code: 3, message: 'height is not available', details: [] } };
      return { body: { balances: [{ denom: 'uatom', amount }], pagination: { next_key: null, total: '1' } } };
    }
    const tx = /^\/cosmos\/tx\/v1beta1\/txs\/([0-9A-Fa-f]{64})$/.exec(path);
    if (call.method === 'GET' && tx) {
      return { status: 404, body: { code: 5, message: `tx not found: ${tx[1]}`, details: [] } };
    }
    if (call.method === 'GET' && path === '/cosmos/tx/v1beta1/txs') return { body: { txs: [], tx_responses: [], pagination: null, total: '0' } };
    if (call.method === 'POST' && path === '/cosmos/tx/v1beta1/simulate') {
      return { body: { gas_info: { gas_wanted: '0', gas_used: '81234' }, result: { data: '', log: '', events: [] } } };
    }
    if (call.method === 'POST' && path === '/cosmos/tx/v1beta1/txs') {
      return { body: { tx_response: { height: '0', txhash: 'E'.repeat(64), code: 0, raw_log: '' } } };
    }
    return { status: 501, body: { code: 12, message: 'Not Implemented', details: [] } };
  });
}
