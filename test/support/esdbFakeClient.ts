import { Readable } from 'node:stream';
import { type AppendExpectedRevision, type EventStoreDBClient, type Position, StreamNotFoundError, WrongExpectedVersionError } from '@eventstore/db-client';

/** What the adapter sends as an event (what `jsonEvent` makes). */
interface ProposedEvent {
  id: string;
  type: string;
  data: unknown;
  metadata?: unknown;
}

interface Recorded {
  streamId: string;
  id: string;
  revision: bigint;
  type: string;
  isJson: true;
  created: Date;
  data: unknown;
  metadata: unknown;
  position: Position;
}

interface AppendAnswer {
  success: true;
  nextExpectedRevision: bigint;
  position: Position;
}

interface Live {
  push(event: Recorded): void;
}

/** Calls the adapter made, one per gRPC round trip. */
export interface EsdbCalls {
  appendToStream: number;
  readStream: number;
  readAll: number;
  subscribeToAll: number;
  /** Reads and writes of stream metadata (each a read or an append of the `$$<stream>` stream on the server). */
  streamMetadata: number;
}

/** The stream metadata the server acts on (`$tb`, `$maxAge` in seconds), with whatever else a client set. */
type StreamMetadata = { truncateBefore?: number; maxAge?: number } & Record<string, unknown>;

/**
 * An in-memory EventStoreDB as `@eventstore/db-client` shows it, for running the real adapter
 * (src/infra/eventstore/esdb.ts) without a server, and counting its round trips. It follows
 * the server's rules (EventStore's StorageWriterService and IndexWriter.CheckCommit):
 * - a multi-event append is one implicit transaction: every event's position is its own log
 *   position as both commit and prepare, and the answer's position is the last event's;
 * - at the stream's head an append is written without looking at ids;
 * - behind the head (a definite revision or `no_stream`) it is an idempotent retry when the
 *   events after that revision carry its ids in order (answered with the last of them), and
 *   refused with the actual revision otherwise, a partial match included;
 * - with `any` / `stream_exists`, a first id the stream does not hold writes the whole batch
 *   (an id it holds later in the batch a second time); a first id it holds makes the batch a
 *   retry if the stream holds every id, and refuses it if not.
 * Subscriptions to `$all` send history, then `caughtUp`, then live events, as a readable stream.
 * Stream metadata: stream reads skip the events before `$tb` and those older than `$maxAge`
 * at once; `$all` keeps them until `scavenge()`, as the server keeps them until its scavenge.
 * A stream keeps its revisions (appends go on from its last event, truncated or not). The
 * metadata lives beside the streams, not as `$metadata` events of `$$<stream>` in the log (the
 * adapter skips system events anyway).
 */
export class FakeEsdbServer {
  readonly calls: EsdbCalls = { appendToStream: 0, readStream: 0, readAll: 0, subscribeToAll: 0, streamMetadata: 0 };
  /** Events sent by stream reads. */
  eventsRead = 0;
  private readonly streams = new Map<string, Recorded[]>();
  private log: Recorded[] = [];
  private readonly metadata = new Map<string, StreamMetadata>();
  /** The server's clock, for `$maxAge` (events are stamped with the real time when appended). */
  now: () => number = Date.now;
  private readonly live = new Set<Live>();
  private logPosition = 0n;

  /** The client to hand to the adapter: the calls it makes are the ones EsdbEventStore makes. */
  readonly client = {
    appendToStream: async (streamName: string, events: ProposedEvent[], options: { expectedRevision?: AppendExpectedRevision } = {}) => {
      this.calls.appendToStream += 1;
      await Promise.resolve();
      return this.append(streamName, events, options.expectedRevision ?? 'any');
    },
    readStream: (
      streamName: string,
      options: { fromRevision?: bigint | 'start' | 'end'; maxCount?: number | bigint; direction?: 'forwards' | 'backwards' } = {},
    ) => {
      this.calls.readStream += 1;
      return this.readStream(streamName, options);
    },
    readAll: (options: { maxCount?: number | bigint; direction?: 'forwards' | 'backwards' } = {}) => {
      this.calls.readAll += 1;
      const backwards = options.direction === 'backwards';
      const events = backwards ? [...this.log].reverse() : [...this.log];
      return resolvedAll(events.slice(0, Number(options.maxCount ?? events.length)));
    },
    subscribeToAll: (options: { fromPosition?: Position | 'start' | 'end'; filter?: { prefixes?: string[] } } = {}) => {
      this.calls.subscribeToAll += 1;
      return this.subscribe(options.fromPosition ?? 'start', options.filter?.prefixes ?? []);
    },
    getStreamMetadata: async (streamName: string) => {
      this.calls.streamMetadata += 1;
      await Promise.resolve();
      const metadata = this.metadata.get(streamName);
      return metadata ? { streamName, metadata: structuredClone(metadata) } : { streamName };
    },
    setStreamMetadata: async (streamName: string, metadata: StreamMetadata) => {
      this.calls.streamMetadata += 1;
      await Promise.resolve();
      this.metadata.set(streamName, structuredClone(metadata));
      this.logPosition += 100n;
      return { success: true, nextExpectedRevision: 0n, position: { commit: this.logPosition, prepare: this.logPosition } };
    },
    dispose: async (): Promise<void> => {},
  } as unknown as EventStoreDBClient;

  /** Client calls so far, in all. */
  get roundTrips(): number {
    const { appendToStream, readStream, readAll, subscribeToAll, streamMetadata } = this.calls;
    return appendToStream + readStream + readAll + subscribeToAll + streamMetadata;
  }

  /** What the server's scavenge does: events that stream reads skip (`$tb`, `$maxAge`) leave the log, so `$all` too. */
  scavenge(): void {
    this.log = this.log.filter((event) => this.readable(event));
  }

  /** Whether a stream read returns the event: not before the stream's `$tb`, not older than its `$maxAge`. */
  private readable(event: Recorded): boolean {
    const { truncateBefore = 0, maxAge } = this.metadata.get(event.streamId) ?? {};
    if (event.revision < BigInt(truncateBefore)) return false;
    return maxAge === undefined || event.created.getTime() >= this.now() - maxAge * 1000;
  }

  private append(streamName: string, events: ProposedEvent[], expected: AppendExpectedRevision): AppendAnswer {
    const stream = this.streams.get(streamName) ?? [];
    const head = BigInt(stream.length - 1);
    const refuse = (): never => {
      throw new WrongExpectedVersionError(undefined, {
        streamName,
        expected,
        current: stream.length === 0 ? 'no_stream' : head,
      });
    };
    if (expected === 'any' || expected === 'stream_exists') {
      if (expected === 'stream_exists' && stream.length === 0) refuse();
      if (stream.some((e) => e.id === events[0]?.id)) {
        // The server's id cache holds the latest record of an id.
        const latest = new Map(stream.map((e) => [e.id, e]));
        const held = events.map((event) => latest.get(event.id));
        const last = held.at(-1);
        return held.every((e) => e !== undefined) && last ? answer(last) : refuse();
      }
    } else {
      const after = expected === 'no_stream' ? -1n : expected;
      if (after < head) {
        const same = events.every((event, i) => stream[Number(after) + 1 + i]?.id === event.id);
        const held = stream[Number(after) + events.length];
        return same && held ? answer(held) : refuse();
      }
      if (after !== head) refuse();
    }
    for (const event of events) {
      this.logPosition += 100n + BigInt(JSON.stringify(event.data ?? null).length);
      const recorded: Recorded = {
        streamId: streamName,
        id: event.id,
        revision: BigInt(stream.length),
        type: event.type,
        isJson: true,
        created: new Date(),
        data: structuredClone(event.data),
        metadata: structuredClone(event.metadata),
        position: { commit: this.logPosition, prepare: this.logPosition },
      };
      stream.push(recorded);
      this.log.push(recorded);
      for (const subscription of this.live) subscription.push(recorded);
    }
    this.streams.set(streamName, stream);
    return answer(stream.at(-1) as Recorded);
  }

  private async *readStream(
    streamName: string,
    options: { fromRevision?: bigint | 'start' | 'end'; maxCount?: number | bigint; direction?: 'forwards' | 'backwards' },
  ): AsyncGenerator<{ event: Recorded }> {
    await Promise.resolve();
    const stream = this.streams.get(streamName);
    if (!stream) throw new StreamNotFoundError(undefined, streamName);
    const maxCount = Number(options.maxCount ?? stream.length);
    const from = options.fromRevision;
    const readable = (event: Recorded): boolean => this.readable(event);
    let slice: Recorded[];
    if (options.direction === 'backwards') {
      const start = from === undefined || from === 'end' ? stream.length - 1 : Number(from);
      slice = stream
        .slice(0, start + 1)
        .filter(readable)
        .reverse()
        .slice(0, maxCount);
    } else {
      const start = from === undefined || from === 'start' ? 0 : from === 'end' ? stream.length : Number(from);
      slice = stream.slice(start).filter(readable).slice(0, maxCount);
    }
    for (const event of slice) {
      this.eventsRead += 1;
      yield { event: structuredClone(event) };
    }
  }

  /** The ids of a stream's events, in order. */
  eventsOf(streamName: string): string[] {
    return (this.streams.get(streamName) ?? []).map((event) => event.id);
  }

  private subscribe(from: Position | 'start' | 'end', prefixes: string[]): Readable {
    const wanted = (event: Recorded): boolean => prefixes.length === 0 || prefixes.some((p) => event.streamId.startsWith(p));
    const after = (event: Recorded): boolean =>
      from === 'start' ||
      (from !== 'end' && (event.position.commit > from.commit || (event.position.commit === from.commit && event.position.prepare > from.prepare)));
    const stream = new Readable({ objectMode: true, read() {} });
    const live: Live = { push: (event) => wanted(event) && stream.push({ event: structuredClone(event) }) };
    const history = from === 'end' ? [] : this.log.filter((event) => after(event) && wanted(event));
    for (const event of history) stream.push({ event: structuredClone(event) });
    this.live.add(live);
    // After the caller has attached its listeners, as the server's marker comes after the history.
    setImmediate(() => stream.emit('caughtUp'));
    return Object.assign(stream, {
      unsubscribe: async (): Promise<void> => {
        this.live.delete(live);
        stream.destroy();
      },
    });
  }
}

const answer = (event: Recorded): AppendAnswer => ({ success: true, nextExpectedRevision: event.revision, position: event.position });

async function* resolvedAll(events: Recorded[]): AsyncGenerator<{ event: Recorded }> {
  await Promise.resolve();
  for (const event of events) yield { event: structuredClone(event) };
}
