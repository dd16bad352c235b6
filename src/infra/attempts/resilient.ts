import { MemoryAttemptCounter } from './memory.js';
import type { AttemptCounter, AttemptRule, AttemptVerdict } from './port.js';
import type { RedisAttemptCounter } from './redis.js';

/**
 * Redis's counts, or this process's own while Redis cannot be reached: log-ins go on during
 * an outage, each API instance then enforcing the limits on the attempts it sees.
 */
export class ResilientAttemptCounter implements AttemptCounter {
  private readonly fallback = new MemoryAttemptCounter();
  /** Calls answered without Redis (tests, diagnosis). */
  fallbackCount = 0;

  constructor(private readonly redis: RedisAttemptCounter) {}

  whenReady(timeoutMs?: number): Promise<void> {
    return this.redis.whenReady(timeoutMs);
  }

  take(key: string, rule: AttemptRule, nowMs: number): Promise<AttemptVerdict> {
    return this.redis.take(key, rule, nowMs).catch(() => {
      this.fallbackCount += 1;
      return this.fallback.take(key, rule, nowMs);
    });
  }

  giveBack(key: string, nowMs: number): Promise<void> {
    return this.redis.giveBack(key, nowMs).catch(() => {
      this.fallbackCount += 1;
      return this.fallback.giveBack(key, nowMs);
    });
  }

  reset(key: string): Promise<void> {
    return this.redis.reset(key).catch(() => {
      this.fallbackCount += 1;
      return this.fallback.reset(key);
    });
  }

  async close(): Promise<void> {
    await Promise.all([this.redis.close(), this.fallback.close()]);
  }
}
