import { streamMatcher } from './appendRules.js';
import { EventStoreError } from './errors.js';
import { decodeEvent, formatPosition, type LogEntry, parsePosition, seqOfLogKey, sniffStreamId } from './levelKeys.js';
import type { StoredEvent, SubscribeOptions, Subscription, SubscriptionItem } from './port.js';

/** A batch reader over the global log, strictly after a sequence number. */
export interface LogCursor {
  nextv(size: number): Promise<LogEntry[]>;
  close(): Promise<void>;
}

/** What a subscription needs from the store. */
export interface LogSource {
  readLogAfter(seq: number): LogCursor;
  /** Sequence number of the newest durable event (0 when the log is empty). */
  committedSeq(): number;
  /** Receives every group of events right after it is durable; returns the detach function. */
  attachTap(tap: LiveTap): () => void;
  forget(subscription: LevelSubscription): void;
}

const READ_BATCH = 1000;

/**
 * Live events handed over by the writer, as it encoded them (never parsed back). Bounded: a
 * subscriber that falls further behind than `limit` events is told it overflowed and goes back
 * to reading the log, so a slow consumer never makes the writer hold an unbounded backlog.
 */
export class LiveTap {
  private queue: StoredEvent[] = [];
  private overflowed = false;
  private wake: (() => void) | undefined;

  constructor(private readonly limit: number) {}

  push(events: readonly StoredEvent[]): void {
    if (this.overflowed) return;
    if (this.queue.length + events.length > this.limit) {
      this.overflowed = true;
      this.queue = [];
    } else {
      for (const event of events) this.queue.push(event);
    }
    this.interrupt();
  }

  /** Wakes a pending `take` (with nothing) so its owner can notice it was closed. */
  interrupt(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  async take(): Promise<StoredEvent[] | 'overflow'> {
    if (!this.overflowed && this.queue.length === 0) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
    if (this.overflowed) return 'overflow';
    const taken = this.queue;
    this.queue = [];
    return taken;
  }
}

/**
 * Catch-up subscription: reads the log in batches from its cursor until it reaches the last
 * durable event, then (in the same tick, so nothing can slip in between) attaches a live tap.
 * The cursor moves over every entry seen, matching or not, so history and live never overlap.
 */
export class LevelSubscription implements Subscription {
  private closed = false;
  private started = false;
  private readonly matches: (streamId: string) => boolean;
  private readonly filtered: boolean;
  private readonly startSeq: number;
  private cursor: LogCursor | undefined;
  private tap: LiveTap | undefined;

  constructor(
    private readonly source: LogSource,
    options: SubscribeOptions,
    private readonly liveBufferLimit: number,
  ) {
    this.matches = streamMatcher(options.streamPrefixes);
    this.filtered = (options.streamPrefixes?.length ?? 0) > 0;
    this.startSeq = options.after === undefined ? 0 : parsePosition(options.after);
  }

  [Symbol.asyncIterator](): AsyncIterator<SubscriptionItem> {
    if (this.started) throw new EventStoreError('subscription_in_use', 'a subscription can be iterated only once');
    this.started = true;
    return this.run();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.tap?.interrupt();
    await this.cursor?.close();
    this.source.forget(this);
  }

  private async *run(): AsyncGenerator<SubscriptionItem> {
    let seq = this.startSeq;
    let caughtUpSent = false;
    try {
      while (!this.closed) {
        // Durable before the history's read began, so in what it reads: entries up to here that
        // it did not meet were dropped by a truncation (the log's last ones may be), not missed.
        const durable = this.source.committedSeq();
        for await (const batch of this.history(seq)) {
          for (const [key, value] of batch) {
            if (this.closed) return;
            seq = seqOfLogKey(key);
            const item = this.deliverable(key, value);
            if (item) yield item;
          }
        }
        if (this.closed) return;
        seq = Math.max(seq, durable);
        // Something became durable while the history was read: read on.
        if (this.source.committedSeq() > seq) continue;
        if (!caughtUpSent) {
          caughtUpSent = true;
          yield { kind: 'caughtUp', position: seq > 0 ? formatPosition(seq) : null };
          continue; // the consumer may have taken its time: look at the log again before going live
        }
        const tap = new LiveTap(this.liveBufferLimit);
        const detach = this.source.attachTap(tap);
        this.tap = tap;
        try {
          while (!this.closed) {
            const events = await tap.take();
            if (events === 'overflow') break; // fell behind: go on from `seq` in the log
            for (const event of events) {
              if (this.closed) return;
              const eventSeq = Number(event.position);
              if (eventSeq <= seq) continue; // `after` may lie beyond the head
              seq = eventSeq;
              if (this.matches(event.streamId)) yield { kind: 'event', event };
            }
          }
        } finally {
          detach();
          this.tap = undefined;
        }
      }
    } finally {
      this.closed = true;
      this.source.forget(this);
    }
  }

  private deliverable(key: string, value: string): SubscriptionItem | undefined {
    if (this.filtered) {
      const streamId = sniffStreamId(value);
      if (streamId !== undefined && !this.matches(streamId)) return undefined;
    }
    const event = decodeEvent(key, value);
    return this.matches(event.streamId) ? { kind: 'event', event } : undefined;
  }

  /** Batches of the log after `seq`, as it is when each batch is read. */
  private async *history(seq: number): AsyncGenerator<LogEntry[]> {
    const cursor = this.source.readLogAfter(seq);
    this.cursor = cursor;
    try {
      while (!this.closed) {
        let batch: LogEntry[];
        try {
          batch = await cursor.nextv(READ_BATCH);
        } catch (error) {
          if (this.closed) return; // closed under our feet
          throw error;
        }
        if (batch.length === 0) return;
        yield batch;
      }
    } finally {
      this.cursor = undefined;
      await cursor.close();
    }
  }
}
