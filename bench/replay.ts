/**
 * Projection replay over 1,000,000 events and time to ready after a restart (issue 2).
 * Writes 1M events of the real shapes into a fresh embedded store (mostly UsageRecorded in
 * `usage-<account>` streams, plus accounts and token events), then measures in the same run:
 *   baseline: reading the whole log through the store's catch-up subscription, projecting nothing;
 *   (a) a full rebuild (what `rebuildProjections` does: reset every projection of the runtime's
 *       PROJECTIONS, replay the log) → events/s; stopped after REPLAY_CAP_SECONDS, the rate then
 *       being that of the events replayed so far;
 *   (b) with the checkpoint present: `openRuntime` to `ProjectionRunner.caughtUp`. Were the
 *       replay stopped by its cap, each checkpoint is first moved to the head (the read models
 *       then hold only part of the log: this measures starting with a checkpoint, not catching up).
 * The store lives in a temp directory for this run only and is deleted at the end. Like
 * `npm run cli -- rebuild`, the benchmark runs with REBUILD_NODE_FLAGS (it starts itself again
 * with them) and opens the read models for a bulk load, so the figure is what a rebuild gets.
 *
 *   npx tsx bench/replay.ts            (EVENTS=200000 for a quicker look)
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import { LevelEventStore } from '../src/infra/eventstore/level.js';
import { openReadModels, type ReadModelStore } from '../src/infra/readmodels/index.js';
import type { Projection } from '../src/projections/projection.js';
import { hasRebuildFlags, REBUILD_NODE_FLAGS } from '../src/projections/rebuild.js';
import { ProjectionRunner } from '../src/projections/runner.js';
import { MINUTE_RETENTION_DAYS } from '../src/projections/usageExpiry.js';
import { PROJECTIONS } from '../src/projections/all.js';
import { openRuntime } from '../src/runtime.js';
import { seedAccounts, seedTokenChanges, seedUsage } from './lib/eventMix.js';
import { runMain, timeLimit } from './lib/processes.js';
import { embeddedEnv } from './lib/services.js';
import { emit, log, round } from './lib/report.js';

const COMMAND = 'npx tsx bench/replay.ts';
const TOTAL_EVENTS = Number(process.env.EVENTS ?? 1_000_000);
const ACCOUNTS = 1000;
const TOKENS_PER_ACCOUNT = 5;
const MONTH_MS = 30 * 86_400_000;
const REPLAY_CAP_SECONDS = Number(process.env.REPLAY_CAP_SECONDS ?? 90);
/** Each projection alone, from the start of the log, to see which one sets the pace. */
const ALONE_CAP_SECONDS = 8;

async function generate(dir: string): Promise<number> {
  // No fsync while generating: only the replay is measured, and it reads what is on disk.
  const store = await LevelEventStore.open(dir, { sync: false });
  try {
    const startMs = Date.now() - MONTH_MS;
    const startIso = new Date(startMs).toISOString();
    const tokens = await seedAccounts(store, ACCOUNTS, TOKENS_PER_ACCOUNT, startIso);
    await seedTokenChanges(store, tokens, new Date(startMs + 1000).toISOString());
    const domainEvents = Number(await store.headPosition());
    await seedUsage(store, tokens, TOTAL_EVENTS - domainEvents, startMs + 2000, MONTH_MS - 10_000);
    return domainEvents;
  } finally {
    await store.close();
  }
}

/**
 * What rebuildProjections does (reset the projections' read models, replay the log), stopped
 * after `capSeconds`: a projection far slower than the target must not hold the run for minutes.
 * Timed from the end of the reset: emptying read models that a previous run filled (the runs of
 * each projection alone after the full replay) takes seconds that are not replaying.
 */
async function replay(
  store: LevelEventStore,
  readModels: ReadModelStore,
  projections: Projection[],
  capSeconds: number,
): Promise<{ seconds: number; replayed: number; capped: boolean }> {
  const resetStarted = performance.now();
  for (const p of projections) await readModels.reset(p.name, p.collections);
  const resetSeconds = (performance.now() - resetStarted) / 1000;
  if (resetSeconds >= 0.5) log(`reset of ${projections.map((p) => p.name).join(', ')}: ${round(resetSeconds)} s (not counted)`);
  const started = performance.now();
  const runner = new ProjectionRunner(store, readModels, projections);
  await runner.start();
  const cap = new Promise<'cap'>((r) => setTimeout(r, capSeconds * 1000, 'cap').unref());
  const capped = (await Promise.race([runner.caughtUp.then(() => 'done' as const), cap])) === 'cap';
  await runner.stop();
  return { seconds: (performance.now() - started) / 1000, replayed: runner.position === null ? 0 : Number(runner.position), capped };
}

/** Reads every event through the subscription the runner uses; events/s. */
async function readWholeLog(dir: string): Promise<{ events: number; seconds: number }> {
  const store = await LevelEventStore.open(dir);
  try {
    const started = performance.now();
    let events = 0;
    const subscription = store.subscribeToAll();
    for await (const item of subscription) {
      if (item.kind === 'caughtUp') break;
      events++;
    }
    await subscription.close();
    return { events, seconds: (performance.now() - started) / 1000 };
  } finally {
    await store.close();
  }
}

async function main(): Promise<void> {
  timeLimit(REPLAY_CAP_SECONDS + 4 * ALONE_CAP_SECONDS + 200);
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-replay-'));
  const storeDir = join(dataDir, 'eventstore');
  try {
    let t = performance.now();
    const domainEvents = await generate(storeDir);
    log(`wrote ${TOTAL_EVENTS} events (${domainEvents} account and token events) in ${round((performance.now() - t) / 1000)} s`);

    const raw = await readWholeLog(storeDir);
    const rawRate = raw.events / raw.seconds;
    log(`baseline: read ${raw.events} events in ${round(raw.seconds)} s (${round(rawRate)}/s)`);

    const store = await LevelEventStore.open(storeDir);
    const readModels = await openReadModels({ dataDir, bulkLoad: true });
    let replaySeconds: number;
    let replayed: number;
    let capped = false;
    try {
      ({ seconds: replaySeconds, replayed, capped } = await replay(store, readModels, PROJECTIONS, REPLAY_CAP_SECONDS));
      if (capped) {
        log(`replay stopped by its ${REPLAY_CAP_SECONDS} s cap after ${replayed} of ${raw.events} events; checkpoints moved to the head for the restart`);
        const head = await store.headPosition();
        if (head !== null) for (const p of PROJECTIONS) await readModels.commit(p.name, head, []);
      }
    } finally {
      await readModels.close();
      await store.close();
    }
    const replayRate = replayed / replaySeconds;
    log(`replay through ${PROJECTIONS.map((p) => p.name).join(', ')}: ${replayed} events in ${round(replaySeconds)} s (${round(replayRate)} events/s)`);

    t = performance.now();
    const runtime = await openRuntime(loadConfig(embeddedEnv(dataDir)));
    try {
      await runtime.projector?.start();
      await runtime.projector?.caughtUp;
    } finally {
      await runtime.close();
    }
    const restartSeconds = (performance.now() - t) / 1000;
    log(`restart with checkpoint: ready in ${round(restartSeconds)} s`);

    emit({
      name: 'replay_events_per_s',
      target: '>= 50000',
      result: round(replayRate),
      unit: 'events/s',
      ratio: round(replayRate / rawRate),
      baseline: `reading the log without projecting ${round(rawRate)} events/s`,
      command: COMMAND,
      method: `a rebuild as \`npm run cli -- rebuild\` does it (node ${REBUILD_NODE_FLAGS.join(' ')}, read models opened for a bulk load; reset, replay ${capped ? `the first ${replayed} of ${raw.events} events: stopped by the ${REPLAY_CAP_SECONDS} s cap` : `all ${raw.events} events`}) through the ${PROJECTIONS.length} projections of PROJECTIONS (${PROJECTIONS.map((p) => p.name).join(', ')}) into the embedded LevelDB read models; store: ${ACCOUNTS} Unlimited accounts × ${TOKENS_PER_ACCOUNT} tokens, ${domainEvents} account/token events, the rest UsageRecorded in usage-<account> streams over the last 30 days (minute roll-ups are kept ${MINUTE_RETENTION_DAYS} days: a rebuild writes them for the last ${MINUTE_RETENTION_DAYS} days only)`,
    });
    emit({
      name: 'restart_to_ready_s',
      target: '<= 5',
      result: round(restartSeconds),
      unit: 's',
      ratio: round(restartSeconds / replaySeconds),
      baseline: capped ? `the replay of ${replayed} events ${round(replaySeconds)} s` : `the full replay ${round(replaySeconds)} s`,
      command: COMMAND,
      method: `openRuntime (role all, embedded) on the ${raw.events}-event store with every checkpoint at the head${capped ? ' (moved there after the capped replay)' : ''}, until ProjectionRunner.caughtUp`,
    });

    const store2 = await LevelEventStore.open(storeDir);
    const readModels2 = await openReadModels({ dataDir, bulkLoad: true });
    try {
      for (const p of PROJECTIONS) {
        const alone = await replay(store2, readModels2, [p], ALONE_CAP_SECONDS);
        const rate = alone.replayed / alone.seconds;
        log(`${p.name} alone: ${alone.replayed} events in ${round(alone.seconds)} s (${round(rate)}/s)`);
        emit({
          name: `replay_events_per_s_${p.name}_alone`,
          target: null,
          result: round(rate),
          unit: 'events/s',
          ratio: round(rate / rawRate),
          baseline: `reading the log without projecting ${round(rawRate)} events/s`,
          command: COMMAND,
          method: `the ${p.name} projection alone replaying the same log from its start, ${alone.capped ? `stopped after ${ALONE_CAP_SECONDS} s at ${alone.replayed} events` : 'to its end'}`,
        });
      }
    } finally {
      await readModels2.close();
      await store2.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (hasRebuildFlags()) runMain(main);
else {
  const flags = REBUILD_NODE_FLAGS.filter((f) => !process.execArgv.includes(f));
  const child = spawnSync(process.execPath, [...process.execArgv, ...flags, ...process.argv.slice(1)], { stdio: 'inherit' });
  process.exit(child.status ?? 1);
}
