import { withinDeadline } from '../deadline.js';
import { closeClient, FAIL_FAST, type RedisClient, type Reply, redisClient, replies, waitForReady } from '../redis/client.js';
import type { LeaseSource } from './leased.js';
import { type LimitDecision, type LimitRequest, ownBucketBesides, type QuotaUsedBefore, quotaBucket, type RefundRequest } from './port.js';
import { decide, monthId, monthlyTtlSeconds, rateWindow } from './window.js';

/**
 * Checks and counts the rate window and the monthly quota in one atomic step.
 * KEYS[1] rate window, KEYS[2] month. ARGV: cost, rps, monthly limit (-1 = unlimited),
 * rate window TTL (ms), month TTL (s). Grants min(cost, rate left, month left) and
 * counts only what it grants (a refused call uses no quota). Returns the counts as they were
 * BEFORE the call; the caller derives the decision with the same pure math as the in-process
 * limiter (`decide`), which yields the same `granted` as computed here. And 1 when this take
 * made the month's counter while the bucket's previous month has none either (KEYS[3]: same hash
 * tag; kept 35 days past its month, so a month that just began has it): Redis lost the counters
 * (`fresh`), else 0.
 */
const TAKE_LUA = `
local cost = tonumber(ARGV[1])
local rps = tonumber(ARGV[2])
local monthLimit = tonumber(ARGV[3])
local rateUsed = tonumber(redis.call('GET', KEYS[1]) or '0')
local monthText = redis.call('GET', KEYS[2])
local monthUsed = tonumber(monthText or '0')
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
local fresh = 0
if granted > 0 and not monthText and redis.call('EXISTS', KEYS[3]) == 0 then
  fresh = 1
end
return {rateUsed, monthUsed, granted, fresh}
`;

/**
 * Adds a granted call's units to the token's own month when its bucket is the account's:
 * KEYS[1] the token's month, KEYS[2] (when given) the part of it in the account's month
 * (`inAccountKey`). ARGV: units, month TTL (s). Its own command, after the take's reply: the two
 * months hash to different slots in a cluster, and only the granted units count. Also a month's
 * units owed, and its units restored. The keys' second half is each counter's previous month.
 * Returns, per counter, 1 where this made it while its previous month has none (as the take's `fresh`).
 */
const COUNT_LUA = `
local n = #KEYS / 2
local fresh = {}
for i = 1, n do
  local key = KEYS[i]
  fresh[i] = (redis.call('EXISTS', key) == 0 and redis.call('EXISTS', KEYS[n + i]) == 0) and 1 or 0
  redis.call('INCRBY', key, tonumber(ARGV[1]))
  redis.call('EXPIRE', key, tonumber(ARGV[2]))
end
return fresh
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

type TakeReply = [number, number, number, number];

/** Whether a reply of COUNT_LUA says it made key `i`'s counter. */
const madeCounter = (reply: unknown, i: number): boolean => Array.isArray(reply) && Number(reply[i]) === 1;

/**
 * The quota bucket a month counter counts: `mq:{<bucket>}:<YYYYMM>`, or `ma:{token:<id>}:<YYYYMM>`
 * (the part of the token's month in its account's: made only while the token counts there, when
 * that part is all of the token's month). Null for any other key.
 */
const bucketOfMonthKey = (key: string): string | null => /^m[qa]:\{(.+)\}:\d{6}$/.exec(key)?.[1] ?? null;

/** The same counter's key in the month before: its `YYYYMM` suffix one month back. */
const previousMonthKey = (key: string): string => {
  const year = Number(key.slice(-6, -2));
  const month = Number(key.slice(-2));
  const [y, m] = month === 1 ? [year - 1, 12] : [year, month - 1];
  return `${key.slice(0, -6)}${y}${String(m).padStart(2, '0')}`;
};

/**
 * A month counter just made is given its month's earlier calls only when the usage totals answer
 * within this: other gateways' calls counted in it meanwhile could be in a later answer too
 * (projected within ~100s of ms), and would count twice. This process's calls of the bucket wait
 * for the read.
 */
const RESTORE_READ_MS = 1_000;

interface LimiterCommands {
  limiterTake(rateKey: string, monthKey: string, previousMonth: string, ...args: (string | number)[]): Promise<unknown>;
  limiterCount(monthKey: string, previousMonth: string, units: number, ttlSeconds: number): Promise<unknown>;
  limiterCountOwn(
    tokenMonth: string,
    inAccount: string,
    previousTokenMonth: string,
    previousInAccount: string,
    units: number,
    ttlSeconds: number,
  ): Promise<unknown>;
  limiterRefund(monthKey: string, units: number): Promise<unknown>;
}

/** Units of one month, and a moment of it (for a count's expiry). */
interface Owed {
  units: number;
  nowMs: number;
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
 * (the bucket it has once given its own limit), and in `ma:{token:<id>}:<YYYYMM>` (`inAccountKey`),
 * by a second command after the take's reply. A plan change that turns custom limits off or on,
 * or a token's own limit set or removed, moves those months into or out of the account's once,
 * marked by `pc:{account:<id>}:<YYYYMM>:<eventId>` and `pc:{token:<id>}:<YYYYMM>:<eventId>` (planChange.ts).
 */
export const rateKey = (bucket: string, tokenId: string, nowMs: number): string => `rl:{${bucket}}:${tokenId}:${rateWindow(nowMs)}`;
export const monthKey = (bucket: string, nowMs: number): string => `mq:{${bucket}}:${monthId(nowMs)}`;
/**
 * The part of a token's month its account's month holds: its calls counted on the account's
 * bucket (with its month, and given back with it), or moved in by a change (planChange.ts).
 */
export const inAccountKey = (tokenId: string, nowMs: number): string => `ma:{${quotaBucket.token(tokenId)}}:${monthId(nowMs)}`;

/**
 * The month keys a bucket's units go to: its month and, when it is the account's, the token's own
 * month and the part of it in the account's (a take counts them so; a refund, a release and units
 * owed move them alike).
 */
const monthKeysOf = (tokenId: string, bucket: string, nowMs: number): string[] => {
  const own = ownBucketBesides(tokenId, bucket);
  return own === null ? [monthKey(bucket, nowMs)] : [monthKey(bucket, nowMs), monthKey(own, nowMs), inAccountKey(tokenId, nowMs)];
};

export interface RedisLimiterOptions {
  /**
   * Per-command deadline. The default fails fast (50 ms) so a sick Redis does not stall
   * calls; the resilient wrapper then answers from memory.
   */
  commandTimeoutMs?: number;
  /** At most this many months' units Redis did not take are held (default 100,000); past it they are dropped, and counted. */
  maxOwedKeys?: number;
  /** At stop, how long the units owed may wait for Redis to come back and take them (default 2 s). */
  closeSettleMs?: number;
  /** Where a stop with units Redis never took is said (default: stderr). */
  log?: (line: string) => void;
  /**
   * What a bucket used in a month before its counter was made: a counter a take or a count makes
   * mid-month (Redis restarted empty, a failover to a replica behind) starts from it, not from
   * zero. Without it, a counter Redis lost starts the month over.
   */
  restoreFrom?: QuotaUsedBefore;
}

/**
 * Units of a month counted (`units` > 0: calls admitted without Redis) or given back (< 0: a
 * refund, a lease's unused part) that Redis has not taken: they go to the bucket's month and,
 * when it is the account's, the token's own (`ownBucketBesides`), as a take's or a refund's do.
 */
export interface MonthAdjustment {
  tokenId: string;
  bucket: string;
  /** A moment of the month the units belong to (the take's `nowMs`). */
  nowMs: number;
  units: number;
}

/**
 * Monthly units Redis did not take that this process no longer holds, by what they were: units
 * counted (Redis's months are short of them) or given back (Redis's months still count them);
 * and why: `cap` (past `maxOwedKeys` months held), `unknown` (sent and the reply lost, the
 * connection dropped or the command timed out: it may have run, so it is never sent again).
 */
export interface UnsettledUnits {
  counted: { cap: number; unknown: number };
  givenBack: { cap: number; unknown: number };
}

const MAX_OWED_KEYS = 100_000;
/** At stop, how long the months owed may wait for Redis (a SIGTERM's drain of usage waits up to 5 s too). */
const CLOSE_SETTLE_MS = 2_000;

/** Months owed are sent this many at a time, the next batch once Redis took some of these. */
const OWED_BATCH = 500;

/**
 * ioredis refuses a command it has not sent with these (the connection, or the cluster, not
 * ready): such a command surely did not run. A Redis error reply (a `ReplyError`: a refused write,
 * READONLY, NOREPLICAS, OOM, LOADING, a script's error) says the same of these scripts, whose
 * one write is their last step. Anything else (a timeout, a connection closed while the command
 * was out) leaves it unknown.
 */
const NOT_SENT = ["Stream isn't writeable and enableOfflineQueue options is false", "Cluster isn't ready and enableOfflineQueue options is false"];
const neverRan = (error: Error): boolean => error.name === 'ReplyError' || NOT_SENT.includes(error.message);
const asError = (error: unknown): Error => (error instanceof Error ? error : new Error(String(error)));
const noop = (): void => undefined;

/**
 * ioredis's own command timeout, only to free its queue while Redis hangs: the deadline that
 * decides is `withinDeadline`'s (src/infra/deadline.ts), which ioredis's timer would beat after a
 * stall of this process: a lease reply that arrived in time would be called a timeout, and the
 * gateway would answer from memory, or refuse with fail-closed, for its own pause.
 */
const IOREDIS_TIMEOUT_FACTOR = 10;

/** A month-adjusting command sent and not answered yet: its units (in one month counter), and when its reply settles. */
interface InFlight {
  units: number;
  settled: Promise<void>;
}

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
  /** The client, with the scripts defined on it (ioredis adds them at run time, untyped). */
  private readonly commands: LimiterCommands;
  private pending: PendingTake[] = [];
  /** Units to give back by month key, sent with the turn's takes (before them). */
  private refunds = new Map<string, Owed>();
  /**
   * Month adjustments Redis did not take, by month key, summed (one number a month): sent once
   * Redis answers again (a take answered, or the connection ready again), each at most once.
   */
  private readonly owed = new Map<string, Owed>();
  /** The months owed being sent now (null: none): a second settle waits for this one. */
  private settling: Promise<void> | null = null;
  /**
   * Every command sent that moves a month (a take, a refund, a give-back, a token's own count, a
   * month owed or restored), until its reply: a stop waits for them and names the units of those
   * that never came back.
   */
  private readonly inFlight = new Set<InFlight>();
  private readonly maxOwedKeys: number;
  /** What was dropped of the months owed (for /metrics and tests). */
  readonly unsettled: UnsettledUnits = { counted: { cap: 0, unknown: 0 }, givenBack: { cap: 0, unknown: 0 } };
  /** Settled once the turn's refunds are answered. */
  private refunded: { promise: Promise<void>; resolve: () => void } | null = null;
  private flushScheduled = false;
  private readonly commandTimeoutMs: number;
  private readonly closeSettleMs: number;
  private readonly log: (line: string) => void;
  private readonly restoreFrom: QuotaUsedBefore | null;
  /** Month counters being restored, by key: this process's takes of them wait (`take`). */
  private readonly restoring = new Map<string, Promise<number>>();

  constructor(redisUrl: string, options: RedisLimiterOptions = {}) {
    this.commandTimeoutMs = options.commandTimeoutMs ?? 50;
    this.maxOwedKeys = options.maxOwedKeys ?? MAX_OWED_KEYS;
    this.closeSettleMs = options.closeSettleMs ?? CLOSE_SETTLE_MS;
    this.log = options.log ?? ((line) => console.warn(line));
    this.restoreFrom = options.restoreFrom ?? null;
    // Fail at once while disconnected instead of queueing calls until Redis is back.
    this.client = redisClient(redisUrl, { ...FAIL_FAST, commandTimeout: this.commandTimeoutMs * IOREDIS_TIMEOUT_FACTOR });
    this.client.defineCommand('limiterTake', { numberOfKeys: 3, lua: TAKE_LUA });
    this.client.defineCommand('limiterCount', { numberOfKeys: 2, lua: COUNT_LUA });
    this.client.defineCommand('limiterCountOwn', { numberOfKeys: 4, lua: COUNT_LUA });
    this.client.defineCommand('limiterRefund', { numberOfKeys: 1, lua: REFUND_LUA });
    this.commands = this.client as unknown as LimiterCommands;
    // Connected again: Redis answered its ready check.
    this.client.on('ready', () => void this.settleOwed());
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
    if (this.restoring.size > 0) {
      // Its month's counter is being restored: the take goes once the restore is sent, and counts on it.
      const restoring = this.restoring.get(monthKey(request.monthly.key, request.nowMs));
      if (restoring !== undefined) return restoring.then(() => this.take(request));
    }
    return new Promise((resolve, reject) => {
      this.pending.push({ request, resolve, reject });
      this.scheduleFlush();
    });
  }

  /**
   * Gives back units to the bucket's month and, when it is the account's, the token's own: queued
   * with the turn's takes, the units of one month summed into one command. Settles (never
   * rejects) once Redis answered or the deadline passed; a refund Redis surely did not run is
   * owed (`owe`), one whose reply was lost is dropped (it may have run).
   */
  refund(request: RefundRequest): Promise<void> {
    if (request.units <= 0) return Promise.resolve();
    for (const key of monthKeysOf(request.tokenId, request.bucket, request.nowMs)) this.addRefund(key, request.units, request.nowMs);
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

  private addRefund(key: string, units: number, nowMs: number): void {
    const held = this.refunds.get(key);
    if (held === undefined) this.refunds.set(key, { units, nowMs });
    else held.units += units;
  }

  /**
   * Holds units Redis did not take (counted or given back while it could not be reached), summed
   * per month: sent once Redis answers again. Redis's months then count what the gateways counted
   * in process meanwhile, less what they gave back, as the account view does.
   */
  owe(adjustment: MonthAdjustment): void {
    if (adjustment.units === 0) return;
    for (const key of monthKeysOf(adjustment.tokenId, adjustment.bucket, adjustment.nowMs)) this.oweKey(key, adjustment.nowMs, adjustment.units);
  }

  private oweKey(key: string, nowMs: number, units: number): void {
    const held = this.owed.get(key);
    if (held !== undefined) held.units += units;
    else if (this.owed.size < this.maxOwedKeys) this.owed.set(key, { units, nowMs });
    else this.dropped(units, 'cap');
  }

  private dropped(units: number, reason: 'cap' | 'unknown'): void {
    if (units > 0) this.unsettled.counted[reason] += units;
    else this.unsettled.givenBack[reason] -= units;
  }

  /**
   * A month adjustment Redis did not answer with success: owed again when it surely did not run;
   * otherwise dropped, never sent twice (a refund sent again after it ran would give a caller
   * more than the calls it was not served; a count, charge one it never made).
   */
  private notTaken(key: string, nowMs: number, units: number, error: Error): void {
    if (neverRan(error)) this.oweKey(key, nowMs, units);
    else this.dropped(units, 'unknown');
  }

  /**
   * Sends the months owed, a batch at a time, each month's units as one command (a count, or a
   * refund never below 0) taken out of the ledger as it is sent: what Redis did not run is owed
   * again, what may have run is not. The next batch goes once Redis took some of this one.
   */
  private settleOwed(): Promise<void> {
    if (this.settling !== null) return this.settling;
    if (this.owed.size === 0 || !this.ready) return Promise.resolve();
    const batch: Array<[string, Owed]> = [];
    for (const [key, held] of this.owed) {
      this.owed.delete(key);
      if (held.units !== 0) batch.push([key, held]);
      if (batch.length === OWED_BATCH) break;
    }
    const { commands } = this;
    const sent = batch.map(([key, { units, nowMs }]) =>
      this.sent(
        Math.abs(units),
        units > 0 ? commands.limiterCount(key, previousMonthKey(key), units, monthlyTtlSeconds(nowMs)) : commands.limiterRefund(key, -units),
      ),
    );
    this.settling = replies(sent).then((answered) => {
      this.settling = null;
      let taken = 0;
      for (const [i, [key, { units, nowMs }]] of batch.entries()) {
        const [error, reply] = answered[i] ?? [new Error('limiter: no reply from Redis'), null];
        if (error !== null) this.notTaken(key, nowMs, units, error);
        else {
          taken += 1;
          if (madeCounter(reply, 0)) void this.restore(key, nowMs);
        }
      }
      if (taken > 0) return this.settleOwed();
    });
    return this.settling;
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
    const { commands } = this;
    // Refunds first: a take of the same turn finds the units back.
    if (this.refunds.size > 0) this.sendRefunds();
    if (takes.length === 0) return;
    const sent: Array<Promise<unknown>> = [];
    for (const { request } of takes) {
      const bucket = request.monthly.key;
      const month = monthKey(bucket, request.nowMs);
      sent.push(
        // In the ledger too: Redis counts what it grants, whether or not its reply comes.
        this.sent(
          request.cost,
          commands.limiterTake(
            rateKey(bucket, request.tokenId, request.nowMs),
            month,
            previousMonthKey(month),
            request.cost,
            request.rps,
            request.monthly.limit ?? -1,
            RATE_WINDOW_TTL_MS,
            monthlyTtlSeconds(request.nowMs),
          ),
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
          const [rateUsed, monthUsed, granted, fresh] = (reply as TakeReply).map(Number) as TakeReply;
          // The take that made its month's counter, or one sent with it: decided once the month's earlier calls are back in it.
          const restore =
            fresh === 1 ? this.restore(monthKey(take.request.monthly.key, take.request.nowMs), take.request.nowMs) : this.restoringOf(take.request);
          if (restore !== undefined) {
            void this.decideRestored(take, rateUsed, monthUsed, granted, restore);
            continue;
          }
          this.countOwn(take.request, granted);
          take.resolve(decide(take.request, rateUsed, monthUsed));
        }
        // Redis answers: what it was owed goes now.
        if (this.owed.size > 0 && answered.some(([error]) => error === null)) void this.settleOwed();
      },
      (error: unknown) => {
        for (const take of takes) take.reject(error);
        void replied.then((late) => this.giveBackLate(takes, late));
      },
    );
  }

  private sendRefunds(): void {
    const refunds = this.refunds;
    const refunded = this.refunded;
    this.refunds = new Map();
    this.refunded = null;
    const sent: Array<Promise<unknown>> = [];
    for (const [key, { units }] of refunds) sent.push(this.sent(units, this.commands.limiterRefund(key, units)));
    const replied = replies(sent);
    void this.withinDeadline(replied)
      .catch(() => undefined)
      .then(() => refunded?.resolve());
    // Every reply, however late: a refund is owed or dropped by what became of it.
    void replied.then((answered) => {
      for (const [i, [key, { units, nowMs }]] of [...refunds].entries()) {
        const error = answered[i]?.[0] ?? null;
        if (error !== null) this.notTaken(key, nowMs, -units, error);
      }
    });
  }

  /**
   * Counts granted units in the token's own month when its bucket is the account's. Not waited
   * for: sent on the same connection before the caller hears of the take, so anything this
   * process asks of Redis later (a take on the token's own bucket included) comes after it.
   * A count Redis did not run is owed (`owe`).
   */
  private countOwn(request: LimitRequest, granted: number): void {
    const own = ownBucketBesides(request.tokenId, request.monthly.key);
    if (own === null || granted <= 0) return;
    const { commands } = this;
    const key = monthKey(own, request.nowMs);
    const part = inAccountKey(request.tokenId, request.nowMs);
    const counted = commands.limiterCountOwn(key, part, previousMonthKey(key), previousMonthKey(part), granted, monthlyTtlSeconds(request.nowMs));
    void this.sent(granted * 2, counted).then(
      (made) => {
        for (const [i, counter] of [key, part].entries()) if (madeCounter(made, i)) void this.restore(counter, request.nowMs);
      },
      (error: unknown) => {
        this.notTaken(key, request.nowMs, granted, asError(error));
        this.notTaken(part, request.nowMs, granted, asError(error));
      },
    );
  }

  /**
   * Restores month counter `key`, made just now, and holds this process's takes of it until the
   * restore is sent (`take`): undefined where nothing restores (no `restoreFrom`).
   */
  private restore(key: string, nowMs: number): Promise<number> | undefined {
    if (this.restoreFrom === null) return undefined;
    const restored = this.restoreMonth(key, nowMs);
    this.restoring.set(key, restored);
    void restored.then(() => {
      if (this.restoring.get(key) === restored) this.restoring.delete(key);
    });
    return restored;
  }

  /** The restore under way of a take's month counter, if one is. */
  private restoringOf(request: LimitRequest): Promise<number> | undefined {
    return this.restoring.size === 0 ? undefined : this.restoring.get(monthKey(request.monthly.key, request.nowMs));
  }

  /**
   * A take decided on a month counter being restored (the one that made it, or one sent with it):
   * decided with the month's earlier calls, `restored`; what Redis granted past the limit they
   * leave goes back. Takes of the bucket by other gateways meanwhile are decided on the counter
   * as it is: up to a read's time of their calls may pass a limit once, where before a Redis that
   * lost its counters gave every bucket its month again.
   */
  private async decideRestored(take: PendingTake, rateUsed: number, monthUsed: number, granted: number, restored: Promise<number>): Promise<void> {
    const { request } = take;
    const before = await restored;
    const decision = decide(request, rateUsed, monthUsed + before);
    if (decision.granted < granted) void this.giveBack([monthKey(request.monthly.key, request.nowMs)], request.nowMs, granted - decision.granted);
    this.countOwn(request, decision.granted);
    take.resolve(decision);
  }

  /**
   * Adds to a month counter just made what its bucket used of the month before (`restoreFrom`,
   * the usage totals); resolves to that once read (0 when nothing is restored, or the read failed
   * or came after RESTORE_READ_MS: said in a line). The month's first call does this too, and
   * finds 0 or little.
   */
  private async restoreMonth(key: string, nowMs: number): Promise<number> {
    const bucket = bucketOfMonthKey(key);
    if (this.restoreFrom === null || bucket === null) return 0;
    let used: number;
    try {
      // In the ledger from the read on: a stop waits for it, and for the count it sends.
      used = await this.sent(
        0,
        withinDeadline(this.restoreFrom(bucket, nowMs), RESTORE_READ_MS, () => new Error(`no answer within ${RESTORE_READ_MS} ms`)),
      );
    } catch (error) {
      this.log(`limits: the month counter ${key} is new and its month's earlier calls could not be read (${asError(error).message}): it counts from 0`);
      return 0;
    }
    if (used > 0) {
      void this.sent(used, this.commands.limiterCount(key, previousMonthKey(key), used, monthlyTtlSeconds(nowMs))).catch((error: unknown) =>
        this.notTaken(key, nowMs, used, asError(error)),
      );
    }
    return used;
  }

  /**
   * Redis runs a take it answers after the deadline all the same, and counts what it grants in
   * the month; the caller was told the take failed and decided without Redis, so nobody uses
   * those units (a lease's extra calls included): they go back, or each late reply would cost the
   * bucket's monthly quota calls never made. A reply that never comes (ioredis's own timeout, a
   * lost connection) leaves its count, as a process killed holding a lease does. A give-back
   * Redis did not run is owed (`owe`).
   */
  private giveBackLate(takes: PendingTake[], late: Reply[]): void {
    for (const [i, { request }] of takes.entries()) {
      const [error, reply] = late[i] ?? [null, null];
      const granted = error === null && Array.isArray(reply) ? Number(reply[2]) : 0;
      // The bucket only: the token's own month counts a take when its reply comes in time (countOwn).
      if (granted > 0) void this.giveBack([monthKey(request.monthly.key, request.nowMs)], request.nowMs, granted);
      // It made the month's counter: nothing else will say so.
      if (granted > 0 && Number((reply as TakeReply)[3]) === 1) void this.restore(monthKey(request.monthly.key, request.nowMs), request.nowMs);
    }
  }

  /**
   * Gives `units` back to each key, never below 0 (a month Redis no longer holds, expired or lost,
   * stays absent: a DECRBY made it negative and kept it for good); one Redis surely did not run is
   * owed. Settles once every reply came.
   */
  private async giveBack(keys: string[], nowMs: number, units: number): Promise<void> {
    const answered = await replies(keys.map((key) => this.sent(units, this.commands.limiterRefund(key, units))));
    for (const [i, key] of keys.entries()) {
      const error = answered[i]?.[0] ?? null;
      if (error !== null) this.notTaken(key, nowMs, -units, error);
    }
  }

  /**
   * Gives back `units` counted in a monthly bucket, and in the token's own month when the bucket
   * is the account's (a lease's unused part: see LeasedLimiter). Rejects after the deadline; what
   * Redis surely did not run is owed all the same.
   */
  async release(key: string, tokenId: string, nowMs: number, units: number): Promise<void> {
    await this.withinDeadline(this.giveBack(monthKeysOf(tokenId, key, nowMs), nowMs, units));
  }

  async monthlyUsed(key: string, nowMs: number): Promise<number> {
    const value = await this.withinDeadline(this.client.get(monthKey(key, nowMs)));
    return value === null ? 0 : Number(value);
  }

  /** Keeps `reply` in the in-flight ledger, with its `units`, until it settles. */
  private sent<T>(units: number, reply: Promise<T>): Promise<T> {
    const entry: InFlight = { units, settled: reply.then(noop, noop) };
    this.inFlight.add(entry);
    void entry.settled.then(() => this.inFlight.delete(entry));
    return reply;
  }

  /**
   * Sends what is owed first: a process that stops holding them loses them, and their months in
   * Redis stay short of calls made (a caller's next calls past the quota). So it waits for Redis,
   * to come back and to take them, and for every month-adjusting command still out, up to
   * `closeSettleMs` (a stop during an outage), and says in one line what it still held.
   */
  async close(): Promise<void> {
    const settleMs = Math.max(this.commandTimeoutMs, this.closeSettleMs);
    const unknownBefore = this.unsettled.counted.unknown + this.unsettled.givenBack.unknown;
    await withinDeadline(this.settleBeforeStop(settleMs), settleMs, () => new Error('settling')).catch(() => undefined);
    const left = this.owedTotals();
    // Given up on while stopping (ioredis's own timeout), or still out: Redis may or may not have them.
    const givenUp = this.unsettled.counted.unknown + this.unsettled.givenBack.unknown - unknownBefore;
    const stillOut = [...this.inFlight].reduce((sum, { units }) => sum + units, 0);
    const parts: string[] = [];
    if (left.months > 0)
      parts.push(`${left.counted} counted in process and ${left.givenBack} given back, in ${left.months} month counters, that those counters miss`);
    if (givenUp + stillOut > 0) parts.push(`${givenUp + stillOut} sent and never answered (Redis may have them)`);
    if (parts.length > 0) this.log(`limits: stopping with units Redis did not take within ${settleMs} ms: ${parts.join('; ')}`);
    // A Redis that does not answer would hold a QUIT behind the commands it never answered.
    if (givenUp + stillOut > 0) this.client.disconnect();
    else await closeClient(this.client);
  }

  private async settleBeforeStop(timeoutMs: number): Promise<void> {
    // The turn's refunds, not sent yet, go first.
    if (this.flushScheduled) await new Promise((resolve) => setImmediate(resolve));
    if (this.owed.size > 0 || this.settling !== null) {
      if (!this.ready) await waitForReady(this.client, timeoutMs);
      // What it could not send is held again.
      await this.settleOwed();
    }
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight].map(({ settled }) => settled));
  }

  /** The units owed, summed by sign, and how many month counters they are in (a call counts in its bucket's month and, for a token with a limit of its own, the token's). */
  private owedTotals(): { counted: number; givenBack: number; months: number } {
    let counted = 0;
    let givenBack = 0;
    for (const { units } of this.owed.values()) {
      if (units > 0) counted += units;
      else givenBack -= units;
    }
    return { counted, givenBack, months: this.owed.size };
  }

  private withinDeadline<T>(reply: Promise<T>): Promise<T> {
    return withinDeadline(reply, this.commandTimeoutMs, () => new Error(`limiter: no reply from Redis within ${this.commandTimeoutMs} ms`));
  }
}
