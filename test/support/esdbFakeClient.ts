import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  type AppendExpectedRevision,
  type EventStoreDBClient,
  metastreamOf,
  type Position,
  StreamNotFoundError,
  WrongExpectedVersionError,
} from '@eventstore/db-client';

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

/** Stream metadata as a client passes it to `setStreamMetadata` (`truncateBefore`, `maxAge`, ...). */
type StreamMetadata = Record<string, unknown>;

/** The client's names for the metadata the server acts on, and the server's (`prepareStreamMetadata` / `readStreamMetadata`). */
const METADATA_NAMES: [client: string, server: string][] = [
  ['truncateBefore', '$tb'],
  ['maxAge', '$maxAge'],
  ['maxCount', '$maxCount'],
  ['cacheControl', '$cacheControl'],
  ['acl', '$acl'],
];
const renamed = (metadata: StreamMetadata, from: 0 | 1): StreamMetadata =>
  Object.fromEntries(Object.entries(metadata).map(([key, value]) => [METADATA_NAMES.find((names) => names[from] === key)?.[1 - from] ?? key, value]));

type ReadAllOptions = { fromPosition?: Position | 'start' | 'end'; maxCount?: number | bigint; direction?: 'forwards' | 'backwards' };
type SubscribeFilter = { filterOn?: 'streamName' | 'eventType'; prefixes?: string[]; regex?: string };

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
 * Stream metadata is what the server makes of it: the last `$metadata` event of the stream
 * `$$<stream>` in the log (`$tb`, `$maxAge`, `$maxCount`, anything else), written with the
 * metastream's expected revision checked like any append (`setStreamMetadata`'s
 * `expectedRevision`); a metastream keeps only its last event (`$maxCount` 1). Stream reads
 * skip the events before `$tb`, those older than `$maxAge` and those before the last
 * `$maxCount` at once; `$all` keeps them until `scavenge()`, as the server keeps them until its
 * scavenge. A stream keeps its revisions (appends go on from its last event, truncated or not).
 * `getStreamMetadata` answers as client 6.2.1 does: its `metastreamRevision` is the commit
 * position the read sent, a log position rather than the metastream's revision.
 * Reads of `$all` start at `fromPosition`, backwards before it; subscriptions apply a filter on
 * stream name prefixes or an event type regex (`excludeSystemEvents()`).
 */
export class FakeEsdbServer {
  readonly calls: EsdbCalls = { appendToStream: 0, readStream: 0, readAll: 0, subscribeToAll: 0, streamMetadata: 0 };
  /** Events sent by stream reads. */
  eventsRead = 0;
  private readonly streams = new Map<string, Recorded[]>();
  private log: Recorded[] = [];
  /** The server's clock, for `$maxAge` (events are stamped with the real time when appended). */
  now: () => number = Date.now;
  private readonly live = new Set<Live>();
  private logPosition = 0n;

  /** The client to hand to the adapter: the calls it makes are the ones EsdbEventStore makes. */
  readonly client = {
    appendToStream: async (streamName: string, events: ProposedEvent | ProposedEvent[], options: { expectedRevision?: AppendExpectedRevision } = {}) => {
      if (streamName.startsWith('$$')) this.calls.streamMetadata += 1;
      else this.calls.appendToStream += 1;
      await Promise.resolve();
      return this.append(streamName, Array.isArray(events) ? events : [events], options.expectedRevision ?? 'any');
    },
    readStream: (
      streamName: string,
      options: { fromRevision?: bigint | 'start' | 'end'; maxCount?: number | bigint; direction?: 'forwards' | 'backwards' } = {},
    ) => {
      if (streamName.startsWith('$$')) this.calls.streamMetadata += 1;
      else this.calls.readStream += 1;
      return this.readStream(streamName, options);
    },
    readAll: (options: ReadAllOptions = {}) => {
      this.calls.readAll += 1;
      return resolvedAll(this.readAll(options));
    },
    subscribeToAll: (options: { fromPosition?: Position | 'start' | 'end'; filter?: SubscribeFilter } = {}) => {
      this.calls.subscribeToAll += 1;
      return this.subscribe(options.fromPosition ?? 'start', options.filter ?? {});
    },
    getStreamMetadata: async (streamName: string) => {
      this.calls.streamMetadata += 1;
      await Promise.resolve();
      const last = this.lastMetadataEvent(streamName);
      if (!last) return { streamName };
      return { streamName, metadata: renamed(structuredClone(last.data) as StreamMetadata, 1), metastreamRevision: last.position.commit };
    },
    setStreamMetadata: async (streamName: string, metadata: StreamMetadata, options: { expectedRevision?: AppendExpectedRevision } = {}) => {
      this.calls.streamMetadata += 1;
      await Promise.resolve();
      const event = { id: randomUUID(), type: '$metadata', data: renamed(metadata, 0) };
      return this.append(metastreamOf(streamName), [event], options.expectedRevision ?? 'any');
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

  /** Whether a stream read returns the event: not before the stream's `$tb`, nor its last `$maxCount`, nor older than its `$maxAge`. */
  private readable(event: Recorded): boolean {
    const metadata = (this.lastMetadataEvent(event.streamId)?.data ?? {}) as StreamMetadata;
    const number = (key: string): number | undefined => (typeof metadata[key] === 'number' ? metadata[key] : undefined);
    const maxCount = number('$maxCount') ?? (event.streamId.startsWith('$$') ? 1 : undefined);
    if (event.revision < BigInt(number('$tb') ?? 0)) return false;
    if (maxCount !== undefined && event.revision < BigInt((this.streams.get(event.streamId)?.length ?? 0) - maxCount)) return false;
    const maxAge = number('$maxAge');
    return maxAge === undefined || event.created.getTime() >= this.now() - maxAge * 1000;
  }

  /** The stream's metadata: the last event of its metastream (a metastream's own is the default). */
  private lastMetadataEvent(streamName: string): Recorded | undefined {
    if (streamName.startsWith('$$')) return undefined;
    const last = this.streams.get(metastreamOf(streamName))?.at(-1);
    return last?.type === '$metadata' ? last : undefined;
  }

  /** `$all` from `fromPosition` (that event included) forwards, or backwards from before it. */
  private readAll(options: ReadAllOptions): Recorded[] {
    const from = options.fromPosition ?? (options.direction === 'backwards' ? 'end' : 'start');
    const key = (position: Position): string => formatPosition(position);
    let events: Recorded[];
    if (options.direction === 'backwards') {
      events = from === 'end' ? [...this.log] : from === 'start' ? [] : this.log.filter((e) => key(e.position) < key(from));
      events.reverse();
    } else {
      events = from === 'start' ? [...this.log] : from === 'end' ? [] : this.log.filter((e) => key(e.position) >= key(from));
    }
    return events.slice(0, Number(options.maxCount ?? events.length));
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

  private subscribe(from: Position | 'start' | 'end', filter: SubscribeFilter): Readable {
    const prefixes = filter.prefixes ?? [];
    const regex = filter.regex === undefined ? undefined : new RegExp(filter.regex);
    const wanted = (event: Recorded): boolean => {
      const name = filter.filterOn === 'eventType' ? event.type : event.streamId;
      return (prefixes.length === 0 || prefixes.some((p) => name.startsWith(p))) && (regex === undefined || regex.test(name));
    };
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

const formatPosition = (position: Position): string => `${position.commit.toString().padStart(20, '0')}:${position.prepare.toString().padStart(20, '0')}`;

const answer = (event: Recorded): AppendAnswer => ({ success: true, nextExpectedRevision: event.revision, position: event.position });

async function* resolvedAll(events: Recorded[]): AsyncGenerator<{ event: Recorded }> {
  await Promise.resolve();
  for (const event of events) yield { event: structuredClone(event) };
}
