/**
 * What the exactly-once usage appends cost on EventStoreDB in round trips, as the number of
 * accounts with calls grows: the EventStoreDB adapter (src/infra/eventstore/esdb.ts) and the
 * ingester's ExactlyOnceAppender over an in-memory server with EventStoreDB's rules
 * (test/support/esdbFakeClient.ts), which counts the client's calls. No network: the figures are
 * calls per append, events read per append, and appends per second of this process's own work
 * (the appender, the adapter and the in-memory server), not a server's throughput.
 *
 * For each account count, every account first gets one batch (its stream is created), then
 * ROUNDS passes append one batch of BATCH fresh records to each account in turn (round-robin,
 * the order that keeps the fewest streams recently used), and one retried batch (a redelivery:
 * records appended before, regrouped with new ones) goes to the first account.
 *
 * MAX_STREAMS sets the appender's `maxStreams` (streams whose head it remembers), to see the cost
 * beyond it; MAX_IDS its `maxIds`. With `node --expose-gc`, the heap the appender holds per
 * account is shown too.
 *
 *   ACCOUNTS="10000,20000" ROUNDS=3 BATCH=5 npx tsx bench/esdb-roundtrips.ts
 *   MAX_STREAMS=10000 npx tsx bench/esdb-roundtrips.ts
 *   ACCOUNTS=200000 ROUNDS=1 node --expose-gc --import tsx bench/esdb-roundtrips.ts
 */
import { randomUUID } from 'node:crypto';
import { type UsageRecord, usageStream } from '../src/domain/usage.js';
import { usageEventRequestIds } from '../src/domain/usageBatch.js';
import { EsdbEventStore } from '../src/infra/eventstore/esdb.js';
import { ExactlyOnceAppender, type ExactlyOnceOptions } from '../src/infra/usage/exactlyOnce.js';
import { usageBatchCodec } from '../src/infra/usage/ingester.js';
import { FakeEsdbServer } from '../test/support/esdbFakeClient.js';
import { log } from './lib/report.js';

const ACCOUNTS = (process.env.ACCOUNTS ?? '10000,20000').split(',').map(Number);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const BATCH = Number(process.env.BATCH ?? 5);
const options: ExactlyOnceOptions = {
  ...(process.env.MAX_STREAMS ? { maxStreams: Number(process.env.MAX_STREAMS) } : {}),
  ...(process.env.MAX_IDS ? { maxIds: Number(process.env.MAX_IDS) } : {}),
};
const gc = (globalThis as { gc?: () => void }).gc;

function record(accountId: string): UsageRecord {
  return {
    requestId: randomUUID(),
    at: new Date().toISOString(),
    accountId,
    tokenId: 'tok1',
    chain: 'eth',
    method: 'eth_blockNumber',
    status: 200,
    rpcErrorCode: null,
    errorMessage: null,
    totalMs: 12.5,
    upstreamMs: 10,
    clientIp: '127.0.0.1',
    upstream: 'primary',
  };
}

const times = (records: UsageRecord[]): [number, number] => {
  const at = records.map((r) => Date.parse(r.at));
  return [Math.min(...at), Math.max(...at)];
};

/** Appends one batch, as the ingester does (the records' earliest and latest times). */
async function appendBatch(appender: ExactlyOnceAppender<UsageRecord>, accountId: string, records: UsageRecord[]): Promise<void> {
  const [since, until] = times(records);
  await appender.append(usageStream(accountId), records, since, until);
}

async function run(accounts: number): Promise<void> {
  const server = new FakeEsdbServer();
  const store = new EsdbEventStore(server.client);
  const holder = { appender: new ExactlyOnceAppender(store, usageBatchCodec, options) };
  const appender = (): ExactlyOnceAppender<UsageRecord> => holder.appender;
  const ids = Array.from({ length: accounts }, (_, i) => `acc${i}`);
  const firstBatch: UsageRecord[] = [];
  for (const id of ids) {
    const records = Array.from({ length: BATCH }, () => record(id));
    if (firstBatch.length === 0) firstBatch.push(...records);
    await appendBatch(appender(), id, records);
  }

  const calls = { ...server.calls };
  const readEvents = server.eventsRead;
  const started = process.hrtime.bigint();
  for (let round = 0; round < ROUNDS; round++) {
    for (const id of ids)
      await appendBatch(
        appender(),
        id,
        Array.from({ length: BATCH }, () => record(id)),
      );
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;

  const appends = accounts * ROUNDS;
  const perAppend = (n: number): string => (n / appends).toFixed(2);
  const appendCalls = server.calls.appendToStream - calls.appendToStream;
  const readCalls = server.calls.readStream - calls.readStream;
  log(
    `${accounts} accounts round-robin, ${ROUNDS} × ${accounts} appends of ${BATCH}: ${perAppend(appendCalls + readCalls)} round trips per append ` +
      `(${perAppend(appendCalls)} appends, ${perAppend(readCalls)} reads, ${perAppend(server.eventsRead - readEvents)} events read), ` +
      `${Math.round(appends / seconds)} appends/s`,
  );

  const before = server.roundTrips;
  const retried = [...firstBatch, record('acc0')];
  await appendBatch(appender(), 'acc0', retried);
  const trips = server.roundTrips - before;
  const stream = usageStream('acc0');
  const recorded = (await store.readStream(stream)).flatMap((e) => usageEventRequestIds(e));
  const held = retried.filter((r) => recorded.filter((id) => id === r.requestId).length === 1).length;
  log(
    `  a redelivered batch on account #1 (${firstBatch.length} appended before + 1 new): ${trips} round trips, ${held} of ${retried.length} in the stream once each: ${held === retried.length ? 'yes' : 'NO'}`,
  );
  if (gc) {
    // The appender's share: the heap with it, less the heap once it is gone (the server's events stay).
    gc();
    const withAppender = process.memoryUsage().heapUsed;
    const remembered = appender().rememberedIds;
    holder.appender = new ExactlyOnceAppender(store, usageBatchCodec, options);
    gc();
    const without = process.memoryUsage().heapUsed;
    log(`  the appender's heap: ${((withAppender - without) / accounts).toFixed(0)} bytes per account, ${remembered} ids remembered in all`);
  }
}

for (const accounts of ACCOUNTS) await run(accounts);
