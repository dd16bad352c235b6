import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import {
  type ChainMethodCount,
  SUMMARY_PART_BYTES,
  summaryParts,
  type TokenMonth,
  USAGE_MONTH_CLOSED,
  type UsageMonthClosedData,
  usageMonthClosedId,
} from '../../src/domain/usageSummary.js';
import { EsdbEventStore } from '../../src/infra/eventstore/esdb.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import { COLLECTIONS } from '../../src/projections/core.js';
import { lastClosableMonth, logCutoff, maxAgeSecondsFor, runLogRetentionPass } from '../../src/projections/logRetention.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { usageRecordsOf } from '../../src/projections/usageRecord.js';
import { USAGE_TOTALS, usageTotalsProjection } from '../../src/projections/usageTotals.js';
import { FakeEsdbServer } from '../support/esdbFakeClient.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { applyWrites } from '../support/projectionSpec.js';
import { usageCall } from '../support/usageCall.js';

const dirs: string[] = [];
const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-log-retention-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const ms = (iso: string): number => Date.parse(iso);

describe('the usage log window', () => {
  it('starts at the start of the month holding the plan’s retention less 2 days', () => {
    expect(logCutoff(ms('2027-03-15T12:00:00Z'), 90)).toBe(ms('2026-12-01T00:00:00Z')); // 92 days back: 2026-12-13
    expect(logCutoff(ms('2027-03-15T12:00:00Z'), 7)).toBe(ms('2027-03-01T00:00:00Z')); // 9 days back: 2027-03-06
    expect(logCutoff(ms('2027-03-08T12:00:00Z'), 7)).toBe(ms('2027-02-01T00:00:00Z')); // 2027-02-27
    expect(logCutoff(ms('2027-03-15T12:00:00Z'), 365)).toBe(ms('2026-03-01T00:00:00Z'));
  });

  it('closes a month 2 days after it ends', () => {
    expect(lastClosableMonth(ms('2027-03-02T23:59:59Z'))).toBe('2027-01');
    expect(lastClosableMonth(ms('2027-03-03T00:00:00Z'))).toBe('2027-02');
    expect(lastClosableMonth(ms('2027-01-05T00:00:00Z'))).toBe('2026-12');
  });

  it("gives EventStoreDB's $maxAge a month and the grace period beyond the window", () => {
    expect(maxAgeSecondsFor(90)).toBe((90 + 2 + 31 + 2) * 86_400);
  });
});

describe('UsageMonthClosed', () => {
  const base = { accountId: 'acc_1', month: '2027-02', account: { requests: 10, errors: 1, uncharged: 0 }, closedAt: '2027-03-03T00:00:00.000Z' };
  const token = (i: number, combos: number): TokenMonth => ({
    tokenId: `tok_${String(i).padStart(5, '0')}`,
    requests: combos,
    errors: 0,
    uncharged: 0,
    lastUsedAt: '2027-02-28T23:00:00.000Z',
    calls: Array.from({ length: combos }, (_, c): ChainMethodCount => ['eth', `method_${c}`, combos - c, 0]),
  });

  it('is one part when it fits', () => {
    const parts = summaryParts(base, [token(1, 5), token(2, 3)], true);
    expect(parts).toEqual([{ ...base, tokens: [token(1, 5), token(2, 3)], callsComplete: true, part: 0, parts: 1 }]);
  });

  it('splits many tokens over parts that each stay under SUMMARY_PART_BYTES, every token in one of them', () => {
    const tokens = Array.from({ length: 400 }, (_, i) => token(i, 60));
    const parts = summaryParts(base, tokens, true);
    expect(parts.length).toBeGreaterThan(2);
    for (const [i, part] of parts.entries()) {
      expect(JSON.stringify(part).length).toBeLessThanOrEqual(SUMMARY_PART_BYTES);
      expect(part).toMatchObject({ part: i, parts: parts.length, account: base.account, callsComplete: true });
    }
    expect(parts.flatMap((p) => p.tokens)).toEqual(tokens);
  });

  it('cuts the chain and method list of a token too large for a part, keeping the busiest, and says so', () => {
    const huge = token(1, 20_000);
    const [part, ...more] = summaryParts(base, [huge, token(2, 3)], true);
    expect(more.length).toBeLessThanOrEqual(1);
    expect(JSON.stringify(part).length).toBeLessThanOrEqual(SUMMARY_PART_BYTES);
    const kept = part!.tokens[0]!;
    expect(kept.requests).toBe(20_000); // the totals stay exact
    expect(kept.calls.length).toBeLessThan(20_000);
    expect(kept.calls).toEqual(huge.calls.slice(0, kept.calls.length));
    expect(part!.callsComplete).toBe(false);
  });

  it('has an id per account, month and part, the same every time', () => {
    const id = usageMonthClosedId('acc_1', '2027-02', 0);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(usageMonthClosedId('acc_1', '2027-02', 0)).toBe(id);
    const others = [usageMonthClosedId('acc_1', '2027-02', 1), usageMonthClosedId('acc_1', '2027-03', 0), usageMonthClosedId('acc_2', '2027-02', 0)];
    expect(new Set([id, ...others]).size).toBe(4);
  });
});

const record = usageCall;

describe('the usage totals projection and a closed month', () => {
  let position = 0;
  const event = (type: string, data: Record<string, unknown>, streamId: string): StoredEvent => ({
    streamId,
    revision: position,
    position: String(++position).padStart(20, '0'),
    id: `00000000-0000-7000-8000-${String(position).padStart(12, '0')}`,
    type,
    data,
    metadata: {},
    created: '2027-03-03T00:00:00.000Z',
  });
  const call = (at: string, overrides: Partial<UsageRecord> = {}): StoredEvent =>
    event(USAGE_EVENT_TYPE, { ...record('acc_1', 'tok_1', at, overrides) }, usageStream('acc_1'));
  const summary = (requests: number, lastUsedAt: string): StoredEvent => {
    const data: UsageMonthClosedData = {
      accountId: 'acc_1',
      month: '2027-02',
      account: { requests, errors: 1, uncharged: 1 },
      tokens: [{ tokenId: 'tok_1', requests, errors: 1, uncharged: 1, lastUsedAt, calls: [['eth', 'eth_call', requests, 1]] }],
      callsComplete: true,
      part: 0,
      parts: 1,
      closedAt: '2027-03-03T00:00:00.000Z',
    };
    return event(USAGE_MONTH_CLOSED, { ...data }, 'usagesummary-acc_1');
  };
  /** The documents the events make, event by event and as one batch: the same both ways. */
  const documents = (events: StoredEvent[]) => {
    const oneByOne = applyWrites(events.flatMap((e) => usageTotalsProjection.project(e)));
    expect(applyWrites(usageTotalsProjection.projectBatch?.(events) ?? [])).toEqual(oneByOne);
    return oneByOne;
  };

  it('sets the month to the summary, in log order: calls before it are replaced, calls after it count on top', () => {
    const docs = documents([
      call('2027-02-10T00:00:00.000Z'),
      call('2027-02-11T00:00:00.000Z', { status: 429, charged: false }),
      summary(40, '2027-02-27T00:00:00.000Z'),
      call('2027-02-28T00:00:00.000Z'), // late: after the summary
      call('2027-03-01T00:00:00.000Z'),
    ]);
    expect(docs[USAGE_TOTALS.byAccount]).toEqual({
      'acc_1/2027-02': { requests: 41, errors: 1, uncharged: 1 },
      'acc_1/2027-03': { requests: 1, errors: 0, uncharged: 0 },
    });
    expect(docs[USAGE_TOTALS.byToken]?.['tok_1/2027-02']).toEqual({ requests: 41, errors: 1, uncharged: 1, lastUsedAt: '2027-02-28T00:00:00.000Z' });
  });

  it('is the whole month when the log no longer holds its calls (a rebuild after retention)', () => {
    const docs = documents([summary(40, '2027-02-27T00:00:00.000Z'), call('2027-03-01T00:00:00.000Z')]);
    expect(docs[USAGE_TOTALS.byToken]?.['tok_1/2027-02']).toEqual({ requests: 40, errors: 1, uncharged: 1, lastUsedAt: '2027-02-27T00:00:00.000Z' });
  });

  it('ignores a summary that is not well formed', () => {
    const bad = event(USAGE_MONTH_CLOSED, { accountId: 'acc_1', month: 'February' }, 'usagesummary-acc_1');
    expect(usageTotalsProjection.project(bad)).toEqual([]);
  });
});

describe('a retention pass over the usage log', () => {
  const open = async () => {
    const store = await LevelEventStore.open(tempDir());
    const readModels = await LevelReadModelStore.open(tempDir());
    await readModels.write([
      { op: 'put', collection: COLLECTIONS.accounts, key: 'acc_1', doc: { id: 'acc_1', email: 'a@example.com', plan: 'free', createdAt: '' } },
    ]);
    const append = (...ats: string[]) =>
      store.append(
        usageStream('acc_1'),
        ats.map((at) => {
          const r = record('acc_1', 'tok_1', at);
          return { id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } };
        }),
        'any',
      );
    return { store, readModels, append };
  };
  const now = () => new Date('2027-03-25T00:00:00.000Z'); // Free keeps March (from 2027-03-16 less 2 days)

  it('drops the leading events older than the window and stops at the first newer one: a late record after it stays', async () => {
    const { store, readModels, append } = await open();
    try {
      await append('2027-01-05T00:00:00.000Z', '2027-01-20T00:00:00.000Z');
      await append('2027-02-27T00:00:00.000Z');
      await append('2027-03-20T00:00:00.000Z');
      await append('2027-02-28T23:59:00.000Z'); // late, appended after a March call
      await append('2027-03-21T00:00:00.000Z');
      const projector = new ProjectionRunner(store, readModels, [usageTotalsProjection]);
      await projector.start();
      await projector.caughtUp;
      await projector.stop();
      const report = await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now });
      expect(report).toEqual({ monthsClosed: 2, streamsTruncated: 1, eventsDropped: 3, deferred: 0 });
      const months = (await store.readStream('usagesummary-acc_1')).map((e) => e.data as unknown as UsageMonthClosedData);
      expect(months.map((m) => [m.month, m.account.requests])).toEqual([
        ['2027-01', 2],
        ['2027-02', 2],
      ]);
      const kept = await store.readStream(usageStream('acc_1'));
      expect(kept.map((e) => e.revision)).toEqual([3, 4, 5]);
      expect(kept.flatMap((e) => usageRecordsOf(e)).map((r) => r.at.slice(0, 10))).toEqual(['2027-03-20', '2027-02-28', '2027-03-21']);
      expect(await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now })).toMatchObject({ streamsTruncated: 0, eventsDropped: 0 });
    } finally {
      await store.close();
      await readModels.close();
    }
  });

  it('finishes a summary that a pass stopped between two appends of its parts, each part once', async () => {
    const { store, readModels } = await open();
    try {
      // A month of 9,000 tokens: more parts than one append carries.
      const tokens = Array.from({ length: 9000 }, (_, i) => `tok_${String(i).padStart(6, '0')}_${'x'.repeat(40)}`);
      await readModels.write([
        { op: 'put', collection: USAGE_TOTALS.byAccount, key: 'acc_1/2027-01', doc: { requests: tokens.length, errors: 0, uncharged: 0 } },
        ...tokens.flatMap((tokenId) => [
          {
            op: 'put' as const,
            collection: USAGE_TOTALS.byToken,
            key: `${tokenId}/2027-01`,
            doc: { requests: 1, errors: 0, uncharged: 0, lastUsedAt: '2027-01-05T00:00:00.000Z' },
          },
          { op: 'put' as const, collection: COLLECTIONS.tokensByAccount, key: `acc_1/${tokenId}`, doc: { tokenId } },
        ]),
      ]);
      const append = store.append.bind(store);
      let summaryAppends = 0;
      store.append = async (streamId, events, expected) => {
        if (streamId.startsWith('usagesummary-') && ++summaryAppends > 1) throw new Error('stopped');
        return append(streamId, events, expected);
      };
      await expect(runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now })).rejects.toThrow('stopped');
      store.append = append;
      const first = (await store.readStream('usagesummary-acc_1')).map((e) => e.data as unknown as UsageMonthClosedData);
      const parts = (first[0] as UsageMonthClosedData).parts;
      expect(parts).toBeGreaterThan(first.length);

      // The parts written are projected, as the projector does before the next pass.
      const projector = new ProjectionRunner(store, readModels, [usageTotalsProjection]);
      await projector.start();
      await projector.caughtUp;
      await projector.stop();
      expect(await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now })).toMatchObject({ monthsClosed: 1 });
      const all = (await store.readStream('usagesummary-acc_1')).map((e) => e.data as unknown as UsageMonthClosedData);
      expect(all.map((m) => m.part)).toEqual(Array.from({ length: parts }, (_, i) => i));
      expect(all.flatMap((m) => m.tokens.map((t) => t.tokenId)).sort()).toEqual(tokens);
    } finally {
      await store.close();
      await readModels.close();
    }
  });

  it('summarises a month again before dropping calls that reached the log after its summary: a rebuild then answers what live does', async () => {
    const { store, readModels, append } = await open();
    const project = async (rm: LevelReadModelStore) => {
      const projector = new ProjectionRunner(store, rm, [usageTotalsProjection]);
      await projector.start();
      await projector.caughtUp;
      await projector.stop();
    };
    const january = async (rm: LevelReadModelStore) => (await rm.get<{ requests: number }>(USAGE_TOTALS.byAccount, 'acc_1/2027-01'))?.requests;
    const rebuilt = await LevelReadModelStore.open(tempDir());
    try {
      await append('2027-01-05T00:00:00.000Z', '2027-01-06T00:00:00.000Z');
      await project(readModels);
      expect(await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now: () => new Date('2027-02-05T00:00:00.000Z') })).toMatchObject({
        monthsClosed: 1,
        eventsDropped: 0,
      });
      // A call of January that reached the log after its summary (a gateway's records held back), then March's.
      await append('2027-01-31T23:59:00.000Z');
      await append('2027-03-20T00:00:00.000Z');
      await project(readModels);
      expect(await january(readModels)).toBe(3);

      const report = await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now });
      expect(report).toMatchObject({ eventsDropped: 3 });
      const summaries = (await store.readStream('usagesummary-acc_1')).map((e) => e.data as unknown as UsageMonthClosedData);
      expect(summaries.map((m) => [m.month, m.account.requests])).toEqual([
        ['2027-01', 2],
        ['2027-01', 3],
      ]);
      await project(readModels);
      expect(await january(readModels)).toBe(3);
      await project(rebuilt);
      expect(await january(rebuilt)).toBe(3);
    } finally {
      await store.close();
      await readModels.close();
      await rebuilt.close();
    }
  });

  it("keeps a stream's last event when every call is past the window", async () => {
    const { store, readModels, append } = await open();
    try {
      await append('2027-01-05T00:00:00.000Z');
      await append('2027-01-06T00:00:00.000Z', '2027-01-07T00:00:00.000Z');
      await append('2027-02-01T00:00:00.000Z');
      const projector = new ProjectionRunner(store, readModels, [usageTotalsProjection]);
      await projector.start();
      await projector.caughtUp;
      await projector.stop();
      expect(await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now })).toMatchObject({ streamsTruncated: 1, eventsDropped: 3 });
      expect((await store.readStream(usageStream('acc_1'))).map((e) => e.revision)).toEqual([3]);
      // New calls go on after it.
      await append('2027-03-24T00:00:00.000Z');
      expect((await store.readStream(usageStream('acc_1'))).map((e) => e.revision)).toEqual([3, 4]);
    } finally {
      await store.close();
      await readModels.close();
    }
  });

  it("on EventStoreDB, sets each usage stream's $maxAge once, again when the plan changes, and truncates with $tb", async () => {
    const server = new FakeEsdbServer();
    const store = new EsdbEventStore(server.client);
    const readModels = await LevelReadModelStore.open(tempDir());
    const account = (plan: string) =>
      readModels.write([{ op: 'put', collection: COLLECTIONS.accounts, key: 'acc_1', doc: { id: 'acc_1', email: 'a@example.com', plan, createdAt: '' } }]);
    try {
      await account('free');
      for (const at of ['2027-01-05T00:00:00.000Z', '2027-03-20T00:00:00.000Z', '2027-03-21T00:00:00.000Z']) {
        const r = record('acc_1', 'tok_1', at);
        await store.append(usageStream('acc_1'), [{ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } }], 'any');
      }
      const projector = new ProjectionRunner(store, readModels, [usageTotalsProjection]);
      await projector.start();
      await projector.caughtUp;
      await projector.stop();
      const metadata = async () => (await server.client.getStreamMetadata(usageStream('acc_1'))).metadata;
      await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now });
      expect(await metadata()).toEqual({ maxAge: maxAgeSecondsFor(7), truncateBefore: 1 });
      const calls = server.calls.streamMetadata;
      await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now });
      expect(server.calls.streamMetadata).toBe(calls); // nothing to change: not even read
      await account('unlimited');
      await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now });
      expect(await metadata()).toEqual({ maxAge: maxAgeSecondsFor(365), truncateBefore: 1 });
      expect((await store.readStream(usageStream('acc_1'))).map((e) => e.revision)).toEqual([1, 2]);
    } finally {
      await store.close();
      await readModels.close();
    }
  });

  it('neither closes months nor truncates while the usage totals are behind the log', async () => {
    const { store, readModels, append } = await open();
    try {
      await append('2027-01-05T00:00:00.000Z');
      const report = await runLogRetentionPass({ store, readModels, plans: DEFAULT_PLANS, now, settleTimeoutMs: 50 });
      expect(report).toEqual({ monthsClosed: 0, streamsTruncated: 0, eventsDropped: 0, deferred: 1 });
      expect(await store.readStream(usageStream('acc_1'))).toHaveLength(1);
    } finally {
      await store.close();
      await readModels.close();
    }
  });
});
