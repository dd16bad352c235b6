import { withinDeadline } from '../deadline.js';
import { closeClient, FAIL_FAST, type RedisClient, redisClient, waitForReady } from '../redis/client.js';
import type { AttemptCounter, AttemptRule, AttemptVerdict } from './port.js';

/**
 * One window per key, a hash {n: attempts, e: end (Unix ms)}, decided on the caller's clock and
 * expired by Redis once it ends. KEYS[1] the window; ARGV limit, window ms, now ms.
 * Answers {1, 0} when counted, {0, ms until the window ends} when refused.
 */
const TAKE_LUA = `
local limit = tonumber(ARGV[1])
local now = tonumber(ARGV[3])
local w = redis.call('HMGET', KEYS[1], 'n', 'e')
local n = tonumber(w[1]) or 0
local e = tonumber(w[2]) or 0
if e <= now then
  n = 0
  e = now + tonumber(ARGV[2])
end
if n >= limit then
  return {0, e - now}
end
redis.call('HSET', KEYS[1], 'n', n + 1, 'e', string.format('%d', e))
redis.call('PEXPIRE', KEYS[1], e - now)
return {1, 0}
`;

/**
 * ARGV now ms: one attempt fewer in a window that has not ended; a window left with none is
 * deleted, as the in-process counter drops it (memory.ts: a flood refused with 503 otherwise
 * leaves a key per address and email for the whole window).
 */
const GIVE_BACK_LUA = `
local w = redis.call('HMGET', KEYS[1], 'n', 'e')
local n = tonumber(w[1]) or 0
if n > 0 and (tonumber(w[2]) or 0) > tonumber(ARGV[1]) then
  if n == 1 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HINCRBY', KEYS[1], 'n', -1)
  end
end
return 0
`;

/** Apart from anything else on the same Redis. */
const KEY_PREFIX = 'attempts:';

interface AttemptCommands {
  attemptTake(key: string, limit: number, windowMs: number, nowMs: number): Promise<[number, number]>;
  attemptGiveBack(key: string, nowMs: number): Promise<number>;
}

export interface RedisAttemptCounterOptions {
  /** How long a command may take before it counts as failed (the resilient wrapper then counts in memory). */
  commandTimeoutMs?: number;
}

/** Attempt counts shared by every API instance; each take is one atomic script call. */
export class RedisAttemptCounter implements AttemptCounter {
  private readonly client: RedisClient;
  private readonly commands: AttemptCommands;
  private readonly commandTimeoutMs: number;

  constructor(redisUrl: string, options: RedisAttemptCounterOptions = {}) {
    this.commandTimeoutMs = options.commandTimeoutMs ?? 500;
    // Fail at once while disconnected instead of queueing log-ins until Redis is back.
    this.client = redisClient(redisUrl, FAIL_FAST);
    this.client.defineCommand('attemptTake', { numberOfKeys: 1, lua: TAKE_LUA });
    this.client.defineCommand('attemptGiveBack', { numberOfKeys: 1, lua: GIVE_BACK_LUA });
    this.commands = this.client as unknown as AttemptCommands;
  }

  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.client, timeoutMs);
  }

  async take(key: string, rule: AttemptRule, nowMs: number): Promise<AttemptVerdict> {
    const [counted, retryAfterMs] = await this.withinDeadline(this.commands.attemptTake(KEY_PREFIX + key, rule.limit, rule.windowMs, nowMs));
    return counted === 1 ? { allowed: true } : { allowed: false, retryAfterMs: Number(retryAfterMs) };
  }

  async giveBack(key: string, nowMs: number): Promise<void> {
    await this.withinDeadline(this.commands.attemptGiveBack(KEY_PREFIX + key, nowMs));
  }

  async reset(key: string): Promise<void> {
    await this.withinDeadline(this.client.del(KEY_PREFIX + key));
  }

  async close(): Promise<void> {
    await closeClient(this.client);
  }

  private withinDeadline<T>(reply: Promise<T>): Promise<T> {
    return withinDeadline(reply, this.commandTimeoutMs, () => new Error(`attempts: no reply from Redis within ${this.commandTimeoutMs} ms`));
  }
}
