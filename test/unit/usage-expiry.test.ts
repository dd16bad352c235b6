import { mkdtemp, rm as removeDir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import type { Position } from '../../src/infra/eventstore/port.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/index.js';
import type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from '../../src/infra/readmodels/port.js';
import { COLLECTIONS } from '../../src/projections/core.js';
import { purgeAccountUsage, RETENTION_STATE, startRetentionJob } from '../../src/projections/retention.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { DAY_MS } from '../../src/projections/usageBuckets.js';
import { MINUTE_RETENTION_DAYS, usageExpiryOf } from '../../src/projections/usageExpiry.js';
import { USAGE_METRICS, usageMetricsProjection, usageWrites } from '../../src/projections/usageMetrics.js';
import { usageRecord } from '../contract/usagequeue.contract.js';
import { usageEventId } from '../support/oneCallUsage.js';

let dir: string;
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gw-usage-expiry-'));
});
afterAll(async () => {
  await removeDir(dir, { recursive: true, force: true });
});
const openLevel = () => LevelReadModelStore.open(join(dir, `s${n++}`));

const call = (at: string, overrides: Partial<UsageRecord> = {}): UsageRecord =>
  usageRecord({ accountId: 'acc', tokenId: 'tok', at, status: 500, rpcErrorCode: -32000, errorMessage: 'boom', ...overrides });

/** Every document the writes touch, with the furthest expiry they give it. */
function expiries(writes: ReadModelWrite[]): Map<string, number | undefined> {
  const out = new Map<string, number | undefined>();
  for (const w of writes) {
    if (w.op === 'delete') continue;
    const k = `${w.collection}|${w.key}`;
    const before = out.get(k);
    out.set(k, w.expiresAt === undefined ? before : Math.max(before ?? Number.NEGATIVE_INFINITY, w.expiresAt));
  }
  return out;
}

async function keysOf(store: ReadModelStore): Promise<Set<string>> {
  const keys = new Set<string>();
  for (const c of Object.values(USAGE_METRICS)) for (const { key } of await store.range(c)) keys.add(`${c}|${key}`);
  return keys;
}

describe('usage document expiry', () => {
  it('is the end of the bucket (or the call) plus the retention the call was metered under', () => {
    const expiry = usageExpiryOf('2024-05-31T13:45:30.250Z', 7);
    const at = (iso: string) => Date.parse(iso) + 7 * DAY_MS;
    expect(expiry('minute')).toBe(at('2024-05-31T13:46:00.000Z'));
    // Minute documents are kept MINUTE_RETENTION_DAYS at most, whatever the plan.
    expect(usageExpiryOf('2024-05-31T13:45:30.250Z', 365)('minute')).toBe(Date.parse('2024-05-31T13:46:00.000Z') + MINUTE_RETENTION_DAYS * DAY_MS);
    expect(usageExpiryOf('2024-05-31T13:45:30.250Z', 365)('hour')).toBe(Date.parse('2024-05-31T14:00:00.000Z') + 365 * DAY_MS);
    expect(expiry('hour')).toBe(at('2024-05-31T14:00:00.000Z'));
    expect(expiry('day')).toBe(at('2024-06-01T00:00:00.000Z'));
    expect(expiry('month')).toBe(at('2024-06-01T00:00:00.000Z'));
    expect(expiry(null)).toBe(at('2024-05-31T13:45:30.250Z'));
  });

  it('is absent for records without a retention (or with one that is not a number of days)', () => {
    for (const days of [undefined, 0, -3, 1.5, Number.NaN]) expect(usageExpiryOf('2024-05-31T13:45:30.250Z', days)('minute')).toBeUndefined();
    expect(usageWrites(call('2024-05-31T13:45:30.250Z'), 0).every((w) => w.op === 'delete' || w.expiresAt === undefined)).toBe(true);
  });

  it('every document a call writes gets one', () => {
    const writes = usageWrites(call('2024-05-31T13:45:30.250Z', { retentionDays: 30 }), 0);
    expect(writes.length).toBeGreaterThan(5);
    for (const w of writes) {
      const minute = w.key.includes('/minute/');
      // The plan's 30 days, or MINUTE_RETENTION_DAYS for minute documents.
      expect(w.op !== 'delete' && w.expiresAt).toBeGreaterThan(Date.parse(minute ? '2024-06-08T00:00:00.000Z' : '2024-06-30T00:00:00.000Z'));
      if (minute) expect(w.op !== 'delete' && w.expiresAt).toBeLessThan(Date.parse('2024-06-09T00:00:00.000Z'));
    }
  });

  it('agrees with the retention job: what has expired at a time is what a pass then deletes (to the minute for per-call documents)', async () => {
    const start = Date.parse('2024-01-30T22:00:00.000Z');
    for (const days of [7, 30]) {
      // 30: minute documents past MINUTE_RETENTION_DAYS, the rest the plan's
      const store = await openLevel();
      await store.write([{ op: 'put', collection: COLLECTIONS.tokensByAccount, key: 'acc/tok', doc: { tokenId: 'tok' } }]);
      const writes: ReadModelWrite[] = [];
      // A call every 97 minutes and 13 s for 40 days: every granularity's buckets, month ends included.
      for (let t = start; t < start + 40 * DAY_MS; t += 97 * 60_000 + 13_000) {
        writes.push(...usageWrites(call(new Date(t).toISOString(), { retentionDays: days, clientIp: `10.0.0.${t % 7}` }), 0));
      }
      await store.write(writes);
      const expiry = expiries(writes);
      for (const now of [start + (days + 1) * DAY_MS + 123_456, start + (days + 9) * DAY_MS + 7 * 60_000 + 30_000]) {
        await purgeAccountUsage(store, 'acc', new Date(now), days);
        const left = await keysOf(store);
        for (const [key, expiresAt] of expiry) {
          const perCall = key.startsWith(`${USAGE_METRICS.requests}|`) || key.startsWith(`${USAGE_METRICS.recentErrors}|`);
          if (expiresAt === undefined) throw new Error(`no expiry on ${key}`);
          // Per-call documents: the job cuts at the minute, the expiry at the millisecond.
          if (perCall && expiresAt > now - 60_000 && expiresAt <= now) continue;
          expect({ key, kept: left.has(key) }).toEqual({ key, kept: expiresAt > now });
        }
      }
      await store.close();
    }
  });
});

/** The embedded store, told to behave as one that expires documents: it records each document's furthest expiry. */
class ExpiringStore implements ReadModelStore {
  readonly expires = true;
  readonly expiry = new Map<string, number>();
  constructor(private readonly inner: ReadModelStore) {}
  get<T extends Doc = Doc>(collection: string, key: string) {
    return this.inner.get<T>(collection, key);
  }
  range<T extends Doc = Doc>(collection: string, options?: RangeOptions) {
    return this.inner.range<T>(collection, options);
  }
  commit(projection: string, position: Position, writes: ReadModelWrite[]) {
    this.note(writes);
    return this.inner.commit(projection, position, writes);
  }
  checkpoint(projection: string) {
    return this.inner.checkpoint(projection);
  }
  write(writes: ReadModelWrite[]) {
    this.note(writes);
    return this.inner.write(writes);
  }
  reset(projection: string, collections: string[]) {
    return this.inner.reset(projection, collections);
  }
  close() {
    return this.inner.close();
  }
  private note(writes: ReadModelWrite[]): void {
    for (const [key, at] of expiries(writes)) if (at !== undefined) this.expiry.set(key, Math.max(at, this.expiry.get(key) ?? 0));
  }
}

describe('retention job on a store that expires documents', () => {
  it('sweeps an account the first time, then leaves it to the expiries until its plan changes or a day has passed', async () => {
    const store = new ExpiringStore(await openLevel());
    let now = Date.parse('2024-06-20T12:00:00.000Z');
    const job = startRetentionJob({ readModels: store, plans: DEFAULT_PLANS, now: () => new Date(now), initialDelayMs: 3_600_000 });
    try {
      await store.write([
        { op: 'put', collection: COLLECTIONS.accounts, key: 'acc', doc: { id: 'acc', email: 'a@example.com', plan: 'developer', createdAt: '' } },
        { op: 'put', collection: COLLECTIONS.tokensByAccount, key: 'acc/tok', doc: { tokenId: 'tok' } },
      ]);
      const old = (daysAgo: number) => usageWrites(call(new Date(now - daysAgo * DAY_MS).toISOString()), 0);
      await store.write(old(40)); // written without an expiry: only a sweep removes it
      expect(await job.runOnce()).toBeGreaterThan(0);
      expect(await store.get(RETENTION_STATE, 'acc')).toEqual({ retentionDays: 30, sweptAt: now });

      await store.write(old(45));
      now += 3_600_000;
      expect(await job.runOnce()).toBe(0); // the plan did not change, the day is not over: the TTL's work
      now += DAY_MS;
      expect(await job.runOnce()).toBeGreaterThan(0); // the daily sweep

      // A downgrade deletes at once what the shorter window leaves out.
      await store.write(usageWrites(call(new Date(now - 10 * DAY_MS).toISOString(), { retentionDays: 30 }), 0));
      await store.write([{ op: 'merge', collection: COLLECTIONS.accounts, key: 'acc', fields: { plan: 'free' } }]);
      now += 3_600_000;
      expect(await job.runOnce()).toBeGreaterThan(0);
      expect(await store.range(USAGE_METRICS.recentErrors, { prefix: 'acc/' })).toEqual([]);
      expect(await store.get(RETENTION_STATE, 'acc')).toMatchObject({ retentionDays: 7 });

      // An upgrade gives what is still there the new plan's expiry.
      const recent = call(new Date(now - 3 * DAY_MS).toISOString(), { retentionDays: 7 });
      await store.write(usageWrites(recent, 0));
      const rowKey = `${USAGE_METRICS.recentErrors}|acc/${recent.at}/${recent.requestId}`;
      expect(store.expiry.get(rowKey)).toBe(Date.parse(recent.at) + 7 * DAY_MS);
      await store.write([{ op: 'merge', collection: COLLECTIONS.accounts, key: 'acc', fields: { plan: 'unlimited' } }]);
      now += 3_600_000;
      await job.runOnce();
      expect(store.expiry.get(rowKey)).toBe(Date.parse(recent.at) + 365 * DAY_MS);
      const minute = [...store.expiry.keys()].find((k) => k.startsWith(`${USAGE_METRICS.rollups}|acc/minute/${recent.at.slice(0, 16)}`));
      // Minute roll-ups go from 7 days to MINUTE_RETENTION_DAYS, not to the year.
      expect(minute && store.expiry.get(minute)).toBe(Date.parse(`${recent.at.slice(0, 16)}:00.000Z`) + 60_000 + MINUTE_RETENTION_DAYS * DAY_MS);
      // The per-call document is put back as it was.
      expect(await store.range(USAGE_METRICS.recentErrors, { prefix: 'acc/' })).toEqual([
        {
          key: `acc/${recent.at}/${recent.requestId}`,
          doc: { tokenId: 'tok', chain: 'eth', method: 'eth_blockNumber', status: 500, code: -32000, message: 'boom' },
        },
      ]);
    } finally {
      await job.stop();
      await store.close();
    }
  });
});

describe('projecting calls older than what their documents are kept for', () => {
  it('writes only documents not yet expired: no minute roll-up past MINUTE_RETENTION_DAYS, nothing past the plan', async () => {
    const now = Date.parse('2024-06-20T12:00:00.000Z');
    const store = await LevelEventStore.open(join(dir, `events${n++}`));
    const ageOf = new Map<string, number>();
    const records = [1, 10, 40].map((age) => {
      const record = call(new Date(now - age * DAY_MS).toISOString(), { retentionDays: 30 });
      ageOf.set(record.at.slice(0, 10), age);
      return record;
    });
    await store.append(
      usageStream('acc'),
      records.map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } })),
      'any',
    );
    const rm = await openLevel();
    const runner = new ProjectionRunner(store, rm, [usageMetricsProjection], null, () => now);
    await runner.start();
    await runner.caughtUp;
    await runner.stop();
    /** The ages (days) of the calls behind a collection's documents under `prefix`, from their day. */
    const ages = async (collection: string, prefix: string, dayAt: (rest: string) => string) =>
      (await rm.range(collection, { prefix })).map(({ key }) => ageOf.get(dayAt(key.slice(prefix.length)).slice(0, 10))).sort((a, b) => (a ?? 0) - (b ?? 0));
    const first = (rest: string) => rest.split('/', 1)[0] ?? '';
    expect(await ages(USAGE_METRICS.rollups, 'acc/minute/', first)).toEqual([1]);
    expect(await ages(USAGE_METRICS.errorGroups, 'acc/minute/', first)).toEqual([1]);
    expect(await ages(USAGE_METRICS.rollups, 'acc/hour/', first)).toEqual([1, 10]);
    expect(await ages(USAGE_METRICS.rollups, 'acc/day/', first)).toEqual([1, 10]);
    expect(await ages(USAGE_METRICS.requestBlocks, 'acc/', first)).toEqual([1, 10]);
    expect(await ages(USAGE_METRICS.recentErrors, 'acc/', first)).toEqual([1, 10]);
    expect(await ages(USAGE_METRICS.clientIps, 'acc/tok/', first)).toEqual([1, 10]);
    await rm.close();
    await store.close();
  });
});
