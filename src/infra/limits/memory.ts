import type { MaybePromise } from '../../domain/maybePromise.js';
import { type LimitDecision, type Limiter, type LimitRequest, ownBucketBesides, quotaBucket, type RefundRequest } from './port.js';
import { decide, MONTHLY_RETENTION_SECONDS, monthId, nextMonthStart, rateWindow } from './window.js';

interface RateWindow {
  second: number;
  used: number;
}

/** Old windows and months are swept at most this often (lazily, on a call: no timer to leak). */
const PRUNE_EVERY_SECONDS = 10;

/**
 * What a quota bucket (`token:<id>`, `account:<id>`) had used in a month before this process
 * counted it: read once per bucket and month, from what outlives the process (the usage totals).
 */
export type QuotaUsedBefore = (bucket: string, nowMs: number) => Promise<number>;

/** What the limiter reads of an account to follow a plan change that turns custom limits off or on. */
export interface AccountPlanReads {
  /** Whether the account's plan has custom limits now (its tokens with their own monthly limit count apart). */
  customLimits(accountId: string): Promise<boolean>;
  /** The account's tokens with their own monthly limit (Queries.tokenIdsWithOwnMonthlyLimit). */
  ownLimitTokens(accountId: string): Promise<string[]>;
}

/** An account's month is read again while its plan's custom limits change under the read, at most this often. */
const ACCOUNT_READS_MAX = 3;

/**
 * In-process limiter with the same semantics as the Redis one: each `take` is one
 * synchronous step (check and count), so concurrent calls in this process never over-admit.
 * Counts live as long as the process; with `usedBefore`, a bucket's month starts from what it
 * had used before (a restart gives no fresh quota): its first call waits for that read, the
 * others take the synchronous step. A granted call also counts in its token's own month when
 * its bucket is the account's (`ownBucketBesides`). With `accounts`, an account's month follows a
 * plan change that turns custom limits off or on (`accountPlanChanged`), as Redis's does
 * (planChange.ts).
 */
export class MemoryLimiter implements Limiter {
  private readonly rateWindows = new Map<string, RateWindow>();
  /** Monthly counts by `<bucket>|<YYYYMM>`, with the month's expiry (Unix s) for pruning. */
  private readonly monthly = new Map<string, { used: number; expireAt: number }>();
  /** Buckets whose month is being read from `usedBefore`, by monthly key: one read each. */
  private readonly seeding = new Map<string, Promise<void>>();
  /**
   * Whether an account's month, by monthly key, is counted as on a plan with custom limits (its
   * tokens with their own limit apart) or without (every call of the account): known from its read.
   */
  private readonly customLimitsOf = new Map<string, boolean>();
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
   * An account's month from the totals, with whether it is counted as on a plan with custom
   * limits: the plan read before and after the totals, again if its custom limits changed between
   * (the totals' figure could be either plan's, and the change's notice would move it or not
   * wrongly).
   */
  private async readAccountMonth(key: string, accountId: string, nowMs: number, usedBefore: QuotaUsedBefore, accounts: AccountPlanReads): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const before = await accounts.customLimits(accountId);
      const used = await usedBefore(quotaBucket.account(accountId), nowMs);
      const after = await accounts.customLimits(accountId);
      if (before === after || attempt === ACCOUNT_READS_MAX) {
        this.seedMonthly(quotaBucket.account(accountId), nowMs, used);
        this.customLimitsOf.set(key, after);
        return;
      }
    }
  }

  /**
   * The account's plan may have changed (its `account:<id>` change notice, after the change is in
   * the read models). When the change turns custom limits off, the months of its tokens with
   * their own limit (every call of theirs, `ownBucketBesides`; read from the totals for a token
   * this process never counted) are added to the account's month, which then counts every call
   * of the account as the account view does; when it turns them on again they are taken out.
   * Only an account month this process counts moves (one it has not read yet is read under the
   * new plan); a change that keeps custom limits as they were moves nothing. Meanwhile the
   * account's calls wait, as for its first read: one counted on the account's bucket under the
   * new plan before the move would be moved twice. Resolves once done; rejects when a read
   * failed, the count then left as it was.
   */
  accountPlanChanged(accountId: string, nowMs: number): Promise<void> {
    const { accounts, usedBefore } = this;
    if (accounts === null || usedBefore === null) return Promise.resolve();
    const key = monthlyKey(quotaBucket.account(accountId), nowMs);
    const pending = this.seeding.get(key);
    // Being read or moved: looked at again once that is done, its plan then known.
    if (pending !== undefined) return pending.catch(() => undefined).then(() => this.accountPlanChanged(accountId, nowMs));
    const month = this.monthly.get(key);
    if (month === undefined) return Promise.resolve();
    this.monthly.delete(key);
    const moving = this.moveAccountMonth(accountId, key, month, nowMs, usedBefore, accounts).finally(() => {
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
    month: { used: number },
    nowMs: number,
    usedBefore: QuotaUsedBefore,
    accounts: AccountPlanReads,
  ): Promise<void> {
    const custom = await accounts.customLimits(accountId);
    const counted = this.customLimitsOf.get(key);
    if (counted === custom) return;
    if (counted !== undefined) {
      const owns = (await accounts.ownLimitTokens(accountId)).map((id) => {
        const bucket = quotaBucket.token(id);
        return { bucket, key: monthlyKey(bucket, nowMs) };
      });
      await Promise.all(owns.filter((own) => !this.monthly.has(own.key)).map((own) => this.seed(own.key, own.bucket, nowMs, usedBefore)));
      // From here on synchronous: the months as they are now, every call of theirs so far in them.
      const units = owns.reduce((sum, own) => sum + (this.monthly.get(own.key)?.used ?? 0), 0);
      month.used = Math.max(0, custom ? month.used - units : month.used + units);
    }
    this.customLimitsOf.set(key, custom);
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
      this.count(month, monthKey, decision.granted, request.nowMs);
      const own = ownBucketBesides(request.tokenId, request.monthly.key);
      if (own !== null) {
        const ownKey = monthlyKey(own, request.nowMs);
        this.count(this.monthly.get(ownKey), ownKey, decision.granted, request.nowMs);
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
    this.uncount(key, request.units);
    if (ownKey !== null) this.uncount(ownKey, request.units);
  }

  private uncount(key: string, units: number): void {
    const month = this.monthly.get(key);
    if (month !== undefined) month.used = Math.max(0, month.used - units);
  }

  /** Adds `granted` to a month's count, in place when it has one. */
  private count(month: { used: number } | undefined, key: string, granted: number, nowMs: number): void {
    // The key holds the month, so an entry's expiry never changes.
    if (month !== undefined) month.used += granted;
    else this.monthly.set(key, { used: granted, expireAt: nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS });
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
    if (!current || current.used < used) {
      this.monthly.set(k, { used, expireAt: nextMonthStart(nowMs) + MONTHLY_RETENTION_SECONDS });
    }
  }

  async close(): Promise<void> {
    this.rateWindows.clear();
    this.monthly.clear();
    this.customLimitsOf.clear();
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
        this.customLimitsOf.delete(key);
      }
    }
  }
}

const monthlyKey = (bucket: string, nowMs: number): string => `${bucket}|${monthId(nowMs)}`;

const ACCOUNT_PREFIX = quotaBucket.account('');
/** The account whose bucket this is; null for a token's. */
const accountOf = (bucket: string): string | null => (bucket.startsWith(ACCOUNT_PREFIX) ? bucket.slice(ACCOUNT_PREFIX.length) : null);
