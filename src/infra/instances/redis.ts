import { randomBytes } from 'node:crypto';
import { withinDeadline } from '../deadline.js';
import { closeClient, FAIL_FAST, type RedisClient, redisClient, waitForReady } from '../redis/client.js';
import type { GatewayInstances } from './port.js';

/** One sorted set of every gateway instance, scored by when its heartbeat runs out (Redis's clock, ms). */
export const INSTANCES_KEY = 'gateway:instances';

/**
 * KEYS[1] the set; ARGV instance, TTL ms. Pushes this instance's time on, forgets the instances
 * whose time is up (a crashed gateway's), gives how many are left. The key itself expires when
 * every gateway has gone.
 */
const BEAT_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
`;

interface InstanceCommands {
  gatewayBeat(key: string, instance: string, ttlMs: number): Promise<number>;
}

export interface RedisGatewayInstancesOptions {
  /** How long an instance counts after its last heartbeat (sent every third of it): a crashed gateway's share is given back within this. */
  ttlMs?: number;
  /** How long a heartbeat may take before it is given up (the count stays as last known). */
  commandTimeoutMs?: number;
  /** The set's key (tests: one deployment each on a shared Redis). */
  key?: string;
}

/**
 * Gateway instances counted in Redis: each sends a heartbeat every third of the TTL, which also
 * reads the count. While Redis cannot be reached the last count known stays: the others cannot
 * be counted, and a share that jumped to the whole budget would send N times the cap.
 */
export class RedisGatewayInstances implements GatewayInstances {
  /** This process's name in the set: random, so a restarted process is never taken for a dead one. */
  readonly instanceId = randomBytes(8).toString('hex');
  private readonly client: RedisClient;
  private readonly commands: InstanceCommands;
  private readonly ttlMs: number;
  private readonly commandTimeoutMs: number;
  private readonly key: string;
  private readonly listeners: Array<(count: number) => void> = [];
  private readonly heartbeat: NodeJS.Timeout;
  private counted = 1;
  private beating: Promise<void> | null = null;
  private closed = false;
  lastError: Error | null = null;

  constructor(redisUrl: string, options: RedisGatewayInstancesOptions = {}) {
    this.ttlMs = options.ttlMs ?? 15_000;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 1_000;
    this.key = options.key ?? INSTANCES_KEY;
    this.client = redisClient(redisUrl, FAIL_FAST);
    this.client.defineCommand('gatewayBeat', { numberOfKeys: 1, lua: BEAT_LUA });
    this.commands = this.client as unknown as InstanceCommands;
    this.heartbeat = setInterval(() => void this.beat(), Math.max(Math.floor(this.ttlMs / 3), 1));
    this.heartbeat.unref();
  }

  /** Connected and counted once: a gateway takes its share from its first call. */
  async whenReady(timeoutMs = 5000): Promise<void> {
    await waitForReady(this.client, timeoutMs);
    await this.beat();
  }

  count(): number {
    return this.counted;
  }

  onCount(listener: (count: number) => void): void {
    this.listeners.push(listener);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.heartbeat);
    await this.beating;
    // Its share goes back to the others at their next heartbeat, not a TTL later.
    if (this.client.status === 'ready')
      await withinDeadline(this.client.zrem(this.key, this.instanceId), this.commandTimeoutMs, () => new Error('leaving')).catch(() => undefined);
    await closeClient(this.client);
  }

  /** One heartbeat (none while one is under way); a failure keeps the last count. */
  beat(): Promise<void> {
    if (this.beating !== null) return this.beating;
    if (this.closed || this.client.status !== 'ready') return Promise.resolve();
    const before = this.counted;
    const sent = this.commands.gatewayBeat(this.key, this.instanceId, this.ttlMs);
    this.beating = withinDeadline(sent, this.commandTimeoutMs, () => new Error(`gateway instances: no heartbeat answer within ${this.commandTimeoutMs} ms`))
      .then(
        (count) => {
          this.lastError = null;
          this.counted = Math.max(1, Number(count));
          if (this.counted !== before) for (const listener of this.listeners) listener(this.counted);
        },
        (error: unknown) => {
          this.lastError = error instanceof Error ? error : new Error(String(error));
        },
      )
      .finally(() => {
        this.beating = null;
      });
    return this.beating;
  }
}
