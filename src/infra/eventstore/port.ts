/**
 * The event store port. Streams are named `<category>-<id>` (no `-` inside a category).
 * Revisions are 0-based per stream; positions are global, opaque and ordered as strings
 * (fixed-width), so a checkpoint can be compared with `<`.
 */
export type Position = string;

/** `no_stream`: the stream must not exist; a number: the revision of the stream's last event. */
export type ExpectedRevision = 'any' | 'no_stream' | 'stream_exists' | number;

export interface NewEvent {
  /** UUID. Appending an event whose id the stream already holds is a no-op (idempotent retry). */
  id: string;
  type: string;
  data: Record<string, unknown>;
  metadata?: Record<string, unknown>;
}

export interface StoredEvent {
  streamId: string;
  revision: number;
  position: Position;
  id: string;
  type: string;
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
  /** ISO 8601 UTC, the store's time of append. */
  created: string;
}

export interface AppendResult {
  /** Revision of the stream's last event after the append. */
  nextExpectedRevision: number;
  /** Global position of the last appended event. */
  position: Position;
}

export class WrongExpectedRevisionError extends Error {
  constructor(
    readonly streamId: string,
    readonly expected: ExpectedRevision,
    readonly actual: number | 'no_stream',
  ) {
    super(`stream ${streamId}: expected revision ${String(expected)}, actual ${String(actual)}`);
    this.name = 'WrongExpectedRevisionError';
  }
}

/** What a subscription yields: each event in global order, and a marker once it has caught up with the log. */
export type SubscriptionItem = { kind: 'event'; event: StoredEvent } | { kind: 'caughtUp'; position: Position | null };

export interface Subscription extends AsyncIterable<SubscriptionItem> {
  close(): Promise<void>;
}

export interface SubscribeOptions {
  /** Exclusive: events strictly after this position. Omit to start at the beginning. */
  after?: Position;
  /** Only events of streams whose id starts with one of these prefixes (e.g. `token-`). */
  streamPrefixes?: string[];
}

export interface EventStore {
  append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult>;
  /** The stream's events in order; empty when the stream does not exist. */
  readStream(streamId: string, options?: { fromRevision?: number; maxCount?: number }): Promise<StoredEvent[]>;
  /** Catch-up subscription to all events: history first, then live, with a `caughtUp` marker in between. */
  subscribeToAll(options?: SubscribeOptions): Subscription;
  /** Position of the newest event in the log, or null when empty. */
  headPosition(): Promise<Position | null>;
  /**
   * Drops the stream's events before `revision` (retention of the usage log): they leave stream
   * reads, the global log (subscriptions and replays that start afterwards) and the store's
   * indexes. The stream keeps its revisions: expected revisions are checked against its last
   * one as before, and later appends go on from there. Past the stream's last event, every event
   * it holds goes (and none appended later). A lower revision than an earlier truncation's
   * changes nothing, nor does a stream that does not exist. Ids of dropped events are
   * forgotten: appending one again is not taken for a retry. EventStoreDB: the stream's `$tb`;
   * there the events leave `$all` at the server's next scavenge.
   */
  truncateBefore(streamId: string, revision: number): Promise<void>;
  /**
   * Stores that drop old events by age themselves (EventStoreDB's `$maxAge`): events of the
   * stream older than this may go. A backstop beside `truncateBefore`; absent elsewhere.
   */
  limitStreamAge?(streamId: string, maxAgeSeconds: number): Promise<void>;
  close(): Promise<void>;
}
