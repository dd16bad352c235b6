import type { MaybePromise } from '../../domain/maybePromise.js';
import { type LimitDecision, type Limiter, type LimitRequest, ownBucketBesides, type QuotaUsedBefore, quotaBucket, type RefundRequest } from './port.js';
import { decide, MONTHLY_RETENTION_SECONDS, monthId, nextMonthStart, rateWindow } from './window.js';

interface RateWindow {
  second: number;
  used: number;
}

/** Old windows and months are swept at most this often (lazily, on a call: no timer to leak). */
const PRUNE_EVERY_SECONDS = 10;

/** What the limiter reads of an account to follow a change of which of its tokens count apart (a plan change, a token's limit). */
export interface AccountPlanReads {
  /** Whether the account's plan has custom limits now (its tokens with their own monthly limit count apart). */
  customLimits(accountId: string): Promise<boolean>;
  /** The account's tokens with their own monthly limit (Queries.tokenIdsWithOwnMonthlyLimit). */
  ownLimitTokens(accountId: string): Promise<string[]>;
  /** The token's account; null for a token not known. */
  accountOf(tokenId: string): Promise<string | null>;
}

/**
 * A month's count. A token's also says how much of it its account's month holds: `seeded` (what
 * the totals had when it was read, held by the account's month unless the token counted apart
 * then) and `inAccount` (counted here on the account's bucket since, or moved in by a change).
 */
interface Month {
  used: number;
  /** Unix s, for pruning. */
  expireAt: number;
  seeded: number;
  inAccount: number;
}

/** How an account's month is counted: its plan's custom limits, and the tokens it counts apart (their own limit, on such a plan). */
interface AccountCounting {
  custom: boolean;
  apart: ReadonlySet<string>;
}

/** An account's month is read again while its plan's custom limits change under the read, at most this often. */
const ACCOUNT_READS_MAX = 3;

/**
 * In-process limiter with the same semantics as the Redis one: each `take` is one
 * synchronous step (check and count), so concurrent calls in this process never over-admit.
 * Counts live as long as the process; with `usedBefore`, a bucket's month starts from what it
 * had used before (a restart gives no fresh quota): its first call waits for that read, the
 * others take the synchronous step. A granted call also counts in its token's own month when
 * its bucket is the account's (`ownBucketBesides`), and there as counted in the account's. With
 * `accounts`, an account's month follows a plan change that turns custom limits off or on
 * (`accountPlanChanged`) and a token's own limit set or removed (`tokenChanged`), as Redis's does
 * (planChange.ts).
 */
export class MemoryLimiter implements Limiter {
  private readonly rateWindows = new Map<string, RateWindow>();
  /** Monthly counts by `<bucket>|<YYYYMM>`. */
  private readonly monthly = new Map<string, Month>();
  /** Buckets whose month is being read from `usedBefore`, by monthly key: one read each. */
  private readonly seeding = new Map<string, Promise<void>>();
  /** How an account's month, by monthly key, is counted: known from its read, then from each move. */
  private readonly countingOf = new Map<string, AccountCounting>();
  private lastPruneSecond = 0;

  constructor(
    private readonly usedBefore: QuotaUsedBefore | null = null,
    private readonly accounts: AccountPlanReads | null = null,
  ) {}

  take(request: LimitRequest): MaybePromise<LimitDecision> {
    const usedBefore = this.usedBefore;
    if (usedBefore === null) return this.takeNow(request);
    const { nowMs } = request;
    const key = monthlyKey(request.monthly.key, nowMs);
    const own = ownBucketBesides(request.tokenId, request.monthly.key);
    const ownKey = own === null ? null : monthlyKey(own, nowMs);
    const bucketSeeded = this.monthly.has(key);
    const ownSeeded = ownKey === null || this.monthly.has(ownKey);
    if (bucketSeeded && ownSeeded) return this.takeNow(request);
    // The token's own month is read with its first call whatever its bucket: counted from then
    // on, it needs no read when a monthly limit is set on the token mid-month.
    const seeds: Promise<void>[] = [];
    if (!bucketSeeded) seeds.push(this.seed(key, request.monthly.key, nowMs, usedBefore));
    if (own !== null && ownKey !== null && !ownSeeded) seeds.push(this.seed(ownKey, own, nowMs, usedBefore));
    return Promise.all(seeds).then(() => this.takeNow(request));
  }

  private seed(key: string, bucket: string, nowMs: number, usedBefore: QuotaUsedBefore): Promise<void> {
    let pending = this.seeding.get(key);
    if (pending === undefined) {
      const accountId = accountOf(bucket);
      const read =
        accountId !== null && this.accounts !== null
          ? this.readAccountMonth(key, accountId, nowMs, usedBefore, this.accounts)
          : usedBefore(bucket, nowMs).then((used) => this.seedMonthly(bucket, nowMs, used));
      pending = read.finally(() => this.seeding.delete(key));
      this.seeding.set(key, pending);
    }
    return pending;
  }

  /**
   * An account's month from the totals, with how it is counted (the plan's custom limits, the
   * tokens apart): read before and after the totals, again if that changed between (the totals'
   * figure could be either's, and the change's notice would move it or not wrongly).
   */
  private async readAccountMonth(key: string, accountId: string, nowMs: number, usedBefore: QuotaUsedBefore, accounts: AccountPlanReads): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const before = await readCounting(accountId, accounts);
      const used = await usedBefore(quotaBucket.account(accountId), nowMs);
      const after = await readCounting(accountId, accounts);
      if (sameCounting(before, after) || attempt === ACCOUNT_READS_MAX) {
        this.seedMonthly(quotaBucket.account(accountId), nowMs, used);
        this.countingOf.set(key, after);
        return;
      }
    }
  }

  /**
   * The account's plan may have changed (its `account:<id>` change notice, after the change is in
   * the read models). When the change turns custom limits off, the months of the tokens it
   * counted apart (their own limit; read from the totals for a token this process never counted)
   * are added to the account's month, which then counts every call of the account as the account
   * view does; when it turns them on again, the months of its tokens with their own limit are
   * taken out. A token's month moves by what the account's holds of it (`Month.inAccount`): its
   * calls counted on the account's bucket before it was given its own limit are taken out with
   * it and never added twice. Only an account month this process counts moves (one it has not
   * read yet is read under the new plan); a change that keeps custom limits as they were moves
   * nothing. Meanwhile the account's calls wait, as for its first read: one counted on the
   * account's bucket under the new plan before the move would be moved twice. Resolves once done;
   * rejects when a read failed, the count then left as it was.
   */
  accountPlanChanged(accountId: string, nowMs: number): Promise<void> {
    return this.follow(accountId, nowMs, false);
  }

  /**
   * A token changed (its `token:<id>` change notice): on a plan with custom limits, its own limit
   * set moves what the account's month holds of its month out of it, its own limit removed moves
   * its month in, as the account view counts it; any other change moves nothing.
   */
  async tokenChanged(tokenId: string, nowMs: number): Promise<void> {
    if (this.accounts === null || this.usedBefore === null) return;
    const accountId = await this.accounts.accountOf(tokenId);
    if (accountId !== null) await this.follow(accountId, nowMs, true);
  }

  /** Moves the account's month as its counting now asks; `tokens`: its tokens' limits may have changed too. */
  private follow(accountId: string, nowMs: number, tokens: boolean): Promise<void> {
    const { accounts, usedBefore } = this;
    if (accounts === null || usedBefore === null) return Promise.resolve();
    const key = monthlyKey(quotaBucket.account(accountId), nowMs);
    const pending = this.seeding.get(key);
    // Being read or moved: looked at again once that is done, its counting then known.
    if (pending !== undefined) return pending.catch(() => undefined).then(() => this.follow(accountId, nowMs, tokens));
    const month = this.monthly.get(key);
    if (month === undefined) return Promise.resolve();
    this.monthly.delete(key);
    const moving = this.moveAccountMonth(accountId, key, month, nowMs, tokens, usedBefore, accounts).finally(() => {
      this.monthly.set(key, month);
      this.seeding.delete(key);
    });
    // The held calls go on whether the move succeeded or not.
    this.seeding.set(
      key,
      moving.catch(() => undefined),
    );
    return moving;
  }

  private async moveAccountMonth(
    accountId: string,
    key: string,
    month: Month,
    nowMs: number,
    tokens: boolean,
    usedBefore: QuotaUsedBefore,
    accounts: AccountPlanReads,
  ): Promise<void> {
    const custom = await accounts.customLimits(accountId);
    const counted = this.countingOf.get(key);
    // Without custom limits before and after, no token counts apart whatever its limit.
    if (counted !== undefined && counted.custom === custom && !(tokens && custom)) return;
    const apart = new Set(custom ? await accounts.ownLimitTokens(accountId) : []);
    if (counted !== undefined) {
      const moved = [...new Set([...apart, ...counted.apart])].map((id) => {
        const bucket = quotaBucket.token(id);
        return { id, bucket, key: monthlyKey(bucket, nowMs) };
      });
      await Promise.all(moved.filter((token) => !this.monthly.has(token.key)).map((token) => this.seed(token.key, token.bucket, nowMs, usedBefore)));
      // From here on synchronous: each month as it is now, every call of it so far in it.
      let units = 0;
      for (const token of moved) {
        const tokenMonth = this.monthly.get(token.key);
        if (tokenMonth === undefined) continue;
        const seededIn = apart.has(token.id) ? 0 : tokenMonth.seeded;
        const held = (counted.apart.has(token.id) ? 0 : tokenMonth.seeded) + tokenMonth.inAccount;
        // Apart: none of it in the account's month; otherwise all of it.
        const wanted = apart.has(token.id) ? 0 : tokenMonth.used;
        units += wanted - held;
        tokenMonth.inAccount = wanted - seededIn;
      }
      month.used = Math.max(0, month.used + units);
    }
    this.countingOf.set(key, { custom, apart });
  }

  /** The synchronous step, also used by the resilient limiter's fallback. */
  takeNow(request: LimitRequest): LimitDecision {
    const second = rateWindow(request.nowMs);
    this.pruneIfDue(second);

    const window = this.rateWindows.get(request.tokenId);
    const rateUsed = window && window.second === second ? window.used : 0;
    const monthKey = monthlyKey(request.monthly.key, request.nowMs);
    const month = this.monthly.get(monthKey);
    const decision = decide(request, rateUsed, month?.used ?? 0);

    if (decision.granted > 0) {
      // Counted in place: the common call allocates no new window or month entry.
      if (window === undefined) this.rateWindows.set(request.tokenId, { second, used: decision.granted });
      else {
        window.second = second;
        window.used = rateUsed + decision.granted;
      }
      this.count(month, monthKey, decision.granted, request.nowMs, false);
      const own = ownBucketBesides(request.tokenId, request.monthly.key);
      if (own !== null) {
        const ownKey = monthlyKey(own, request.nowMs);
        this.count(this.monthly.get(ownKey), ownKey, decision.granted, request.nowMs, true);
      }
    }
    return decision;
  }

  /**
   * Gives back units a take granted, in the same synchronous step as a take: the bucket's month
   * and the token's own (when the bucket is the account's), never below 0; the rate window keeps
   * them. A month being moved by a plan change (out of the map meanwhile) is given back to once
   * the move is done.
   */
  refund(request: RefundRequest): MaybePromise<void> {
    const key = monthlyKey(request.bucket, request.nowMs);
    const own = ownBucketBesides(request.tokenId, request.bucket);
    const ownKey = own === null ? null : monthlyKey(own, request.nowMs);
    const pending = this.seeding.get(key) ?? (ownKey === null ? undefined : this.seeding.get(ownKey));
    if (pending !== undefined) return pending.catch(() => undefined).then(() => this.refund(request));
    this.uncount(key, request.units, false);
    if (ownKey !== null) this.uncount(ownKey, request.units, true);
  }

  /** `inAccount`: the month is a token's, the units given back to its account's bucket too. */
  private uncount(key: string, units: number, inAccount: boolean): void {
    const month = this.monthly.get(key);
    if (month === undefined) return;
    const back = Math.min(units, month.used);
    month.used -= back;
    if (inAccount) month.inAccount -= back;
  }

  /** Adds `granted` to a month's count, in place when it has one; `inAccount`: a token's month, the call counted on its account's bucket. */
  private count(month: Month | undefined, key: string, granted: number, nowMs: number, inAccount: boolean): void {
    // The key holds the month, so an entry's expiry never changes.
    if (month !== undefined) {
      month.used += granted;
      if (inAccount) month.inAccount += granted;
    } else {
      this.monthly.set(key, { used: granted, expireAt: nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS, seeded: 0, inAccount: inAccount ? granted : 0 });
    }
  }

  async monthlyUsed(key: string, nowMs: number): Promise<number> {
    return this.monthly.get(monthlyKey(key, nowMs))?.used ?? 0;
  }

  /**
   * Raises a bucket's count for the month to at least `used` (the resilient limiter seeds its
   * fallback with the last count Redis reported, so an outage does not restart the quota at 0).
   */
  seedMonthly(key: string, nowMs: number, used: number): void {
    const k = monthlyKey(key, nowMs);
    const current = this.monthly.get(k);
    if (current === undefined) this.monthly.set(k, { used, expireAt: nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS, seeded: used, inAccount: 0 });
    else if (current.used < used) current.used = used;
  }

  async close(): Promise<void> {
    this.rateWindows.clear();
    this.monthly.clear();
    this.countingOf.clear();
  }

  private pruneIfDue(second: number): void {
    if (second - this.lastPruneSecond < PRUNE_EVERY_SECONDS) return;
    this.lastPruneSecond = second;
    for (const [token, window] of this.rateWindows) {
      if (window.second < second) this.rateWindows.delete(token);
    }
    for (const [key, month] of this.monthly) {
      if (month.expireAt < second) {
        this.monthly.delete(key);
        this.countingOf.delete(key);
      }
    }
  }
}

const monthlyKey = (bucket: string, nowMs: number): string => `${bucket}|${monthId(nowMs)}`;

/** How the account's month is counted now: on a plan without custom limits no token counts apart. */
async function readCounting(accountId: string, accounts: AccountPlanReads): Promise<AccountCounting> {
  const custom = await accounts.customLimits(accountId);
  return { custom, apart: new Set(custom ? await accounts.ownLimitTokens(accountId) : []) };
}

const sameCounting = (a: AccountCounting, b: AccountCounting): boolean =>
  a.custom === b.custom && a.apart.size === b.apart.size && [...a.apart].every((id) => b.apart.has(id));

const ACCOUNT_PREFIX = quotaBucket.account('');
/** The account whose bucket this is; null for a token's. */
const accountOf = (bucket: string): string | null => (bucket.startsWith(ACCOUNT_PREFIX) ? bucket.slice(ACCOUNT_PREFIX.length) : null);
