import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AccountPlanReads, MemoryLimiter } from '../../src/infra/limits/memory.js';
import type { LimitDecision, LimitRequest } from '../../src/infra/limits/port.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import {
  accountOnApp,
  DEVELOPER,
  downToFreeAndBack,
  FREE,
  OWN,
  ownLimitRemovedMidMonth,
  ownLimitSetMidMonth,
  planChangeAccount,
  upFromFree,
  writePlanChangePlans,
} from '../support/planChangeAccount.js';
import { quotaCalls, unprojected } from '../support/quotaCalls.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/**
 * On the embedded default (no Redis, the in-process limiter) the account's monthly count follows
 * a plan change that turns its tokens' own limits off (Free: every call of the month counts
 * against the account) or on (a token with its own limit counts apart again, for its whole
 * month), as the account view (`Queries.accountQuotaUsage`) and Redis's bucket
 * (limits-plan-change-redis.test.ts) do, though the account's bucket was read before the change.
 */

const dir = mkdtempSync(join(tmpdir(), 'gw-limits-plan-change-embedded-'));
const plansFile = writePlanChangePlans(dir);

let evm: FakeUpstream;

beforeAll(async () => {
  evm = await startEvmFake();
});
afterAll(async () => {
  await evm?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.each(['on', 'off'])('the embedded limiter (STORAGE_THREAD=%s) at a plan change that turns custom limits off or on', (storageThread) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plansFile, STORAGE_THREAD: storageThread } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('down to Free, the calls of a token with its own limit count against the account; back up, they leave it again', () => downToFreeAndBack(t));

  it('up from Free, the calls a token with its own limit made there leave the account’s count', () => upFromFree(t));

  it('a token given its own limit mid-month: its earlier calls leave the account’s count, and Free counts them once', () => ownLimitSetMidMonth(t));

  it('a token’s own limit removed mid-month: its calls so far join the account’s count', () => ownLimitRemovedMidMonth(t));

  it('moves the calls handed over but not yet in the totals too: the limiter counts them, the view catches up', async () => {
    const a = await planChangeAccount(t);
    expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '19']]);
    expect(await a.viewRemaining(1)).toBe(DEVELOPER - 1);
    await unprojected(t, async () => {
      expect((await quotaCalls(t, a.own.token, 5)).map(([, left]) => left)).toEqual(['14', '13', '12', '11', '10']);
      await a.setPlan('free');
      // The totals lack the 5: the view says 9 left; the limiter counts them, 1 + 5 + this one.
      expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(FREE - 7)]]);
    });
    expect(await a.viewRemaining(7)).toBe(FREE - 7);

    await unprojected(t, async () => {
      expect(await quotaCalls(t, a.own.token, 2)).toEqual([
        [200, '2'],
        [200, '1'],
      ]);
      await a.setPlan('developer');
      // The token's whole month (7) is apart again; the account keeps its shared token's 2, and this one.
      expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(DEVELOPER - 3)]]);
      expect(await quotaCalls(t, a.own.token, 1)).toEqual([[200, String(OWN - 8)]]);
    });
    expect(await a.viewRemaining(11)).toBe(DEVELOPER - 3);
  });
});

describe('after a restart, a token whose month this process never counted', () => {
  it('is moved from the totals', async () => {
    const dataDir = mkdtempSync(join(dir, 'data-'));
    const env = { UPSTREAM_LOCAL: evm.url, PLANS_CONFIG: plansFile };
    let t = await startTestApp({ dataDir, env });
    const a = await planChangeAccount(t);
    expect((await quotaCalls(t, a.own.token, 5)).map(([status]) => status)).toEqual([200, 200, 200, 200, 200]);
    expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '19']]);
    expect(await a.viewRemaining(6)).toBe(DEVELOPER - 1);
    await t.close({ keepData: true });

    t = await startTestApp({ dataDir, env });
    try {
      const again = accountOnApp(t, a.o.accountId, a.o.auth);
      // The account's bucket read again, the token with its own limit not called in this process.
      expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, '18']]);
      await again.setPlan('free');
      // Its 5 from the totals, the shared token's 2, this one.
      expect(await quotaCalls(t, a.shared.token, 1)).toEqual([[200, String(FREE - 8)]]);
      expect(await again.viewRemaining(8)).toBe(FREE - 8);
    } finally {
      await t.close();
    }
  });
});

describe('the in-process limiter while it moves an account’s month', () => {
  const NOW = Date.UTC(2026, 10, 16, 12);
  const request = (tokenId: string, key: string, limit: number | null): LimitRequest => ({ tokenId, rps: 100, monthly: { key, limit }, cost: 1, nowMs: NOW });

  /** An account `a` whose plan's custom limits the test sets, its token `x` with its own limit; each plan read waits for `release` when held. */
  function accountReads(custom: boolean) {
    const state = { custom, planReads: 0, tokenReads: 0, held: null as Promise<void> | null };
    const reads: AccountPlanReads = {
      customLimits: async () => {
        state.planReads++;
        if (state.held) await state.held;
        return state.custom;
      },
      ownLimitTokens: async () => {
        state.tokenReads++;
        return ['x'];
      },
      accountOf: async () => 'a',
    };
    return { state, reads };
  }

  it('holds the account’s calls until the move is done: a call counted meanwhile on the token’s own bucket moves with it', async () => {
    const { state, reads } = accountReads(true);
    const limiter = new MemoryLimiter(async () => 0, reads);
    for (let i = 0; i < 3; i++) expect((await limiter.take(request('x', 'token:x', 15))).granted).toBe(1);
    expect(await limiter.take(request('s', 'account:a', 10))).toMatchObject({ granted: 1, monthly: { remaining: 9 } });

    state.custom = false;
    let release!: () => void;
    state.held = new Promise((resolve) => {
      release = resolve;
    });
    const moved = limiter.accountPlanChanged('a', NOW);
    // A call on the account's bucket waits; one that still has the old plan counts on the token's bucket at once.
    const waiting = limiter.take(request('s', 'account:a', 10));
    expect(waiting).toBeInstanceOf(Promise);
    const early = limiter.take(request('x', 'token:x', 15));
    expect(early).not.toBeInstanceOf(Promise);
    expect((early as LimitDecision).granted).toBe(1);
    release();
    await moved;
    // 1 of the account's, the token's 4, this one.
    expect(await waiting).toMatchObject({ granted: 1, monthly: { remaining: 10 - 6 } });
    const after = limiter.take(request('x', 'account:a', 10));
    expect(after).not.toBeInstanceOf(Promise);
    expect(after).toMatchObject({ granted: 1, monthly: { remaining: 10 - 7 } });

    // Back to custom limits: the token's month (5) leaves the account's.
    state.held = null;
    state.custom = true;
    await limiter.accountPlanChanged('a', NOW);
    expect(await limiter.monthlyUsed('account:a', NOW)).toBe(2);
    expect(await limiter.monthlyUsed('token:x', NOW)).toBe(5);
  });

  it('a change that keeps custom limits as they were moves nothing and reads no tokens; nor does an account never counted here', async () => {
    const { state, reads } = accountReads(true);
    const limiter = new MemoryLimiter(async (bucket) => (bucket === 'account:a' ? 4 : 2), reads);
    await limiter.take(request('s', 'account:a', 10));
    // The account's month read with the tokens it counts apart (before and after the totals).
    expect(state.tokenReads).toBe(2);
    const planReadsAtSeed = state.planReads;
    await limiter.accountPlanChanged('a', NOW);
    await limiter.accountPlanChanged('b', NOW);
    expect(state.planReads).toBe(planReadsAtSeed + 1);
    expect(state.tokenReads).toBe(2);
    expect(await limiter.monthlyUsed('account:a', NOW)).toBe(5);
    expect(limiter.take(request('s', 'account:a', 10))).not.toBeInstanceOf(Promise);
  });

  it('a token given its own limit takes out what the account’s month holds of it, not the calls it made on its own bucket meanwhile', async () => {
    const { reads } = accountReads(true);
    let own: string[] = [];
    reads.ownLimitTokens = async () => own;
    // 3 calls of `y` before this process, on the account's bucket (no limit then).
    const limiter = new MemoryLimiter(async (bucket) => (bucket === 'account:a' || bucket === 'token:y' ? 3 : 0), reads);
    expect(await limiter.take(request('y', 'account:a', 10))).toMatchObject({ granted: 1, monthly: { remaining: 10 - 4 } });
    own = ['y'];
    const moved = limiter.tokenChanged('y', NOW);
    // Decided under its own limit before the notice's reads are done: counted on its own month only.
    expect(await limiter.take(request('y', 'token:y', 8))).toMatchObject({ granted: 1, monthly: { remaining: 8 - 5 } });
    await moved;
    expect(await limiter.monthlyUsed('account:a', NOW)).toBe(0);
    expect(await limiter.monthlyUsed('token:y', NOW)).toBe(5);
    // Its limit removed: its whole month (5) is the account's again.
    own = [];
    await limiter.tokenChanged('y', NOW);
    expect(await limiter.monthlyUsed('account:a', NOW)).toBe(5);
    expect(await limiter.take(request('y', 'account:a', 10))).toMatchObject({ granted: 1, monthly: { remaining: 10 - 6 } });
  });

  it('reads the account again when its plan’s custom limits changed while it was read', async () => {
    const { state, reads } = accountReads(true);
    let viewReads = 0;
    const limiter = new MemoryLimiter(async (bucket) => {
      if (bucket !== 'account:a') return 0;
      viewReads++;
      // The plan changes while the totals are read: the first read's figure may be either plan's.
      if (viewReads === 1) state.custom = false;
      return viewReads === 1 ? 3 : 7;
    }, reads);
    expect(await limiter.take(request('s', 'account:a', 10))).toMatchObject({ granted: 1, monthly: { remaining: 10 - 8 } });
    expect(viewReads).toBe(2);
    // Read once, before the first totals, while the plan still had custom limits.
    expect(state.tokenReads).toBe(1);
    // Its count is known to be Free's: the change's notice then moves nothing.
    await limiter.accountPlanChanged('a', NOW);
    expect(state.tokenReads).toBe(1);
    expect(await limiter.monthlyUsed('account:a', NOW)).toBe(8);
  });
});
