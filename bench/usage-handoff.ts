/**
 * What handing usage records to the usage queue costs the gateway's event loop, per record, at a
 * steady rate, for each send interval asked (a quick comparison for development; it records
 * nothing): `redis`, the gateway role's queue (records sent to a real redis-server on a free port
 * every N ms), or `embedded`, the embedded default's (records posted to a storage thread every N
 * ms, ingested there). wrk cannot show this: a microsecond a call is ~1 % of the role's CPU per
 * call, and throughput rounds on these machines move by ±10 % (an A/A run of one build against
 * itself gave 0.732× and 0.804× the bare proxy, 16 rounds of 1 s).
 *
 * The loop is kept busy as under full load: each "call" is a fixed computation (~85 µs here) and
 * a usage record; every few calls the loop yields (setImmediate), so timers and replies are
 * served between them. A round runs the loop without a queue, then once per interval with a
 * queue of its own, in turn (each round in another order). The figure is the main thread's CPU
 * per call (from /proc, this thread alone) minus the run without a queue: the computation costs
 * the same CPU however the host shares its cores, so what is left is the queue's own work on the
 * event loop, its collections and its system calls. The loop allocates little besides the
 * records, so what holding records longer does to a busy gateway's young collections is for the
 * allocation probe to show (GATEWAY_ALLOC_PROBE, bench/README.md), not this.
 *
 *   INTERVALS="5,20" ROUNDS=8 npx tsx bench/usage-handoff.ts [redis|embedded]   (defaults: redis, INTERVALS=5,20, ROUNDS=6, CALLS=60000)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import type { UsageRecord } from '../src/domain/usage.js';
import { openStorageThread } from '../src/infra/storagethread/index.js';
import type { UsageSink } from '../src/infra/usage/port.js';
import { RedisUsageQueue } from '../src/infra/usage/redis.js';
import { Processes, runMain, timeLimit } from './lib/processes.js';
import { log, median } from './lib/report.js';
import { embeddedEnv, startRedis } from './lib/services.js';

const MODES = ['redis', 'embedded'] as const;
type Mode = (typeof MODES)[number];

const INTERVALS = (process.env.INTERVALS ?? '5,20').split(',').map(Number);
const ROUNDS = Number(process.env.ROUNDS ?? 6);
const CALLS = Number(process.env.CALLS ?? 60_000);
/** Calls between two turns of the event loop: a busy gateway serves several sockets' reads per turn. */
const CALLS_PER_TURN = 8;
/** Iterations of the fixed computation standing for the rest of a call (~85 µs on these machines). */
const WORK_ITERATIONS = 60_000;

/** CPU time of this process's main thread, in µs (clock ticks of 10 ms: runs are seconds long). */
function mainThreadCpuUs(): number {
  const fields = (readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8').split(') ')[1] ?? '').split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** Written by every computation and printed at the end, so the compiler cannot drop the computation. */
let workChecksum = 0;
function fixedWork(): void {
  let x = 0;
  for (let j = 0; j < WORK_ITERATIONS; j++) x = (x * 31 + j) | 0;
  workChecksum = (workChecksum + x) | 0;
}

const record = (i: number): UsageRecord => ({
  requestId: `Ab3dEf7hIj9kLm1n-${i.toString(36)}`,
  at: '2026-11-24T23:40:00.000Z',
  accountId: 'acc-bench',
  tokenId: 'tok-bench',
  chain: 'eth',
  method: 'eth_blockNumber',
  status: 200,
  rpcErrorCode: null,
  errorMessage: null,
  totalMs: 0.41,
  upstreamMs: 0.2,
  clientIp: '127.0.0.1',
  upstream: 'eth-1',
  retentionDays: 30,
});

/** A queue under test, and what to do between runs, outside the measured time. */
interface Queue {
  sink: UsageSink;
  /** Waits until what was handed over is taken care of (ingested, for the storage thread). */
  settle(): Promise<void>;
  close(): Promise<void>;
}

async function redisQueues(processes: Processes): Promise<Queue[]> {
  const redis = await startRedis(processes);
  // Redis mode sends at the end of each turn since issue 33: the intervals apply to the storage thread only.
  const queues = INTERVALS.map((_ms, i) => new RedisUsageQueue(redis.url, { consumer: 'bench', stream: `usage-handoff-${i}` }));
  await Promise.all(queues.map((q) => q.whenReady()));
  return queues.map((q) => ({ sink: q, settle: async () => undefined, close: () => q.close() }));
}

/** A storage thread per interval, each in a directory of its own, its ingester running. */
async function embeddedQueues(processes: Processes): Promise<Queue[]> {
  const queues: Queue[] = [];
  for (const [i, ms] of INTERVALS.entries()) {
    const dataDir = join(processes.workDir('bench-handoff-'), String(i));
    const storage = await openStorageThread({ dataDir, consumer: 'bench', plans: loadConfig(embeddedEnv(dataDir)).plans, usageSendEveryMs: ms });
    storage.ingester.start();
    queues.push({ sink: storage.usageQueue, settle: () => storage.ingester.whenDrained(60_000), close: () => storage.close() });
  }
  return queues;
}

/** The main thread's CPU per call over CALLS calls, each record handed to `queue` (none: the loop alone). */
async function cpuPerCall(queue: UsageSink | null): Promise<number> {
  const before = mainThreadCpuUs();
  let calls = 0;
  await new Promise<void>((done) => {
    const turn = (): void => {
      for (let k = 0; k < CALLS_PER_TURN; k++) {
        fixedWork();
        const r = record(calls++);
        queue?.enqueue(r);
      }
      if (calls >= CALLS) done();
      else setImmediate(turn);
    };
    turn();
  });
  await queue?.flush();
  return (mainThreadCpuUs() - before) / calls;
}

async function main(): Promise<void> {
  const mode = (process.argv[2] ?? 'redis') as Mode;
  if (!MODES.includes(mode)) throw new Error(`unknown mode "${mode}": choose from ${MODES.join(', ')}`);
  if (INTERVALS.some((ms) => !(ms > 0))) throw new Error(`INTERVALS must be positive milliseconds, e.g. "5,20": got ${process.env.INTERVALS}`);
  timeLimit(120 + ROUNDS * (INTERVALS.length + 1) * Math.ceil(CALLS / 4_000));
  const processes = new Processes();
  let queues: Queue[] = [];
  try {
    queues = await (mode === 'redis' ? redisQueues(processes) : embeddedQueues(processes));
    await cpuPerCall(null); // warm up the loop and the record's code
    const added = INTERVALS.map((): number[] => []);
    for (let round = 1; round <= ROUNDS; round++) {
      const alone = await cpuPerCall(null);
      const line = [`loop alone ${alone.toFixed(1)} µs a call`];
      for (let k = 0; k < queues.length; k++) {
        const i = (k + round - 1) % queues.length;
        const queue = queues[i] as Queue;
        const extra = (await cpuPerCall(queue.sink)) - alone;
        await queue.settle();
        added[i]?.push(extra);
        line.push(`flush every ${INTERVALS[i]} ms +${extra.toFixed(2)}`);
      }
      log(`round ${round}: ${line.join(', ')}`);
    }
    for (const [i, ms] of INTERVALS.entries()) {
      const xs = added[i] ?? [];
      log(
        `median of ${xs.length} rounds (${mode}): flush every ${ms} ms costs the event loop ${median(xs).toFixed(2)} µs a record (rounds ${xs.map((x) => x.toFixed(2)).join(', ')})`,
      );
    }
    log(`(the fixed computation's checksum: ${workChecksum})`);
  } finally {
    await Promise.all(queues.map((q) => q.close().catch(() => undefined)));
    await processes.stopAll();
  }
}

runMain(main);
