import type { MaybePromise } from '../../domain/maybePromise.js';
import { type LimitDecision, type Limiter, type LimitRequest, quotaBucket, type RefundRequest } from './port.js';
import type { MonthAdjustment, UnsettledUnits } from './redis.js';
import { decide, monthId, rateWindow } from './window.js';

/** What the leasing limiter needs of the shared limiter under it (the Redis one). */
export interface LeaseSource extends Limiter {
  readonly ready: boolean;
  whenReady(timeoutMs?: number): Promise<void>;
  /** Gives back `units` of a monthly bucket's count, and of the token's own month when the bucket is the account's (the unused part of a lease). */
  release(monthlyKey: string, tokenId: string, nowMs: number, units: number): Promise<void>;
  /** Holds month units counted or given back without it, sent once it answers again (RedisLimiter.owe). */
  owe?(adjustment: MonthAdjustment): void;
  /** What was dropped of them (RedisLimiter.unsettled). */
  readonly unsettled?: UnsettledUnits;
}

/** A token's calls of one second taken from the shared limiter but not yet used by this process. */
interface Lease {
  second: number;
  rps: number;
  monthlyKey: string;
  monthlyLimit: number | null;
  /** Units granted by the shared limiter and not yet handed to a call. */
  left: number;
  /** What the last decision told the caller was left (its own unused lease included), less what was granted since. */
  rateRemaining: number;
  monthRemaining: number | null;
  /** The shared limiter answered for this second: the remaining counts are known. */
  answered: boolean;
  /** The shared limiter refused part of a request this second: the rest of it is refused here. */
  exhausted: boolean;
  /** Calls asked for this second (granted or not): next second's lease is sized by it. */
  asked: number;
  /** Calls asked for in the previous second (0 after a gap or a change of limits). */
  previousAsked: number;
  /** Set while a request for a lease is in flight: the token's next calls wait for it. */
  leasing: Promise<unknown> | null;
}

/** Stale leases are given back this often (and on close). */
const RELEASE_EVERY_MS = 1000;

/**
 * Counts shared by every gateway (Redis) without a round trip per call. The first call of a
 * token in a second asks the shared limiter for its own cost plus as many calls as the token
 * asked for in the previous second (at most its rate): the limiter grants them atomically, as
 * for any call, so N processes together never admit more than the limits; without a previous
 * second, it asks for as many more as the token asked for before this call in this one (the
 * lease doubles). A token's first call with no history asks for itself only: most tokens of a
 * gateway call less than once a second, and a lease for such a token would go unused and cost
 * a second command to give back. The calls of that second are then granted here until the
 * lease is spent, when the next one asks again. What a lease did not use is given back to the
 * month's count once its second is over: a refused or never-made call uses no quota. The
 * headers stay exact for one process (the remaining counts include its own unused lease); with
 * several, a lease held by one may refuse another's call within that second, never admit one
 * too many. A process that dies holding a lease leaves its unused calls counted for the month
 * (at most one second of its traffic per token).
 */
export class LeasedLimiter implements Limiter {
  private readonly leases = new Map<string, Lease>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly source: LeaseSource,
    private readonly now: () => number = Date.now,
  ) {
    this.timer = setInterval(() => this.releaseStale(), RELEASE_EVERY_MS);
    this.timer.unref();
  }

  get ready(): boolean {
    return this.source.ready;
  }

  whenReady(timeoutMs?: number): Promise<void> {
    return this.source.whenReady(timeoutMs);
  }

  /** At once when the token's lease for this second decides the call; otherwise after asking Redis. */
  take(request: LimitRequest): MaybePromise<LimitDecision> {
    const lease = this.leaseFor(request);
    return lease.leasing === null ? this.takeWith(lease, request) : this.takeAfterLeasing(request);
  }

  private async takeAfterLeasing(request: LimitRequest): Promise<LimitDecision> {
    for (;;) {
      const lease = this.leaseFor(request);
      if (lease.leasing === null) return this.takeWith(lease, request);
      // One lease request per token at a time: the calls behind it use what it brings.
      const failure = await lease.leasing.then(
        () => null,
        (error: unknown) => error,
      );
      if (failure === null) continue;
      // Redis just failed for this token: a call the lease cannot decide fails with it. Asking
      // again one after another, the last of N waiting calls would wait N deadlines.
      const after = this.leaseFor(request);
      if (after.leasing === null && !decidedByLease(after, request)) throw failure;
    }
  }

  /** The token's lease for the request's second and limits; a stale or different one is given back first. */
  private leaseFor(request: LimitRequest): Lease {
    const second = rateWindow(request.nowMs);
    const held = this.leases.get(request.tokenId);
    if (
      held &&
      (held.leasing !== null ||
        (held.second === second && held.rps === request.rps && held.monthlyKey === request.monthly.key && held.monthlyLimit === request.monthly.limit))
    ) {
      return held;
    }
    if (held) this.giveBack(request.tokenId, held);
    const fresh: Lease = {
      second,
      rps: request.rps,
      monthlyKey: request.monthly.key,
      monthlyLimit: request.monthly.limit,
      left: 0,
      rateRemaining: 0,
      monthRemaining: null,
      answered: false,
      asked: 0,
      leasing: null,
      exhausted: false,
      previousAsked: held && held.second === second - 1 && held.rps === request.rps ? held.asked : 0,
    };
    this.leases.set(request.tokenId, fresh);
    return fresh;
  }

  private takeWith(lease: Lease, request: LimitRequest): MaybePromise<LimitDecision> {
    const decided = decidedByLease(lease, request);
    lease.asked += request.cost;
    const fromLease = Math.min(lease.left, request.cost);
    lease.left -= fromLease;
    if (decided) return this.remember(lease, decideFromLeft(request, lease.rateRemaining, lease.monthRemaining));
    return this.askShared(lease, request, fromLease, request.cost - fromLease);
  }

  /** Asks Redis for the call's rest and the lease's next units. */
  private async askShared(lease: Lease, request: LimitRequest, fromLease: number, rest: number): Promise<LimitDecision> {
    // As many more as the previous second still expects, or, past that, as many as this second
    // asked before this call: without history the lease doubles (1, 1 + 1, 1 + 3, …), a busy
    // token reaches Redis a few times, and a token's lone call leases nothing it must give back.
    const extra = Math.max(Math.min(Math.max(lease.previousAsked - lease.asked, lease.asked - request.cost), request.rps), 0);
    const asking = Promise.resolve(this.source.take({ ...request, cost: rest + extra }));
    if (extra > 0) lease.leasing = asking;
    let shared: LimitDecision;
    try {
      shared = await asking;
    } catch (error) {
      // This layer admitted nothing: what the call drew from the lease is unused, given back with the rest.
      this.unused(request.tokenId, lease, fromLease);
      throw error;
    } finally {
      if (lease.leasing === asking) lease.leasing = null;
    }
    // What was left before this request, read back from its decision. The calls taken from the
    // lease were counted by an earlier request: for this call they are left too.
    const rateLeft = shared.rate.remaining + shared.granted + fromLease;
    const monthLeft = shared.monthly.remaining === null ? null : shared.monthly.remaining + shared.granted + fromLease;
    const decision = decideFromLeft(request, rateLeft, monthLeft);
    // The lease keeps what was granted beyond the call's part; the decision counts it as left,
    // as the caller should see it: it is not used yet.
    lease.left += shared.granted - (decision.granted - fromLease);
    if (decision.granted < request.cost) lease.exhausted = true;
    lease.answered = true;
    return this.remember(lease, decision);
  }

  /** Keeps what a decision says is left, for the next calls of the second. */
  private remember(lease: Lease, decision: LimitDecision): LimitDecision {
    lease.rateRemaining = decision.rate.remaining;
    lease.monthRemaining = decision.monthly.remaining;
    return decision;
  }

  /**
   * Gives back units of calls the gateway failed to serve: to Redis's month (the shared limiter
   * refunds there), not to the token's lease. A lease's units are counted in the second's rate
   * window too, and a unit handed back to the lease would let another call through in that
   * second: the rate window keeps what was used. The lease's idea of the month follows, so the
   * next decisions it makes (and their headers) see the units back; and a lease refused part of
   * a request asks Redis again for a call it cannot cover instead of refusing it here.
   */
  refund(request: RefundRequest): Promise<void> {
    const lease = this.leases.get(request.tokenId);
    if (lease !== undefined && lease.monthlyKey === request.bucket && monthId(lease.second * 1000) === monthId(request.nowMs)) {
      if (lease.monthRemaining !== null && lease.monthlyLimit !== null)
        lease.monthRemaining = Math.min(lease.monthRemaining + request.units, lease.monthlyLimit);
      lease.exhausted = false;
    }
    return Promise.resolve(this.source.refund(request));
  }

  /** Units counted or given back while the shared limiter was not used: held there, sent once it answers again. */
  owe(adjustment: MonthAdjustment): void {
    this.source.owe?.(adjustment);
  }

  get unsettled(): UnsettledUnits {
    return this.source.unsettled ?? { counted: { cap: 0, unknown: 0 }, givenBack: { cap: 0, unknown: 0 } };
  }

  /** Returns units to a lease, or straight to the month when the lease was given back meanwhile. */
  private unused(tokenId: string, lease: Lease, units: number): void {
    if (units === 0) return;
    if (this.leases.get(tokenId) === lease) lease.left += units;
    else void this.source.release(lease.monthlyKey, tokenId, lease.second * 1000, units).catch(() => undefined);
  }

  /** Drops a lease and gives its unused calls back to the month (the second's window expires by itself). */
  private giveBack(tokenId: string, lease: Lease): void {
    this.leases.delete(tokenId);
    if (lease.left > 0) void this.source.release(lease.monthlyKey, tokenId, lease.second * 1000, lease.left).catch(() => undefined);
    lease.left = 0;
  }

  /** Gives back every lease of a second that is over (by this process's clock). */
  releaseStale(): void {
    const current = rateWindow(this.now());
    for (const [tokenId, lease] of this.leases) {
      if (lease.second < current && lease.leasing === null) this.giveBack(tokenId, lease);
    }
  }

  async monthlyUsed(key: string, nowMs: number): Promise<number> {
    const used = await this.source.monthlyUsed(key, nowMs);
    const month = monthId(nowMs);
    let held = 0;
    for (const [tokenId, lease] of this.leases) {
      // A lease counts in its bucket and, under the account's, in its token's own month too.
      const counted = lease.monthlyKey === key || quotaBucket.token(tokenId) === key;
      if (counted && monthId(lease.second * 1000) === month) held += lease.left;
    }
    return Math.max(used - held, 0);
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await Promise.allSettled([...this.leases.values()].map((l) => l.leasing));
    const leases = [...this.leases];
    this.leases.clear();
    await Promise.allSettled(leases.filter(([, l]) => l.left > 0).map(([tokenId, l]) => this.source.release(l.monthlyKey, tokenId, l.second * 1000, l.left)));
    await this.source.close();
  }
}

/**
 * Granted from the lease, or refused because this second has nothing more to give (the window
 * cannot refill; the month only through other processes' leases coming back, for at most a
 * second): decided here, from what the last answer left, without asking Redis.
 */
function decidedByLease(lease: Lease, request: LimitRequest): boolean {
  return lease.answered && (request.cost <= lease.left || lease.exhausted);
}

/** The decision of a single counter that has `rateLeft` calls left this second and `monthLeft` this month (null: unlimited). */
function decideFromLeft(request: LimitRequest, rateLeft: number, monthLeft: number | null): LimitDecision {
  const limit = request.monthly.limit;
  return decide(request, request.rps - rateLeft, monthLeft === null || limit === null ? 0 : limit - monthLeft);
}
