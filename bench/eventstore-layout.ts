/**
 * A design measurement, not a recorded figure: what LevelDB's compaction costs the embedded
 * event store's keys (src/infra/eventstore/levelKeys.ts) in one store, as stores made before
 * 2026-11-24 keep them, against the log in one store and its indexes in another, as
 * src/infra/eventstore/level.ts keeps them since.
 * In one store every level-0 table spans all four key families (log, stream index, heads,
 * event ids), so it overlaps every level-1 table and each compaction rewrites them; the log's
 * keys alone only grow, so its tables move down a level without being rewritten. Writes N
 * usage events of the ingester's shape, 64 to a batch as a group commit, over 50 accounts,
 * unsynced (the CPU, not the disk), waits for compaction to settle, and prints the process's
 * CPU time (all threads) per event and LevelDB's compaction output (from each store's LOG).
 *
 *   npx tsx bench/eventstore-layout.ts     (N=400000; one store, then two; ORDER=split for the reverse)
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { eventIdEntry, headEntry, logKey, pad, streamRunEntry } from '../src/infra/eventstore/levelKeys.js';
import { usageEventId } from '../test/support/oneCallUsage.js';
import { compactionBytes } from './lib/leveldb.js';
import { runMain, timeLimit } from './lib/processes.js';
import { log } from './lib/report.js';

const EVENTS = Number(process.env.N ?? 400_000);
const GROUP = 64;
const ACCOUNTS = 50;
const SETTLE_MS = 8_000;

const cpuSeconds = (): number => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
};
const sizeBytes = (dir: string): number => readdirSync(dir).reduce((sum, f) => sum + statSync(join(dir, f)).size, 0);

function usageEvent(seq: number, streamId: string, revision: number): { id: string; json: string } {
  const requestId = `r${seq.toString(36)}`;
  const at = new Date().toISOString();
  const id = usageEventId({ requestId, at });
  const account = seq % ACCOUNTS;
  const data = {
    requestId,
    at,
    accountId: `account-${account}`,
    tokenId: `token-${account}`,
    chain: 'eth',
    method: 'eth_blockNumber',
    status: 200,
    rpcErrorCode: null,
    errorMessage: null,
    totalMs: 0.42,
    upstreamMs: 0.21,
    clientIp: '127.0.0.1',
    upstream: 'eth-1',
    retentionDays: 30,
  };
  return { id, json: JSON.stringify({ streamId, revision, id, type: 'UsageRecorded', created: at, data, metadata: {} }) };
}

async function measure(split: boolean): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'bench-layout-'));
  try {
    const open = (name: string): ClassicLevel<string, string> =>
      new ClassicLevel<string, string>(join(root, name), { keyEncoding: 'utf8', valueEncoding: 'utf8' });
    const logStore = open(split ? 'log' : 'store');
    const indexStore = split ? open('index') : logStore;
    await logStore.open();
    await indexStore.open();
    const revisions = new Array<number>(ACCOUNTS).fill(-1);
    const cpuBefore = cpuSeconds();
    for (let first = 1; first <= EVENTS; first += GROUP) {
      const logBatch = logStore.batch();
      const indexBatch = split ? indexStore.batch() : logBatch;
      const heads = new Map<string, number>();
      for (let seq = first; seq < first + GROUP && seq <= EVENTS; seq++) {
        const account = seq % ACCOUNTS;
        const streamId = `usage-account-${account}`;
        const revision = ++(revisions[account] as number);
        const { id, json } = usageEvent(seq, streamId, revision);
        logBatch.put(logKey(seq), json);
        indexBatch.put(...streamRunEntry(streamId, revision, seq, 1));
        indexBatch.put(...eventIdEntry(streamId, id, revision, pad(seq)));
        heads.set(streamId, revision);
      }
      for (const [streamId, revision] of heads) indexBatch.put(...headEntry(streamId, revision));
      await logBatch.write();
      if (split) await indexBatch.write();
    }
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const cpu = cpuSeconds() - cpuBefore;
    const stores = (split ? ['log', 'index'] : ['store']).map((name) => {
      const dir = join(root, name);
      return `${name}: compaction output ${(compactionBytes(dir) / 1e6).toFixed(1)} MB, ${(sizeBytes(dir) / 1e6).toFixed(1)} MB on disk`;
    });
    log(
      `${split ? 'two stores' : 'one store '}: ${EVENTS} events, ${((cpu * 1e6) / EVENTS).toFixed(1)} µs of CPU per event (all threads, ${SETTLE_MS / 1000} s of settling included); ${stores.join('; ')}`,
    );
    await logStore.close();
    if (split) await indexStore.close();
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

runMain(async () => {
  timeLimit(300);
  const splitFirst = process.env.ORDER === 'split';
  await measure(splitFirst);
  await measure(!splitFirst);
});
