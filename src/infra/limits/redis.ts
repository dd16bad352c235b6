import type { Redis } from 'ioredis';
import type { LimitDecision, LimitRequest, Limiter } from './port.js';
import { FAIL_FAST, closeClient, connectRedis, waitForReady } from './redisConnection.js';
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

/** A window key outlives its second a little, so a slow clock on another gateway still sees it. */
const RATE_WINDOW_TTL_MS = 2000;

type TakeReply = [number, number, number];

interface LimiterCommands {
  limiterTake(rateKey: string, monthKey: string, ...args: (string | number)[]): Promise<TakeReply>;
}

/**
 * Key layout (Redis Cluster safe: both keys of one call must hash to one slot). The hash tag
 * is the monthly bucket (`account:<id>` or `token:<id>`) because a token belongs to exactly
 * one bucket, so tagging the per-token rate key with it costs nothing and keeps the pair
 * together:
 *   rate window  rl:{<bucket>}:<tokenId>:<unixSecond>   expires 2 s after its last use
 *   month        mq:{<bucket>}:<YYYYMM>                 expires 35 days after the month ends
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

/** Redis limiter: one EVALSHA per call (ioredis `defineCommand` falls back to EVAL on NOSCRIPT). */
export class RedisLimiter implements Limiter {
  readonly client: Redis;
  private readonly commands: LimiterCommands;

  constructor(redisUrl: string, options: RedisLimiterOptions = {}) {
    // Fail at once while disconnected instead of queueing calls until Redis is back.
    this.client = connectRedis(redisUrl, { ...FAIL_FAST, commandTimeout: options.commandTimeoutMs ?? 50 });
    this.client.defineCommand('limiterTake', { numberOfKeys: 2, lua: TAKE_LUA });
    this.commands = this.client as unknown as LimiterCommands;
  }

  /** True while the connection is up and commands can be sent. */
  get ready(): boolean {
    return this.client.status === 'ready';
  }

  /** Resolves once connected (at startup), or rejects after `timeoutMs`. */
  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.client, timeoutMs);
  }

  async take(request: LimitRequest): Promise<LimitDecision> {
    const bucket = request.monthly.key;
    const [rateUsed, monthUsed] = await this.commands.limiterTake(
      rateKey(bucket, request.tokenId, request.nowMs),
      monthKey(bucket, request.nowMs),
      request.cost,
      request.rps,
      request.monthly.limit ?? -1,
      RATE_WINDOW_TTL_MS,
      monthlyTtlSeconds(request.nowMs),
    );
    return decide(request, Number(rateUsed), Number(monthUsed));
  }

  async monthlyUsed(key: string, nowMs: number): Promise<number> {
    const value = await this.client.get(monthKey(key, nowMs));
    return value === null ? 0 : Number(value);
  }

  async close(): Promise<void> {
    await closeClient(this.client);
  }
}
