import { EventStoreError } from '../eventstore/errors.js';
import { type EventStore, type NewEvent, WrongExpectedRevisionError } from '../eventstore/port.js';

export interface ExactlyOnceOptions {
  /**
   * How far the clocks of the gateways (which stamp a record's `at`), the ingesters and the event
   * store may disagree. A record cannot be in its stream before `at`; it is looked for among
   * the events created from `at` minus this on.
   */
  clockSkewMs?: number;
  /** Streams remembered at most; the least recently used is forgotten first. */
  maxStreams?: number;
  /** Event ids remembered per stream at most. */
  maxIdsPerStream?: number;
  /** Events read at once when looking back into a stream. */
  readPage?: number;
  /**
   * The store itself skips or refuses every id a stream holds, however long ago it was
   * appended: the embedded store does, EventStoreDB only recognises a retried identical batch.
   * Then no ids are remembered or read back (up to `maxIdsPerStream` per stream, a large map
   * churned by every record): a stream's head is all that is kept, and what the store says it
   * holds already is counted as duplicates.
   */
  storeKnowsEveryId?: boolean;
  now?: () => number;
}

export interface AppendOutcome {
  appended: number;
  /** Events left out because the stream already held them. */
  duplicates: number;
  /** Appends refused because another writer moved the stream on first. */
  conflicts: number;
}

/**
 * What this process knows of one stream: the ids of the events at revisions [low, head], in
 * revision order, each with its creation time (ms). Complete over a time window: every event
 * of the stream created at or after `coveredFrom`, up to `head`, is in `ids`.
 */
interface StreamView {
  /** Revision of the last event known; -1 when the stream does not exist. */
  head: number;
  low: number;
  coveredFrom: number;
  ids: Map<string, number>;
}

/**
 * Appends events exactly once per id on any event store, including EventStoreDB, whose own
 * id de-duplication only covers a retried identical batch.
 *
 * Each append is at the stream's revision as last seen, so it lands right after the events this
 * process knows of or not at all; on a conflict (another ingester appended), the events after
 * that revision are read, the ids already there dropped, and the append retried. What was
 * appended before the last-seen revision is covered by time: a record of time `at` can only be
 * in the stream from `at` on, so the ids of the events created since `at` minus the clock skew
 * suffice, and they are remembered for a sliding window behind the records being appended
 * (read back from the stream the first time, or when older records come again).
 *
 * Common case, one process per account's records: one append per batch, no reads.
 *
 * On a store that checks every id itself (`storeKnowsEveryId`), the window is left out: the
 * appends at the last-seen head and the conflict handling stay, and the store's refusals and
 * idempotent answers tell what it held.
 */
export class ExactlyOnceAppender {
  private readonly views = new Map<string, StreamView>();
  private readonly clockSkewMs: number;
  private readonly maxStreams: number;
  private readonly maxIdsPerStream: number;
  private readonly readPage: number;
  private readonly rememberIds: boolean;
  private readonly now: () => number;

  constructor(
    private readonly store: EventStore,
    options: ExactlyOnceOptions = {},
  ) {
    this.clockSkewMs = options.clockSkewMs ?? 10_000;
    this.maxStreams = options.maxStreams ?? 10_000;
    this.maxIdsPerStream = options.maxIdsPerStream ?? 200_000;
    this.readPage = options.readPage ?? 500;
    this.rememberIds = !options.storeKnowsEveryId;
    this.now = options.now ?? Date.now;
  }

  /**
   * Appends the events whose ids `streamId` does not hold yet. `since` (ms) is the earliest time
   * any of them can have been appended before (the oldest record's time). Store failures other
   * than conflicts are thrown; calling again with the same events is safe.
   */
  async append(streamId: string, events: NewEvent[], since: number): Promise<AppendOutcome> {
    const outcome: AppendOutcome = { appended: 0, duplicates: 0, conflicts: 0 };
    // Not a time: it may be anywhere in the stream.
    const oldest = Number.isNaN(since) ? Number.NEGATIVE_INFINITY : since;
    const from = oldest - this.clockSkewMs;
    let pending = events;
    const drop = (held: (id: string) => boolean): void => {
      const fresh = pending.filter((event) => !held(event.id));
      outcome.duplicates += pending.length - fresh.length;
      pending = fresh;
    };
    for (;;) {
      if (pending.length === 0) return outcome;
      const view = this.views.get(streamId);
      if (view === undefined) {
        try {
          await this.firstAppend(streamId, pending, outcome);
          return outcome;
        } catch (error) {
          const held = heldIds(error);
          if (held) drop((id) => held.has(id));
          else if (!(error instanceof WrongExpectedRevisionError)) throw error;
          else this.track(streamId, newView(error.actual === 'no_stream' ? -1 : error.actual, Number.POSITIVE_INFINITY));
          outcome.conflicts += 1;
          continue;
        }
      }
      // Most recently used last, so that the first is the one to forget.
      this.views.delete(streamId);
      this.views.set(streamId, view);
      if (this.rememberIds) {
        if (from < view.coveredFrom) await this.readBack(streamId, view, from);
        drop((id) => view.ids.has(id));
      }
      if (pending.length === 0) return outcome;
      try {
        const result = await this.store.append(streamId, pending, view.head);
        if (result.nextExpectedRevision !== view.head + pending.length) {
          // Answered as a retry of events this view did not know of: it no longer matches the stream.
          this.views.delete(streamId);
          outcome.duplicates += pending.length;
          return outcome;
        }
        this.remember(view, pending, this.now());
        outcome.appended += pending.length;
        if (this.rememberIds) this.prune(view, Math.min(oldest, this.now()) - 2 * this.clockSkewMs);
        return outcome;
      } catch (error) {
        const held = heldIds(error);
        if (held) {
          // Ids the store holds that this view does not (before its window, or no window kept):
          // the store named them. If its head moved too, the next append is told so.
          outcome.conflicts += 1;
          drop((id) => held.has(id));
          continue;
        }
        if (!(error instanceof WrongExpectedRevisionError)) throw error;
        outcome.conflicts += 1;
        if (error.actual === 'no_stream' || error.actual < view.head) {
          // The stream went back (deleted and created again): start over.
          this.views.delete(streamId);
        } else if (this.rememberIds) {
          await this.readForward(streamId, view);
        } else {
          // The store checks the ids of what another writer appended: its head is all to learn.
          view.head = error.actual;
        }
      }
    }
  }

  /**
   * First sight of a stream: appending as a new stream either creates it (nothing to
   * de-duplicate against) or is refused with the stream's head, thrown for `append` to handle.
   */
  private async firstAppend(streamId: string, events: NewEvent[], outcome: AppendOutcome): Promise<void> {
    const result = await this.store.append(streamId, events, 'no_stream');
    if (result.nextExpectedRevision !== events.length - 1) {
      // Answered as the retry of an earlier creation: all of them are there already.
      outcome.duplicates += events.length;
      return;
    }
    const view = newView(-1, Number.NEGATIVE_INFINITY);
    this.remember(view, events, this.now());
    this.track(streamId, view);
    outcome.appended += events.length;
  }

  /** Reads what was appended after `head`. */
  private async readForward(streamId: string, view: StreamView): Promise<void> {
    for (;;) {
      const events = await this.store.readStream(streamId, { fromRevision: view.head + 1, maxCount: this.readPage });
      for (const event of events) {
        if (event.revision !== view.head + 1) continue;
        view.ids.set(event.id, Date.parse(event.created));
        view.head = event.revision;
      }
      if (events.length < this.readPage) break;
    }
    this.cap(view);
  }

  /** Reads older events, page by page (doubling), until one created before `until` or the start. */
  private async readBack(streamId: string, view: StreamView, until: number): Promise<void> {
    const pages: Array<Array<[string, number]>> = [];
    let low = view.low;
    let page = this.readPage;
    let reached = false;
    while (low > 0 && !reached) {
      const fromRevision = Math.max(0, low - page);
      const events = await this.store.readStream(streamId, { fromRevision, maxCount: low - fromRevision });
      const chunk: Array<[string, number]> = events.map((event) => [event.id, Date.parse(event.created)]);
      pages.push(chunk);
      reached = chunk.some(([, created]) => created < until);
      low = fromRevision;
      page *= 2;
    }
    view.ids = new Map([...pages.reverse().flat(), ...view.ids]);
    view.low = low;
    view.coveredFrom = low === 0 ? Number.NEGATIVE_INFINITY : until;
    this.cap(view);
  }

  private remember(view: StreamView, events: NewEvent[], at: number): void {
    if (this.rememberIds) for (const event of events) view.ids.set(event.id, at);
    view.head += events.length;
  }

  /** Forgets the oldest ids created before `cutoff`: they cannot match records still to come. */
  private prune(view: StreamView, cutoff: number): void {
    let pruned = 0;
    for (const [id, created] of view.ids) {
      if (created >= cutoff) break;
      view.ids.delete(id);
      pruned += 1;
    }
    if (pruned > 0) {
      view.low += pruned;
      view.coveredFrom = Math.max(view.coveredFrom, cutoff);
    }
    this.cap(view);
  }

  /** Holds at most `maxIdsPerStream` ids: beyond, the oldest go and the window shrinks past them. */
  private cap(view: StreamView): void {
    let excess = view.ids.size - this.maxIdsPerStream;
    if (excess <= 0) return;
    let latest = view.coveredFrom;
    for (const [id, created] of view.ids) {
      if (excess-- <= 0) break;
      view.ids.delete(id);
      view.low += 1;
      latest = Math.max(latest, created + 1);
    }
    view.coveredFrom = latest;
  }

  private track(streamId: string, view: StreamView): void {
    this.views.set(streamId, view);
    if (this.views.size > this.maxStreams) {
      const oldest = this.views.keys().next().value;
      if (oldest !== undefined) this.views.delete(oldest);
    }
  }
}

const newView = (head: number, coveredFrom: number): StreamView => ({ head, low: head + 1, coveredFrom, ids: new Map() });

/** The ids a store said it holds already when it refused a partial repeat (the embedded store names them). */
function heldIds(error: unknown): Set<string> | null {
  if (!(error instanceof EventStoreError && error.code === 'duplicate_event_ids')) return null;
  const ids = error.details?.['ids'];
  const held = new Set(Array.isArray(ids) ? ids.filter((id): id is string => typeof id === 'string') : []);
  return held.size > 0 ? held : null;
}
