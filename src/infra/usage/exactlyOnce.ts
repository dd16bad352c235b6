import { EventStoreError } from '../eventstore/errors.js';
import { type EventStore, type NewEvent, type StoredEvent, WrongExpectedRevisionError } from '../eventstore/port.js';

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
  /**
   * Item keys remembered in all; beyond, the keys of the least recently used streams go first,
   * and a single stream past it loses its oldest events' keys (its window shrinks) rather than all.
   * The window is twice the clock skew behind the records: 1,000,000 covers 20 s at 50,000
   * records a second (~70 MB). A window capped below that is read back from the stream for
   * every batch: at 20,000 records a second into one stream, 200,000 keys made the ingester
   * re-read and re-add ~10 s of keys per append, and it fell behind.
   */
  maxIds?: number;
  /** Events read at once at most when looking back into a stream. */
  readPage?: number;
  now?: () => number;
}

/** How the items appended map to events: many items (usage records) to one event. */
export interface BatchCodec<T> {
  /** The item's identity: an item whose key the stream holds is not appended again. */
  keyOf(item: T): string;
  /** The one event recording `items` (never empty) after the stream's first `itemsBefore`, its id deterministic from the items. */
  eventOf(items: readonly T[], itemsBefore: number): NewEvent;
  /** The keys of the items a stored event records (none for another kind of event). */
  keysOf(stored: StoredEvent): string[];
  /**
   * How many items the stream holds up to and with `stored`, the event at `revision`; with no
   * event to read there (dropped by retention), a count past any the stream could have used.
   */
  itemsThrough(stored: StoredEvent | undefined, revision: number): number;
}

export interface AppendOutcome {
  /** Items appended. */
  appended: number;
  /** Items left out because the stream already held them. */
  duplicates: number;
  /** Appends refused because another writer moved the stream on first. */
  conflicts: number;
}

/** What this process knows of one stream. */
interface StreamView {
  /** Revision of the last event known; -1 when the stream does not exist. */
  head: number;
  /** Items in the stream up to `head`; NaN until read. */
  items: number;
  /**
   * No record of a later time (ms) is in the stream up to `head`: the latest time appended here,
   * or the creation of the last event read plus the clock skew. +Infinity until known.
   */
  newest: number;
  keys: KeyWindow | null;
  /** When this process last appended to the stream or checked a batch against it (ms). */
  usedAt: number;
}

/**
 * The keys of the items of the events at revisions [low, head], event by event in revision
 * order, each event with its creation time (ms). Complete over a time window: every item of
 * an event created at or after `coveredFrom`, up to `head`, is in `keys`.
 */
interface KeyWindow {
  low: number;
  coveredFrom: number;
  events: Array<{ created: number; keys: string[] }>;
  keys: Set<string>;
}

/** Events read first when looking back: a stream's tail, which is all a batch of new records needs. */
const FIRST_PAGE = 16;

/**
 * Appends items exactly once per key on any event store, many items to an event (a batch of
 * usage records is one event): neither EventStoreDB's id de-duplication (a retried identical
 * batch only) nor the embedded store's (every event id) knows the items inside an event, and a
 * redelivery regroups them.
 *
 * Each append is at the stream's revision as last seen, so it lands right after the events this
 * process knows of or not at all; on a conflict (another ingester appended), the events after
 * that revision are read, the keys already there dropped, and the append retried. What was
 * appended before the last-seen revision is covered by time: a record of time `at` can only be
 * in the stream from `at` on. So a batch whose records are all later than the stream's newest
 * (the usual case: new calls) is appended as it is; one with older records (a redelivery, a
 * slow call's record) is checked against the keys of the events created since its oldest `at`
 * minus the clock skew, remembered for a sliding window behind the records appended (read back
 * from the stream when not remembered).
 *
 * Cost: one append per batch while the stream's head is remembered (`maxStreams`, a few dozen
 * bytes each) and a Set entry per item for the window (bounded by `maxIds`, least recently
 * used streams' first; a stream's let go once unused for twice the clock skew). A stream seen for the first time (a new one is created by that append)
 * or forgotten costs a refused append and a read of its last events, then the append.
 */
export class ExactlyOnceAppender<T> {
  /** Least recently used first. */
  private readonly views = new Map<string, StreamView>();
  /** The views that have keys, least recently used first. */
  private readonly windows = new Map<string, StreamView>();
  private keyCount = 0;
  private readonly clockSkewMs: number;
  private readonly maxStreams: number;
  private readonly maxIds: number;
  private readonly readPage: number;
  private readonly now: () => number;

  constructor(
    private readonly store: EventStore,
    private readonly codec: BatchCodec<T>,
    options: ExactlyOnceOptions = {},
  ) {
    this.clockSkewMs = options.clockSkewMs ?? 10_000;
    this.maxStreams = options.maxStreams ?? 200_000;
    this.maxIds = options.maxIds ?? 1_000_000;
    this.readPage = options.readPage ?? 500;
    this.now = options.now ?? Date.now;
  }

  /** Item keys remembered in all (for tests and metrics). */
  get rememberedIds(): number {
    return this.keyCount;
  }

  /**
   * Appends, as one event, the items whose keys `streamId` does not hold yet. `since` and
   * `until` (ms) are the earliest and latest times of the items: none can have been appended
   * before `since`, and the stream holds none later than `until` once they are in (NaN: not a
   * time). Store failures other than conflicts are thrown; calling again with the same items is safe.
   */
  async append(streamId: string, items: readonly T[], since: number, until = Number.POSITIVE_INFINITY): Promise<AppendOutcome> {
    try {
      return await this.appendNew(streamId, items, since, until);
    } finally {
      // Not before: what was read for this batch is what it is checked against.
      const view = this.views.get(streamId);
      if (view !== undefined) {
        this.capStream(streamId, view);
        if (view.keys?.keys.size === 0) this.dropKeys(streamId, view);
      }
      this.capAll();
      this.dropIdle();
    }
  }

  private async appendNew(streamId: string, items: readonly T[], since: number, until: number): Promise<AppendOutcome> {
    const outcome: AppendOutcome = { appended: 0, duplicates: 0, conflicts: 0 };
    // Not a time: it may be anywhere in the stream.
    const oldest = Number.isNaN(since) ? Number.NEGATIVE_INFINITY : since;
    const latest = Number.isNaN(until) ? Number.POSITIVE_INFINITY : until;
    const from = oldest - this.clockSkewMs;
    let pending = items;
    const drop = (held: (key: string) => boolean): void => {
      const fresh = pending.filter((item) => !held(this.codec.keyOf(item)));
      outcome.duplicates += pending.length - fresh.length;
      pending = fresh;
    };
    /** None of `pending` is among the stream's events up to the view's head. */
    let checked = false;
    for (;;) {
      if (pending.length === 0) return outcome;
      let view = this.views.get(streamId);
      if (view === undefined) {
        const event = this.codec.eventOf(pending, 0);
        try {
          await this.firstAppend(streamId, event, pending, oldest, latest, outcome);
          return outcome;
        } catch (error) {
          if (holds(error, event)) {
            // The store holds this very event (all of these items): appended by an earlier try.
            outcome.conflicts += 1;
            drop(() => true);
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
      if (!checked && oldest <= view.newest) {
        // Items the stream may hold already: looked up among the events created since `from`.
        const known = view.keys === null || from < view.keys.coveredFrom ? await this.readBack(streamId, view, from, oldest) : view.keys;
        drop((key) => known.keys.has(key));
      }
      checked = true;
      if (pending.length === 0) return outcome;
      if (Number.isNaN(view.items)) {
        await this.readHead(streamId, view);
        if (this.views.get(streamId) !== view) {
          // The head moved under it: learnt again, and the batch checked again, from the top.
          checked = false;
          continue;
        }
      }
      const event = this.codec.eventOf(pending, view.items);
      try {
        const result = await this.store.append(streamId, [event], view.head);
        if (result.nextExpectedRevision !== view.head + 1) {
          // Answered as a retry of an event this view did not know of: it no longer matches the stream.
          this.forget(streamId);
          outcome.duplicates += pending.length;
          return outcome;
        }
        this.remember(streamId, view, pending, oldest, latest);
        view.items += pending.length;
        outcome.appended += pending.length;
        return outcome;
      } catch (error) {
        if (holds(error, event)) {
          // An event the store holds that this view does not (before its window): the store
          // named it. If its head moved too, the next append is told so.
          outcome.conflicts += 1;
          drop(() => true);
          continue;
        }
        if (!(error instanceof WrongExpectedRevisionError)) throw error;
        outcome.conflicts += 1;
        if (error.actual === 'no_stream' || error.actual < view.head) {
          // The stream went back (deleted and created again): start over.
          this.forget(streamId);
          checked = false;
        } else {
          // Only the events after the head need checking: the batch was checked against the rest.
          const theirs = await this.readForward(streamId, view);
          drop((key) => theirs.has(key));
        }
      }
    }
  }

  /**
   * First sight of a stream: appending as a new stream either creates it (nothing to
   * de-duplicate against) or is refused with the stream's head, thrown for `append` to handle.
   */
  private async firstAppend(streamId: string, event: NewEvent, items: readonly T[], oldest: number, latest: number, outcome: AppendOutcome): Promise<void> {
    const result = await this.store.append(streamId, [event], 'no_stream');
    if (result.nextExpectedRevision !== 0) {
      // Answered as the retry of an earlier creation: all of them are there already.
      outcome.duplicates += items.length;
      return;
    }
    const view = newView(-1, Number.NEGATIVE_INFINITY);
    this.track(streamId, view);
    this.remember(streamId, view, items, oldest, latest);
    view.items = items.length;
    outcome.appended += items.length;
  }

  /** Learns how many items the stream holds from its last event. */
  private async readHead(streamId: string, view: StreamView): Promise<void> {
    if (view.head < 0) {
      view.items = 0;
      return;
    }
    const [last] = await this.store.readStream(streamId, { fromRevision: view.head, maxCount: 1 });
    if (last === undefined) view.items = this.codec.itemsThrough(undefined, view.head);
    else if (last.revision === view.head) view.items = this.codec.itemsThrough(last, last.revision);
    // Another writer appended since: learnt again at the next try.
    else this.forget(streamId);
  }

  /** Reads what was appended after `head`; answers the keys read. */
  private async readForward(streamId: string, view: StreamView): Promise<Set<string>> {
    const read = new Set<string>();
    for (;;) {
      const events = await this.store.readStream(streamId, { fromRevision: view.head + 1, maxCount: this.readPage });
      const window = this.windowOf(streamId, view);
      if ((events[0]?.revision ?? view.head + 1) > view.head + 1) {
        // What followed the head is gone (retention dropped it): this view no longer matches the
        // stream; forgotten, it is learnt again from the stream's head at the next try.
        this.forget(streamId);
        return read;
      }
      for (const event of events) {
        if (event.revision !== view.head + 1) continue;
        const created = Date.parse(event.created);
        const keys = this.codec.keysOf(event);
        this.resize(streamId, view, window, () => {
          window.events.push({ created, keys });
          for (const key of keys) window.keys.add(key);
        });
        for (const key of keys) read.add(key);
        view.head = event.revision;
        // Never back: an event that numbers its items below the ones before (a writer of an older
        // version) must not make this one reuse numbers.
        view.items = Math.max(Number.isNaN(view.items) ? 0 : view.items, this.codec.itemsThrough(event, event.revision));
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
  private async readBack(streamId: string, view: StreamView, until: number, oldest: number): Promise<KeyWindow> {
    const window = this.windowOf(streamId, view);
    const pages: Array<Array<{ created: number; keys: string[] }>> = [];
    let low = window.low;
    let page = Math.min(FIRST_PAGE, this.readPage);
    let done = false;
    while (low > 0 && !done) {
      const fromRevision = Math.max(0, low - page);
      // A stream whose start was dropped (retention) answers from its first event on: only those below `low` are new here.
      const events = (await this.store.readStream(streamId, { fromRevision, maxCount: low - fromRevision })).filter((e) => e.revision < low);
      if (events.length === 0) {
        // Nothing below `low` any more: the window reaches the stream's start.
        low = 0;
        break;
      }
      const chunk = events.map((event) => ({ created: Date.parse(event.created), keys: this.codec.keysOf(event) }));
      const last = events.at(-1);
      if (last !== undefined && last.revision === view.head) {
        view.newest = Math.min(view.newest, Date.parse(last.created) + this.clockSkewMs);
        view.items = this.codec.itemsThrough(last, last.revision);
      }
      pages.push(chunk);
      done = chunk.some(({ created }) => created < until) || oldest > view.newest;
      low = fromRevision;
      page = Math.min(page * 2, this.readPage);
    }
    const read = pages.reverse().flat();
    this.resize(streamId, view, window, () => {
      window.events = read.concat(window.events);
      for (const { keys } of read) for (const key of keys) window.keys.add(key);
    });
    // Every event below `low` was created at or before the one at `low`.
    const first = read[0];
    if (low === 0) window.coveredFrom = Number.NEGATIVE_INFINITY;
    else if (first !== undefined) window.coveredFrom = Math.min(window.coveredFrom, first.created + 1);
    window.low = low;
    return window;
  }

  private remember(streamId: string, view: StreamView, items: readonly T[], oldest: number, latest: number): void {
    view.newest = Math.max(view.newest, latest);
    const at = this.now();
    view.usedAt = at;
    const window = this.windowOf(streamId, view, at);
    const keys = items.map((item) => this.codec.keyOf(item));
    this.resize(streamId, view, window, () => {
      window.events.push({ created: at, keys });
      for (const key of keys) window.keys.add(key);
    });
    view.head += 1;
    this.prune(streamId, view, Math.min(oldest, at) - 2 * this.clockSkewMs);
  }

  /**
   * The view's keys, a new window if it has none: from `low` = the event after its head on, and
   * covering the events created from `coveredFrom` on (all of them for a stream this process
   * creates).
   */
  private windowOf(streamId: string, view: StreamView, coveredFrom = Number.POSITIVE_INFINITY): KeyWindow {
    if (view.keys === null) {
      view.keys = { low: view.head + 1, coveredFrom: view.head === -1 ? Number.NEGATIVE_INFINITY : coveredFrom, events: [], keys: new Set() };
      // A view forgotten while its append was under way keeps its keys to itself, uncounted.
      if (this.views.get(streamId) === view) this.windows.set(streamId, view);
    }
    return view.keys;
  }

  /** Changes a window's keys, keeping `keyCount` the number of keys of the windows in `windows`. */
  private resize(streamId: string, view: StreamView, window: KeyWindow, change: () => void): void {
    const before = window.keys.size;
    change();
    if (view.keys === window && this.windows.get(streamId) === view) this.keyCount += window.keys.size - before;
  }

  /** Drops the window's oldest event; answers its creation time. */
  private shiftEvent(window: KeyWindow): number {
    const first = window.events.shift();
    if (first === undefined) return Number.NEGATIVE_INFINITY;
    for (const key of first.keys) window.keys.delete(key);
    window.low += 1;
    return first.created;
  }

  /** Forgets the oldest events created before `cutoff`: their items cannot match records still to come. */
  private prune(streamId: string, view: StreamView, cutoff: number): void {
    const window = view.keys;
    if (window === null) return;
    let pruned = 0;
    this.resize(streamId, view, window, () => {
      while ((window.events[0]?.created ?? Number.POSITIVE_INFINITY) < cutoff) {
        this.shiftEvent(window);
        pruned += 1;
      }
    });
    if (pruned > 0) window.coveredFrom = Math.max(window.coveredFrom, cutoff);
  }

  /** Holds a stream to at most `maxIds` keys (whole events): beyond, the oldest go and the window shrinks past them. */
  private capStream(streamId: string, view: StreamView): void {
    const window = view.keys;
    if (window === null || window.keys.size <= this.maxIds) return;
    let latest = window.coveredFrom;
    this.resize(streamId, view, window, () => {
      while (window.keys.size > this.maxIds && window.events.length > 0) latest = Math.max(latest, this.shiftEvent(window) + 1);
    });
    window.coveredFrom = latest;
  }

  /** Holds at most `maxIds` keys in all: beyond, the least recently used streams' keys go (their heads stay). */
  private capAll(): void {
    if (this.keyCount <= this.maxIds) return;
    for (const [streamId, view] of this.windows) {
      if (this.keyCount <= this.maxIds) return;
      this.dropKeys(streamId, view);
    }
  }

  /**
   * Lets go of the keys of streams unused for twice the clock skew (an account gone quiet): its
   * next new records are later than all of them, and a late redelivery reads the stream's tail
   * back. Without it they stayed until `maxIds` pushed them out. By last use, not by the age of
   * the events held: a redelivery of old records keeps its stream's keys while it goes on (by
   * event age, each of its batches read the tail back again, and a master restart's redelivery
   * did not drain). `windows` is in order of use, so it stops at the first stream still in use.
   */
  private dropIdle(): void {
    const cutoff = this.now() - 2 * this.clockSkewMs;
    for (const [streamId, view] of this.windows) {
      if (view.usedAt >= cutoff) return;
      this.dropKeys(streamId, view);
    }
  }

  private dropKeys(streamId: string, view: StreamView): void {
    if (view.keys === null) return;
    this.keyCount -= view.keys.keys.size;
    view.keys = null;
    this.windows.delete(streamId);
  }

  /** Most recently used last, so that the first is the one to forget. */
  private touch(streamId: string, view: StreamView): void {
    view.usedAt = this.now();
    this.views.delete(streamId);
    this.views.set(streamId, view);
    if (view.keys !== null) {
      this.windows.delete(streamId);
      this.windows.set(streamId, view);
    }
  }

  private track(streamId: string, view: StreamView): void {
    view.usedAt = this.now();
    this.views.set(streamId, view);
    if (this.views.size > this.maxStreams) {
      const oldest = this.views.keys().next().value;
      if (oldest !== undefined) this.forget(oldest);
    }
  }

  private forget(streamId: string): void {
    const view = this.views.get(streamId);
    if (view !== undefined) this.dropKeys(streamId, view);
    this.views.delete(streamId);
  }
}

const newView = (head: number, newest: number): StreamView => ({ head, items: head === -1 ? 0 : Number.NaN, newest, keys: null, usedAt: 0 });

/** Whether the store refused an append because it holds `event` already (the embedded store names the ids it holds). */
function holds(error: unknown, event: NewEvent): boolean {
  if (!(error instanceof EventStoreError && error.code === 'duplicate_event_ids')) return false;
  const ids = error.details?.['ids'];
  return Array.isArray(ids) && ids.includes(event.id);
}
