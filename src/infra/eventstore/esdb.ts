import {
  ANY,
  type AppendExpectedRevision,
  BACKWARDS,
  END,
  type Position as EsdbPosition,
  EventStoreDBClient,
  jsonEvent,
  MaxAppendSizeExceededError,
  metastreamOf,
  NO_STREAM,
  STREAM_EXISTS,
  StreamNotFoundError,
  WrongExpectedVersionError,
} from '@eventstore/db-client';
import { validateAppend, validateTruncation } from './appendRules.js';
import { EventStoreError } from './errors.js';
import { formatEsdbPosition, isSystemEvent, type RawStreamMetadata, readRawMetadata, toStoredEvent } from './esdbEvents.js';
import { EsdbSubscription } from './esdbSubscription.js';
import {
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  type Position,
  type StoredEvent,
  type SubscribeOptions,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.js';

/** Events per read of `$all` when `headPosition` looks back past the server's own events. */
const HEAD_PAGE = 1000;
/** How long `headPosition` looks back past the server's own events before settling for the newest of all. */
const HEAD_SCAN_MS = 5000;
/** Writes of a stream's metadata tried, each over a fresh read, before giving way to other writers. */
const METADATA_ATTEMPTS = 5;

export interface EsdbEventStoreOptions {
  /** How long `headPosition` pages back past system events (HEAD_SCAN_MS by default). */
  headScanMs?: number;
}

/**
 * The production event store: EventStoreDB / KurrentDB over gRPC (`@eventstore/db-client` v6).
 * Needs a server of 23.10 or later (positions on stream reads, caught-up on subscriptions).
 */
export class EsdbEventStore implements EventStore {
  private readonly subscriptions = new Set<EsdbSubscription>();
  private readonly headScanMs: number;

  /** `client` is the connection (or, in tests, an in-memory stand-in with the same calls). */
  constructor(
    private readonly client: EventStoreDBClient,
    options: EsdbEventStoreOptions = {},
  ) {
    this.headScanMs = options.headScanMs ?? HEAD_SCAN_MS;
  }

  /** E.g. `esdb://localhost:2113?tls=false`. Connects lazily, on the first call. */
  static connect(connectionString: string): EsdbEventStore {
    return new EsdbEventStore(EventStoreDBClient.connectionString(connectionString));
  }

  async append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    validateAppend(streamId, events, expected);
    let result: Awaited<ReturnType<EventStoreDBClient['appendToStream']>>;
    try {
      result = await this.client.appendToStream(
        streamId,
        events.map((event) => jsonEvent({ id: event.id, type: event.type, data: event.data, metadata: event.metadata })),
        { expectedRevision: toEsdbExpected(expected) },
      );
    } catch (error) {
      throw fromEsdbAppendError(error, streamId, expected);
    }
    const nextExpectedRevision = Number(result.nextExpectedRevision);
    // The answer's position is the last event's: the server writes an append as one implicit
    // transaction and answers with the log position of its last record, which is that event's
    // commit and prepare position (an idempotent retry is answered with the last event it
    // matched). Servers that answer a retry without a position cost a read, on retries only.
    const position = result.position ? formatEsdbPosition(result.position) : await this.positionOf(streamId, nextExpectedRevision);
    return { nextExpectedRevision, position };
  }

  async readStream(streamId: string, options: { fromRevision?: number; maxCount?: number } = {}): Promise<StoredEvent[]> {
    const { fromRevision = 0, maxCount } = options;
    if (maxCount !== undefined && maxCount <= 0) return [];
    const events: StoredEvent[] = [];
    try {
      const read = this.client.readStream(streamId, {
        fromRevision: BigInt(Math.max(0, fromRevision)),
        ...(maxCount === undefined ? {} : { maxCount }),
      });
      for await (const resolved of read) {
        if (resolved.event) events.push(toStoredEvent(resolved.event));
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw error;
    }
    return events;
  }

  /**
   * Sets the stream's `$tb` (keeping its other metadata), at most one past its last event: a
   * `$tb` beyond it would hide the events appended later too. Never lowers a `$tb` already set.
   * Stream reads skip the events at once; `$all` (subscriptions, rebuilds) still holds them
   * until the server's next scavenge. Safe beside other writers of the metadata (see updateMetadata).
   */
  async truncateBefore(streamId: string, revision: number): Promise<void> {
    validateTruncation(streamId, revision);
    const last = await this.lastRevision(streamId);
    if (last === undefined) return; // no stream, or nothing left in it
    const cut = Math.min(revision, last + 1);
    await this.updateMetadata(streamId, (metadata) => {
      const current = typeof metadata.$tb === 'number' ? metadata.$tb : 0;
      return cut <= current ? undefined : { ...metadata, $tb: cut };
    });
  }

  /** Sets the stream's `$maxAge` (keeping its other metadata); a stream not created yet gets it when it is. */
  async limitStreamAge(streamId: string, maxAgeSeconds: number): Promise<void> {
    if (!(Number.isSafeInteger(maxAgeSeconds) && maxAgeSeconds > 0)) {
      throw new EventStoreError('invalid_truncation', `a maximum age must be a positive whole number of seconds, got ${maxAgeSeconds}`, { streamId });
    }
    await this.updateMetadata(streamId, (metadata) => (metadata.$maxAge === maxAgeSeconds ? undefined : { ...metadata, $maxAge: maxAgeSeconds }));
  }

  subscribeToAll(options: SubscribeOptions = {}): Subscription {
    const subscription = new EsdbSubscription(this.client, options, (closed) => this.subscriptions.delete(closed));
    this.subscriptions.add(subscription);
    return subscription;
  }

  /**
   * The newest event of ours: the server's own (the `$metadata` that `truncateBefore` and
   * `limitStreamAge` write, statistics) may follow it, and no subscription delivers those, so
   * a head among them would never be reached. `$all` is read back page by page (client 6.2.1
   * cannot filter reads of `$all`) to the start or an event of ours; after `headScanMs` of
   * pages of the server's own, the newest event of all (a head the caller waits for in vain
   * rather than one it passes too early).
   */
  async headPosition(): Promise<Position | null> {
    const deadline = Date.now() + this.headScanMs;
    let newest: Position | null = null;
    let from: EsdbPosition | typeof END = END;
    for (;;) {
      const before = from === END ? undefined : formatEsdbPosition(from);
      let read = 0;
      let oldest: EsdbPosition | undefined;
      for await (const resolved of this.client.readAll({ direction: BACKWARDS, fromPosition: from, maxCount: HEAD_PAGE })) {
        read += 1;
        const event = resolved.event;
        if (!event) continue;
        const position = formatEsdbPosition(event.position);
        if (before !== undefined && position >= before) continue; // the page's start again, if a server sends it
        oldest = event.position;
        if (!isSystemEvent(event)) return position;
        newest ??= position;
      }
      if (read < HEAD_PAGE || oldest === undefined || Date.now() >= deadline) return newest;
      from = oldest;
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.subscriptions].map((subscription) => subscription.close()));
    await this.client.dispose();
  }

  /**
   * Changes the stream's metadata as the server holds it (`$tb`, `$maxAge` and whatever else
   * anyone set, kept as they are): reads the last event of its metadata stream `$$<stream>`
   * with that event's revision, and writes the changed metadata only over that revision, so
   * that two writers (retention passes of two processes, a pass and a plan change) cannot undo
   * each other; the one that lost reads again and applies its change to what the other wrote,
   * METADATA_ATTEMPTS times at most. `change` answers undefined for nothing to write. The
   * revision is read here because client 6.2.1's `getStreamMetadata` answers a log position
   * as `metastreamRevision`; the event is what its `setStreamMetadata` appends.
   */
  private async updateMetadata(streamId: string, change: (metadata: RawStreamMetadata) => RawStreamMetadata | undefined): Promise<void> {
    const metastream = metastreamOf(streamId);
    for (let attempt = 1; ; attempt += 1) {
      const { metadata, revision } = await this.readMetadata(metastream);
      const next = change(metadata);
      if (next === undefined) return;
      const expected = revision === undefined ? NO_STREAM : revision;
      try {
        await this.client.appendToStream(metastream, jsonEvent({ type: '$metadata', data: next }), { expectedRevision: expected });
        return;
      } catch (error) {
        if (error instanceof WrongExpectedVersionError && attempt < METADATA_ATTEMPTS) continue;
        throw fromEsdbAppendError(error, metastream, revision === undefined ? 'no_stream' : Number(revision));
      }
    }
  }

  /** The last metadata event of a metadata stream, as the server reads it, and its revision (undefined: none). */
  private async readMetadata(metastream: string): Promise<{ metadata: RawStreamMetadata; revision: bigint | undefined }> {
    try {
      const read = this.client.readStream(metastream, { direction: BACKWARDS, fromRevision: END, maxCount: 1, requiresLeader: true });
      for await (const resolved of read) {
        if (resolved.event) return { metadata: readRawMetadata(resolved.event), revision: resolved.event.revision };
      }
    } catch (error) {
      if (!(error instanceof StreamNotFoundError)) throw error;
    }
    return { metadata: {}, revision: undefined };
  }

  /** The revision of the stream's last event still readable, undefined when there is none. */
  private async lastRevision(streamId: string): Promise<number | undefined> {
    try {
      for await (const resolved of this.client.readStream(streamId, { direction: BACKWARDS, fromRevision: END, maxCount: 1 })) {
        if (resolved.event) return Number(resolved.event.revision);
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return undefined;
      throw error;
    }
    return undefined;
  }

  private async positionOf(streamId: string, revision: number): Promise<Position> {
    const read = this.client.readStream(streamId, { fromRevision: BigInt(revision), maxCount: 1, requiresLeader: true });
    for await (const resolved of read) {
      if (resolved.event) return toStoredEvent(resolved.event).position;
    }
    throw new EventStoreError('position_unavailable', `${streamId}@${revision} was appended but cannot be read back`);
  }
}

function toEsdbExpected(expected: ExpectedRevision): AppendExpectedRevision {
  switch (expected) {
    case 'any':
      return ANY;
    case 'no_stream':
      return NO_STREAM;
    case 'stream_exists':
      return STREAM_EXISTS;
    default:
      return BigInt(expected);
  }
}

function fromEsdbAppendError(error: unknown, streamId: string, expected: ExpectedRevision): unknown {
  if (error instanceof WrongExpectedVersionError) {
    const actual = error.actualVersion === NO_STREAM ? 'no_stream' : Number(error.actualVersion);
    return new WrongExpectedRevisionError(streamId, expected, actual);
  }
  if (error instanceof MaxAppendSizeExceededError) {
    return new EventStoreError('append_too_large', `append to ${streamId} exceeds the server's ${error.maxAppendSize} bytes`, {
      streamId,
    });
  }
  return error;
}
