import { checkExpectedRevision } from './appendRules.js';
import { EventStoreError } from './errors.js';
import { type Entry, eventIdEntry, eventIdKey, formatPosition, headEntry, LOG_START, streamRunEntry } from './levelKeys.js';
import type { AppendResult, ExpectedRevision, NewEvent, StoredEvent } from './port.js';

/** Point reads of the committed index (synchronous: the writer plans a whole group in one go). */
export interface EventIndexReader {
  /** Revision of the stream's last event, undefined when the stream does not exist. */
  head(streamId: string): number | undefined;
  /** `<revision> <seq:20>` of an event id already in the stream. */
  eventId(streamId: string, eventId: string): string | undefined;
  /** An id at least as large as every id in the stream, when known (levelIdCeilings.ts): ids above it need no lookup. */
  idCeiling(streamId: string): string | undefined;
}

/** The same limit as EventStoreDB's default, so code that fits one store fits the other. */
export const MAX_APPEND_BYTES = 1024 * 1024;

/**
 * Events looked up or encoded between two turns of the event loop. An append of ~100 usage
 * events took 1.4-3 ms in one stretch (id lookups, JSON, keys): every call the process served
 * waited that long. Planning is private to the store's one writer, so pausing it changes
 * nothing anyone sees. 64 rather than 32: each pause lets the projector commit smaller batches
 * in between, and a burst of 60,000 records was ingested ~10 % slower at 32, within noise at 64.
 */
export const EVENTS_PER_TURN = 64;

/** UTF-8 bytes of the entries' values. */
function utf8Bytes(entries: readonly Entry[]): number {
  let bytes = 0;
  for (const [, value] of entries) bytes += Buffer.byteLength(value);
  return bytes;
}

/** Lets the event loop run what is waiting (answers, timers) before going on. */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * One group commit being planned: every append of the group is checked against the committed
 * index plus what earlier appends of the same group will write, and contributes its puts to
 * one batch. An append that fails its checks contributes nothing.
 */
export class AppendPlan {
  /** The new log entries (key, the event as JSON). */
  readonly logPuts: Entry[] = [];
  /** The index entries: each append's run of events in the log, each event's id, each stream's head. */
  readonly indexPuts: Entry[] = [];
  /**
   * The new events as stored, for live subscribers: the objects whose JSON the log holds, so
   * that nobody parses back what was just encoded (~1 µs an event). Their data is the
   * appender's: neither side changes an event once appended.
   */
  readonly appended: StoredEvent[] = [];
  private readonly heads = new Map<string, number>();
  private readonly ids = new Map<string, string>();
  /** Per stream, the largest id this group appends to it: the store raises its ceiling once the group is written. */
  readonly largestIds = new Map<string, string>();
  /** Events handled since the last pause (see EVENTS_PER_TURN). */
  private sinceTurn = 0;

  constructor(
    private readonly index: EventIndexReader,
    public lastSeq: number,
    private readonly created: string,
  ) {}

  /** Plans one append; resolves with what it answers, or rejects (and contributes nothing). */
  async add(streamId: string, given: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    const head = this.heads.get(streamId) ?? this.index.head(streamId);
    let events = given;
    if (head !== undefined) {
      const retried = await this.alreadyAppended(streamId, events, expected);
      if (retried.done) return retried.done;
      events = retried.rest;
    }
    checkExpectedRevision(streamId, expected, head);

    const logPuts: Entry[] = [];
    const indexPuts: Entry[] = [];
    const appended: StoredEvent[] = [];
    const ids: Entry[] = [];
    let revision = head ?? -1;
    let seq = this.lastSeq;
    // The JSON's length in UTF-16 units; its UTF-8 bytes are counted only once 3 bytes a unit could pass the limit.
    let units = 0;
    let bytes: number | null = null;
    for (const event of events) {
      await this.pauseIfDue();
      revision++;
      seq++;
      const metadata = event.metadata ?? {};
      // streamId first: a filtered replay reads it without parsing the event (sniffStreamId).
      const json = JSON.stringify({ streamId, revision, id: event.id, type: event.type, created: this.created, data: event.data, metadata });
      units += json.length;
      if (bytes !== null) bytes += Buffer.byteLength(json);
      else if (units * 3 > MAX_APPEND_BYTES) bytes = utf8Bytes(logPuts) + Buffer.byteLength(json);
      if (bytes !== null && bytes > MAX_APPEND_BYTES) {
        throw new EventStoreError('append_too_large', `append to ${streamId} exceeds ${MAX_APPEND_BYTES} bytes`, { streamId });
      }
      const position = formatPosition(seq);
      logPuts.push([LOG_START + position, json]);
      const idEntry = eventIdEntry(streamId, event.id, revision, position);
      indexPuts.push(idEntry);
      ids.push(idEntry);
      appended.push({ streamId, revision, position, id: event.id, type: event.type, data: event.data, metadata, created: this.created });
    }
    // One entry for the append's run, not one an event: a stream's entries then lie apart only
    // per append, and compactions do not rewrite them all again (docs/decisions.md).
    if (events.length > 0) indexPuts.push(streamRunEntry(streamId, (head ?? -1) + 1, this.lastSeq + 1, events.length));
    indexPuts.push(headEntry(streamId, revision));

    for (const put of logPuts) this.logPuts.push(put);
    for (const put of indexPuts) this.indexPuts.push(put);
    for (const event of appended) this.appended.push(event);
    for (const [key, value] of ids) this.ids.set(key, value);
    let largest = this.largestIds.get(streamId) ?? '';
    for (const event of events) if (event.id > largest) largest = event.id;
    this.largestIds.set(streamId, largest);
    this.heads.set(streamId, revision);
    this.lastSeq = seq;
    return { nextExpectedRevision: revision, position: formatPosition(seq) };
  }

  /**
   * Drops what only the planning needed (the puts, once copied into the native batch, and the
   * group's id and head lookups), so it does not live through the fsync'd write: only the new
   * events stay, for the live subscribers.
   */
  release(): void {
    this.logPuts.length = 0;
    this.indexPuts.length = 0;
    this.ids.clear();
    this.heads.clear();
  }

  /** Every EVENTS_PER_TURN events, a turn of the event loop for others (usually no pause at all). */
  private pauseIfDue(): Promise<void> | undefined {
    if (++this.sinceTurn < EVENTS_PER_TURN) return undefined;
    this.sinceTurn = 0;
    return nextTurn();
  }

  /**
   * A retry of an append whose ids are all in the stream already writes nothing and answers
   * what the first append answered. With `any`, ids already there are skipped and the rest is
   * appended (a redelivered batch may mix old and new events); with a definite expected
   * revision, repeating only some of them is refused.
   */
  private async alreadyAppended(
    streamId: string,
    events: NewEvent[],
    expected: ExpectedRevision,
  ): Promise<{ done: AppendResult; rest?: never } | { done?: never; rest: NewEvent[] }> {
    const found: Array<{ id: string; revision: number; seq: number }> = [];
    const ceiling = this.index.idCeiling(streamId);
    for (const event of events) {
      await this.pauseIfDue();
      const key = eventIdKey(streamId, event.id);
      // Above the ceiling an id is not in the committed index; this group's own ids are in `ids`.
      const entry = this.ids.get(key) ?? (ceiling !== undefined && event.id > ceiling ? undefined : this.index.eventId(streamId, event.id));
      if (entry === undefined) continue;
      const [revision, seq] = entry.split(' ');
      found.push({ id: event.id, revision: Number(revision), seq: Number(seq) });
    }
    if (found.length === 0) return { rest: events };
    if (found.length < events.length) {
      if (expected === 'any') {
        const seen = new Set(found.map((f) => f.id));
        return { rest: events.filter((e) => !seen.has(e.id)) };
      }
      throw new EventStoreError(
        'duplicate_event_ids',
        `append to ${streamId} repeats ${found.length} of its ${events.length} event ids already in the stream`,
        { streamId, ids: found.map((f) => f.id) },
      );
    }
    const last = found.reduce((a, b) => (b.revision > a.revision ? b : a));
    return { done: { nextExpectedRevision: last.revision, position: formatPosition(last.seq) } };
  }
}
