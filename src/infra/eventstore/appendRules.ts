import { EventStoreError } from './errors.js';
import { type ExpectedRevision, type NewEvent, WrongExpectedRevisionError } from './port.js';

/** Rejects appends that no adapter should send on: empty batches, odd stream names, repeated ids. */
export function validateAppend(streamId: string, events: NewEvent[], expected: ExpectedRevision): void {
  if (streamId.length === 0 || streamId.includes('\u0000')) {
    throw new EventStoreError('invalid_append', `invalid stream id ${JSON.stringify(streamId)}`);
  }
  if (events.length === 0) throw new EventStoreError('invalid_append', `append to ${streamId} has no events`);
  if (typeof expected === 'number' && !(Number.isSafeInteger(expected) && expected >= 0)) {
    throw new EventStoreError('invalid_append', `expected revision must be a non-negative integer, got ${expected}`);
  }
  const ids = new Set<string>();
  for (const event of events) {
    if (typeof event.id !== 'string' || event.id.length === 0) {
      throw new EventStoreError('invalid_append', `event of type ${event.type} in ${streamId} has no id`);
    }
    if (typeof event.type !== 'string' || event.type.length === 0) {
      throw new EventStoreError('invalid_append', `event ${event.id} in ${streamId} has no type`);
    }
    if (ids.has(event.id)) {
      throw new EventStoreError('duplicate_event_ids', `event id ${event.id} appears twice in one append to ${streamId}`, {
        streamId,
        ids: [event.id],
      });
    }
    ids.add(event.id);
  }
}

/** A truncation names a stream and a revision (a non-negative whole number). */
export function validateTruncation(streamId: string, revision: number): void {
  if (streamId.length === 0 || streamId.includes('\u0000')) {
    throw new EventStoreError('invalid_truncation', `invalid stream id ${JSON.stringify(streamId)}`);
  }
  if (!(Number.isSafeInteger(revision) && revision >= 0)) {
    throw new EventStoreError('invalid_truncation', `a truncation's revision must be a non-negative integer, got ${revision}`, { streamId });
  }
}

/** EventStoreDB's rules: `head` is the revision of the stream's last event, undefined when the stream does not exist. */
export function checkExpectedRevision(streamId: string, expected: ExpectedRevision, head: number | undefined): void {
  const actual = head ?? 'no_stream';
  const ok =
    expected === 'any' ||
    (expected === 'no_stream' && head === undefined) ||
    (expected === 'stream_exists' && head !== undefined) ||
    (typeof expected === 'number' && head === expected);
  if (!ok) throw new WrongExpectedRevisionError(streamId, expected, actual);
}

/** Events of a subscription can be limited to streams whose id starts with one of these; none (or an empty list) means all. */
export function streamMatcher(prefixes: string[] | undefined): (streamId: string) => boolean {
  if (!prefixes || prefixes.length === 0) return () => true;
  const list = [...prefixes];
  return (streamId) => list.some((prefix) => streamId.startsWith(prefix));
}
