import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { type UsageMonthClosedData, usageSummaryStream } from '../../src/domain/usageSummary.js';
import { EsdbEventStore } from '../../src/infra/eventstore/esdb.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import type { EventStore } from '../../src/infra/eventstore/port.js';
import { PostgresEventStore } from '../../src/infra/eventstore/postgres.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { PostgresReadModelStore } from '../../src/infra/readmodels/postgres.js';
import { COLLECTIONS } from '../../src/projections/core.js';
import { runLogRetentionPass } from '../../src/projections/logRetention.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { usageMetricsProjection } from '../../src/projections/usageMetrics.js';
import { USAGE_TOTALS, usageTotalsProjection } from '../../src/projections/usageTotals.js';
import { FakeEsdbServer } from '../support/esdbFakeClient.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { createTestDatabase, postgresUnavailable } from '../support/postgres.js';
import { usageCall } from '../support/usageCall.js';

/**
 * The retention pass and a projector that is behind the log, after an outage longer than the
 * grace period (2 days): calls of a month reach the log after the pass closed that month, and
 * the month had no usage then, so no summary. Such a call, once truncation drops it, must be
 * in a summary of its month first, and the usage totals must have counted it (or the summary
 * must hold it): else the projector catching up, and a rebuild, never count it. After each
 * scenario the live usage totals equal a rebuild's and what was served, call for call.
 */

const dirs: string[] = [];
const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-log-retention-outage-'));
  dirs.push(dir);
  return dir;
};
const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const at = (iso: string) => () => new Date(iso);
/** January is closable; Free keeps from January on (less 2 days: 2027-01-25). */
const FEB_3 = at('2027-02-03T01:00:00.000Z');
/** Free keeps February on (2027-02-12 less 9 days: 2027-02-03): January's calls go. */
const FEB_12 = at('2027-02-12T00:00:00.000Z');
/** February is closable and its calls go (2027-03-12 less 9 days: 2027-03-03). */
const MAR_12 = at('2027-03-12T00:00:00.000Z');

interface Backend {
  name: string;
  skip: string | null;
  open(): Promise<{ store: EventStore; readModels: ReadModelStore }>;
}

const pgUnavailable = await postgresUnavailable();
const backends: Backend[] = [
  {
    name: 'LevelDB',
    skip: null,
    open: async () => ({ store: await LevelEventStore.open(tempDir()), readModels: await LevelReadModelStore.open(tempDir()) }),
  },
  {
    name: 'PostgreSQL',
    skip: pgUnavailable,
    open: async () => {
      const db = await createTestDatabase();
      const store = await PostgresEventStore.open(db.url);
      const readModels = await PostgresReadModelStore.open(db.url);
      cleanups.push(() => db.drop());
      return { store, readModels };
    },
  },
  {
    name: 'EventStoreDB (double) with LevelDB read models',
    skip: null,
    open: async () => ({ store: new EsdbEventStore(new FakeEsdbServer().client), readModels: await LevelReadModelStore.open(tempDir()) }),
  },
];

/** Requests, errors and quota-free calls per account-month and token-month. */
type Counts = Record<string, { requests: number; errors: number; uncharged: number }>;

async function open(backend: Backend) {
  const { store, readModels } = await backend.open();
  const opened: ReadModelStore[] = [readModels];
  await readModels.write([
    { op: 'put', collection: COLLECTIONS.accounts, key: 'acc_1', doc: { id: 'acc_1', email: 'a@example.com', plan: 'free', createdAt: '' } },
  ]);
  const served: UsageRecord[] = [];
  /** A call served at `at`, reaching the log now (as the ingester appends it, however late). */
  const call = (tokenId: string, at: string) => {
    const r = usageCall('acc_1', tokenId, at);
    served.push(r);
    return store.append(usageStream('acc_1'), [{ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } }], 'any');
  };
  /** The usage projections brought up to the log's head: the projector running, or catching up after its outage. */
  const project = async (rm: ReadModelStore) => {
    const projector = new ProjectionRunner(store, rm, [usageTotalsProjection, usageMetricsProjection]);
    await projector.start();
    await projector.caughtUp;
    await projector.stop();
  };
  const pass = (now: () => Date) => runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now, settleTimeoutMs: 50 });
  /** The usage totals, whole documents by collection. */
  const totals = async (rm: ReadModelStore) => ({
    [USAGE_TOTALS.byAccount]: await rm.range(USAGE_TOTALS.byAccount),
    [USAGE_TOTALS.byToken]: await rm.range(USAGE_TOTALS.byToken),
  });
  /** The usage totals' counts. */
  const counted = async (rm: ReadModelStore): Promise<Counts> => {
    const counts: Counts = {};
    for (const collection of [USAGE_TOTALS.byAccount, USAGE_TOTALS.byToken]) {
      for (const { key, doc } of await rm.range<{ requests: number; errors: number; uncharged?: number }>(collection)) {
        counts[key] = { requests: doc.requests, errors: doc.errors, uncharged: doc.uncharged ?? 0 };
      }
    }
    return counts;
  };
  /** What the calls served add up to (all answered 200, charged). */
  const servedCounts = (): Counts => {
    const counts: Counts = {};
    for (const r of served) {
      for (const owner of [r.accountId, r.tokenId]) {
        const key = `${owner}/${r.at.slice(0, 7)}`;
        counts[key] = { requests: (counts[key]?.requests ?? 0) + 1, errors: 0, uncharged: 0 };
      }
    }
    return counts;
  };
  /** Live equals a rebuild from the log as it is, and both equal what was served. */
  const expectLiveEqualsRebuildAndServed = async () => {
    const rebuilt = await LevelReadModelStore.open(tempDir());
    opened.push(rebuilt);
    await project(rebuilt);
    expect(await counted(readModels)).toEqual(servedCounts());
    expect(await totals(readModels)).toEqual(await totals(rebuilt));
  };
  const summaries = async () =>
    (await store.readStream(usageSummaryStream('acc_1'))).map((e) => {
      const d = e.data as unknown as UsageMonthClosedData;
      return [d.month, d.account.requests];
    });
  const close = async () => {
    await store.close();
    for (const rm of opened) await rm.close();
  };
  return { store, readModels, call, project, pass, expectLiveEqualsRebuildAndServed, summaries, close };
}

for (const backend of backends) {
  describe.skipIf(backend.skip !== null)(
    `late calls of a month closed with no usage, the projector behind, on ${backend.name}${backend.skip ? ` (skipped: ${backend.skip})` : ''}`,
    () => {
      it('the projector stopped for more than 2 days: the pass keeps the calls until it has counted them, then summarises the month and drops them', async () => {
        const t = await open(backend);
        try {
          await t.call('tok_1', '2026-12-10T00:00:00.000Z');
          await t.call('tok_1', '2026-12-20T00:00:00.000Z');
          await t.project(t.readModels);
          // January closed with no usage: December is summarised, January has no summary.
          expect(await t.pass(FEB_3)).toMatchObject({ monthsClosed: 1, deferred: 0 });
          expect(await t.summaries()).toEqual([['2026-12', 2]]);

          // The projector stops. Calls served on January 31 reach the log on February 9 (the
          // ingester catching up), then February's.
          await t.call('tok_2', '2027-01-31T23:00:00.000Z');
          await t.call('tok_1', '2027-01-31T23:30:00.000Z');
          await t.call('tok_1', '2027-02-09T00:00:00.000Z');
          expect(await t.pass(FEB_12)).toMatchObject({ deferred: 1 });

          // The projector catches up; the next pass summarises January, then drops its calls.
          await t.project(t.readModels);
          expect(await t.pass(FEB_12)).toMatchObject({ deferred: 0 });
          expect(await t.summaries()).toEqual([
            ['2026-12', 2],
            ['2027-01', 2],
          ]);
          const kept = await t.store.readStream(usageStream('acc_1'));
          expect(kept.map((e) => (e.data as unknown as UsageRecord).at)).toEqual(['2027-02-09T00:00:00.000Z']);
          await t.project(t.readModels);
          await t.expectLiveEqualsRebuildAndServed();
        } finally {
          await t.close();
        }
      });

      it('the projector caught up with them: the pass summarises the month before it drops them, so a rebuild counts them too', async () => {
        const t = await open(backend);
        try {
          await t.call('tok_1', '2026-12-10T00:00:00.000Z');
          await t.project(t.readModels);
          expect(await t.pass(FEB_3)).toMatchObject({ monthsClosed: 1 });
          await t.call('tok_2', '2027-01-31T23:00:00.000Z');
          await t.call('tok_1', '2027-02-09T00:00:00.000Z');
          await t.project(t.readModels);
          expect(await t.pass(FEB_12)).toMatchObject({ eventsDropped: 2, deferred: 0 });
          expect(await t.summaries()).toEqual([
            ['2026-12', 1],
            ['2027-01', 1],
          ]);
          await t.project(t.readModels);
          await t.expectLiveEqualsRebuildAndServed();
        } finally {
          await t.close();
        }
      });

      it('reaching the log during the pass, not projected yet when it drops them: the summary takes them from the log', async () => {
        const t = await open(backend);
        try {
          await t.call('tok_1', '2027-01-10T00:00:00.000Z');
          await t.project(t.readModels);
          expect(await t.pass(FEB_3)).toMatchObject({ monthsClosed: 1 });
          await t.project(t.readModels);
          // February has no usage by the time the pass (March 12) finds the usage totals at the
          // log's head; then a call served on February 28 and one of March reach the log, and
          // the pass closes February without a summary.
          const checkpoint = t.readModels.checkpoint.bind(t.readModels);
          let raced = false;
          t.readModels.checkpoint = async (projection) => {
            const read = await checkpoint(projection);
            if (!raced) {
              raced = true;
              await t.call('tok_2', '2027-02-28T23:00:00.000Z');
              await t.call('tok_1', '2027-03-11T00:00:00.000Z');
            }
            return read;
          };
          expect(await t.pass(MAR_12)).toMatchObject({ eventsDropped: 2, deferred: 0 });
          expect(raced).toBe(true);
          t.readModels.checkpoint = checkpoint;
          expect(await t.summaries()).toEqual([
            ['2027-01', 1],
            ['2027-02', 1],
          ]);
          await t.project(t.readModels);
          await t.expectLiveEqualsRebuildAndServed();
        } finally {
          await t.close();
        }
      });
    },
  );
}
