/**
 * What the gateway does with the nodes behind it (issue 34), cache, coalescing and hedging off
 * and then on, in one run: two fake EVM nodes serving one chain (20–60 ms each; the second stalls
 * 2 s on 5 % of calls), a head advancing every 2 s and a reorg of the last 2 blocks every 10 s,
 * and a mixed dApp workload from 32 clients (eth_call 40 %, eth_getBlockByNumber 15 %,
 * eth_getTransactionReceipt 10 %, eth_getLogs 10 %, eth_blockNumber 10 %, eth_getBalance 10 %,
 * eth_chainId 5 %; block arguments at the head or one of the last 16 final blocks (eth_call 10 %
 * final, eth_getBlockByNumber 50 %, receipts 70 %, eth_getBalance 40 %, eth_getLogs 70 % closed
 * final ranges), 10 contracts × 10 call datas and 10 addresses, so clients repeat each other). Figures: upstream calls per client call, the p99 against the
 * healthy node's own p99 (the same workload sent to it directly), stale answers (a block or
 * receipt a reorg replaced more than one head poll before the call was sent), and the gateway's
 * CPU per call for a cache hit against a proxied call with everything off (its process alone,
 * from /proc).
 *
 *   npx tsx bench/upstream-intelligence.ts   (SECONDS=15 per mode, CLIENTS=32)
 */
import { Pool } from 'undici';
import { type EvmNodeFake, FakeEvmChain, startEvmNodeFake } from '../test/support/fakeUpstreams.js';
import { cpuSeconds, Processes, runMain, timeLimit, tsNodeArgs } from './lib/processes.js';
import { emit, log } from './lib/report.js';

const SECONDS = Number(process.env.SECONDS ?? 15);
const CLIENTS = Number(process.env.CLIENTS ?? 32);
const HEAD_POLL_MS = 250;
/** A replaced block served this long after its reorg is stale: the gateway had one poll to see the head move. */
const STALE_AFTER_MS = HEAD_POLL_MS * 2 + 100;
const CPU_CALLS = 6_000;
const COMMAND = 'npx tsx bench/upstream-intelligence.ts';

const chain = new FakeEvmChain(1_000, 8);
/** Hash of a block a reorg replaced → when. */
const replacedAt = new Map<string, number>();

const uniform = (lo: number, hi: number): number => lo + Math.random() * (hi - lo);
const pick = <T>(list: readonly T[]): T => list[Math.floor(Math.random() * list.length)] as T;
const hex = (n: number): string => `0x${n.toString(16)}`;
const ADDRESSES = Array.from({ length: 10 }, (_, i) => `0x${(i + 1).toString(16).padStart(40, '0')}`);
const CALL_DATA = Array.from({ length: 10 }, (_, i) => `0x70a08231${(i + 1).toString(16).padStart(64, '0')}`);

/** Final blocks a dApp asks about again and again: the last 16 final ones. */
const finalBlock = (): number => chain.finalized - Math.floor(Math.random() * 16);
const recentBlock = (): number => chain.head - Math.floor(Math.random() * 3);
const blockArg = (finalShare: number): string => (Math.random() < finalShare ? hex(finalBlock()) : 'latest');

/** One client call of the mix. */
function nextCall(): { method: string; params: unknown[] } {
  const r = Math.random();
  if (r < 0.4) return { method: 'eth_call', params: [{ to: pick(ADDRESSES), data: pick(CALL_DATA) }, blockArg(0.1)] };
  if (r < 0.55) return { method: 'eth_getBlockByNumber', params: [blockArg(0.5), false] };
  if (r < 0.65) {
    const block = chain.block(Math.random() < 0.7 ? finalBlock() : recentBlock());
    return { method: 'eth_getTransactionReceipt', params: [block?.transactions[0]] };
  }
  if (r < 0.75) {
    if (Math.random() < 0.7) {
      const to = finalBlock();
      return { method: 'eth_getLogs', params: [{ fromBlock: hex(to - 2), toBlock: hex(to) }] };
    }
    return { method: 'eth_getLogs', params: [{ fromBlock: hex(chain.head - 2) }] };
  }
  if (r < 0.85) return { method: 'eth_blockNumber', params: [] };
  if (r < 0.95) return { method: 'eth_getBalance', params: [pick(ADDRESSES), blockArg(0.4)] };
  return { method: 'eth_chainId', params: [] };
}

/** Block hashes an answer names (a block, a receipt, logs). */
function hashesOf(result: unknown): string[] {
  if (Array.isArray(result)) return result.flatMap(hashesOf);
  if (typeof result !== 'object' || result === null) return [];
  const r = result as Record<string, unknown>;
  const hash = typeof r.blockHash === 'string' ? r.blockHash : typeof r.hash === 'string' && 'parentHash' in r ? r.hash : null;
  return hash === null ? [] : [hash];
}

interface RunResult {
  calls: number;
  failures: number;
  stale: number;
  latencies: number[];
}

/** CLIENTS loops sending the mix to `url` for `seconds`. */
async function load(url: string, seconds: number): Promise<RunResult> {
  const target = new URL(url);
  const pool = new Pool(target.origin, { connections: CLIENTS });
  const result: RunResult = { calls: 0, failures: 0, stale: 0, latencies: [] };
  const until = performance.now() + seconds * 1000;
  let id = 0;
  const client = async (): Promise<void> => {
    while (performance.now() < until) {
      const call = nextCall();
      const sentAt = Date.now();
      const started = performance.now();
      const res = await pool.request({
        method: 'POST',
        path: target.pathname,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: ++id, ...call }),
      });
      const body = (await res.body.json()) as { result?: unknown; error?: unknown };
      result.latencies.push(performance.now() - started);
      result.calls++;
      if (res.statusCode !== 200 || body.error !== undefined) result.failures++;
      for (const hash of hashesOf(body.result)) {
        const at = replacedAt.get(hash);
        if (at !== undefined && sentAt - at > STALE_AFTER_MS) result.stale++;
      }
    }
  };
  await Promise.all(Array.from({ length: CLIENTS }, client));
  await pool.close();
  return result;
}

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? 0;
};

/** CPU seconds of the gateway process per call, over CPU_CALLS calls of `body` at 16 in flight. */
async function cpuPerCall(url: string, pid: number, body: string): Promise<number> {
  const target = new URL(url);
  const pool = new Pool(target.origin, { connections: 16 });
  const one = async (): Promise<void> => {
    const res = await pool.request({ method: 'POST', path: target.pathname, headers: { 'content-type': 'application/json' }, body });
    await res.body.dump();
  };
  for (let i = 0; i < 200; i++) await one();
  const before = cpuSeconds(pid);
  let left = CPU_CALLS;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (left-- > 0) await one();
    }),
  );
  const used = cpuSeconds(pid) - before;
  await pool.close();
  return used / CPU_CALLS;
}

async function main(): Promise<void> {
  timeLimit(SECONDS * 3 + 120);
  const processes = new Processes();
  const [healthy, stalling] = (await Promise.all([startEvmNodeFake(chain), startEvmNodeFake(chain)])) as [EvmNodeFake, EvmNodeFake];
  const realistic = (): void => {
    healthy.latency = () => uniform(20, 60);
    stalling.latency = () => (Math.random() < 0.05 ? 2_000 : uniform(20, 60));
  };
  realistic();
  let ticks = 0;
  const headTimer = setInterval(() => {
    chain.advance(1);
    if (++ticks % 5 === 0) for (const old of chain.reorg(2)) replacedAt.set(old.hash, Date.now());
  }, 2_000);

  const chains = [
    {
      id: 'eth',
      name: 'eth',
      protocol: 'jsonrpc',
      timeoutMs: 5_000,
      headPollMs: HEAD_POLL_MS,
      maxLagBlocks: 5,
      upstreams: [
        { url: healthy.url, label: 'healthy' },
        { url: stalling.url, label: 'stalling' },
      ],
    },
  ];

  log(`direct to the healthy node for ${SECONDS} s`);
  const direct = await load(healthy.url, SECONDS);
  const directP99 = quantile(direct.latencies, 0.99);

  const results: Record<string, { run: RunResult; upstreamCalls: number; cpu: number; tally: string }> = {};
  for (const [mode, pool] of [
    ['off', { cacheBytes: 0, hedge: false, coalesce: false }],
    ['on', {}],
  ] as const) {
    const started = processes.start(`gateway-${mode}`, process.execPath, tsNodeArgs('bench/servers/intelligenceGateway.ts'), {
      env: { BENCH_CHAINS: JSON.stringify(chains), BENCH_POOL: JSON.stringify(pool) },
    });
    const ready = await new Promise<{ url: string; token: string }>((resolve, reject) => {
      started.child.stdout?.on('data', () => {
        const line = started
          .output()
          .split('\n')
          .find((l) => l.startsWith('{"url"'));
        if (line) resolve(JSON.parse(line) as { url: string; token: string });
      });
      void started.exited.then(() => reject(new Error(`gateway exited: ${started.output()}`)));
    });
    const url = `${ready.url}/eth/${ready.token}`;
    healthy.reset();
    stalling.reset();
    realistic();
    log(`gateway with cache, coalescing and hedging ${mode} for ${SECONDS} s`);
    const run = await load(url, SECONDS);
    const upstreamCalls = healthy.calls.length + stalling.calls.length;
    healthy.latency = () => 0;
    stalling.latency = () => 0;
    // A cache hit with everything on; a proxied call (every call to a node) with everything off.
    const cpu = await cpuPerCall(url, started.child.pid as number, '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}');
    await processes.stop(started);
    const tally =
      started
        .output()
        .split('\n')
        .find((l) => l.startsWith('{"tally"')) ?? '';
    results[mode] = { run, upstreamCalls, cpu, tally };
    log(
      `${mode}: ${run.calls} calls, ${run.failures} failed, ${upstreamCalls} upstream calls, p50 ${quantile(run.latencies, 0.5).toFixed(1)} ms, p99 ${quantile(run.latencies, 0.99).toFixed(1)} ms, stale ${run.stale}, CPU ${(cpu * 1e6).toFixed(0)} µs/call ${tally}`,
    );
  }
  clearInterval(headTimer);
  await Promise.all([healthy.close(), stalling.close()]);

  const on = results.on as (typeof results)['on'];
  const off = results.off as (typeof results)['off'];
  const method = `${CLIENTS} clients, ${SECONDS} s per mode; nodes 20–60 ms, one stalling 2 s on 5 %; head every 2 s, 2-block reorg every 10 s; head poll ${HEAD_POLL_MS} ms`;
  emit({
    name: 'upstream_calls_per_call_on',
    target: '<= 0.4',
    result: round(on.upstreamCalls / on.run.calls),
    unit: 'upstream calls per client call',
    ratio: round(on.upstreamCalls / on.run.calls / (off.upstreamCalls / off.run.calls)),
    baseline: `off: ${round(off.upstreamCalls / off.run.calls)}`,
    command: COMMAND,
    method,
  });
  const onP99 = quantile(on.run.latencies, 0.99);
  emit({
    name: 'upstream_p99_over_healthy_p99_on',
    target: '<= 1.5',
    result: round(onP99 / directP99),
    unit: 'ratio',
    baseline: `healthy node direct p99 ${directP99.toFixed(1)} ms; gateway on ${onP99.toFixed(1)} ms, off ${quantile(off.run.latencies, 0.99).toFixed(1)} ms`,
    command: COMMAND,
    method,
  });
  emit({
    name: 'upstream_stale_answers_on',
    target: '<= 0',
    result: on.run.stale,
    unit: 'answers',
    baseline: `off: ${off.run.stale}`,
    command: COMMAND,
    method,
  });
  emit({
    name: 'gateway_cpu_cache_hit_over_proxied',
    target: '<= 1',
    result: round(on.cpu / off.cpu),
    unit: 'ratio',
    baseline: `hit ${(on.cpu * 1e6).toFixed(0)} µs, proxied ${(off.cpu * 1e6).toFixed(0)} µs of gateway CPU per call`,
    command: COMMAND,
    method: `${CPU_CALLS} eth_chainId calls at 16 in flight, the gateway process's CPU from /proc`,
  });
}

const round = (v: number): number => Math.round(v * 1000) / 1000;

runMain(main);
