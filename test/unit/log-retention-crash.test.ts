import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { type UsageMonthClosedData, usageSummaryStream } from '../../src/domain/usageSummary.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { COLLECTIONS } from '../../src/projections/core.js';
import { runLogRetentionPass } from '../../src/projections/logRetention.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { usageMetricsProjection } from '../../src/projections/usageMetrics.js';
import { USAGE_TOTALS, usageTotalsProjection } from '../../src/projections/usageTotals.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { usageCall } from '../support/usageCall.js';

/**
 * A retention pass that stops between two appends of a summary's parts (a crash, a deploy). A
 * month of many tokens is summarised in parts, three to an append, so the log may hold only a
 * summary's first parts for a while; each part sets its tokens' month when projected. A call of
 * the month more than 2 days late (an ingester catching up) for a token in a part already
 * written counts on top of it, live. Before truncation drops that call, a summary written whole
 * after it must hold it, else a rebuild (the parts, not the call) answers less than live did.
 * After each scenario the live usage totals equal a rebuild's and what was served, call for call.
 */

const dirs: string[] = [];
const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-log-retention-crash-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const at = (iso: string) => () => new Date(iso);
/** January is closable; nothing is truncated yet (Free keeps from January on). */
const FEB_5 = at('2027-02-05T00:00:00.000Z');
/** Free keeps March only: January's calls go. */
const MAR_25 = at('2027-03-25T00:00:00.000Z');

/** Tokens enough for a summary of more parts than one append carries (long ids: fewer tokens to make the parts). */
const TOKENS = Array.from({ length: 2000 }, (_, i) => `tok_${String(i).padStart(5, '0')}_${'x'.repeat(400)}`);
const FIRST_TOKEN = TOKENS[0] as string;
const LAST_TOKEN = TOKENS[TOKENS.length - 1] as string;

/** Requests per account-month and token-month. */
type Counts = Record<string, number>;

/** The keys whose counts differ, each with [counted, expected]: a short failure among 2,000 tokens. */
const differences = (counted: Counts, expected: Counts): Record<string, [number | undefined, number | undefined]> =>
  Object.fromEntries(
    [...new Set([...Object.keys(counted), ...Object.keys(expected)])]
      .filter((key) => counted[key] !== expected[key])
      .map((key) => [key.replace(/x{400}/, 'x…'), [counted[key], expected[key]]]),
  );

async function open() {
  const store = await LevelEventStore.open(tempDir());
  const readModels = await LevelReadModelStore.open(tempDir());
  const opened: ReadModelStore[] = [readModels];
  await readModels.write([
    { op: 'put', collection: COLLECTIONS.accounts, key: 'acc_1', doc: { id: 'acc_1', email: 'a@example.com', plan: 'free', createdAt: '' } },
  ]);
  const served: UsageRecord[] = [];
  /** Calls served at their times, reaching the log now (as the ingester appends them, however late). */
  const calls = async (records: UsageRecord[]) => {
    served.push(...records);
    for (let i = 0; i < records.length; i += 500) {
      const events = records.slice(i, i + 500).map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } }));
      await store.append(usageStream('acc_1'), events, 'any');
    }
  };
  const call = (tokenId: string, time: string) => calls([usageCall('acc_1', tokenId, time)]);
  /** One January call per token. */
  const january = () => calls(TOKENS.map((tokenId, i) => usageCall('acc_1', tokenId, new Date(Date.UTC(2027, 0, 5, 0, 0, i)).toISOString())));
  /** The usage projections brought up to the log's head, as the projector does. */
  const project = async (rm: ReadModelStore) => {
    const projector = new ProjectionRunner(store, rm, [usageTotalsProjection, usageMetricsProjection]);
    await projector.start();
    await projector.caughtUp;
    await projector.stop();
  };
  const pass = (now: () => Date) => runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now });
  /** A pass that stops (throws) at its `n`th append to the summary stream, as a crash there would leave the log. */
  const passStoppedAtSummaryAppend = async (now: () => Date, n: number) => {
    const append = store.append.bind(store);
    let appends = 0;
    store.append = async (streamId, events, expected) => {
      if (streamId === usageSummaryStream('acc_1') && ++appends === n) throw new Error('stopped');
      return append(streamId, events, expected);
    };
    try {
      await expect(pass(now)).rejects.toThrow('stopped');
    } finally {
      store.append = append;
    }
  };
  const counted = async (rm: ReadModelStore): Promise<Counts> => {
    const counts: Counts = {};
    for (const collection of [USAGE_TOTALS.byAccount, USAGE_TOTALS.byToken]) {
      for (const { key, doc } of await rm.range<{ requests: number }>(collection)) counts[key] = doc.requests;
    }
    return counts;
  };
  const servedCounts = (): Counts => {
    const counts: Counts = {};
    for (const r of served) {
      for (const owner of [r.accountId, r.tokenId]) {
        const key = `${owner}/${r.at.slice(0, 7)}`;
        counts[key] = (counts[key] ?? 0) + 1;
      }
    }
    return counts;
  };
  /** Live equals a rebuild from the log as it is, and both equal what was served. */
  const expectLiveEqualsRebuildAndServed = async () => {
    const rebuilt = await LevelReadModelStore.open(tempDir());
    opened.push(rebuilt);
    await project(rebuilt);
    const expected = servedCounts();
    expect(differences(await counted(readModels), expected)).toEqual({});
    expect(differences(await counted(rebuilt), expected)).toEqual({});
  };
  const summaries = async () => (await store.readStream(usageSummaryStream('acc_1'))).map((e) => e.data as unknown as UsageMonthClosedData);
  /** The summary the stream ends with, every part of it: the account's and a token's requests. */
  const lastSummary = async (tokenId: string) => {
    const all = await summaries();
    const parts = all.at(-1)?.parts ?? 0;
    const last = all.slice(-parts);
    expect(last.map((p) => p.part)).toEqual(Array.from({ length: parts }, (_, i) => i));
    return { account: last[0]?.account.requests, token: last.flatMap((p) => p.tokens).find((t) => t.tokenId === tokenId)?.requests };
  };
  const close = async () => {
    await store.close();
    for (const rm of opened) await rm.close();
  };
  return { store, call, january, project, readModels, pass, passStoppedAtSummaryAppend, expectLiveEqualsRebuildAndServed, summaries, lastSummary, close };
}

describe('a retention pass stopped between two appends of a summary’s parts, and a late call', () => {
  it('for a token in a part written before the stop: the month is summarised whole again before the call goes', { timeout: 120_000 }, async () => {
    const t = await open();
    try {
      await t.january();
      await t.project(t.readModels);
      await t.passStoppedAtSummaryAppend(FEB_5, 2);
      const written = await t.summaries();
      expect(written).toHaveLength(3); // the first append's parts only
      const parts = written[0]?.parts ?? 0;
      expect(parts).toBeGreaterThan(written.length);
      expect(written[0]?.tokens.map((tok) => tok.tokenId)).toContain(FIRST_TOKEN);
      await t.project(t.readModels); // the parts written are projected

      // A January call of a token in part 0 reaches the log over 2 days late; the next pass
      // finishes the summary (its last parts come after the call).
      await t.call(FIRST_TOKEN, '2027-01-31T23:00:00.000Z');
      await t.project(t.readModels);
      expect(await t.pass(FEB_5)).toMatchObject({ monthsClosed: 1, eventsDropped: 0 });
      expect(await t.summaries()).toHaveLength(parts);
      await t.project(t.readModels);

      // In March, January's calls go: the late one only once a summary holds it.
      await t.call(FIRST_TOKEN, '2027-03-20T00:00:00.000Z');
      await t.project(t.readModels);
      expect(await t.pass(MAR_25)).toMatchObject({ eventsDropped: TOKENS.length + 1, deferred: 0 });
      await t.project(t.readModels);
      await t.expectLiveEqualsRebuildAndServed();
      expect(await t.lastSummary(FIRST_TOKEN)).toEqual({ account: TOKENS.length + 1, token: 2 });
    } finally {
      await t.close();
    }
  });

  it('while the pass summarised the month again for that late call: the next pass summarises it whole before the call goes', { timeout: 120_000 }, async () => {
    const t = await open();
    try {
      await t.january();
      await t.project(t.readModels);
      expect(await t.pass(FEB_5)).toMatchObject({ monthsClosed: 1 });
      const parts = (await t.summaries()).length;
      expect(parts).toBeGreaterThan(3);
      await t.project(t.readModels);

      // A January call of a token in the last part, over 2 days late, then March's.
      await t.call(LAST_TOKEN, '2027-01-31T23:00:00.000Z');
      await t.call(LAST_TOKEN, '2027-03-20T00:00:00.000Z');
      await t.project(t.readModels);
      // The pass stops while it writes January's new summary: its first parts only, nothing dropped.
      await t.passStoppedAtSummaryAppend(MAR_25, 2);
      expect(await t.summaries()).toHaveLength(parts + 3);
      expect((await t.store.readStream(usageStream('acc_1'))).length).toBe(TOKENS.length + 2);
      await t.project(t.readModels);

      expect(await t.pass(MAR_25)).toMatchObject({ eventsDropped: TOKENS.length + 1, deferred: 0 });
      await t.project(t.readModels);
      await t.expectLiveEqualsRebuildAndServed();
      expect(await t.lastSummary(LAST_TOKEN)).toEqual({ account: TOKENS.length + 1, token: 2 });
    } finally {
      await t.close();
    }
  });
});
