import { EventStoreError } from './errors.js';
import type { Position, StoredEvent } from './port.js';

/**
 * Key layout of the LevelDB event store (utf8 keys, NUL separates a stream id from what follows):
 *   l\0<seq:20>            → the event as JSON (global log; seq starts at 1)
 *   s\0<stream>\0<rev:20>  → <seq:20> <n>    (stream index: the stream's `n` events from `rev` on are
 *                                             the log's from `seq` on; ` <n>` left out when 1)
 *   h\0<stream>            → <rev>           (revision of the stream's last event)
 *   e\0<stream>\0<eventId> → <rev> <seq:20>  (ids already in the stream, for idempotent retries)
 *   m\0indexed             → <seq:20>        (the last log entry the indexes cover; two stores only)
 *   t\0<stream>            → <rev>           (the stream's events before `rev` were dropped: truncateBefore)
 *   p\0<stream>            → <rev>           (a truncation whose deletes may not all be written yet)
 *   m\0lastseq             → <seq:20>        (in the log's store: the last sequence number handed out when
 *                                             a truncation may have deleted the log's last entry)
 * Numbers are zero-padded to 20 digits so that string order is numeric order. The log (`l`) and
 * the indexes (`s`, `h`, `e`, `m`) live in two LevelDB stores, or in one in a store made before
 * 2026-11-24 (src/infra/eventstore/level.ts).
 */
const WIDTH = 20;

export const pad = (n: number): string => String(n).padStart(WIDTH, '0');

export const LOG_START = 'l\u0000';
export const LOG_END = 'l\u0001';
export const logKey = (seq: number): string => LOG_START + pad(seq);
export const seqOfLogKey = (key: string): number => Number(key.slice(LOG_START.length));

const streamPrefix = (streamId: string): string => `s\u0000${streamId}\u0000`;
export const streamKey = (streamId: string, revision: number): string => streamPrefix(streamId) + pad(revision);
export const streamRange = (streamId: string): { gte: string; lt: string } => ({
  gte: streamPrefix(streamId),
  lt: `s\u0000${streamId}\u0001`,
});

export const headKey = (streamId: string): string => `h\u0000${streamId}`;
const eventIdPrefix = (streamId: string): string => `e\u0000${streamId}\u0000`;
export const eventIdKey = (streamId: string, eventId: string): string => eventIdPrefix(streamId) + eventId;
/** A stream's id entries: their keys sort by event id. */
export const eventIdRange = (streamId: string): { gte: string; lt: string } => ({
  gte: eventIdPrefix(streamId),
  lt: `e\u0000${streamId}\u0001`,
});
/** A key and its value, as put in a batch. */
export type Entry = [key: string, value: string];

/*
 * The index entries of events of a stream: where a run of them is in the log (one append's
 * events have consecutive revisions and sequence numbers), each one's id, and the stream's head.
 */
export const streamRunEntry = (streamId: string, firstRevision: number, firstSeq: number, count: number): Entry => [
  streamKey(streamId, firstRevision),
  count === 1 ? pad(firstSeq) : `${pad(firstSeq)} ${count}`,
];

/** A stream index entry's run (`prefix`: the stream's `streamRange(…).gte`): its first revision and sequence number, and how many events it holds. */
export function parseStreamRun(prefix: string, key: string, value: string): { firstRevision: number; firstSeq: number; count: number } {
  const space = value.indexOf(' ');
  return {
    firstRevision: Number(key.slice(prefix.length)),
    firstSeq: Number(space < 0 ? value : value.slice(0, space)),
    count: space < 0 ? 1 : Number(value.slice(space + 1)),
  };
}
export const eventIdEntry = (streamId: string, eventId: string, revision: number, position: Position): Entry => [
  eventIdKey(streamId, eventId),
  `${revision} ${position}`,
];
export const headEntry = (streamId: string, revision: number): Entry => [headKey(streamId), String(revision)];

export const INDEXED_KEY = 'm\u0000indexed';

export const truncationKey = (streamId: string): string => `t\u0000${streamId}`;
export const pendingTruncationKey = (streamId: string): string => `p\u0000${streamId}`;
export const PENDING_TRUNCATIONS = { gte: 'p\u0000', lt: 'p\u0001' } as const;
export const LAST_SEQ_KEY = 'm\u0000lastseq';

export const formatPosition = (seq: number): Position => pad(seq);

/** A Level position is the 20-digit sequence number of an event in the global log. */
export function parsePosition(position: Position): number {
  if (!/^\d{20}$/.test(position)) {
    throw new EventStoreError('invalid_position', `not a position of this store: ${JSON.stringify(position)}`);
  }
  const seq = Number(position);
  if (!Number.isSafeInteger(seq)) throw new EventStoreError('invalid_position', `position out of range: ${position}`);
  return seq;
}

/** A raw entry of the global log: its key and the event as JSON. */
export type LogEntry = Entry;

/** Log values are the event without its position, which is the key. */
export function decodeEvent(key: string, value: string): StoredEvent {
  const event = JSON.parse(value) as StoredEvent;
  event.position = key.slice(LOG_START.length);
  return event;
}

const STREAM_ID_FIELD = '{"streamId":"';

/**
 * The stream id of a log value without parsing the whole event (values start with it), so a
 * filtered replay parses only what it delivers. Undefined when the id holds escapes.
 */
export function sniffStreamId(value: string): string | undefined {
  if (!value.startsWith(STREAM_ID_FIELD)) return undefined;
  const end = value.indexOf('"', STREAM_ID_FIELD.length);
  const streamId = value.slice(STREAM_ID_FIELD.length, end);
  return end < 0 || streamId.includes('\\') ? undefined : streamId;
}
