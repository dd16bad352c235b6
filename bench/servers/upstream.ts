/**
 * The upstream every gateway benchmark forwards to: answers any request at once with a fixed
 * JSON-RPC result (id 1, as the benches send), the head's number, so what is measured is the
 * proxy in front of it. The gateway's head polls (`eth_getBlockByNumber` at "latest",
 * "finalized" or "safe") get a block as a node answers them (number, hash, parentHash,
 * timestamp), with the caller's id; the head moves every 12 s as mainnet's does, and
 * `eth_blockNumber` answers it, so the gateway tracks a head and keeps answers for it as it
 * would in front of a real node.
 *
 *   node dist/bench-build/bench/servers/upstream.js <port>   (compiled by bench/lib/services.ts)
 */
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 0);
const BLOCK_MS = 12_000;
/** Blocks under the head that are final (two epochs of 32, as on Ethereum). */
const FINALITY_DEPTH = 64;
const GENESIS_TIME = 1_700_000_000;

let head = 0x134e82a;
let answer = answerFor(head);

function answerFor(n: number): Buffer {
  return Buffer.from(`{"jsonrpc":"2.0","id":1,"result":"0x${n.toString(16)}"}`);
}

const blockHash = (n: number): string => `0x${n.toString(16).padStart(64, '0')}`;

function block(n: number): Record<string, unknown> {
  const number = `0x${n.toString(16)}`;
  return { number, hash: blockHash(n), parentHash: blockHash(n - 1), timestamp: `0x${(GENESIS_TIME + n * 12).toString(16)}`, transactions: [] };
}

/** The answer to a head poll, or null when the body is not one (a single eth_getBlockByNumber at a tag). */
function headPollAnswer(body: Buffer): Buffer | null {
  let call: unknown;
  try {
    call = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  if (typeof call !== 'object' || call === null || Array.isArray(call)) return null;
  const { id, method, params } = call as { id?: unknown; method?: unknown; params?: unknown };
  if (method !== 'eth_getBlockByNumber' || !Array.isArray(params)) return null;
  const tag = params[0];
  const n = tag === 'latest' ? head : tag === 'finalized' || tag === 'safe' ? head - FINALITY_DEPTH : null;
  return n === null ? null : Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: id ?? null, result: block(n) }));
}

setInterval(() => {
  head++;
  answer = answerFor(head);
}, BLOCK_MS).unref();

const POLL_METHOD = Buffer.from('"eth_getBlockByNumber"');

const server = createServer((req, res) => {
  // Read the request to its end before answering, as a node does.
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
    const out = body.includes(POLL_METHOD) ? (headPollAnswer(body) ?? answer) : answer;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': out.length });
    res.end(out);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
