import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { type UsageMonthClosedData, usageSummaryStream } from '../../src/domain/usageSummary.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { Doc } from '../../src/infra/readmodels/port.js';
import { COLLECTIONS } from '../../src/projections/core.js';
import { runLogRetentionPass } from '../../src/projections/logRetention.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { usageMetricsProjection } from '../../src/projections/usageMetrics.js';
import { USAGE_TOTALS, usageTotalsProjection } from '../../src/projections/usageTotals.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { usageCall } from '../support/usageCall.js';

/**
 * A call of a month being summarised that reaches the log while the retention pass summarises
 * it (a projector or ingester catching up after an outage longer than the grace period): before
 * the summary in the log, it must be in it, else the totals projection counts it and then sets
 * the month to a summary without it, live and in a rebuild alike. The race is forced with hooks
 * on the real stores (LevelDB): a call appended just before the pass appends its summary, or
 * appended and projected while the pass reads the month.
 */

const dirs: string[] = [];
const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-log-retention-race-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const FEBRUARY = () => new Date('2027-02-05T00:00:00.000Z'); // January is closable, nothing is truncated yet
const LATE_MARCH = () => new Date('2027-03-25T00:00:00.000Z'); // Free keeps March only: January's calls go

const record = (tokenId: string, at: string): UsageRecord => usageCall('acc_1', tokenId, at);

async function open() {
  const store = await LevelEventStore.open(tempDir());
  const readModels = await LevelReadModelStore.open(tempDir());
  const stores: LevelReadModelStore[] = [readModels];
  await readModels.write([
    { op: 'put', collection: COLLECTIONS.accounts, key: 'acc_1', doc: { id: 'acc_1', email: 'a@example.com', plan: 'free', createdAt: '' } },
  ]);
  const call = (tokenId: string, at: string) => {
    const r = record(tokenId, at);
    return store.append(usageStream('acc_1'), [{ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } }], 'any');
  };
  /** The usage projections brought up to the log's head, as the projector does. */
  const project = async (rm: LevelReadModelStore) => {
    const projector = new ProjectionRunner(store, rm, [usageTotalsProjection, usageMetricsProjection]);
    await projector.start();
    await projector.caughtUp;
    await projector.stop();
  };
  /** January's totals, the account's and each token's. */
  const january = async (rm: LevelReadModelStore) => {
    const requests = async (collection: string, key: string) => (await rm.get<Doc & { requests: number }>(collection, key))?.requests;
    return {
      account: await requests(USAGE_TOTALS.byAccount, 'acc_1/2027-01'),
      tok_1: await requests(USAGE_TOTALS.byToken, 'tok_1/2027-01'),
      tok_2: await requests(USAGE_TOTALS.byToken, 'tok_2/2027-01'),
    };
  };
  /** A rebuild from the log as it is: a new read model store projected from the start. */
  const rebuilt = async () => {
    const rm = await LevelReadModelStore.open(tempDir());
    stores.push(rm);
    await project(rm);
    return january(rm);
  };
  /** Runs `fn` once, just before the pass appends its `n`th append to the summary stream. */
  const beforeSummaryAppend = (n: number, fn: () => Promise<unknown>) => {
    const append = store.append.bind(store);
    let appends = 0;
    store.append = async (streamId, events, expected) => {
      if (streamId === usageSummaryStream('acc_1') && ++appends === n) await fn();
      return append(streamId, events, expected);
    };
  };
  const summaries = async () =>
    (await store.readStream(usageSummaryStream('acc_1'))).map((e) => {
      const d = e.data as unknown as UsageMonthClosedData;
      return [d.month, d.account.requests, Object.fromEntries(d.tokens.map((t) => [t.tokenId, t.requests]))];
    });
  const close = async () => {
    await store.close();
    for (const rm of stores) await rm.close();
  };
  return { store, readModels, call, project, january, rebuilt, beforeSummaryAppend, summaries, close };
}

describe('a call of a month that reaches the log while the retention pass summarises the month', () => {
  it('appended after the pass read the totals, before the summary: a new generation of the summary counts it, live and rebuilt', async () => {
    const t = await open();
    try {
      // Enough events that the pass finds where the totals' checkpoint is in the stream by a search.
      const calls = 37;
      for (let day = 1; day <= calls; day++) await t.call('tok_1', new Date(Date.UTC(2027, 0, 1, day)).toISOString());
      await t.project(t.readModels);
      // A January call more than 2 days late (an ingester catching up), on a token January had no call of yet.
      t.beforeSummaryAppend(1, () => t.call('tok_2', '2027-01-31T23:00:00.000Z'));
      expect(await runLogRetentionPass({ store: t.store, readModels: t.readModels, plans: DEFAULT_PLANS, now: FEBRUARY })).toMatchObject({
        monthsClosed: 1,
        deferred: 0,
      });
      expect(await t.summaries()).toEqual([
        ['2027-01', calls, { tok_1: calls }],
        ['2027-01', calls + 1, { tok_1: calls, tok_2: 1 }],
      ]);
      const whole = { account: calls + 1, tok_1: calls, tok_2: 1 };
      await t.project(t.readModels);
      expect(await t.january(t.readModels)).toEqual(whole);
      expect(await t.rebuilt()).toEqual(whole);

      // Once January's calls are gone from the log, the summaries alone still say so.
      expect(await runLogRetentionPass({ store: t.store, readModels: t.readModels, plans: DEFAULT_PLANS, now: LATE_MARCH })).toMatchObject({
        eventsDropped: calls,
        deferred: 0,
      });
      expect(await t.summaries()).toHaveLength(2);
      await t.project(t.readModels);
      expect(await t.january(t.readModels)).toEqual(whole);
      expect(await t.rebuilt()).toEqual(whole);
    } finally {
      await t.close();
    }
  });

  it('appended and projected while the pass reads the month: the pass reads it again, and the summary holds the call once', async () => {
    const t = await open();
    try {
      await t.call('tok_1', '2027-01-05T00:00:00.000Z');
      await t.call('tok_2', '2027-01-06T00:00:00.000Z');
      await t.project(t.readModels);
      // The account's month read without the call, the tokens' with it.
      const get = t.readModels.get.bind(t.readModels);
      let raced = false;
      t.readModels.get = async <T extends Doc = Doc>(collection: string, key: string): Promise<T | null> => {
        if (collection === USAGE_TOTALS.byToken && !raced) {
          raced = true;
          await t.call('tok_1', '2027-01-31T23:00:00.000Z');
          await t.project(t.readModels);
        }
        return get<T>(collection, key);
      };
      expect(await runLogRetentionPass({ store: t.store, readModels: t.readModels, plans: DEFAULT_PLANS, now: FEBRUARY })).toMatchObject({
        monthsClosed: 1,
        deferred: 0,
      });
      expect(raced).toBe(true);
      expect(await t.summaries()).toEqual([['2027-01', 3, { tok_1: 2, tok_2: 1 }]]);
      const whole = { account: 3, tok_1: 2, tok_2: 1 };
      await t.project(t.readModels);
      expect(await t.january(t.readModels)).toEqual(whole);
      expect(await t.rebuilt()).toEqual(whole);
    } finally {
      await t.close();
    }
  });

  it('projected under every read of the month: the account waits for the next pass, which closes the month with them all', async () => {
    const t = await open();
    try {
      await t.call('tok_1', '2027-01-05T00:00:00.000Z');
      await t.project(t.readModels);
      const get = t.readModels.get.bind(t.readModels);
      let raced = 0;
      t.readModels.get = async <T extends Doc = Doc>(collection: string, key: string): Promise<T | null> => {
        if (collection === USAGE_TOTALS.byToken) {
          await t.call('tok_1', new Date(Date.UTC(2027, 0, 31, 12, ++raced)).toISOString());
          await t.project(t.readModels);
        }
        return get<T>(collection, key);
      };
      expect(await runLogRetentionPass({ store: t.store, readModels: t.readModels, plans: DEFAULT_PLANS, now: FEBRUARY })).toMatchObject({
        monthsClosed: 0,
        deferred: 1,
      });
      expect(await t.summaries()).toEqual([]);
      t.readModels.get = get;
      expect(await runLogRetentionPass({ store: t.store, readModels: t.readModels, plans: DEFAULT_PLANS, now: FEBRUARY })).toMatchObject({
        monthsClosed: 1,
        deferred: 0,
      });
      expect(await t.summaries()).toEqual([['2027-01', 1 + raced, { tok_1: 1 + raced }]]);
    } finally {
      await t.close();
    }
  });

  it('appended while the pass summarises a month again for a late call it drops: counted too, live and rebuilt', async () => {
    const t = await open();
    try {
      await t.call('tok_1', '2027-01-05T00:00:00.000Z');
      await t.call('tok_1', '2027-01-06T00:00:00.000Z');
      await t.project(t.readModels);
      await runLogRetentionPass({ store: t.store, readModels: t.readModels, plans: DEFAULT_PLANS, now: FEBRUARY });
      // A late January call after the summary: truncation summarises January again before dropping it…
      await t.call('tok_1', '2027-01-31T22:00:00.000Z');
      await t.call('tok_1', '2027-03-20T00:00:00.000Z');
      await t.project(t.readModels);
      // …and another one reaches the log just before that new summary.
      t.beforeSummaryAppend(1, () => t.call('tok_2', '2027-01-31T23:00:00.000Z'));
      expect(await runLogRetentionPass({ store: t.store, readModels: t.readModels, plans: DEFAULT_PLANS, now: LATE_MARCH })).toMatchObject({
        eventsDropped: 3,
        deferred: 0,
      });
      expect(await t.summaries()).toEqual([
        ['2027-01', 2, { tok_1: 2 }],
        ['2027-01', 3, { tok_1: 3 }],
        ['2027-01', 4, { tok_1: 3, tok_2: 1 }],
      ]);
      const whole = { account: 4, tok_1: 3, tok_2: 1 };
      await t.project(t.readModels);
      expect(await t.january(t.readModels)).toEqual(whole);
      expect(await t.rebuilt()).toEqual(whole);
    } finally {
      await t.close();
    }
  });
});
