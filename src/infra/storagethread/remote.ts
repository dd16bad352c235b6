import type { UsageRecord } from '../../domain/usage.js';
import { EventStoreError, type EventStoreErrorCode } from '../eventstore/errors.js';
import {
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  type Position,
  type StoredEvent,
  type SubscribeOptions,
  type Subscription,
  type SubscriptionItem,
  WrongExpectedRevisionError,
} from '../eventstore/port.js';
import { ReadModelError, type ReadModelErrorCode } from '../readmodels/errors.js';
import type { Doc, RangeOptions, ReadModelReader, ReadModelStore, ReadModelWrite } from '../readmodels/port.js';
import type { UsageSink } from '../usage/port.js';
import type { RpcClient, WireError } from './rpc.js';

/**
 * The main thread's side of the storage thread's ports: each call crosses the port and gets
 * what the adapter there answered or threw, as the same classes (`reviveStorageError`).
 */

/** The errors the stores throw, as their classes, for callers that look at `code` or `instanceof`. */
export function reviveStorageError(wire: WireError): Error {
  const f = wire.fields;
  let error: Error;
  switch (wire.name) {
    case 'WrongExpectedRevisionError':
      error = new WrongExpectedRevisionError(String(f.streamId), f.expected as ExpectedRevision, f.actual as number | 'no_stream');
      break;
    case 'EventStoreError':
      error = new EventStoreError(f.code as EventStoreErrorCode, wire.message, f.details as Record<string, unknown> | undefined);
      break;
    case 'ReadModelError':
      error = new ReadModelError(f.code as ReadModelErrorCode, wire.message);
      break;
    default:
      error = new Error(wire.message);
      error.name = wire.name;
  }
  return error;
}

export class RemoteEventStore implements EventStore {
  constructor(private readonly rpc: RpcClient) {}

  append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    return this.rpc.call('store.append', streamId, events, expected);
  }

  readStream(streamId: string, options?: { fromRevision?: number; maxCount?: number }): Promise<StoredEvent[]> {
    return this.rpc.call('store.readStream', streamId, options);
  }

  subscribeToAll(options?: SubscribeOptions): Subscription {
    const stream = this.rpc.open<SubscriptionItem>('store.subscribeToAll', options);
    return {
      [Symbol.asyncIterator]: () => stream[Symbol.asyncIterator](),
      close: async () => stream.close(),
    };
  }

  headPosition(): Promise<Position | null> {
    return this.rpc.call('store.headPosition');
  }

  truncateBefore(streamId: string, revision: number): Promise<void> {
    return this.rpc.call('store.truncateBefore', streamId, revision);
  }

  /** The store itself closes with the storage thread. */
  async close(): Promise<void> {}
}

/**
 * Reads straight from the LevelDB the storage thread writes (opened by both threads, shared):
 * a token lookup or an API query does not cross the port, nor leave its garbage on both sides.
 * Writes go over, to the one writer there.
 */
export class RemoteReadModelStore implements ReadModelStore {
  constructor(
    private readonly rpc: RpcClient,
    private readonly reader: ReadModelReader,
  ) {}

  get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null> {
    return this.reader.get<T>(collection, key);
  }

  range<T extends Doc = Doc>(collection: string, options?: RangeOptions): Promise<Array<{ key: string; doc: T }>> {
    return this.reader.range<T>(collection, options);
  }

  commit(projection: string, position: Position, writes: ReadModelWrite[]): Promise<void> {
    return this.rpc.call('readModels.commit', projection, position, writes);
  }

  checkpoint(projection: string): Promise<Position | null> {
    return this.rpc.call('readModels.checkpoint', projection);
  }

  write(writes: ReadModelWrite[]): Promise<void> {
    return this.rpc.call('readModels.write', writes);
  }

  reset(projection: string, collections: string[]): Promise<void> {
    return this.rpc.call('readModels.reset', projection, collections);
  }

  /** The store, and this thread's reader of it, close with the storage thread. */
  async close(): Promise<void> {}
}

/**
 * How long enqueued records wait on this side to go over in one message, by default: each
 * message wakes the storage thread. 20 ms, not 5: ~1 µs a record less on the event loop
 * (bench/usage-handoff.ts embedded), and the ingester over there lingers 100 ms anyway.
 */
const USAGE_SEND_EVERY_MS = 20;

/**
 * The gateway's side of the usage queue when the ingester runs on the storage thread: records
 * gather here and go over together every few ms (one message, not one per call); the queue
 * itself, which the ingester reads, is the in-process one over there. Neither side outlives a
 * crash: the runtime journals every record before its call is answered (JournaledUsageSink),
 * and this queue tells the journal how far the store has them (`appendedThrough`).
 */
export class ThreadUsageQueue implements UsageSink {
  private buffer: UsageRecord[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly rpc: RpcClient,
    private readonly sendEveryMs = USAGE_SEND_EVERY_MS,
  ) {}

  enqueue(record: UsageRecord): void {
    this.buffer.push(record);
    this.timer ??= setTimeout(this.send, this.sendEveryMs);
  }

  private readonly send = (): void => {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.buffer.length === 0) return;
    this.rpc.notify('usage', this.buffer);
    this.buffer = [];
  };

  /** Held here only: the journal in front says when records are handed over. */
  whenHandedOver(done: () => void): void {
    done();
  }

  /** How many of the records enqueued here, in order, the store has (MemoryUsageBackend.appendedThrough). */
  appendedThrough(): Promise<number> {
    return this.rpc.call<number>('usage.appendedThrough');
  }

  async depth(): Promise<number> {
    return this.buffer.length + (await this.rpc.call<number>('usage.depth'));
  }

  /** Resolves once the storage thread holds every record enqueued before it (messages arrive in order). */
  async flush(): Promise<void> {
    this.send();
    await this.rpc.call('usage.depth');
  }

  async close(): Promise<void> {
    this.send();
  }
}
