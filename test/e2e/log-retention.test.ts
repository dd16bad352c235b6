import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/domain/usage.js';
import { usageStream } from '../../src/domain/usage.js';
import { USAGE_MONTH_CLOSED, type UsageMonthClosedData, usageSummaryStream } from '../../src/domain/usageSummary.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { PROJECTIONS } from '../../src/projections/all.js';
import { LOG_RETENTION_STATE, type LogRetentionReport, logCutoff } from '../../src/projections/logRetention.js';
import { rebuildProjections } from '../../src/projections/rebuild.js';
import { startRetentionJob } from '../../src/projections/retention.js';
import { USAGE_METRICS } from '../../src/projections/usageMetrics.js';
import { usageRecordsOf } from '../../src/projections/usageRecord.js';
import { USAGE_TOTALS } from '../../src/projections/usageTotals.js';
import { SubscriptionReader } from '../contract/eventstore.contract.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * Retention of the usage log, end to end on a runtime with an injected clock: calls up to 400
 * days old are ingested as the gateway hands them over, then one retention pass (the job the
 * projector runs) summarises the closed months, truncates the usage streams and purges the
 * read models. What is past each plan's retention is gone from the log and every read model;
 * the monthly totals stay; a rebuild from what is left equals the live read models.
 */

const DAY = 86_400_000;
const NOW = Date.parse('2027-03-15T12:00:00.000Z');
/** Ages of the calls in days: 400 (2026-02-08) is past every plan's retention; 10 and 1 are in the open month. */
const AGES = [400, 370, 200, 100, 95, 40, 10, 1];
const PLANS = [
  ['free', 7],
  ['professional', 90],
  ['unlimited', 365],
] as const;
const CHAINS = ['eth', 'bsc', 'sol'];
const METHODS = ['eth_call', 'eth_blockNumber', 'getSlot'];

const pgUnavailable = await postgresUnavailable();

/** End (epoch ms) of a `YYYY-MM` month. */
const monthEnd = (month: string): number => Date.UTC(Number(month.slice(0, 4)), Number(month.slice(5, 7)), 1);

interface Account {
  plan: string;
  days: number;
  accountId: string;
  tokens: string[];
}

/** One account's calls of one age: a few per token, with errors and a refused (uncharged) one. */
function callsOf(a: Account, age: number): UsageRecord[] {
  return Array.from({ length: 6 }, (_, i) => {
    const refused = i === 5;
    const failed = i === 3;
    return {
      requestId: `${a.accountId}-${age}-${i}`,
      at: new Date(NOW - age * DAY + i * 60_000).toISOString(),
      accountId: a.accountId,
      tokenId: a.tokens[i % a.tokens.length]!,
      chain: CHAINS[i % CHAINS.length]!,
      method: METHODS[(i + age) % METHODS.length]!,
      status: refused ? 429 : failed ? 502 : 200,
      rpcErrorCode: failed ? -32010 : null,
      errorMessage: failed ? 'upstream unavailable' : null,
      totalMs: 4 + i,
      upstreamMs: refused ? null : 3,
      clientIp: `192.0.2.${1 + (i % 3)}`,
      upstream: refused ? null : 'node-1',
      retentionDays: a.days,
      charged: !refused,
    };
  });
}

/** Every document of every projection, by collection. */
async function dump(rm: ReadModelStore): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const p of PROJECTIONS) for (const c of p.collections) out[c] = await rm.range(c);
  return out;
}

const backends = [
  { name: 'LevelDB', skip: null as string | null, env: async (): Promise<{ env: Record<string, string>; drop?: () => Promise<void> }> => ({ env: {} }) },
  {
    name: 'PostgreSQL',
    skip: pgUnavailable,
    env: async () => {
      const db: TestDatabase = await createTestDatabase();
      return { env: { DATABASE_URL: db.url }, drop: () => db.drop() };
    },
  },
];

for (const backend of backends) {
  describe.skipIf(backend.skip !== null)(`usage log retention on ${backend.name}${backend.skip ? ` (skipped: ${backend.skip})` : ''}`, () => {
    let nowMs = NOW;
    const clock = () => new Date(nowMs);
    let t: TestApp;
    let drop: (() => Promise<void>) | undefined;
    const accounts: Account[] = [];
    /** The usage totals as live counting left them, before any retention. */
    let totalsBefore: Record<string, unknown>;
    let report: LogRetentionReport | undefined;

    const settle = async (): Promise<void> => {
      await t.runtime.ingester?.whenDrained(10_000);
      const head = await t.runtime.store.headPosition();
      if (head) await t.runtime.projector?.waitFor(head, 20_000);
    };
    const totals = async (): Promise<Record<string, unknown>> => ({
      [USAGE_TOTALS.byAccount]: await t.runtime.readModels.range(USAGE_TOTALS.byAccount),
      [USAGE_TOTALS.byToken]: await t.runtime.readModels.range(USAGE_TOTALS.byToken),
    });
    /** One retention pass as the projector runs it (usage log, then read models), on the test's clock. */
    const retentionPass = async (): Promise<void> => {
      const job = startRetentionJob({
        readModels: t.runtime.readModels,
        store: t.runtime.store,
        plans: t.runtime.config.plans,
        now: clock,
        initialDelayMs: 3_600_000,
        onLogPass: (r) => {
          report = r;
        },
        onError: (e) => {
          throw e;
        },
      });
      try {
        await job.runOnce();
      } finally {
        await job.stop();
      }
      await settle();
    };
    const callsIn = (events: StoredEvent[]): UsageRecord[] => events.flatMap((e) => usageRecordsOf(e));

    beforeAll(async () => {
      const opened = await backend.env();
      drop = opened.drop;
      t = await startTestApp({ now: clock, env: opened.env });
      for (const [plan, days] of PLANS) {
        const o = await owner(t.app);
        await t.app.inject({
          method: 'PUT',
          url: `/api/v1/admin/accounts/${o.accountId}/plan`,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
          payload: { plan },
        });
        const tokens: string[] = [];
        for (const name of ['one', 'two']) {
          tokens.push((await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name } })).json().id as string);
        }
        accounts.push({ plan, days, accountId: o.accountId, tokens });
      }
      // Oldest first, each age handed over and ingested before the next, as time would have it.
      for (const age of AGES) {
        for (const a of accounts) for (const record of callsOf(a, age)) t.runtime.usageQueue.enqueue(record);
        await t.runtime.ingester?.whenDrained(10_000);
      }
      await settle();
      totalsBefore = await totals();
      await retentionPass();
    }, 120_000);

    afterAll(async () => {
      await t?.close();
      await drop?.();
    });

    it('drops from each usage stream the calls of the months before its plan keeps, and keeps the others whole', async () => {
      expect(report).toMatchObject({ deferred: 0 });
      expect(report?.streamsTruncated).toBe(accounts.length);
      for (const a of accounts) {
        const cut = logCutoff(NOW, a.days);
        const kept = callsIn(await t.runtime.store.readStream(usageStream(a.accountId)));
        const expected = AGES.flatMap((age) => callsOf(a, age)).filter((r) => Date.parse(r.at) >= cut);
        expect(kept.map((r) => r.requestId).sort(), a.plan).toEqual(expected.map((r) => r.requestId).sort());
        // Whole months: Professional keeps December for its 100-day-old calls, past 90 days.
        if (a.plan === 'professional') expect(kept.some((r) => r.requestId.endsWith('-100-0'))).toBe(true);
        expect(kept.every((r) => Date.parse(r.at) > NOW - 400 * DAY + DAY)).toBe(true);
      }
    });

    it('drops them from the global log: a replay from the start does not see them', async () => {
      const subscription = t.runtime.store.subscribeToAll({ streamPrefixes: accounts.map((a) => `${usageStream(a.accountId)}`) });
      try {
        const { events } = await new SubscriptionReader(subscription).untilCaughtUp(20_000);
        const calls = callsIn(events);
        expect(calls.length).toBeGreaterThan(0);
        for (const a of accounts) {
          const cut = logCutoff(NOW, a.days);
          const mine = calls.filter((r) => r.accountId === a.accountId);
          expect(mine.length, a.plan).toBeGreaterThan(0);
          expect(
            mine.filter((r) => Date.parse(r.at) < cut),
            a.plan,
          ).toEqual([]);
        }
      } finally {
        await subscription.close();
      }
    });

    it('summarises every closed month once, with the totals live counting gave', async () => {
      for (const a of accounts) {
        const summaries = (await t.runtime.store.readStream(usageSummaryStream(a.accountId))).filter((e) => e.type === USAGE_MONTH_CLOSED);
        const data = summaries.map((e) => e.data as unknown as UsageMonthClosedData);
        // Months with calls that ended two days before NOW or earlier: all but March 2027.
        const months = [...new Set(AGES.map((age) => new Date(NOW - age * DAY).toISOString().slice(0, 7)))].filter((m) => m < '2027-03').sort();
        expect(data.map((d) => d.month).sort(), a.plan).toEqual(months);
        for (const d of data) {
          const calls = AGES.flatMap((age) => callsOf(a, age)).filter((r) => r.at.startsWith(d.month));
          expect(d.account).toEqual({ requests: calls.length, errors: calls.filter((r) => r.status >= 400).length, uncharged: 1 * (calls.length / 6) });
          expect(d.tokens.map((tk) => tk.tokenId).sort()).toEqual([...a.tokens].sort());
          expect(d.tokens.reduce((sum, tk) => sum + tk.requests, 0)).toBe(calls.length);
          // By chain and method, from the month's roll-ups: here calls of long ago arrive now, so a month whose
          // roll-ups had expired at once (its end is further back than the plan keeps) has none; live, a month
          // is closed days after its end, long before.
          const rolledUp = monthEnd(d.month) + a.days * DAY > NOW;
          expect(d.callsComplete, `${a.plan} ${d.month}`).toBe(rolledUp);
          const byChainMethod = d.tokens.flatMap((tk) => tk.calls);
          if (rolledUp) {
            expect(byChainMethod.reduce((sum, c) => sum + c[2], 0)).toBe(calls.length);
            expect(byChainMethod.reduce((sum, c) => sum + c[3], 0)).toBe(calls.filter((r) => r.status >= 400).length);
            expect(new Set(byChainMethod.map((c) => c[0]))).toEqual(new Set(calls.map((r) => r.chain)));
          } else expect(byChainMethod).toEqual([]);
        }
      }
      // A second pass writes nothing more.
      await retentionPass();
      expect(report).toMatchObject({ monthsClosed: 0, streamsTruncated: 0, eventsDropped: 0 });
    });

    it('keeps the monthly totals of months whose calls are gone, as they were counted', async () => {
      expect(await totals()).toEqual(totalsBefore);
      const unlimited = accounts.find((a) => a.plan === 'unlimited')!;
      // February 2026: 400 days ago, gone from the log; 5 of its 6 calls used quota.
      expect(await t.runtime.queries.accountMonthUsage(unlimited.accountId, '2026-02')).toBe(5);
      expect(await t.runtime.store.readStream(usageStream(unlimited.accountId))).not.toHaveLength(0);
    });

    it('purges every read model of what is past the plan', async () => {
      for (const a of accounts) {
        const oldDay = new Date(NOW - 400 * DAY).toISOString().slice(0, 10);
        for (const collection of Object.values(USAGE_METRICS)) {
          const keys = (await t.runtime.readModels.range(collection, { prefix: `${a.accountId}/` })).map((d) => d.key);
          expect(
            keys.filter((k) => k.includes(oldDay) || k.includes('/month/2026-02/')),
            `${a.plan} ${collection}`,
          ).toEqual([]);
        }
      }
      const state = await t.runtime.readModels.get(LOG_RETENTION_STATE, accounts[0]!.accountId);
      expect(state).toMatchObject({ closedThrough: '2027-02' });
    });

    it('a month later, the month that was open is summarised and leaves the logs of the plans past it', async () => {
      nowMs = NOW + 35 * DAY; // 2027-04-19: March 2027 is closable, Free keeps April only
      const free = accounts.find((a) => a.plan === 'free')!;
      const before = await t.runtime.readModels.get(USAGE_TOTALS.byAccount, `${free.accountId}/2027-03`);
      await retentionPass();
      // Each plan's window moved on a month: Free loses March, Professional December, Unlimited March 2026.
      expect(report).toMatchObject({ monthsClosed: accounts.length, streamsTruncated: accounts.length, deferred: 0 });
      // Free's calls are all past its window now: only the stream's last event stays (the usage appender numbers the next calls from it).
      const left = await t.runtime.store.readStream(usageStream(free.accountId));
      expect(left).toHaveLength(1);
      expect(callsIn(left).every((r) => r.requestId.startsWith(`${free.accountId}-1-`))).toBe(true);
      expect(await t.runtime.readModels.get(USAGE_TOTALS.byAccount, `${free.accountId}/2027-03`)).toEqual(before);
      expect(await t.runtime.queries.accountMonthUsage(free.accountId, '2027-03')).toBe(10);
      for (const a of accounts.filter((x) => x !== free)) {
        const cut = logCutoff(nowMs, a.days);
        const kept = callsIn(await t.runtime.store.readStream(usageStream(a.accountId)));
        expect(kept.map((r) => r.requestId).sort(), a.plan).toEqual(
          AGES.flatMap((age) => callsOf(a, age))
            .filter((r) => Date.parse(r.at) >= cut)
            .map((r) => r.requestId)
            .sort(),
        );
      }
      expect(logCutoff(nowMs, 90)).toBe(Date.parse('2027-01-01T00:00:00Z'));
    });

    it('a rebuild from what the log still holds equals the live read models', async () => {
      const live = await dump(t.runtime.readModels);
      expect((live[USAGE_METRICS.requestBlocks] as unknown[]).length).toBeGreaterThan(0);
      await t.runtime.projector?.stop();
      await rebuildProjections(t.runtime.store, t.runtime.readModels, PROJECTIONS, { now: () => nowMs });
      // The read models as the retention job leaves them (a replay writes what it cannot know the job deleted).
      const purge = startRetentionJob({ readModels: t.runtime.readModels, plans: t.runtime.config.plans, now: clock, initialDelayMs: 3_600_000 });
      await purge.runOnce();
      await purge.stop();
      expect(await dump(t.runtime.readModels)).toEqual(live);
    });
  });
}
