import { EventStoreError } from '../eventstore/errors.js';
import { type EventStore, type NewEvent, WrongExpectedRevisionError } from '../eventstore/port.js';

export interface ExactlyOnceOptions {
  /**
   * How far the clocks of the gateways (which stamp a record's `at`), the ingesters and the event
   * store may disagree. A record cannot be in its stream before `at`; it is looked for among
   * the events created from `at` minus this on.
   */
  clockSkewMs?: number;
  /**
   * Streams whose head is remembered at most; the least recently used is forgotten first. A
   * forgotten stream costs a refused append and a read of its tail the next time.
   */
  maxStreams?: number;
  /** Event ids remembered in all; beyond, the ids of the least recently used streams go first. */
  maxIds?: number;
  /** Event ids remembered per stream at most. */
  maxIdsPerStream?: number;
  /** Events read at once at most when looking back into a stream. */
  readPage?: number;
  /**
   * The store itself skips or refuses every id a stream holds, however long ago it was
   * appended: the embedded store does, EventStoreDB only recognises a retried identical batch.
   * Then no ids are remembered or read back (a large map churned by every record): a stream's
   * head is all that is kept, and what the store says it holds already is counted as duplicates.
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

/** What this process knows of one stream. */
interface StreamView {
  /** Revision of the last event known; -1 when the stream does not exist. */
  head: number;
  /**
   * No record of a later time (ms) is in the stream up to `head`: the latest time appended here,
   * or the creation of the last event read plus the clock skew. +Infinity until known.
   */
  newest: number;
  ids: IdWindow | null;
}

/**
 * The ids of the events at revisions [low, head], in revision order, each with its creation
 * time (ms). Complete over a time window: every event of the stream created at or after
 * `coveredFrom`, up to `head`, is in `ids`.
 */
interface IdWindow {
  low: number;
  coveredFrom: number;
  ids: Map<string, number>;
}

/** Events read first when looking back: a stream's tail, which is all a batch of new records needs. */
const FIRST_PAGE = 16;

/**
 * Appends events exactly once per id on any event store, including EventStoreDB, whose own
 * id de-duplication only covers a retried identical batch.
 *
 * Each append is at the stream's revision as last seen, so it lands right after the events this
 * process knows of or not at all; on a conflict (another ingester appended), the events after
 * that revision are read, the ids already there dropped, and the append retried. What was
 * appended before the last-seen revision is covered by time: a record of time `at` can only be
 * in the stream from `at` on. So a batch whose records are all later than the stream's newest
 * (the usual case: new calls) is appended as it is; one with older records (a redelivery, a
 * slow call's record) is checked against the ids of the events created since its oldest `at`
 * minus the clock skew, remembered for a sliding window behind the records appended (read back
 * from the stream when not remembered).
 *
 * Cost: one append per batch while the stream's head is remembered (`maxStreams`, a few dozen
 * bytes each; ids are bounded apart, by `maxIds`, least recently used streams' first). A stream
 * seen for the first time (a new one is created by that append) or forgotten costs a refused
 * append and a read of its last events, then the append.
 *
 * On a store that checks every id itself (`storeKnowsEveryId`), the window is left out: the
 * appends at the last-seen head and the conflict handling stay, and the store's refusals and
 * idempotent answers tell what it held.
 */
export class ExactlyOnceAppender {
  /** Least recently used first. */
  private readonly views = new Map<string, StreamView>();
  /** The views that have ids, least recently used first. */
  private readonly windows = new Map<string, StreamView>();
  private idCount = 0;
  private readonly clockSkewMs: number;
  private readonly maxStreams: number;
  private readonly maxIds: number;
  private readonly maxIdsPerStream: number;
  private readonly readPage: number;
  private readonly rememberIds: boolean;
  private readonly now: () => number;

  constructor(
    private readonly store: EventStore,
    options: ExactlyOnceOptions = {},
  ) {
    this.clockSkewMs = options.clockSkewMs ?? 10_000;
    this.maxStreams = options.maxStreams ?? 200_000;
    this.maxIds = options.maxIds ?? 500_000;
    this.maxIdsPerStream = Math.min(options.maxIdsPerStream ?? 200_000, this.maxIds);
    this.readPage = options.readPage ?? 500;
    this.rememberIds = !options.storeKnowsEveryId;
    this.now = options.now ?? Date.now;
  }

  /** Ids remembered in all (for tests and metrics). */
  get rememberedIds(): number {
    return this.idCount;
  }

  /**
   * Appends the events whose ids `streamId` does not hold yet. `since` and `until` (ms) are the
   * earliest and latest times of their records: none can have been appended before `since`, and
   * the stream holds none later than `until` once they are in (NaN: not a time). Store failures
   * other than conflicts are thrown; calling again with the same events is safe.
   */
  async append(streamId: string, events: NewEvent[], since: number, until = Number.POSITIVE_INFINITY): Promise<AppendOutcome> {
    try {
      return await this.appendNew(streamId, events, since, until);
    } finally {
      // Not before: what was read for this batch is what it is checked against.
      const view = this.views.get(streamId);
      if (view !== undefined) {
        this.capStream(streamId, view);
        if (view.ids?.ids.size === 0) this.dropIds(streamId, view);
      }
      this.capAll();
    }
  }

  private async appendNew(streamId: string, events: NewEvent[], since: number, until: number): Promise<AppendOutcome> {
    const outcome: AppendOutcome = { appended: 0, duplicates: 0, conflicts: 0 };
    // Not a time: it may be anywhere in the stream.
    const oldest = Number.isNaN(since) ? Number.NEGATIVE_INFINITY : since;
    const latest = Number.isNaN(until) ? Number.POSITIVE_INFINITY : until;
    const from = oldest - this.clockSkewMs;
    let pending = events;
    const drop = (held: (id: string) => boolean): void => {
      const fresh = pending.filter((event) => !held(event.id));
      outcome.duplicates += pending.length - fresh.length;
      pending = fresh;
    };
    /** None of `pending` is among the stream's events up to the view's head. */
    let checked = false;
    for (;;) {
      if (pending.length === 0) return outcome;
      let view = this.views.get(streamId);
      if (view === undefined) {
        try {
          await this.firstAppend(streamId, pending, oldest, latest, outcome);
          return outcome;
        } catch (error) {
          const held = heldIds(error);
          if (held) {
            outcome.conflicts += 1;
            drop((id) => held.has(id));
            continue;
          }
          if (!(error instanceof WrongExpectedRevisionError)) throw error;
          // The stream exists: its head is known now, what it holds is read below if needed.
          view = error.actual === 'no_stream' ? newView(-1, Number.NEGATIVE_INFINITY) : newView(error.actual, Number.POSITIVE_INFINITY);
          this.track(streamId, view);
          checked = false;
        }
      } else {
        this.touch(streamId, view);
      }
      if (this.rememberIds && !checked && oldest <= view.newest) {
        // Records the stream may hold already: looked up among the events created since `from`.
        const known = view.ids === null || from < view.ids.coveredFrom ? await this.readBack(streamId, view, from, oldest) : view.ids;
        drop((id) => known.ids.has(id));
      }
      checked = true;
      if (pending.length === 0) return outcome;
      try {
        const result = await this.store.append(streamId, pending, view.head);
        if (result.nextExpectedRevision !== view.head + pending.length) {
          // Answered as a retry of events this view did not know of: it no longer matches the stream.
          this.forget(streamId);
          outcome.duplicates += pending.length;
          return outcome;
        }
        this.remember(streamId, view, pending, oldest, latest);
        outcome.appended += pending.length;
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
          this.forget(streamId);
          checked = false;
        } else if (this.rememberIds) {
          // Only the events after the head need checking: the batch was checked against the rest.
          const theirs = await this.readForward(streamId, view);
          drop((id) => theirs.has(id));
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
  private async firstAppend(streamId: string, events: NewEvent[], oldest: number, latest: number, outcome: AppendOutcome): Promise<void> {
    const result = await this.store.append(streamId, events, 'no_stream');
    if (result.nextExpectedRevision !== events.length - 1) {
      // Answered as the retry of an earlier creation: all of them are there already.
      outcome.duplicates += events.length;
      return;
    }
    const view = newView(-1, Number.NEGATIVE_INFINITY);
    this.track(streamId, view);
    this.remember(streamId, view, events, oldest, latest);
    outcome.appended += events.length;
  }

  /** Reads what was appended after `head`; answers the ids read. */
  private async readForward(streamId: string, view: StreamView): Promise<Set<string>> {
    const read = new Set<string>();
    for (;;) {
      const events = await this.store.readStream(streamId, { fromRevision: view.head + 1, maxCount: this.readPage });
      const window = this.windowOf(streamId, view);
      for (const event of events) {
        if (event.revision !== view.head + 1) continue;
        const created = Date.parse(event.created);
        this.resize(streamId, view, window, () => window.ids.set(event.id, created));
        read.add(event.id);
        view.head = event.revision;
        view.newest = Math.max(view.newest, created + this.clockSkewMs);
      }
      if (events.length < this.readPage) return read;
    }
  }

  /**
   * Reads older events, from the stream's tail back (pages doubling), until one created before
   * `until`, or the start, or, once the tail told the stream's newest, as soon as the records
   * (from `oldest` on) are all later than that.
   */
  private async readBack(streamId: string, view: StreamView, until: number, oldest: number): Promise<IdWindow> {
    const window = this.windowOf(streamId, view);
    const pages: Array<Array<[string, number]>> = [];
    let low = window.low;
    let page = Math.min(FIRST_PAGE, this.readPage);
    let done = false;
    while (low > 0 && !done) {
      const fromRevision = Math.max(0, low - page);
      const events = await this.store.readStream(streamId, { fromRevision, maxCount: low - fromRevision });
      const chunk: Array<[string, number]> = events.map((event) => [event.id, Date.parse(event.created)]);
      const last = events.at(-1);
      if (last !== undefined && last.revision === view.head) {
        view.newest = Math.min(view.newest, Date.parse(last.created) + this.clockSkewMs);
      }
      pages.push(chunk);
      done = chunk.some(([, created]) => created < until) || oldest > view.newest;
      low = fromRevision;
      page = Math.min(page * 2, this.readPage);
    }
    const read = pages.reverse().flat();
    this.resize(streamId, view, window, () => {
      window.ids = new Map([...read, ...window.ids]);
    });
    // Every event below `low` was created at or before the one at `low`.
    const first = read[0];
    if (low === 0) window.coveredFrom = Number.NEGATIVE_INFINITY;
    else if (first !== undefined) window.coveredFrom = Math.min(window.coveredFrom, first[1] + 1);
    window.low = low;
    return window;
  }

  private remember(streamId: string, view: StreamView, events: NewEvent[], oldest: number, latest: number): void {
    view.newest = Math.max(view.newest, latest);
    if (this.rememberIds) {
      const at = this.now();
      const window = this.windowOf(streamId, view, at);
      this.resize(streamId, view, window, () => {
        for (const event of events) window.ids.set(event.id, at);
      });
      view.head += events.length;
      this.prune(streamId, view, Math.min(oldest, at) - 2 * this.clockSkewMs);
    } else {
      view.head += events.length;
    }
  }

  /**
   * The view's ids, a new window if it has none: from `low` = the event after its head on, and
   * covering the events created from `coveredFrom` on (all of them for a stream this process
   * creates).
   */
  private windowOf(streamId: string, view: StreamView, coveredFrom = Number.POSITIVE_INFINITY): IdWindow {
    if (view.ids === null) {
      view.ids = { low: view.head + 1, coveredFrom: view.head === -1 ? Number.NEGATIVE_INFINITY : coveredFrom, ids: new Map() };
      // A view forgotten while its append was under way keeps its ids to itself, uncounted.
      if (this.views.get(streamId) === view) this.windows.set(streamId, view);
    }
    return view.ids;
  }

  /** Changes a window's ids, keeping `idCount` the number of ids of the windows in `windows`. */
  private resize(streamId: string, view: StreamView, window: IdWindow, change: () => void): void {
    const before = window.ids.size;
    change();
    if (view.ids === window && this.windows.get(streamId) === view) this.idCount += window.ids.size - before;
  }

  /** Forgets the oldest ids created before `cutoff`: they cannot match records still to come. */
  private prune(streamId: string, view: StreamView, cutoff: number): void {
    const window = view.ids;
    if (window === null) return;
    let pruned = 0;
    this.resize(streamId, view, window, () => {
      for (const [id, created] of window.ids) {
        if (created >= cutoff) break;
        window.ids.delete(id);
        pruned += 1;
      }
    });
    if (pruned > 0) {
      window.low += pruned;
      window.coveredFrom = Math.max(window.coveredFrom, cutoff);
    }
  }

  /** Holds at most `maxIdsPerStream` ids: beyond, the oldest go and the window shrinks past them. */
  private capStream(streamId: string, view: StreamView): void {
    const window = view.ids;
    if (window === null) return;
    let excess = window.ids.size - this.maxIdsPerStream;
    if (excess <= 0) return;
    let latest = window.coveredFrom;
    this.resize(streamId, view, window, () => {
      for (const [id, created] of window.ids) {
        if (excess-- <= 0) break;
        window.ids.delete(id);
        window.low += 1;
        latest = Math.max(latest, created + 1);
      }
    });
    window.coveredFrom = latest;
  }

  /** Holds at most `maxIds` ids in all: beyond, the least recently used streams' ids go (their heads stay). */
  private capAll(): void {
    if (this.idCount <= this.maxIds) return;
    for (const [streamId, view] of this.windows) {
      if (this.idCount <= this.maxIds) return;
      this.dropIds(streamId, view);
    }
  }

  private dropIds(streamId: string, view: StreamView): void {
    if (view.ids === null) return;
    this.idCount -= view.ids.ids.size;
    view.ids = null;
    this.windows.delete(streamId);
  }

  /** Most recently used last, so that the first is the one to forget. */
  private touch(streamId: string, view: StreamView): void {
    this.views.delete(streamId);
    this.views.set(streamId, view);
    if (view.ids !== null) {
      this.windows.delete(streamId);
      this.windows.set(streamId, view);
    }
  }

  private track(streamId: string, view: StreamView): void {
    this.views.set(streamId, view);
    if (this.views.size > this.maxStreams) {
      const oldest = this.views.keys().next().value;
      if (oldest !== undefined) this.forget(oldest);
    }
  }

  private forget(streamId: string): void {
    const view = this.views.get(streamId);
    if (view !== undefined) this.dropIds(streamId, view);
    this.views.delete(streamId);
  }
}

const newView = (head: number, newest: number): StreamView => ({ head, newest, ids: null });

/** The ids a store said it holds already when it refused a partial repeat (the embedded store names them). */
function heldIds(error: unknown): Set<string> | null {
  if (!(error instanceof EventStoreError && error.code === 'duplicate_event_ids')) return null;
  const ids = error.details?.['ids'];
  const held = new Set(Array.isArray(ids) ? ids.filter((id): id is string => typeof id === 'string') : []);
  return held.size > 0 ? held : null;
}
