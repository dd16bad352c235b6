import type { UsageRecord } from '../../domain/usage.js';

/**
 * The usage queue: the gateway hands every usage record to it without waiting; the ingester
 * reads records, appends them to `usage-<accountId>` streams, and acknowledges them only
 * after the append succeeded, so a crash replays (idempotently) rather than loses.
 */
export interface QueuedUsage {
  ackId: string;
  record: UsageRecord;
}

/** What the gateway's side of a process uses of the queue: it hands records over and reports the depth; the ingester reads elsewhere (the storage thread). */
export type UsageSink = Pick<UsageQueue, 'enqueue' | 'whenHandedOver' | 'depth' | 'flush' | 'close'> & {
  /** In-process queues: how many of the records enqueued, in order, the store has (the usage journal deletes by it). */
  appendedThrough?(): Promise<number>;
};

export interface UsageQueue {
  /** Never blocks and never throws: buffers in memory while the backend is away. The record must not be changed afterwards (the in-process queue keeps it as it is). */
  enqueue(record: UsageRecord): void;
  /**
   * Calls `done` once every record enqueued so far is handed over durably: written where a kill
   * of this process does not lose it (the embedded journal; Redis's acknowledged XADD). At once
   * (synchronously) when nothing is waiting. The gateway answers a metered call only then.
   */
  whenHandedOver(done: () => void): void;
  /** Up to `max` records not yet acknowledged, including ones a crashed consumer left pending. */
  read(max: number, blockMs?: number): Promise<QueuedUsage[]>;
  ack(ackIds: string[]): Promise<void>;
  /**
   * A consumer (re)starting on this queue: what it read before and did not acknowledge (a stopped
   * ingester's abandoned batch) is handed out again by the next read, not after a timeout.
   */
  redeliverHeld(): void;
  /** Records enqueued but not yet acknowledged (approximate for Redis). */
  depth(): Promise<number>;
  /** Records `enqueue` dropped since start: its in-memory bound was full (their calls were served, never recorded). */
  readonly dropped: number;
  /** Sends what is buffered in memory to the backend; resolves when it is there. */
  flush(): Promise<void>;
  close(): Promise<void>;
}
