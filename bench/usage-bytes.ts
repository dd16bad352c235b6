/**
 * Disk per served call in the embedded usage log (LevelDB: the log and its indexes), the usage
 * events as the ingester writes them (one compact batch event per account per append,
 * src/domain/usageBatch.ts) against one `UsageRecorded` event per call (the format before, and
 * the baseline), in the same run. CALLS calls of a varied mix (5 chains × 6 methods, 250 client
 * IPs, 3 % errors, 3 tokens per account, two gateway processes' request ids) over ACCOUNTS
 * accounts go through the real ingester and the real store; each store is then closed and
 * opened again (its write-ahead log becomes a table) and measured on disk. Prints bytes per call.
 *
 *   CALLS=200000 ACCOUNTS=20 npx tsx bench/usage-bytes.ts     (BATCH=n: the ingester's batch size, 2,000 by default)
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../src/domain/usage.js';
import { LevelEventStore } from '../src/infra/eventstore/level.js';
import { UsageIngester } from '../src/infra/usage/ingester.js';
import { MemoryUsageBackend, MemoryUsageQueue } from '../src/infra/usage/memory.js';
import { usageEventId } from '../test/support/oneCallUsage.js';
import { runMain } from './lib/processes.js';
import { log } from './lib/report.js';

const CALLS = Number(process.env.CALLS ?? 200_000);
const ACCOUNTS = Number(process.env.ACCOUNTS ?? 20);
/** Calls per second of simulated time: the spacing of the calls' times. */
const RATE = 5_000;
const CHAINS = ['eth', 'polygon', 'base', 'arbitrum', 'sol'];
const METHODS = ['eth_call', 'eth_getBalance', 'eth_blockNumber', 'eth_getLogs', 'eth_getTransactionReceipt', 'eth_chainId'];
const prefixes = [randomBytes(12).toString('base64url'), randomBytes(12).toString('base64url')];

function mix(): UsageRecord[] {
  const start = Date.now() - Math.ceil((CALLS / RATE) * 1000);
  const counters: [number, number] = [0, 0];
  return Array.from({ length: CALLS }, (_, i) => {
    const gateway = (i % 2) as 0 | 1;
    const account = Math.floor(i / 7) % ACCOUNTS;
    const failed = i % 33 === 7;
    const cached = i % 5 === 0;
    const totalMs = cached ? 0.2 + (i % 13) / 100 : 20 + ((i * 7919) % 4000) / 100;
    return {
      requestId: `${prefixes[gateway]}-${(counters[gateway]++).toString(36)}`,
      at: new Date(start + Math.floor((i * 1000) / RATE) - (i % 11)).toISOString(),
      accountId: `acc-${account}`,
      tokenId: `tok-${account}-${i % 3}`,
      chain: CHAINS[i % 5] as string,
      method: METHODS[Math.floor(i / 5) % 6] as string,
      status: failed ? 502 : 200,
      rpcErrorCode: failed ? -32010 : null,
      errorMessage: failed ? 'upstream unavailable' : null,
      totalMs: Math.round(totalMs * 100) / 100,
      upstreamMs: cached ? null : Math.round((totalMs - 0.4) * 100) / 100,
      clientIp: `203.0.${((i * 31) % 250) >> 4}.${(i * 31) % 250}`,
      upstream: cached ? null : `node-${i % 2}`,
      retentionDays: 30,
      charged: true,
      ...(cached ? { cache: 'hit' as const } : { cache: 'miss' as const }),
    };
  });
}

const sizeOf = (dir: string): number =>
  readdirSync(dir, { recursive: true, encoding: 'utf8' }).reduce((sum, f) => {
    const stat = statSync(join(dir, f));
    return stat.isFile() ? sum + stat.size : sum;
  }, 0);

/** Closed and opened again: what the write-ahead log held is in a table, as after any restart. */
async function settledSize(dir: string): Promise<number> {
  const again = await LevelEventStore.open(dir);
  await again.close();
  return sizeOf(dir);
}

async function compact(records: UsageRecord[], dir: string): Promise<number> {
  const store = await LevelEventStore.open(dir);
  const backend = new MemoryUsageBackend();
  const ingester = new UsageIngester({
    queue: new MemoryUsageQueue(backend, 'bench'),
    store,
    lingerMs: 100,
    ...(process.env.BATCH ? { batchSize: Number(process.env.BATCH) } : {}),
  });
  ingester.start();
  for (let i = 0; i < records.length; i += 5_000) {
    for (const record of records.slice(i, i + 5_000)) backend.add(record);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await ingester.whenDrained(120_000);
  await ingester.stop();
  const events = (await Promise.all(Array.from({ length: ACCOUNTS }, (_, a) => store.readStream(usageStream(`acc-${a}`))))).reduce((n, e) => n + e.length, 0);
  await store.close();
  log(`  compact batches: ${events} events, ${(records.length / events).toFixed(0)} calls per event`);
  return settledSize(dir);
}

/** The format before: one event per call, appended in batches of the ingester's size per account. */
async function onePerCall(records: UsageRecord[], dir: string): Promise<number> {
  const store = await LevelEventStore.open(dir);
  const byAccount = new Map<string, UsageRecord[]>();
  for (let i = 0; i < records.length; i += 500) {
    byAccount.clear();
    for (const r of records.slice(i, i + 500)) byAccount.set(r.accountId, [...(byAccount.get(r.accountId) ?? []), r]);
    await Promise.all(
      [...byAccount].map(([account, rs]) =>
        store.append(
          usageStream(account),
          rs.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: r })),
          'any',
        ),
      ),
    );
  }
  await store.close();
  return settledSize(dir);
}

await runMain(async () => {
  const records = mix();
  log(`${CALLS} calls over ${ACCOUNTS} accounts (5 chains × 6 methods, 250 IPs, 3 % errors)`);
  const dirs = [mkdtempSync(join(tmpdir(), 'usage-bytes-a-')), mkdtempSync(join(tmpdir(), 'usage-bytes-b-'))];
  try {
    const before = await onePerCall(records, dirs[0] as string);
    log(`  one event per call (before): ${(before / CALLS).toFixed(1)} B per call`);
    const after = await compact(records, dirs[1] as string);
    log(`  compact batches (now): ${(after / CALLS).toFixed(1)} B per call, ${(before / after).toFixed(1)}× less`);
  } finally {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
});
