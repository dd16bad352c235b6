/**
 * For bench/batch-forwarding.ts: forwards batches of distinct reads to one node the two ways the
 * gateway could, through the gateway's own pool and JSON-RPC code, in a process of its own (its
 * CPU is the forwarding's alone): `batch`, the members as one upstream batch (what rpcHandler.ts
 * does); `singles`, each member as its own upstream call, as a single call goes. Rounds
 * alternate the two. Env: NODE_URL, MEMBERS, BATCHES (per round), CONCURRENCY, ROUNDS. Prints one
 * JSON line per round: mode, CPU µs per member, the batches' latencies (ms).
 */
import { judgeBatch, judgeSingle } from '../../src/gateway/cache/rpcReads.js';
import { parseChainsConfig } from '../../src/gateway/chains.js';
import { batchUpstreamBody, parseJsonRpc, type RpcCall, singleUpstreamBody, splitBatchAnswer } from '../../src/gateway/jsonrpc.js';
import { type UpstreamPool, UpstreamPools, type Verdict } from '../../src/gateway/upstream.js';
import { shapeOf, shapeOfAll } from '../../src/gateway/upstreams/evmCalls.js';

const MEMBERS = Number(process.env.MEMBERS ?? 10);
const BATCHES = Number(process.env.BATCHES ?? 1_500);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 8);
const ROUNDS = Number(process.env.ROUNDS ?? 4);

const registry = parseChainsConfig(
  { chains: [{ id: 'eth', name: 'eth', protocol: 'jsonrpc', finality: 'none', timeoutMs: 10_000, upstreams: [{ url: process.env.NODE_URL, label: 'node' }] }] },
  'bench',
);
const pools = new UpstreamPools(registry, { hedge: false, cacheBytes: 0, coalesce: false });
const eth = pools.get('eth');
if (eth === undefined) throw new Error('no pool');
const pool: UpstreamPool = eth;

let sequence = 0;
/** A client's batch of MEMBERS distinct reads, as the gateway parses it. */
function nextCalls(): RpcCall[] {
  const body = Array.from({ length: MEMBERS }, (_, i) => {
    const address = `0x${(++sequence).toString(16).padStart(40, '0')}`;
    return `{"jsonrpc":"2.0","id":${i + 1},"method":"eth_getBalance","params":["${address}","latest"]}`;
  });
  const parsed = parseJsonRpc(Buffer.from(`[${body.join(',')}]`), 1_000);
  if (parsed.kind !== 'batch') throw new Error('not a batch');
  return parsed.members as RpcCall[];
}

async function asOneBatch(calls: RpcCall[]): Promise<string> {
  let judged: ReturnType<typeof splitBatchAnswer> = null;
  const judge = (body: Buffer): Verdict => {
    judged = splitBatchAnswer(body, calls);
    return judgeBatch(judged);
  };
  const shape = shapeOfAll(calls.map((c) => shapeOf(c.method, c.paramsText)));
  const outcome = await pool.send({ method: 'POST', path: '', body: batchUpstreamBody(calls), retriable: true, shape, judge });
  if (!outcome.ok || judged === null) throw new Error(`batch failed: ${outcome.ok ? 'bad answer' : outcome.message}`);
  const answers = judged as Map<number, { text: string }>;
  return `[${calls.map((c) => answers.get(c.index)?.text ?? 'null').join(',')}]`;
}

async function asSingles(calls: RpcCall[]): Promise<string> {
  const elements = await Promise.all(
    calls.map((c) =>
      pool.sendThen(
        {
          method: 'POST',
          path: '',
          body: singleUpstreamBody(c),
          retriable: true,
          shape: shapeOf(c.method, c.paramsText),
          judge: judgeSingle,
          answerId: c.idText,
        },
        (outcome) => {
          if (!outcome.ok) throw new Error(`single failed: ${outcome.message}`);
          return outcome.body.toString('utf8');
        },
      ),
    ),
  );
  return `[${elements.join(',')}]`;
}

async function round(mode: 'batch' | 'singles'): Promise<void> {
  const forward = mode === 'batch' ? asOneBatch : asSingles;
  const latencies: number[] = [];
  let left = BATCHES;
  const before = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (left-- > 0) {
        const started = performance.now();
        await forward(nextCalls());
        latencies.push(performance.now() - started);
      }
    }),
  );
  const used = process.cpuUsage(before);
  const cpuUsPerMember = (used.user + used.system) / (BATCHES * MEMBERS);
  process.stdout.write(`${JSON.stringify({ mode, cpuUsPerMember, latencies })}\n`);
}

// Warm-up of both paths, not measured.
for (let i = 0; i < 200; i++) {
  await asOneBatch(nextCalls());
  await asSingles(nextCalls());
}
for (let r = 0; r < ROUNDS; r++) for (const mode of r % 2 === 0 ? (['batch', 'singles'] as const) : (['singles', 'batch'] as const)) await round(mode);
await pools.close();
