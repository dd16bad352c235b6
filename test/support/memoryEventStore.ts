import type { AppendResult, EventStore, ExpectedRevision, NewEvent, Position, StoredEvent, Subscription } from '../../src/infra/eventstore/port.js';
import { WrongExpectedRevisionError } from '../../src/infra/eventstore/port.js';

/**
 * A minimal in-memory EventStore for tests of code that only appends and reads streams (the
 * usage ingester). It keeps the port's rules that such code relies on: expected revisions,
 * and an event whose id the stream already holds is skipped (idempotent retry). It has no
 * subscriptions: use the real adapters for projector tests. A truncation hides the events
 * before it from stream reads and keeps the stream's revisions, as the port says.
 */
export class MemoryEventStore implements EventStore {
  private readonly streams = new Map<string, StoredEvent[]>();
  /** Per stream, its first revision not dropped by a truncation. */
  private readonly truncated = new Map<string, number>();
  private lastPosition = 0;
  readCalls = 0;

  async append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    const stream = this.events(streamId);
    const actual = stream.length === 0 ? 'no_stream' : stream.length - 1;
    const matches =
      expected === 'any' ||
      (expected === 'no_stream' && actual === 'no_stream') ||
      (expected === 'stream_exists' && actual !== 'no_stream') ||
      expected === actual;
    if (!matches) throw new WrongExpectedRevisionError(streamId, expected, actual);

    const known = new Set(stream.map((event) => event.id));
    const fresh = events.filter((event) => !known.has(event.id) && known.add(event.id));
    return this.write(streamId, stream, fresh);
  }

  /** Appends `events` to the stream as they are (no id checks) and answers as the port does. */
  protected write(streamId: string, stream: StoredEvent[], events: NewEvent[]): AppendResult {
    for (const event of events) {
      this.lastPosition += 1;
      stream.push({
        streamId,
        revision: stream.length,
        position: formatPosition(this.lastPosition),
        id: event.id,
        type: event.type,
        data: structuredClone(event.data),
        metadata: structuredClone(event.metadata ?? {}),
        created: new Date().toISOString(),
      });
    }
    if (stream.length > 0) this.streams.set(streamId, stream);
    const last = stream.at(-1);
    return { nextExpectedRevision: stream.length - 1, position: last?.position ?? formatPosition(this.lastPosition) };
  }

  /** The stored events of a stream (empty when it does not exist); appended to by `write`. */
  protected events(streamId: string): StoredEvent[] {
    return this.streams.get(streamId) ?? [];
  }

  async readStream(streamId: string, options: { fromRevision?: number; maxCount?: number } = {}): Promise<StoredEvent[]> {
    this.readCalls += 1;
    const from = Math.max(options.fromRevision ?? 0, this.truncated.get(streamId) ?? 0);
    const events = this.events(streamId).slice(from, from + (options.maxCount ?? Number.POSITIVE_INFINITY));
    return events.map((event) => structuredClone(event));
  }

  async truncateBefore(streamId: string, revision: number): Promise<void> {
    const stream = this.streams.get(streamId);
    if (!stream) return;
    const cut = Math.min(revision, stream.length);
    if (cut > (this.truncated.get(streamId) ?? 0)) this.truncated.set(streamId, cut);
  }

  /** Ids of every stream written, for assertions. */
  streamIds(): string[] {
    return [...this.streams.keys()];
  }

  subscribeToAll(): Subscription {
    throw new Error(`${this.constructor.name} (test double) has no subscriptions`);
  }

  async headPosition(): Promise<Position | null> {
    return this.lastPosition === 0 ? null : formatPosition(this.lastPosition);
  }

  async close(): Promise<void> {}
}

const formatPosition = (n: number): Position => String(n).padStart(20, '0');
