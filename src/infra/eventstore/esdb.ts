import {
  ANY,
  type AppendExpectedRevision,
  BACKWARDS,
  END,
  EventStoreDBClient,
  jsonEvent,
  MaxAppendSizeExceededError,
  NO_STREAM,
  STREAM_EXISTS,
  StreamNotFoundError,
  WrongExpectedVersionError,
} from '@eventstore/db-client';
import { validateAppend, validateTruncation } from './appendRules.js';
import { EventStoreError } from './errors.js';
import { formatEsdbPosition, isSystemEvent, toStoredEvent } from './esdbEvents.js';
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

/** System events `headPosition` looks past, at most, for the newest event of ours. */
const HEAD_SCAN = 1000;

/**
 * The production event store: EventStoreDB / KurrentDB over gRPC (`@eventstore/db-client` v6).
 * Needs a server of 23.10 or later (positions on stream reads, caught-up on subscriptions).
 */
export class EsdbEventStore implements EventStore {
  private readonly subscriptions = new Set<EsdbSubscription>();

  /** `client` is the connection (or, in tests, an in-memory stand-in with the same calls). */
  constructor(private readonly client: EventStoreDBClient) {}

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
   * `$tb` beyond it would hide the events appended later too. Stream reads skip the events at
   * once; `$all` (subscriptions, rebuilds) still holds them until the server's next scavenge.
   * Run by one writer (the projector's retention pass): the metadata is read, then written.
   */
  async truncateBefore(streamId: string, revision: number): Promise<void> {
    validateTruncation(streamId, revision);
    const last = await this.lastRevision(streamId);
    if (last === undefined) return; // no stream, or nothing left in it
    const { metadata = {} } = await this.client.getStreamMetadata(streamId);
    const current = typeof metadata.truncateBefore === 'number' ? metadata.truncateBefore : 0;
    const cut = Math.min(revision, last + 1);
    if (cut <= current) return;
    await this.client.setStreamMetadata(streamId, { ...metadata, truncateBefore: cut });
  }

  /** Sets the stream's `$maxAge` (keeping its other metadata); a stream not created yet gets it when it is. */
  async limitStreamAge(streamId: string, maxAgeSeconds: number): Promise<void> {
    if (!(Number.isSafeInteger(maxAgeSeconds) && maxAgeSeconds > 0)) {
      throw new EventStoreError('invalid_truncation', `a maximum age must be a positive whole number of seconds, got ${maxAgeSeconds}`, { streamId });
    }
    const { metadata = {} } = await this.client.getStreamMetadata(streamId);
    if (metadata.maxAge === maxAgeSeconds) return;
    await this.client.setStreamMetadata(streamId, { ...metadata, maxAge: maxAgeSeconds });
  }

  subscribeToAll(options: SubscribeOptions = {}): Subscription {
    const subscription = new EsdbSubscription(this.client, options, (closed) => this.subscriptions.delete(closed));
    this.subscriptions.add(subscription);
    return subscription;
  }

  /**
   * The newest event of ours: the server's own (the `$metadata` that `truncateBefore` and
   * `limitStreamAge` write, statistics) may follow it, and no subscription delivers those, so
   * a head among them would never be reached. Past HEAD_SCAN of them, the newest of all.
   */
  async headPosition(): Promise<Position | null> {
    let newest: Position | null = null;
    for await (const resolved of this.client.readAll({ direction: BACKWARDS, fromPosition: END, maxCount: HEAD_SCAN })) {
      if (!resolved.event) continue;
      if (!isSystemEvent(resolved.event)) return formatEsdbPosition(resolved.event.position);
      newest ??= formatEsdbPosition(resolved.event.position);
    }
    return newest;
  }

  async close(): Promise<void> {
    await Promise.all([...this.subscriptions].map((subscription) => subscription.close()));
    await this.client.dispose();
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
