import { randomBytes } from 'node:crypto';
import { withinDeadline } from '../deadline.js';
import { closeClient, FAIL_FAST, type RedisClient, redisClient, waitForReady } from '../redis/client.js';
import { LocalConnectionCounts, once } from './memory.js';
import type { ConnectionCounter, ConnectionVerdict } from './port.js';

/**
 * Key layout: one hash per token, `wsconn:{<tokenId>}` (one hash slot: a Redis Cluster keeps it
 * on one node), with two fields per gateway instance holding connections of the token:
 *   <instance>     its connections
 *   <instance>:t   until when they count (Unix ms, Redis's clock), pushed on at every write
 * An instance's liveness lives beside its count, in the token's hash, so every script touches
 * one key: a key of its own per instance would lie in another slot than the tokens'.
 * Every write sets the instance's count absolutely, from what the instance knows it holds:
 * a count lost (Redis restarted, a failover, an outage) or left wrong by a timed-out command
 * is put right by the instance's next write or heartbeat.
 */
const keyOf = (tokenId: string): string => `wsconn:{${tokenId}}`;

/** Redis's clock in ms, and the key kept at least `ttl` ms (the latest writer's TTL, never shortened). */
const LUA_PRELUDE = `
local me = ARGV[1]
local mine = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function keep(count)
  if count > 0 then
    redis.call('HSET', KEYS[1], me, count, me .. ':t', string.format('%d', now + ttl))
    if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  else
    redis.call('HDEL', KEYS[1], me, me .. ':t')
  end
end
`;

/**
 * ARGV instance, its connections of the token before this one, TTL ms, cap (-1: none).
 * Sums the live instances' counts (this one's as given), deleting those whose time is up (a
 * crashed instance's), and counts one more for this instance if the sum is under the cap.
 * Answers {granted 1|0, the token's connections after}.
 */
const ACQUIRE_LUA = `${LUA_PRELUDE}
local cap = tonumber(ARGV[4])
local fields = redis.call('HGETALL', KEYS[1])
local counts, untils = {}, {}
for i = 1, #fields, 2 do
  local name = fields[i]
  if string.sub(name, -2) == ':t' then
    untils[string.sub(name, 1, -3)] = tonumber(fields[i + 1])
  else
    counts[name] = tonumber(fields[i + 1])
  end
end
local total = mine
for instance, count in pairs(counts) do
  if instance ~= me then
    if (untils[instance] or 0) > now then
      total = total + count
    else
      redis.call('HDEL', KEYS[1], instance, instance .. ':t')
    end
  end
end
local granted = 0
if cap < 0 or total < cap then
  granted = 1
  mine = mine + 1
  total = total + 1
end
keep(mine)
return {granted, total}
`;

/** ARGV instance, its connections of the token, TTL ms: sets them and pushes their time on (the heartbeat, and a release). */
const SYNC_LUA = `${LUA_PRELUDE}
keep(mine)
return mine
`;

interface CounterCommands {
  wsconnAcquire(key: string, instance: string, mine: number, ttlMs: number, cap: number): Promise<[number, number]>;
  wsconnSync(key: string, instance: string, mine: number, ttlMs: number): Promise<number>;
}

/** After a failed command, Redis is left alone this long: a hung server costs one timeout, not one per upgrade. */
const REDIS_COOLDOWN_MS = 500;

export interface RedisConnectionCounterOptions {
  /**
   * How long this instance's counts last in Redis without a heartbeat (sent every third of it):
   * when an instance dies, its connections stop counting within this.
   */
  instanceTtlMs?: number;
  /** How long a command may take before this instance decides on its own (fail open). */
  commandTimeoutMs?: number;
  /** Told once when this instance starts counting on its own (warn), and once when Redis is back (info). */
  log?: { warn(message: string): void; info(message: string): void };
}

/**
 * Connections counted in Redis across every gateway instance: an upgrade is one script call
 * (sum of the live instances' counts against the cap, this instance's raised if under), a
 * release and the heartbeat one small one. The operations on one token are sent one after
 * another, so each knows exactly what this instance holds.
 *
 * While Redis cannot be reached (not connected, a command error, no answer in time) it fails
 * open, as the limits do: this instance applies the cap to its own connections, and writes its
 * counts to Redis again once it is back.
 */
export class RedisConnectionCounter implements ConnectionCounter {
  /** This process's name in the hashes: random, so a restarted process never inherits a dead one's counts. */
  readonly instanceId = randomBytes(8).toString('hex');
  private readonly client: RedisClient;
  private readonly commands: CounterCommands;
  private readonly held = new LocalConnectionCounts();
  /** Per token, the end of its queue of Redis operations (absent: none under way). */
  private readonly queues = new Map<string, Promise<void>>();
  private readonly heartbeat: NodeJS.Timeout;
  private readonly instanceTtlMs: number;
  private readonly commandTimeoutMs: number;
  private skipRedisUntil = 0;
  /** A heartbeat's writes are under way: the next one waits for them. */
  private beating = false;
  private closed = false;
  /** Counting on its own since a failure, until Redis answers again (logged once each way). */
  private fallingBack = false;
  private readonly log: RedisConnectionCounterOptions['log'];
  /** Upgrades decided without Redis (tests, diagnosis). */
  fallbackCount = 0;
  lastError: Error | null = null;

  constructor(redisUrl: string, options: RedisConnectionCounterOptions = {}) {
    this.instanceTtlMs = options.instanceTtlMs ?? 15_000;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 250;
    this.log = options.log;
    // Fail at once while disconnected: an upgrade is decided in process rather than queued.
    this.client = redisClient(redisUrl, FAIL_FAST);
    this.client.defineCommand('wsconnAcquire', { numberOfKeys: 1, lua: ACQUIRE_LUA });
    this.client.defineCommand('wsconnSync', { numberOfKeys: 1, lua: SYNC_LUA });
    this.commands = this.client as unknown as CounterCommands;
    this.heartbeat = setInterval(() => this.beat(), Math.max(Math.floor(this.instanceTtlMs / 3), 1));
    this.heartbeat.unref();
  }

  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.client, timeoutMs);
  }

  acquire(tokenId: string, cap: number | null): Promise<ConnectionVerdict> {
    return this.queued(tokenId, async (): Promise<ConnectionVerdict> => {
      const verdict = await this.acquireInRedis(tokenId, cap);
      if (verdict === null) {
        this.fallbackCount += 1;
        this.fellBack(this.lastError?.message ?? `Redis not connected (${this.client.status})`);
        if (!this.held.takeIfUnder(tokenId, cap)) return { granted: false, connections: this.held.held(tokenId) };
      } else if (verdict.granted) {
        this.held.add(tokenId);
      } else {
        return { granted: false, connections: verdict.connections };
      }
      return { granted: true, release: once(() => this.release(tokenId)) };
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.heartbeat);
    await withinDeadline(Promise.all(this.queues.values()), this.commandTimeoutMs, () => new Error('queued operations')).catch(() => undefined);
    // This instance's counts leave with it, rather than a TTL later.
    const leaving = [...this.held.tokens()].map(([tokenId]) => this.sync(tokenId, 0));
    await Promise.all(leaving);
    this.held.clear();
    await closeClient(this.client);
  }

  private release(tokenId: string): void {
    this.held.remove(tokenId);
    if (this.closed) return;
    void this.queued(tokenId, () => this.sync(tokenId, this.held.held(tokenId)));
  }

  /**
   * Every token this instance holds connections of: its count written again and its time pushed
   * on. Sent straight, not queued: a reply changes nothing here, and a later operation on the
   * token is sent after it on the same connection. A token with an operation under way is left
   * to it (an acquire in flight would make the count written here one short).
   */
  private beat(): void {
    if (this.beating || !this.useRedis()) return;
    const sent: Array<Promise<number>> = [];
    for (const [tokenId, held] of this.held.tokens()) {
      if (!this.queues.has(tokenId)) sent.push(this.commands.wsconnSync(keyOf(tokenId), this.instanceId, held, this.instanceTtlMs));
    }
    if (sent.length === 0) return;
    this.beating = true;
    const interval = Math.max(Math.floor(this.instanceTtlMs / 3), this.commandTimeoutMs);
    withinDeadline(Promise.all(sent), interval, () => new Error(`ws connections: the heartbeat's ${sent.length} writes took over ${interval} ms`))
      .then(
        () => this.answered(),
        (error: unknown) => this.failed(error),
      )
      .finally(() => {
        this.beating = false;
      });
  }

  /** The verdict from Redis, or null when Redis cannot say. */
  private async acquireInRedis(tokenId: string, cap: number | null): Promise<{ granted: boolean; connections: number } | null> {
    if (!this.useRedis()) return null;
    try {
      const reply = this.commands.wsconnAcquire(keyOf(tokenId), this.instanceId, this.held.held(tokenId), this.instanceTtlMs, cap ?? -1);
      const [granted, connections] = await this.withinDeadline(reply);
      this.answered();
      return { granted: granted === 1, connections: Number(connections) };
    } catch (error) {
      this.failed(error);
      return null;
    }
  }

  /** Writes this instance's count of the token; a failure leaves it to the next write or heartbeat. */
  private async sync(tokenId: string, mine: number): Promise<void> {
    if (!this.useRedis()) return;
    try {
      await this.withinDeadline(this.commands.wsconnSync(keyOf(tokenId), this.instanceId, mine, this.instanceTtlMs));
      this.answered();
    } catch (error) {
      this.failed(error);
    }
  }

  /** Runs `operation` (which never rejects) after the token's operations already queued. */
  private queued<T>(tokenId: string, operation: () => Promise<T>): Promise<T> {
    const result = (this.queues.get(tokenId) ?? Promise.resolve()).then(operation);
    const end = result.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(tokenId, end);
    void end.then(() => {
      if (this.queues.get(tokenId) === end) this.queues.delete(tokenId);
    });
    return result;
  }

  private useRedis(): boolean {
    return this.client.status === 'ready' && Date.now() >= this.skipRedisUntil;
  }

  private failed(error: unknown): void {
    this.lastError = error instanceof Error ? error : new Error(String(error));
    this.skipRedisUntil = Date.now() + REDIS_COOLDOWN_MS;
    this.fellBack(this.lastError.message);
  }

  /** This instance counts on its own: said once per outage. */
  private fellBack(reason: string): void {
    if (this.fallingBack || this.closed) return;
    this.fallingBack = true;
    this.log?.warn(`ws connections: Redis cannot be reached (${reason}); each gateway instance applies the cap to its own connections until it is back`);
  }

  /** Redis answered: the end of an outage is said once. */
  private answered(): void {
    if (!this.fallingBack) return;
    this.fallingBack = false;
    this.log?.info('ws connections: Redis is back; connections are counted across gateway instances again');
  }

  private withinDeadline<T>(reply: Promise<T>): Promise<T> {
    return withinDeadline(reply, this.commandTimeoutMs, () => new Error(`ws connections: no reply from Redis within ${this.commandTimeoutMs} ms`));
  }
}
