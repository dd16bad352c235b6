/**
 * PostgreSQL against the embedded LevelDB store, in the same run and by the same method (issue
 * 37): token commands per second (bench/token-commands.ts's loop: createApiToken + revokeApiToken
 * on one Unlimited account, beside bare single-event appends), usage records ingested and
 * projected per second with the projection lag at a steady offered rate (bench/usage-pipeline.ts's
 * method, shorter), and a replay of the real projections from an empty set of read models
 * (bench/replay.ts's, over fewer events and without its rebuild flags and bulk load, which only
 * the embedded store has). Each backend runs in a process of its own making (one runtime, every
 * role but HTTP); PostgreSQL in a database created for the run and dropped after it.
 *
 *   npx tsx bench/postgres-throughput.ts    (PG_BENCH_ADMIN_URL, default postgres://postgres@127.0.0.1:5432/test; REPLAY_EVENTS, default 100000)
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import type { UsageRecord } from '../src/domain/usage.js';
import type { EventStore, SubscribeOptions, Subscription } from '../src/infra/eventstore/port.js';
import { LevelEventStore } from '../src/infra/eventstore/level.js';
import { PostgresEventStore } from '../src/infra/eventstore/postgres.js';
import { openReadModels, type ReadModelStore } from '../src/infra/readmodels/index.js';
import { PROJECTIONS } from '../src/projections/all.js';
import { ProjectionRunner } from '../src/projections/runner.js';
import { openRuntime, type Runtime } from '../src/runtime.js';
import { seedAccounts, seedUsage, type SeededToken } from './lib/eventMix.js';
import { withBenchDatabase } from './lib/postgres.js';
import { runMain, timeLimit } from './lib/processes.js';
import { emit, log, round } from './lib/report.js';
import { embeddedEnv } from './lib/services.js';

const COMMAND = 'npx tsx bench/postgres-throughput.ts';
const BASELINE_SECONDS = 2;
const COMMAND_SECONDS = 5;
const BURST = 20_000;
const STEADY_RATE = 1000;
const STEADY_SECONDS = 6;
const REPLAY_EVENTS = Number(process.env.REPLAY_EVENTS ?? 100_000);
const REPLAY_CAP_SECONDS = 25;
const DAY = 86_400_000;

type Backend = 'embedded' | 'postgres';

interface Figures {
  appendsPerSecond: number;
  commandsPerSecond: number;
  recordsPerSecond: number;
  lagP50: number;
  lagP99: number;
  /** p50 lag of the steady phase's last second over its first: about 1 when the projections keep up. */
  lagTrend: number;
  replayPerSecond: number;
  replayed: number;
}

async function forSeconds(seconds: number, step: () => Promise<void>): Promise<number> {
  const started = performance.now();
  let steps = 0;
  while (performance.now() - started < seconds * 1000) {
    await step();
    steps++;
  }
  return steps / ((performance.now() - started) / 1000);
}

const record = (t: SeededToken, i: number): UsageRecord => ({
  requestId: randomUUID(),
  at: new Date().toISOString(),
  accountId: t.accountId,
  tokenId: t.tokenId,
  chain: ['eth', 'bsc', 'matic'][i % 3] as string,
  method: ['eth_blockNumber', 'eth_call', 'eth_getBalance', 'eth_getLogs'][i % 4] as string,
  status: i % 50 === 0 ? 502 : 200,
  rpcErrorCode: i % 50 === 0 ? -32010 : null,
  errorMessage: i % 50 === 0 ? 'upstream unavailable' : null,
  totalMs: 3 + (i % 17),
  upstreamMs: 2 + (i % 13),
  clientIp: `198.51.100.${i % 200}`,
  upstream: 'eth-1',
});

async function commands(runtime: Runtime): Promise<{ appendsPerSecond: number; commandsPerSecond: number }> {
  const { accountId } = await runtime.commands.signUp(`bench-${randomUUID()}@example.com`, 'correct horse battery');
  await runtime.commands.changePlan(accountId, 'unlimited');
  const stream = `benchbaseline-${randomUUID().replaceAll('-', '')}`;
  let revision: number | 'no_stream' = 'no_stream';
  const appendsPerSecond = await forSeconds(BASELINE_SECONDS, async () => {
    revision = (await runtime.store.append(stream, [{ id: randomUUID(), type: 'BenchBaseline', data: { at: new Date().toISOString() } }], revision))
      .nextExpectedRevision;
  });
  let n = 0;
  const pairsPerSecond = await forSeconds(COMMAND_SECONDS, async () => {
    const { tokenId } = await runtime.commands.createApiToken(accountId, { name: `bench ${n++}` });
    await runtime.commands.revokeApiToken(accountId, tokenId);
  });
  return { appendsPerSecond, commandsPerSecond: 2 * pairsPerSecond };
}

async function usage(runtime: Runtime): Promise<{ recordsPerSecond: number; lagP50: number; lagP99: number; lagTrend: number }> {
  const tokens = await seedAccounts(runtime.store, 1, 10, new Date().toISOString());
  const head = await runtime.store.headPosition();
  if (head) await runtime.projector?.waitFor(head, 30_000);
  const accountId = (tokens[0] as SeededToken).accountId;
  const projected = () => runtime.queries.accountMonthUsage(accountId);
  const started = performance.now();
  for (let i = 0; i < BURST; i++) runtime.usageQueue.enqueue(record(tokens[i % tokens.length] as SeededToken, i));
  while ((await projected()) < BURST) {
    if (performance.now() - started > 100_000) throw new Error(`only ${await projected()} of ${BURST} records projected in 100 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
  const recordsPerSecond = BURST / ((performance.now() - started) / 1000);
  // Steady: a batch every 100 ms, and when the read models count it.
  const lags: Array<{ at: number; lag: number }> = [];
  const marks: Array<{ count: number; at: number }> = [];
  let sent = BURST;
  const steadyStart = performance.now();
  const steadyEnd = steadyStart + STEADY_SECONDS * 1000;
  const sender = (async () => {
    while (performance.now() < steadyEnd) {
      for (let i = 0; i < STEADY_RATE / 10; i++) runtime.usageQueue.enqueue(record(tokens[sent % tokens.length] as SeededToken, sent++));
      marks.push({ count: sent, at: performance.now() });
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  while (performance.now() < steadyEnd + 5000 && (marks.length > 0 || performance.now() < steadyEnd)) {
    const count = await projected();
    const now = performance.now();
    while (marks.length > 0 && (marks[0] as { count: number }).count <= count) {
      const mark = marks.shift() as { at: number };
      lags.push({ at: mark.at - steadyStart, lag: now - mark.at });
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  await sender;
  if (marks.length > 0) throw new Error(`${marks.length} batches not projected 5 s after the steady phase`);
  const p = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))] ?? Number.NaN;
  const all = lags.map((l) => l.lag);
  const first = lags.filter((l) => l.at < 1000).map((l) => l.lag);
  const last = lags.filter((l) => l.at >= (STEADY_SECONDS - 1) * 1000).map((l) => l.lag);
  return { recordsPerSecond, lagP50: p(all, 0.5), lagP99: p(all, 0.99), lagTrend: p(last, 0.5) / p(first, 0.5) };
}

/** Writes accounts and tokens and REPLAY_EVENTS usage events, then replays them through every projection into empty read models. */
async function replay(store: EventStore, readModels: ReadModelStore): Promise<{ replayPerSecond: number; replayed: number }> {
  const startMs = Date.now() - 30 * DAY;
  const tokens = await seedAccounts(store, 200, 5, new Date(startMs).toISOString());
  await seedUsage(store, tokens, REPLAY_EVENTS, startMs + 2000, 30 * DAY - 10_000);
  // Positions are not counts on every store: the events the runner was handed are counted instead.
  let replayed = 0;
  const counted: EventStore = Object.assign(Object.create(store) as EventStore, {
    subscribeToAll: (options?: SubscribeOptions): Subscription => {
      const subscription = store.subscribeToAll(options);
      return {
        close: () => subscription.close(),
        async *[Symbol.asyncIterator]() {
          for await (const item of subscription) {
            if (item.kind === 'event') replayed++;
            yield item;
          }
        },
      };
    },
  });
  const started = performance.now();
  const runner = new ProjectionRunner(counted, readModels, PROJECTIONS);
  await runner.start();
  const cap = new Promise<'cap'>((r) => setTimeout(r, REPLAY_CAP_SECONDS * 1000, 'cap').unref());
  await Promise.race([runner.caughtUp, cap]);
  const seconds = (performance.now() - started) / 1000;
  await runner.stop();
  return { replayPerSecond: replayed / seconds, replayed };
}

async function measure(backend: Backend): Promise<Figures> {
  const dataDir = mkdtempSync(join(tmpdir(), `bench-${backend}-`));
  try {
    const run = async (url?: string): Promise<Figures> => {
      const runtime = await openRuntime(loadConfig(embeddedEnv(dataDir, url ? { DATABASE_URL: url } : {})));
      let live: Awaited<ReturnType<typeof commands>> & Awaited<ReturnType<typeof usage>>;
      try {
        await runtime.projector?.start();
        runtime.ingester?.start();
        await runtime.projector?.caughtUp;
        log(`${backend}: token commands`);
        const c = await commands(runtime);
        log(`${backend}: usage burst of ${BURST}, then ${STEADY_RATE}/s for ${STEADY_SECONDS} s`);
        live = { ...c, ...(await usage(runtime)) };
      } finally {
        await runtime.close();
      }
      log(`${backend}: replay of ${REPLAY_EVENTS} events`);
      const replayed = url
        ? await withBenchDatabase(async (replayUrl) => {
            const store = await PostgresEventStore.open(replayUrl);
            const readModels = await openReadModels({ databaseUrl: replayUrl, dataDir });
            try {
              return await replay(store, readModels);
            } finally {
              await readModels.close();
              await store.close();
            }
          })
        : await (async () => {
            const replayDir = mkdtempSync(join(tmpdir(), 'bench-replay-'));
            const store = await LevelEventStore.open(join(replayDir, 'eventstore'), { sync: false });
            const readModels = await openReadModels({ dataDir: replayDir });
            try {
              return await replay(store, readModels);
            } finally {
              await readModels.close();
              await store.close();
              rmSync(replayDir, { recursive: true, force: true });
            }
          })();
      return { ...live, ...replayed };
    };
    return backend === 'postgres' ? await withBenchDatabase(run) : await run();
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  timeLimit(280);
  const results = { embedded: await measure('embedded'), postgres: await measure('postgres') };
  for (const [backend, f] of Object.entries(results)) {
    log(
      `${backend}: ${round(f.commandsPerSecond)} commands/s (bare appends ${round(f.appendsPerSecond)}/s); ${round(f.recordsPerSecond)} usage records/s, lag p50 ${round(f.lagP50)} / p99 ${round(f.lagP99)} ms (last second ÷ first ${round(f.lagTrend)}); replay ${round(f.replayPerSecond)} events/s (${f.replayed})`,
    );
  }
  const { embedded: e, postgres: p } = results;
  emit({
    name: 'postgres_token_commands_per_s',
    target: null,
    result: round(p.commandsPerSecond),
    unit: 'commands/s',
    ratio: round(p.commandsPerSecond / e.commandsPerSecond),
    baseline: `embedded LevelDB ${round(e.commandsPerSecond)} commands/s; bare appends PostgreSQL ${round(p.appendsPerSecond)}/s, LevelDB ${round(e.appendsPerSecond)}/s`,
    command: COMMAND,
    method: `sequential createApiToken then revokeApiToken for ${COMMAND_SECONDS} s on one Unlimited account, every role but HTTP in the process; bare appends: sequential single-event appends with expected revision, ${BASELINE_SECONDS} s`,
  });
  emit({
    name: 'postgres_usage_records_per_s',
    target: null,
    result: round(p.recordsPerSecond),
    unit: 'records/s',
    ratio: round(p.recordsPerSecond / e.recordsPerSecond),
    baseline: `embedded LevelDB ${round(e.recordsPerSecond)} records/s`,
    command: COMMAND,
    method: `${BURST} records enqueued at once, until the read models count them all (ingest + every projection)`,
  });
  emit({
    name: 'postgres_usage_projection_lag_p99_ms',
    target: '<= 1000',
    result: round(p.lagP99),
    unit: 'ms',
    baseline: `embedded LevelDB p99 ${round(e.lagP99)} ms`,
    command: COMMAND,
    method: `${STEADY_RATE} records/s for ${STEADY_SECONDS} s in batches every 100 ms, enqueue to counted; p50 ${round(p.lagP50)} ms; p50 of the last second ÷ the first ${round(p.lagTrend)} (LevelDB ${round(e.lagTrend)}): about 1 when the lag stays flat`,
  });
  emit({
    name: 'postgres_replay_events_per_s',
    target: null,
    result: round(p.replayPerSecond),
    unit: 'events/s',
    ratio: round(p.replayPerSecond / e.replayPerSecond),
    baseline: `embedded LevelDB ${round(e.replayPerSecond)} events/s by the same method (bench/replay.ts, with rebuild flags and bulk load, is the embedded figure of record)`,
    command: COMMAND,
    method: `200 accounts × 5 tokens and ${REPLAY_EVENTS} UsageRecorded over 30 days replayed through the ${PROJECTIONS.length} projections into empty read models, capped at ${REPLAY_CAP_SECONDS} s (PostgreSQL ${p.replayed} events, LevelDB ${e.replayed})`,
  });
}

runMain(main);
