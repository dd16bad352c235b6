import { validateAppend } from '../../src/infra/eventstore/appendRules.js';
import { type AppendResult, type ExpectedRevision, type NewEvent, type StoredEvent, WrongExpectedRevisionError } from '../../src/infra/eventstore/port.js';
import { MemoryEventStore } from './memoryEventStore.js';
/**
 * An in-memory EventStore with EventStoreDB's idempotency rules, not the embedded store's:
 * - at a definite expected revision (or `no_stream`, i.e. -1) behind the head, an append is
 *   answered as a retry when the events after that revision carry the same ids in the same
 *   order, and refused with the actual revision otherwise (a partial match included);
 * - with `any` / `stream_exists`, only the first event's id is looked up: found, the batch is a
 *   retry if the following events match (refused if not); not found, every event is written,
 *   so an id already in the stream later in the batch is written a second time.
 * For tests of code that must be exactly-once on EventStoreDB. No subscriptions.
 */
export class EsdbLikeEventStore extends MemoryEventStore {
  appendCalls = 0;

  override async append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    validateAppend(streamId, events, expected);
    this.appendCalls += 1;
    const stream = this.events(streamId);
    const head = stream.length - 1;
    const actual = stream.length === 0 ? 'no_stream' : head;
    const refuse = (): never => {
      throw new WrongExpectedRevisionError(streamId, expected, actual);
    };
    if (expected === 'any' || expected === 'stream_exists') {
      if (expected === 'stream_exists' && stream.length === 0) refuse();
      const first = stream.findIndex((e) => e.id === events[0]?.id);
      if (first >= 0) return this.retried(stream, first - 1, events) ?? refuse();
    } else {
      const after = expected === 'no_stream' ? -1 : expected;
      if (after < head) return this.retried(stream, after, events) ?? refuse();
      if (after !== head) refuse();
    }
    return this.write(streamId, stream, events);
  }

  /** The answer to a retry when the events after revision `after` are these, in order; else undefined. */
  private retried(stream: StoredEvent[], after: number, events: NewEvent[]): AppendResult | undefined {
    const same = events.every((event, i) => stream[after + 1 + i]?.id === event.id);
    const last = stream[after + events.length];
    return same && last ? { nextExpectedRevision: last.revision, position: last.position } : undefined;
  }
}

