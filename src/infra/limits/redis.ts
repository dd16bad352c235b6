import { withinDeadline } from '../deadline.js';
import { closeClient, FAIL_FAST, type RedisClient, type Reply, redisClient, replies, waitForReady } from '../redis/client.js';
import type { LeaseSource } from './leased.js';
import { type LimitDecision, type LimitRequest, ownBucketBesides, type RefundRequest } from './port.js';
import { decide, monthId, monthlyTtlSeconds, rateWindow } from './window.js';

/**
 * Checks and counts the rate window and the monthly quota in one atomic step.
 * KEYS[1] rate window, KEYS[2] month. ARGV: cost, rps, monthly limit (-1 = unlimited),
 * rate window TTL (ms), month TTL (s). Grants min(cost, rate left, month left) and
 * counts only what it grants (a refused call uses no quota). Returns the counts as they were
 * BEFORE the call; the caller derives the decision with the same pure math as the in-process
 * limiter (`decide`), which yields the same `granted` as computed here.
 */
const TAKE_LUA = `
local cost = tonumber(ARGV[1])
local rps = tonumber(ARGV[2])
local monthLimit = tonumber(ARGV[3])
local rateUsed = tonumber(redis.call('GET', KEYS[1]) or '0')
local monthUsed = tonumber(redis.call('GET', KEYS[2]) or '0')
local granted = math.min(cost, math.max(rps - rateUsed, 0))
if monthLimit >= 0 then
  granted = math.min(granted, math.max(monthLimit - monthUsed, 0))
end
if granted > 0 then
  redis.call('INCRBY', KEYS[1], granted)
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
  redis.call('INCRBY', KEYS[2], granted)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[5]))
end
return {rateUsed, monthUsed, granted}
`;

/**
 * Adds a granted call's units to the token's own month when its bucket is the account's:
 * KEYS[1] the token's month. ARGV: units, month TTL (s). Its own command, after the take's
 * reply: the two months hash to different slots in a cluster, and only the granted units count.
 */
const COUNT_LUA = `
redis.call('INCRBY', KEYS[1], tonumber(ARGV[1]))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
`;

/**
 * Gives back units of a month, never below 0: KEYS[1] the month. ARGV: units. Returns what was
 * given back. A month that is not there (expired, or never counted) stays absent.
 */
const REFUND_LUA = `
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = math.min(tonumber(ARGV[1]), used)
if back > 0 then
  redis.call('DECRBY', KEYS[1], back)
end
return back
`;

/** A window key outlives its second a little, so a slow clock on another gateway still sees it. */
const RATE_WINDOW_TTL_MS = 2000;

type TakeReply = [number, number, number];

interface LimiterCommands {
  limiterTake(rateKey: string, monthKey: string, ...args: (string | number)[]): Promise<unknown>;
  limiterCount(monthKey: string, units: number, ttlSeconds: number): Promise<unknown>;
  limiterRefund(monthKey: string, units: number): Promise<unknown>;
}

interface PendingTake {
  request: LimitRequest;
  resolve(decision: LimitDecision): void;
  reject(error: unknown): void;
}

/**
 * Key layout (Redis Cluster safe: both keys of one call must hash to one slot). The hash tag
 * is the monthly bucket (`account:<id>` or `token:<id>`) because a token belongs to exactly
 * one bucket, so tagging the per-token rate key with it costs nothing and keeps the pair
 * together:
 *   rate window  rl:{<bucket>}:<tokenId>:<unixSecond>   expires 2 s after its last use
 *   month        mq:{<bucket>}:<YYYYMM>                 expires 35 days after the month ends
 * A call whose bucket is its account's also counts in its token's month, `mq:{token:<id>}:<YYYYMM>`
 * (the bucket it has once given its own limit), by a second command after the take's reply.
 * A plan change that turns custom limits off or on moves those months into or out of the
 * account's once, marked by `pc:{account:<id>}:<YYYYMM>:<eventId>` (planChange.ts).
 */
export const rateKey = (bucket: string, tokenId: string, nowMs: number): string => `rl:{${bucket}}:${tokenId}:${rateWindow(nowMs)}`;
export const monthKey = (bucket: string, nowMs: number): string => `mq:{${bucket}}:${monthId(nowMs)}`;

export interface RedisLimiterOptions {
  /**
   * Per-command deadline. The default fails fast (50 ms) so a sick Redis does not stall
   * calls; the resilient wrapper then answers from memory.
   */
  commandTimeoutMs?: number;
}

/**
 * ioredis's own command timeout, only to free its queue while Redis hangs: the deadline that
 * decides is `withinDeadline`'s (src/infra/deadline.ts), which ioredis's timer would beat after a
 * stall of this process: a lease reply that arrived in time would be called a timeout, and the
 * gateway would answer from memory, or refuse with fail-closed, for its own pause.
 */
const IOREDIS_TIMEOUT_FACTOR = 10;

/**
 * Redis limiter: one EVALSHA per request (ioredis `defineCommand` falls back to EVAL on
 * NOSCRIPT), the requests of one event-loop turn sent together as one pipeline: one socket
 * write and one read for all that arrived at once (the turn's refunds, one script per month,
 * go first in it). A request waits at most until the end of
 * the current turn. The gateway reaches it through LeasedLimiter, whose requests each cover a
 * token's calls for up to a second.
 */
export class RedisLimiter implements LeaseSource {
  readonly client: RedisClient;
  private pending: PendingTake[] = [];
  /** Units to give back by month key, sent with the turn's takes (before them). */
  private refunds = new Map<string, number>();
  /** Settled once the turn's refunds are answered. */
  private refunded: { promise: Promise<void>; resolve: () => void } | null = null;
  private flushScheduled = false;
  private readonly commandTimeoutMs: number;

  constructor(redisUrl: string, options: RedisLimiterOptions = {}) {
    this.commandTimeoutMs = options.commandTimeoutMs ?? 50;
    // Fail at once while disconnected instead of queueing calls until Redis is back.
    this.client = redisClient(redisUrl, { ...FAIL_FAST, commandTimeout: this.commandTimeoutMs * IOREDIS_TIMEOUT_FACTOR });
    this.client.defineCommand('limiterTake', { numberOfKeys: 2, lua: TAKE_LUA });
    this.client.defineCommand('limiterCount', { numberOfKeys: 1, lua: COUNT_LUA });
    this.client.defineCommand('limiterRefund', { numberOfKeys: 1, lua: REFUND_LUA });
  }

  /** True while the connection is up and commands can be sent. */
  get ready(): boolean {
    return this.client.status === 'ready';
  }

  /** Resolves once connected (at startup), or rejects after `timeoutMs`. */
  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.client, timeoutMs);
  }

  take(request: LimitRequest): Promise<LimitDecision> {
    return new Promise((resolve, reject) => {
      this.pending.push({ request, resolve, reject });
      this.scheduleFlush();
    });
  }

  /**
   * Gives back units to the bucket's month and, when it is the account's, the token's own: queued
   * with the turn's takes, the units of one month summed into one command. Settles (never
   * rejects) once Redis answered or the deadline passed; a refund Redis never got is lost, as a
   * count is while Redis is unreachable.
   */
  refund(request: RefundRequest): Promise<void> {
    if (request.units <= 0) return Promise.resolve();
    this.addRefund(monthKey(request.bucket, request.nowMs), request.units);
    const own = ownBucketBesides(request.tokenId, request.bucket);
    if (own !== null) this.addRefund(monthKey(own, request.nowMs), request.units);
    if (this.refunded === null) {
      let resolve: () => void = () => undefined;
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      this.refunded = { promise, resolve };
    }
    this.scheduleFlush();
    return this.refunded.promise;
  }

  private addRefund(key: string, units: number): void {
    this.refunds.set(key, (this.refunds.get(key) ?? 0) + units);
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    const takes = this.pending;
    this.pending = [];
    this.flushScheduled = false;
    const commands = this.client as unknown as LimiterCommands;
    // Refunds first: a take of the same turn finds the units back.
    if (this.refunds.size > 0) this.sendRefunds(commands);
    if (takes.length === 0) return;
    const sent: Array<Promise<unknown>> = [];
    for (const { request } of takes) {
      const bucket = request.monthly.key;
      sent.push(
        commands.limiterTake(
          rateKey(bucket, request.tokenId, request.nowMs),
          monthKey(bucket, request.nowMs),
          request.cost,
          request.rps,
          request.monthly.limit ?? -1,
          RATE_WINDOW_TTL_MS,
          monthlyTtlSeconds(request.nowMs),
        ),
      );
    }
    const replied = replies(sent);
    this.withinDeadline(replied).then(
      (answered) => {
        for (const [i, take] of takes.entries()) {
          const [error, reply] = answered[i] ?? [new Error('limiter: no reply from Redis'), null];
          if (error) {
            take.reject(error);
            continue;
          }
          const [rateUsed, monthUsed, granted] = reply as TakeReply;
          this.countOwn(take.request, Number(granted));
          take.resolve(decide(take.request, Number(rateUsed), Number(monthUsed)));
        }
      },
      (error: unknown) => {
        for (const take of takes) take.reject(error);
        void replied.then((late) => this.giveBackLate(takes, late));
      },
    );
  }

  private sendRefunds(commands: LimiterCommands): void {
    const refunds = this.refunds;
    const refunded = this.refunded;
    this.refunds = new Map();
    this.refunded = null;
    const sent: Array<Promise<unknown>> = [];
    for (const [key, units] of refunds) sent.push(commands.limiterRefund(key, units));
    void this.withinDeadline(replies(sent))
      .catch(() => undefined)
      .then(() => refunded?.resolve());
  }

  /**
   * Counts granted units in the token's own month when its bucket is the account's. Not waited
   * for: sent on the same connection before the caller hears of the take, so anything this
   * process asks of Redis later (a take on the token's own bucket included) comes after it.
   * A failed count is lost, as a count is while Redis is unreachable (fail-open).
   */
  private countOwn(request: LimitRequest, granted: number): void {
    const own = ownBucketBesides(request.tokenId, request.monthly.key);
    if (own === null || granted <= 0) return;
    const commands = this.client as unknown as LimiterCommands;
    void commands.limiterCount(monthKey(own, request.nowMs), granted, monthlyTtlSeconds(request.nowMs)).catch(() => undefined);
  }

  /**
   * Redis runs a take it answers after the deadline all the same, and counts what it grants in
   * the month; the caller was told the take failed and decided without Redis, so nobody uses
   * those units (a lease's extra calls included): they go back, or each late reply would cost the
   * bucket's monthly quota calls never made. A reply that never comes (ioredis's own timeout, a
   * lost connection) leaves its count, as a process killed holding a lease does.
   */
  private giveBackLate(takes: PendingTake[], late: Reply[]): void {
    for (const [i, { request }] of takes.entries()) {
      const [error, reply] = late[i] ?? [null, null];
      const granted = error === null && Array.isArray(reply) ? Number(reply[2]) : 0;
      // The bucket only: the token's own month counts a take when its reply comes in time (countOwn).
      if (granted > 0) void this.withinDeadline(this.client.decrby(monthKey(request.monthly.key, request.nowMs), granted)).catch(() => undefined);
    }
  }

  /** Gives back `units` counted in a monthly bucket, and in the token's own month when the bucket is the account's (a lease's unused part: see LeasedLimiter). */
  async release(key: string, tokenId: string, nowMs: number, units: number): Promise<void> {
    const own = ownBucketBesides(tokenId, key);
    await this.withinDeadline(
      Promise.all([this.client.decrby(monthKey(key, nowMs), units), own === null ? null : this.client.decrby(monthKey(own, nowMs), units)]),
    );
  }

  async monthlyUsed(key: string, nowMs: number): Promise<number> {
    const value = await this.withinDeadline(this.client.get(monthKey(key, nowMs)));
    return value === null ? 0 : Number(value);
  }

  async close(): Promise<void> {
    await closeClient(this.client);
  }

  private withinDeadline<T>(reply: Promise<T>): Promise<T> {
    return withinDeadline(reply, this.commandTimeoutMs, () => new Error(`limiter: no reply from Redis within ${this.commandTimeoutMs} ms`));
  }
}
