import type { AttemptCounter, AttemptRule, AttemptVerdict } from './port.js';

interface Window {
  count: number;
  endsAt: number;
}

/** Ended windows are swept at most this often (on a call: no timer to leak). */
const PRUNE_EVERY_MS = 60_000;

/** In-process attempt counts, for the embedded default (one API process): lost on restart. */
export class MemoryAttemptCounter implements AttemptCounter {
  private readonly windows = new Map<string, Window>();
  private nextPruneAt = 0;

  async take(key: string, rule: AttemptRule, nowMs: number): Promise<AttemptVerdict> {
    this.pruneIfDue(nowMs);
    const open = this.windows.get(key);
    const window = open && open.endsAt > nowMs ? open : { count: 0, endsAt: nowMs + rule.windowMs };
    if (window.count >= rule.limit) return { allowed: false, retryAfterMs: window.endsAt - nowMs };
    window.count += 1;
    this.windows.set(key, window);
    return { allowed: true };
  }

  /**
   * A window left with no attempt is dropped, as if none had been made: a log-in that succeeded,
   * or was refused for a full hashing queue, leaves nothing behind. Kept, every address and email
   * of a flood of log-ins refused with 503 held an empty window for the whole window (15 min),
   * as many as the requests, sent from a handful of addresses (bench/soak.ts).
   */
  async giveBack(key: string, nowMs: number): Promise<void> {
    const window = this.windows.get(key);
    if (!window || window.endsAt <= nowMs || window.count === 0) return;
    window.count -= 1;
    if (window.count === 0) this.windows.delete(key);
  }

  /** Windows held (ended ones are swept at most every PRUNE_EVERY_MS): for tests and the soak bench. */
  get size(): number {
    return this.windows.size;
  }

  async reset(key: string): Promise<void> {
    this.windows.delete(key);
  }

  async close(): Promise<void> {
    this.windows.clear();
  }

  private pruneIfDue(nowMs: number): void {
    if (nowMs < this.nextPruneAt) return;
    this.nextPruneAt = nowMs + PRUNE_EVERY_MS;
    for (const [key, window] of this.windows) {
      if (window.endsAt <= nowMs) this.windows.delete(key);
    }
  }
}
