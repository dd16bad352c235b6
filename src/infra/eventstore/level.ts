import { existsSync, readdirSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { validateAppend, validateTruncation } from './appendRules.js';
import { EventStoreError } from './errors.js';
import { AppendPlan, EVENTS_PER_TURN, type EventIndexReader, nextTurn } from './levelAppendPlan.js';
import { IdCeilings } from './levelIdCeilings.js';
import {
  decodeEvent,
  eventIdEntry,
  eventIdKey,
  eventIdRange,
  formatPosition,
  headEntry,
  headKey,
  INDEXED_KEY,
  LAST_SEQ_KEY,
  LOG_END,
  LOG_START,
  type LogEntry,
  logKey,
  pad,
  parseStreamRun,
  pendingTruncationKey,
  seqOfLogKey,
  streamKey,
  streamRange,
  streamRunEntry,
  truncationKey,
} from './levelKeys.js';
import { LevelSubscription, type LiveTap, type LogCursor, type LogSource } from './levelSubscription.js';
import { type DroppedSeqs, dropBefore, pendingTruncations } from './levelTruncation.js';
import type { AppendResult, EventStore, ExpectedRevision, NewEvent, Position, StoredEvent, SubscribeOptions, Subscription } from './port.js';

export interface LevelEventStoreOptions {
  /** fsync every commit (default true), so an acknowledged append survives power loss, not only a crash. */
  sync?: boolean;
  /** Live events a subscription may hold unread before it falls back to reading the log (default 10,000). */
  liveBufferLimit?: number;
}

interface PendingAppend {
  streamId: string;
  events: NewEvent[];
  expected: ExpectedRevision;
  resolve: (result: AppendResult) => void;
  reject: (error: unknown) => void;
}

/** Appends that arrive while a commit is being written are written together in the next one. */
const MAX_EVENTS_PER_COMMIT = 5000;

type Db = ClassicLevel<string, string>;

/**
 * Where the log and its indexes live (levelKeys.ts). Two LevelDB stores: in one, every table
 * LevelDB writes spans all four key families and overlaps every table of the next level, so
 * each compaction rewrote the log over and over; alone, the log's keys only grow and its
 * tables move down without a rewrite (a sixth of the compaction output and ~3–5 µs less CPU
 * per event, `npx tsx bench/eventstore-layout.ts`). A store made before 2026-11-24 keeps both
 * in one (`log === index`).
 */
interface Stores {
  log: Db;
  index: Db;
}

/** Streams whose id ceiling the writer remembers (levelIdCeilings.ts): ~200 bytes each, 2 MB at most. */
const ID_CEILING_STREAMS = 10_000;

/** After the last truncation, how long the store waits before it compacts what they dropped (one compaction for a pass of many). */
const COMPACT_AFTER_MS = 2000;

/** Index entries rebuilt from the log per batch when the indexes are behind it (at open). */
const CATCH_UP_BATCH = 1000;

/**
 * The embedded event store: one directory, one writer (this process; LevelDB's lock keeps any
 * other out). Appends are queued and committed in groups: each group's log entries are one
 * atomic, synced batch, so a crash leaves whole appends or nothing, and an append is
 * acknowledged only once it is on disk. The group's index entries follow in a batch of the
 * index store that records how far the indexes cover the log; a crash between the two leaves
 * the indexes behind, and `open` rebuilds them from the log. Revision checks run in the single
 * writer, so they cannot race.
 */
export class LevelEventStore implements EventStore {
  private queue: PendingAppend[] = [];
  private draining: Promise<void> | undefined;
  private closed = false;
  private readonly taps = new Set<LiveTap>();
  private readonly subscriptions = new Set<LevelSubscription>();
  private readonly sync: boolean;
  private readonly liveBufferLimit: number;
  private readonly index: EventIndexReader;
  private readonly split: boolean;
  private readonly ceilings = new IdCeilings(ID_CEILING_STREAMS);
  /** Set when a group's index batch failed after its log entries were written: the indexes no longer cover the log until a reopen rebuilds them. */
  private failure: EventStoreError | null = null;
  /** Truncations run one at a time, each after the one before. */
  private truncating: Promise<void> = Promise.resolve();
  /** What truncations dropped since the last compaction: the log's sequence numbers and the streams. */
  private dropped: { seqs: DroppedSeqs | null; streams: Set<string> } = { seqs: null, streams: new Set() };
  private compactTimer: NodeJS.Timeout | undefined;
  private compacting: Promise<void> = Promise.resolve();

  private constructor(
    private readonly stores: Stores,
    private lastSeq: number,
    options: LevelEventStoreOptions,
  ) {
    this.sync = options.sync ?? true;
    this.liveBufferLimit = options.liveBufferLimit ?? 10_000;
    this.split = stores.log !== stores.index;
    const index = stores.index;
    this.index = {
      head: (streamId) => {
        const value = index.getSync(headKey(streamId));
        return value === undefined ? undefined : Number(value);
      },
      eventId: (streamId, eventId) => index.getSync(eventIdKey(streamId, eventId)),
      idCeiling: (streamId) => this.ceilings.get(streamId),
    };
  }

  static async open(directory: string, options: LevelEventStoreOptions = {}): Promise<LevelEventStore> {
    await mkdir(directory, { recursive: true });
    // A LevelDB's own files right in the directory: a store made with the log and indexes in one.
    const oneStore = existsSync(join(directory, 'CURRENT'));
    if (!oneStore) for (const logDir of [directory, join(directory, 'log')]) refuseLostCurrent(logDir);
    const log = await openDb(oneStore ? directory : join(directory, 'log'), directory);
    let index = log;
    try {
      if (!oneStore) index = await openDb(join(directory, 'index'), directory);
      const [lastKey] = await log.keys({ gt: LOG_START, lt: LOG_END, reverse: true, limit: 1 }).all();
      // A truncation may have deleted the log's last entries: its sequence number is not handed out again.
      const kept = await log.get(LAST_SEQ_KEY);
      const lastSeq = Math.max(lastKey === undefined ? 0 : seqOfLogKey(lastKey), kept === undefined ? 0 : Number(kept));
      if (index !== log) await indexUpTo(log, index, lastSeq);
      for (const { streamId, cut } of await pendingTruncations(index)) await dropBefore({ log, index }, streamId, cut, lastSeq, { resuming: true });
      return new LevelEventStore({ log, index }, lastSeq, options);
    } catch (error) {
      await log.close();
      if (index !== log) await index.close();
      throw error;
    }
  }

  append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    try {
      this.assertOpen();
      validateAppend(streamId, events, expected);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise<AppendResult>((resolve, reject) => {
      this.queue.push({ streamId, events, expected, resolve, reject });
      this.draining ??= this.drain();
    });
  }

  async readStream(streamId: string, options: { fromRevision?: number; maxCount?: number } = {}): Promise<StoredEvent[]> {
    this.assertOpen();
    // Events before a truncation point are gone, whatever their index entries say while it is under way.
    const fromRevision = Math.max(0, Math.trunc(options.fromRevision ?? 0), this.truncatedBefore(streamId));
    if (options.maxCount !== undefined && options.maxCount < 1) return [];
    const maxCount = options.maxCount === undefined ? -1 : Math.trunc(options.maxCount); // -1: no limit
    const range = streamRange(streamId);
    // The run holding `fromRevision` starts at or before it.
    const [holding] = await this.stores.index.keys({ gte: range.gte, lte: streamKey(streamId, fromRevision), reverse: true, limit: 1 }).all();
    // Each run holds one event at least: `maxCount` runs are enough.
    const runs = await this.stores.index.iterator({ gte: holding ?? range.gte, lt: range.lt, limit: maxCount }).all();
    const seqs: string[] = [];
    for (const [key, value] of runs) {
      const { firstRevision, firstSeq, count } = parseStreamRun(range.gte, key, value);
      for (let i = Math.max(0, fromRevision - firstRevision); i < count && seqs.length !== maxCount; i++) seqs.push(pad(firstSeq + i));
    }
    if (seqs.length === 0) return [];
    const values = await this.stores.log.getMany(seqs.map((seq) => LOG_START + seq));
    const events: StoredEvent[] = [];
    for (const [i, value] of values.entries()) {
      if (value !== undefined) events.push(decodeEvent(LOG_START + seqs[i]!, value));
      // Dropped by a truncation that began after the truncation point was read: the events after it are still read.
      else if (fromRevision + i >= this.truncatedBefore(streamId))
        throw new Error(`event store is corrupt: ${streamId} points at missing log entry ${seqs[i]}`);
    }
    return events;
  }

  truncateBefore(streamId: string, revision: number): Promise<void> {
    try {
      this.assertOpen();
      validateTruncation(streamId, revision);
    } catch (error) {
      return Promise.reject(error);
    }
    const truncation = this.truncating.then(() => this.truncate(streamId, revision));
    this.truncating = truncation.catch(() => undefined);
    return truncation;
  }

  /**
   * Gives back the disk space of what truncations dropped now, rather than COMPACT_AFTER_MS after
   * the last one: LevelDB keeps deleted entries (and the deletes) in its tables until a
   * compaction rewrites them, and the log's old tables are otherwise rarely compacted again.
   */
  async compactDropped(): Promise<void> {
    clearTimeout(this.compactTimer);
    this.compactTimer = undefined;
    const { seqs, streams } = this.dropped;
    this.dropped = { seqs: null, streams: new Set() };
    const compaction = this.compacting.then(async () => {
      if (seqs) await this.stores.log.compactRange(logKey(seqs.first), logKey(seqs.last));
      // The index entries dropped: each stream's runs and ids, as two key ranges spanning them all.
      for (const rangeOf of [streamRange, eventIdRange]) {
        const ranges = [...streams].map(rangeOf);
        const gte = ranges.map((r) => r.gte).sort()[0];
        const lt = ranges
          .map((r) => r.lt)
          .sort()
          .at(-1);
        if (gte !== undefined && lt !== undefined) await this.stores.index.compactRange(gte, lt);
      }
    });
    this.compacting = compaction.catch(() => undefined);
    await compaction;
  }

  subscribeToAll(options: SubscribeOptions = {}): Subscription {
    this.assertOpen();
    const subscription = new LevelSubscription(this.logSource, options, this.liveBufferLimit);
    this.subscriptions.add(subscription);
    return subscription;
  }

  async headPosition(): Promise<Position | null> {
    this.assertOpen();
    return this.lastSeq > 0 ? formatPosition(this.lastSeq) : null;
  }

  /** Finishes queued appends and truncations, ends every subscription, releases the lock. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.draining;
    await this.truncating;
    clearTimeout(this.compactTimer);
    await this.compacting;
    await Promise.all([...this.subscriptions].map((subscription) => subscription.close()));
    await this.stores.log.close();
    if (this.split) await this.stores.index.close();
  }

  /** The stream's first revision not dropped by a truncation (0 when none). */
  private truncatedBefore(streamId: string): number {
    const value = this.stores.index.getSync(truncationKey(streamId));
    return value === undefined ? 0 : Number(value);
  }

  /**
   * Writes the truncation point first (stream reads go by it at once), then deletes what it
   * drops (levelTruncation.ts); a crash in between leaves the pending mark, and the next open
   * finishes the deletes. Appends go on meanwhile: they only add runs after the stream's head.
   */
  private async truncate(streamId: string, revision: number): Promise<void> {
    this.assertOpen();
    const head = this.index.head(streamId);
    if (head === undefined) return;
    const cut = Math.min(revision, head + 1);
    if (cut <= this.truncatedBefore(streamId)) return;
    await this.stores.index.batch(
      [
        { type: 'put', key: truncationKey(streamId), value: String(cut) },
        { type: 'put', key: pendingTruncationKey(streamId), value: String(cut) },
      ],
      { sync: true },
    );
    const seqs = await dropBefore(this.stores, streamId, cut, this.lastSeq);
    const before = this.dropped.seqs;
    if (seqs) this.dropped.seqs = before ? { first: Math.min(before.first, seqs.first), last: Math.max(before.last, seqs.last) } : seqs;
    this.dropped.streams.add(streamId);
    clearTimeout(this.compactTimer);
    this.compactTimer = setTimeout(() => {
      this.compactDropped().catch(() => undefined); // space comes back at the next one
    }, COMPACT_AFTER_MS);
    this.compactTimer.unref();
  }

  private readonly logSource: LogSource = {
    readLogAfter: (seq) => this.readLogAfter(seq),
    committedSeq: () => this.lastSeq,
    attachTap: (tap) => {
      this.taps.add(tap);
      return () => this.taps.delete(tap);
    },
    forget: (subscription) => this.subscriptions.delete(subscription),
  };

  private readLogAfter(seq: number): LogCursor {
    const iterator = this.stores.log.iterator({ gt: logKey(seq), lt: LOG_END });
    // Read ahead: LevelDB fills the next batch on the thread pool while this one is decoded.
    let ahead: Promise<LogEntry[]> | undefined;
    const readAhead = (size: number): Promise<LogEntry[]> => {
      const next = iterator.nextv(size);
      next.catch(() => {}); // a read-ahead nobody waits for (closed meanwhile) must not go unhandled
      return next;
    };
    return {
      nextv: async (size) => {
        const entries = await (ahead ?? readAhead(size));
        ahead = entries.length > 0 ? readAhead(size) : undefined;
        return entries;
      },
      close: () => iterator.close(),
    };
  }

  private async drain(): Promise<void> {
    await Promise.resolve(); // appends issued in the same tick join the first group
    try {
      while (this.queue.length > 0) await this.commit(this.takeGroup());
    } finally {
      this.draining = undefined;
    }
  }

  private takeGroup(): PendingAppend[] {
    let events = 0;
    let count = 0;
    while (count < this.queue.length && (count === 0 || events + this.queue[count]!.events.length <= MAX_EVENTS_PER_COMMIT)) {
      events += this.queue[count]!.events.length;
      count++;
    }
    return this.queue.splice(0, count);
  }

  private async commit(group: PendingAppend[]): Promise<void> {
    // Appends queued before an index batch failed would be planned against the stale index.
    const failure = this.failure;
    if (failure) {
      for (const request of group) request.reject(failure);
      return;
    }
    await this.learnCeilings(group);
    const plan = new AppendPlan(this.index, this.lastSeq, new Date().toISOString());
    const outcomes: Array<{ result?: AppendResult; error?: unknown }> = [];
    for (const request of group) {
      try {
        outcomes.push({ result: await plan.add(request.streamId, request.events, request.expected) });
      } catch (error) {
        outcomes.push({ error });
      }
    }
    if (plan.logPuts.length > 0) {
      // The chained form: several times faster than an array of operations for big groups.
      const logBatch = this.stores.log.batch();
      const indexBatch = this.split ? this.stores.index.batch() : logBatch;
      try {
        // Two puts an event (log, id), and two an append (run, head): the planning's pace (see EVENTS_PER_TURN).
        let sinceTurn = 0;
        for (const [puts, batch] of [
          [plan.logPuts, logBatch],
          [plan.indexPuts, indexBatch],
        ] as const) {
          for (const [key, value] of puts) {
            batch.put(key, value);
            if (++sinceTurn === 2 * EVENTS_PER_TURN) {
              sinceTurn = 0;
              await nextTurn();
            }
          }
        }
        if (this.split) indexBatch.put(INDEXED_KEY, pad(plan.lastSeq));
        // The native batches hold copies now: what the planning kept goes before the fsync'd write,
        // which can outlast a young collection or two.
        plan.release();
        await logBatch.write({ sync: this.sync });
      } catch (error) {
        if (this.split) await indexBatch.close().catch(() => undefined);
        group.forEach((request, i) => {
          request.reject(outcomes[i]!.error ?? error);
        });
        return;
      }
      this.lastSeq = plan.lastSeq;
      // Not synced: after a power loss, `open` rebuilds what the indexes lost from the synced log.
      if (this.split) await this.writeIndex(indexBatch);
      for (const [streamId, id] of plan.largestIds) this.ceilings.raise(streamId, id);
      for (const tap of this.taps) tap.push(plan.appended);
    }
    group.forEach((request, i) => {
      const outcome = outcomes[i]!;
      if (outcome.result) request.resolve(outcome.result);
      else request.reject(outcome.error);
    });
  }

  /**
   * The id ceilings of the group's streams not known yet: '' for a stream without events (no
   * read: a new account's or token's first append), else from its last id entry. One that
   * cannot be read stays unknown: its appends look every id up, as before ceilings.
   */
  private async learnCeilings(group: PendingAppend[]): Promise<void> {
    const unknown = new Set<string>();
    for (const { streamId } of group) {
      if (this.ceilings.knows(streamId)) continue;
      if (this.index.head(streamId) === undefined) this.ceilings.learn(streamId, '');
      else unknown.add(streamId);
    }
    if (unknown.size === 0) return;
    await Promise.all(
      [...unknown].map(async (streamId) => {
        const range = eventIdRange(streamId);
        try {
          const [last] = await this.stores.index.keys({ ...range, reverse: true, limit: 1 }).all();
          this.ceilings.learn(streamId, last === undefined ? '' : last.slice(range.gte.length));
        } catch {
          // unknown it stays
        }
      }),
    );
  }

  /**
   * The group's log entries are on disk, so its appends stand whatever happens here; if the
   * index batch fails, the indexes (heads, ids, stream reads) no longer cover the log, and every
   * later call fails until the store is opened again, which rebuilds them.
   */
  private async writeIndex(batch: ReturnType<Db['batch']>): Promise<void> {
    try {
      await batch.write();
    } catch (error) {
      this.failure = new EventStoreError(
        'store_failed',
        'event store index could not be written after its log: reopen the store (restart the process) to rebuild it',
        {
          cause: error instanceof Error ? error.message : String(error),
        },
      );
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new EventStoreError('store_closed', 'event store is closed');
    if (this.failure) throw this.failure;
  }
}

/**
 * LevelDB opens a directory whose CURRENT file is gone as a new, empty database and deletes the
 * table files the lost CURRENT named: opening would destroy the log. A log directory with
 * LevelDB's files but no CURRENT is refused, untouched. (The index store is not checked: it is
 * rebuilt from the log when it comes back empty.)
 */
function refuseLostCurrent(logDir: string): void {
  let files: string[];
  try {
    files = readdirSync(logDir);
  } catch {
    return; // not there, or no directory: opening it says why
  }
  if (!files.includes('CURRENT') && files.some((f) => /^MANIFEST-\d+$|\.(ldb|sst)$/.test(f))) {
    throw new EventStoreError(
      'store_damaged',
      `The event log in ${logDir} is damaged (LevelDB files but no CURRENT file); left untouched: restore DATA_DIR from a backup (opening it would start an empty log).`,
      { directory: logDir },
    );
  }
}

async function openDb(location: string, directory: string): Promise<Db> {
  const db: Db = new ClassicLevel<string, string>(location, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
  try {
    await db.open();
  } catch (error) {
    if (isLockedError(error)) {
      throw new EventStoreError('store_locked', `event store ${directory} is open in another process`, { directory });
    }
    throw error;
  }
  return db;
}

/**
 * Brings the index store up to the log's last entry: after a crash between a group's log batch
 * and its index batch (or a power loss, which the unsynced index batches do not survive), the
 * entries of the log past the index's mark get their stream index, id and head entries again.
 */
async function indexUpTo(log: Db, index: Db, lastSeq: number): Promise<void> {
  const mark = await index.get(INDEXED_KEY);
  let indexed = mark === undefined ? 0 : Number(mark);
  if (indexed >= lastSeq) return;
  const entries = log.iterator({ gt: logKey(indexed), lt: LOG_END });
  try {
    for (;;) {
      const chunk = await entries.nextv(CATCH_UP_BATCH);
      if (chunk.length === 0) break;
      const batch = index.batch();
      const heads = new Map<string, number>();
      for (const [key, value] of chunk) {
        const event = decodeEvent(key, value);
        const seq = seqOfLogKey(key);
        batch.put(...streamRunEntry(event.streamId, event.revision, seq, 1));
        batch.put(...eventIdEntry(event.streamId, event.id, event.revision, event.position));
        heads.set(event.streamId, event.revision);
        indexed = seq;
      }
      for (const [streamId, revision] of heads) batch.put(...headEntry(streamId, revision));
      batch.put(INDEXED_KEY, pad(indexed));
      await batch.write({ sync: true });
    }
  } finally {
    await entries.close();
  }
}

function isLockedError(error: unknown): boolean {
  const cause = error instanceof Error ? (error.cause as { code?: unknown } | undefined) : undefined;
  return cause?.code === 'LEVEL_LOCKED';
}
