import type { UsageRecord } from '../../domain/usage.js';
import type { QueuedUsage, UsageQueue } from './port.js';

/** Records held at most; beyond, new ones are dropped and counted (`dropped`). */
export const DEFAULT_QUEUE_CAPACITY = 1_000_000;
/** A record read but not acknowledged this long is handed out again. */
export const DEFAULT_VISIBILITY_TIMEOUT_MS = 30_000;

interface Entry {
  record: UsageRecord;
  /** Consumer that holds it, and since when; null while nobody does. */
  deliveredTo: string | null;
  deliveredAt: number;
}

export interface MemoryUsageBackendOptions {
  capacity?: number;
  visibilityTimeoutMs?: number;
}

/**
 * The in-process queue itself, shared by every role of the process (the gateway enqueues, the
 * ingester reads): records in arrival order until acknowledged, with the same delivery rules
 * as the Redis consumer group. Lost with the process: the embedded default journals every record
 * in front of it (journal.ts), and replays the journal into it at the next start.
 */
export class MemoryUsageBackend {
  /** Map keeps insertion order: reads scan from the oldest. */
  private readonly entries = new Map<string, Entry>();
  /** Records given to `add`, dropped ones too: the next one's id is this plus one. */
  private received = 0;
  private readonly waiters = new Set<() => void>();
  readonly capacity: number;
  readonly visibilityTimeoutMs: number;
  /** Records refused because the queue was full. */
  dropped = 0;

  constructor(options: MemoryUsageBackendOptions = {}) {
    this.capacity = options.capacity ?? DEFAULT_QUEUE_CAPACITY;
    this.visibilityTimeoutMs = options.visibilityTimeoutMs ?? DEFAULT_VISIBILITY_TIMEOUT_MS;
  }

  get size(): number {
    return this.entries.size;
  }

  add(record: UsageRecord): void {
    this.received += 1;
    if (this.entries.size >= this.capacity) {
      this.dropped += 1;
      return;
    }
    // Kept as given, not copied: a record is not changed once enqueued (UsageQueue.enqueue), and a
    // copy per call was most of what this queue kept alive past a young collection.
    this.entries.set(String(this.received), { record, deliveredTo: null, deliveredAt: 0 });
    for (const wake of this.waiters) wake();
  }

  /**
   * How many of the records given to `add`, in order, are done with: every one of the first
   * that many was acknowledged (appended to the store) or dropped. The usage journal deletes
   * what it wrote of them.
   */
  appendedThrough(): number {
    const oldest = this.entries.keys().next();
    return oldest.done ? this.received : Number(oldest.value) - 1;
  }

  /** Hands out up to `max` records nobody holds, or held past the visibility timeout. */
  take(consumer: string, max: number, nowMs = Date.now()): QueuedUsage[] {
    const taken: QueuedUsage[] = [];
    for (const [ackId, entry] of this.entries) {
      if (taken.length >= max) break;
      if (entry.deliveredTo !== null && nowMs - entry.deliveredAt < this.visibilityTimeoutMs) continue;
      entry.deliveredTo = consumer;
      entry.deliveredAt = nowMs;
      // The snapshot taken by `add`, shared: consumers only read it.
      taken.push({ ackId, record: entry.record });
    }
    return taken;
  }

  ack(ackIds: string[]): void {
    for (const id of ackIds) this.entries.delete(id);
  }

  /** A consumer (re)starting: what it held before is handed out again at once. */
  release(consumer: string): void {
    for (const entry of this.entries.values()) {
      if (entry.deliveredTo === consumer) entry.deliveredTo = null;
    }
  }

  /** Resolves on the next `add`, or after `ms`. */
  async waitForRecords(ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }
}

/** The queue every role of this process shares when no Redis is configured. */

/** One consumer's (or producer's) view of an in-process queue. */
export class MemoryUsageQueue implements UsageQueue {
  constructor(
    readonly backend: MemoryUsageBackend,
    readonly consumer: string,
  ) {
    backend.release(consumer);
  }

  get dropped(): number {
    return this.backend.dropped;
  }

  enqueue(record: UsageRecord): void {
    this.backend.add(record);
  }

  /** How many of the records enqueued here, in order, the store has (for the usage journal). */
  async appendedThrough(): Promise<number> {
    return this.backend.appendedThrough();
  }

  /** Held in memory only: a process that needs more wraps it in the journal (JournaledUsageSink). */
  whenHandedOver(done: () => void): void {
    done();
  }

  async read(max: number, blockMs = 0): Promise<QueuedUsage[]> {
    const taken = this.backend.take(this.consumer, max);
    if (taken.length > 0 || blockMs <= 0) return taken;
    await this.backend.waitForRecords(blockMs);
    return this.backend.take(this.consumer, max);
  }

  async ack(ackIds: string[]): Promise<void> {
    this.backend.ack(ackIds);
  }

  redeliverHeld(): void {
    this.backend.release(this.consumer);
  }

  async depth(): Promise<number> {
    return this.backend.size;
  }

  async flush(): Promise<void> {}

  async whenReady(): Promise<void> {}

  /** The records stay in the backend for the process's other roles. */
  async close(): Promise<void> {}
}
