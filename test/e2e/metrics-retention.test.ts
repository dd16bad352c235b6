import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { type RetentionJob, startRetentionJob } from '../../src/projections/retention.js';
import { MINUTE_RETENTION_DAYS } from '../../src/projections/usageExpiry.js';
import { USAGE_METRICS } from '../../src/projections/usageMetrics.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

const DAY = 86_400_000;
let nowMs = Date.now();
const clock = () => new Date(nowMs);
let t: TestApp;
let job: RetentionJob;

beforeAll(async () => {
  t = await startTestApp({ now: clock });
  job = startRetentionJob({ readModels: t.runtime.readModels, plans: t.runtime.config.plans, now: clock, initialDelayMs: 3_600_000 });
});
afterAll(async () => {
  await job?.stop();
  await t?.close();
});

const AGES_DAYS = [3, 8, 31, 91, 366];
const PLANS = [
  ['free', 7],
  ['developer', 30],
  ['professional', 90],
  ['unlimited', 365],
] as const;

/** How many documents an account has in each usage collection. */
async function counts(accountId: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const c of Object.values(USAGE_METRICS)) out[c] = (await t.runtime.readModels.range(c, { prefix: `${accountId}/` })).length;
  return out;
}

describe('retention per plan', () => {
  const accounts: Array<{ plan: string; days: number; accountId: string; auth: Record<string, string> }> = [];

  beforeAll(async () => {
    for (const [plan, days] of PLANS) {
      const o = await owner(t.app);
      await t.app.inject({
        method: 'PUT',
        url: `/api/v1/admin/accounts/${o.accountId}/plan`,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        payload: { plan },
      });
      const tokenId = (await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'x' } })).json().id as string;
      // One failed call per age, each in its own minute, hour and day, from its own IP.
      const records: UsageRecord[] = AGES_DAYS.map((age, i) => ({
        requestId: `${o.accountId}-${age}`,
        at: new Date(nowMs - age * DAY).toISOString(),
        accountId: o.accountId,
        tokenId,
        chain: 'eth',
        method: 'eth_call',
        status: 502,
        rpcErrorCode: -32010,
        errorMessage: 'upstream unavailable',
        totalMs: 5,
        upstreamMs: null,
        clientIp: `192.0.2.${i + 1}`,
        upstream: null,
      }));
      await t.runtime.store.append(
        usageStream(o.accountId),
        records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } })),
        'any',
      );
      accounts.push({ plan, days, accountId: o.accountId, auth: o.auth });
    }
    const head = await t.runtime.store.headPosition();
    if (head) await t.runtime.projector?.waitFor(head);
  });

  it('deletes every usage document older than the plan keeps (7, 30, 90, 365 days), and nothing newer', async () => {
    // Each call in its own hour: one raw-row block each.
    for (const a of accounts) expect((await counts(a.accountId))[USAGE_METRICS.requestBlocks]).toBe(AGES_DAYS.length);
    const deleted = await job.runOnce();
    expect(deleted).toBeGreaterThan(0);
    for (const a of accounts) {
      const kept = AGES_DAYS.filter((age) => age < a.days).length;
      // Minute documents are kept MINUTE_RETENTION_DAYS at most (the 8-day-old call sits in the bucket holding that cutoff).
      const minutesKept = AGES_DAYS.filter((age) => age < a.days && age <= MINUTE_RETENTION_DAYS).length;
      const c = await counts(a.accountId);
      expect({ plan: a.plan, ...c }).toEqual({
        plan: a.plan,
        [USAGE_METRICS.requestBlocks]: kept,
        [USAGE_METRICS.requests]: 0,
        [USAGE_METRICS.recentErrors]: kept,
        [USAGE_METRICS.clientIps]: kept,
        // Hour and day per kept call, minute per call inside the minute window; the buckets at the cutoffs stay, nothing else older.
        [USAGE_METRICS.errorGroups]: 2 * kept + minutesKept,
        // Minute, hour, day per kept call, plus months not entirely older than the cutoff.
        [USAGE_METRICS.rollups]: expect.any(Number),
      });
      const rollups = await t.runtime.readModels.range(USAGE_METRICS.rollups, { prefix: `${a.accountId}/day/` });
      expect(rollups).toHaveLength(kept);
      expect(await t.runtime.readModels.range(USAGE_METRICS.rollups, { prefix: `${a.accountId}/minute/` })).toHaveLength(minutesKept);
      // The metrics API agrees: everything it shows is inside the window.
      const m = (await t.app.inject({ method: 'GET', url: '/api/v1/metrics/user?start=2000-01-01T00:00:00Z', headers: a.auth })).json();
      expect(m.totals.requests).toBe(kept);
      expect(m.retention).toMatchObject({ retentionDays: a.days, clamped: true });
    }
  });

  it('a later pass deletes what has aged out since; a second pass on the same day changes nothing', async () => {
    expect(await job.runOnce()).toBe(0);
    nowMs += 5 * DAY;
    await job.runOnce();
    const free = accounts.find((a) => a.plan === 'free');
    const developer = accounts.find((a) => a.plan === 'developer');
    // The 3-day-old call is now 8 days old: past Free's 7 days, inside Developer's 30.
    expect((await counts(free?.accountId ?? ''))[USAGE_METRICS.requestBlocks]).toBe(0);
    expect((await counts(developer?.accountId ?? ''))[USAGE_METRICS.requestBlocks]).toBe(2);
  });
});
