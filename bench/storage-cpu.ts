/**
 * What the embedded default's metering costs the machine per call, away from wrk's noise: usage
 * records handed to a storage thread (as ROLE=all does, src/infra/storagethread) at a steady
 * rate, ingested into the event store and projected into the read models there, and the CPU
 * every thread of the process but the main one spent on them (from /proc/self/task), per record:
 * the storage thread itself, and the rest (LevelDB's compaction thread, libuv's pool running the
 * batch writes, V8's helpers) together. These are what shares the two cores with wrk, the
 * upstream and the gateway's event loop in bench/gateway.ts. A quick comparison for development,
 * it records nothing. One store serves every round, after a warm-up that is not counted (a fresh
 * thread spends as much on compiling its code as on the records).
 *
 *   RATE=20000 SECONDS=4 ROUNDS=3 ACCOUNTS=1 TOKENS=3 npx tsx bench/storage-cpu.ts
 *   RATE=10000 ACCOUNTS=10000 TOKENS=10 npx tsx bench/storage-cpu.ts   (issue 33: ≤ 2× ACCOUNTS=1 TOKENS=1)
 */
import { loadConfig } from '../src/config.js';
import type { UsageRecord } from '../src/domain/usage.js';
import { openStorageThread, type StorageThread } from '../src/infra/storagethread/index.js';
import { compactionOutput } from './lib/leveldb.js';
import { Processes, runMain, threadCpuSeconds, timeLimit } from './lib/processes.js';
import { log, median } from './lib/report.js';
import { embeddedEnv } from './lib/services.js';

const RATE = Number(process.env.RATE ?? 20_000);
const SECONDS = Number(process.env.SECONDS ?? 4);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
/** Records are handed over in slices this often, as a gateway's calls arrive. */
const SLICE_MS = 2;
const WARMUP_SECONDS = 3;
/** Accounts the calls are spread over, in turn: each has a usage stream and raw rows of its own. */
const ACCOUNTS = Number(process.env.ACCOUNTS ?? 1);
/** Tokens of each account, called in turn after the accounts (`ACCOUNTS=10000 TOKENS=10`: 100,000 tokens round-robin). */
const TOKENS = Number(process.env.TOKENS ?? 3);

let sequence = 0;
/** A call as the gateway meters it: a few tokens and methods of ACCOUNTS accounts in turn, mostly successes. */
function record(): UsageRecord {
  const i = sequence++;
  return {
    requestId: `Ab3dEf7hIj9kLm1n${i.toString(36).padStart(8, '0')}`,
    at: new Date().toISOString(),
    accountId: `acc-bench-${i % ACCOUNTS}`,
    tokenId: `tok-bench-${i % ACCOUNTS}-${Math.floor(i / ACCOUNTS) % TOKENS}`,
    chain: 'eth',
    method: ['eth_blockNumber', 'eth_call', 'eth_getBalance'][i % 3] as string,
    status: i % 100 === 0 ? 429 : 200,
    rpcErrorCode: i % 100 === 0 ? -32005 : null,
    errorMessage: i % 100 === 0 ? 'rate limit exceeded' : null,
    totalMs: 0.41 + (i % 7) / 10,
    upstreamMs: i % 100 === 0 ? null : 0.2,
    clientIp: '127.0.0.1',
    upstream: i % 100 === 0 ? null : 'eth-1',
    retentionDays: 30,
  };
}

/** Hands RATE records a second to the storage thread for `seconds`, then waits until they are ingested and projected. */
async function feed(storage: StorageThread, seconds: number): Promise<number> {
  const total = Math.round(RATE * seconds);
  const started = performance.now();
  let sent = 0;
  await new Promise<void>((done) => {
    const timer = setInterval(() => {
      const due = Math.min(total, Math.round(((performance.now() - started) / 1000) * RATE));
      while (sent < due) {
        storage.usageQueue.enqueue(record());
        sent++;
      }
      if (sent >= total) {
        clearInterval(timer);
        done();
      }
    }, SLICE_MS);
  });
  await storage.ingester.whenDrained(60_000);
  const head = await storage.store.headPosition();
  if (head !== null) await storage.projector.waitFor(head, 60_000);
  return total;
}

async function oneRound(storage: StorageThread, dataDir: string): Promise<{ storage: number; others: number; wallMs: number }> {
  const before = threadCpuSeconds(process.pid);
  const started = performance.now();
  const total = await feed(storage, SECONDS);
  const wallMs = performance.now() - started;
  const after = threadCpuSeconds(process.pid);
  let main = 0;
  const spent: number[] = [];
  for (const [tid, seconds] of after) {
    const used = seconds - (before.get(tid) ?? 0);
    if (tid === process.pid) main = used;
    else spent.push(used);
  }
  spent.sort((a, b) => b - a);
  const perRecord = (s: number): number => (s * 1e6) / total;
  log(
    `  main thread ${perRecord(main).toFixed(2)} µs a record (not counted), threads by CPU: ${spent
      .filter((s) => s > 0)
      .map((s) => perRecord(s).toFixed(2))
      .join(', ')}; LevelDB compaction output so far: ${compactionOutput(dataDir)}; process RSS ${Math.round(process.memoryUsage.rss() / 1e6)} MB`,
  );
  return { storage: perRecord(spent[0] ?? 0), others: perRecord(spent.slice(1).reduce((a, b) => a + b, 0)), wallMs };
}

async function main(): Promise<void> {
  timeLimit(60 + ROUNDS * (SECONDS + 30));
  const processes = new Processes();
  let stopStorage = async (): Promise<void> => undefined;
  try {
    const dataDir = processes.workDir('bench-storage-cpu-');
    const storage = await openStorageThread({
      dataDir,
      consumer: 'bench',
      plans: loadConfig(embeddedEnv(dataDir)).plans,
      usageSendEveryMs: Number(process.env.SEND_MS ?? 20),
    });
    stopStorage = () => storage.close();
    await storage.projector.start();
    await storage.projector.caughtUp;
    storage.ingester.start();
    // Not counted: the thread's code is optimised by the end of it, as in a gateway serving for a while.
    await feed(storage, WARMUP_SECONDS);
    const rounds: Array<{ storage: number; others: number }> = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const r = await oneRound(storage, dataDir);
      rounds.push(r);
      log(
        `round ${round}: ${RATE * SECONDS} records at ${RATE}/s, done in ${(r.wallMs / 1000).toFixed(1)} s: storage thread ${r.storage.toFixed(2)} µs a record, other threads ${r.others.toFixed(2)}, together ${(r.storage + r.others).toFixed(2)}`,
      );
    }
    log(
      `median of ${ROUNDS} rounds: storage thread ${median(rounds.map((r) => r.storage)).toFixed(2)} µs a record, other threads ${median(rounds.map((r) => r.others)).toFixed(2)}, together ${median(rounds.map((r) => r.storage + r.others)).toFixed(2)}`,
    );
  } finally {
    await stopStorage();
    await processes.stopAll();
  }
}

runMain(main);
