import { mkdir } from 'node:fs/promises';
import { ClassicLevel } from 'classic-level';
import { validateAppend } from './appendRules.js';
import { EventStoreError } from './errors.js';
import { AppendPlan, EVENTS_PER_TURN, type EventIndexReader, nextTurn } from './levelAppendPlan.js';
import { decodeEvent, eventIdKey, formatPosition, headKey, LOG_END, LOG_START, type LogEntry, logKey, seqOfLogKey, streamKey, streamRange } from './levelKeys.js';
import { LevelSubscription, type LiveTap, type LogCursor, type LogSource } from './levelSubscription.js';
import type {
  AppendResult,
  EventStore,
  ExpectedRevision,
  NewEvent,
  Position,
  StoredEvent,
  SubscribeOptions,
  Subscription,
} from './port.js';

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
 * The embedded event store: one LevelDB directory, one writer (this process; LevelDB's lock
 * keeps any other out). Appends are queued and committed in groups, each group one atomic,
 * synced batch, so a crash leaves whole appends or nothing, and an append is acknowledged
 * only once it is on disk. Revision checks run in the single writer, so they cannot race.
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

  private constructor(
    private readonly db: Db,
    private lastSeq: number,
    options: LevelEventStoreOptions,
  ) {
    this.sync = options.sync ?? true;
    this.liveBufferLimit = options.liveBufferLimit ?? 10_000;
    this.index = {
      head: (streamId) => {
        const value = db.getSync(headKey(streamId));
        return value === undefined ? undefined : Number(value);
      },
      eventId: (streamId, eventId) => db.getSync(eventIdKey(streamId, eventId)),
    };
  }

  static async open(directory: string, options: LevelEventStoreOptions = {}): Promise<LevelEventStore> {
    await mkdir(directory, { recursive: true });
    const db: Db = new ClassicLevel<string, string>(directory, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
    try {
      await db.open();
    } catch (error) {
      if (isLockedError(error)) {
        throw new EventStoreError('store_locked', `event store ${directory} is open in another process`, { directory });
      }
      throw error;
    }
    const [lastKey] = await db.keys({ gt: LOG_START, lt: LOG_END, reverse: true, limit: 1 }).all();
    return new LevelEventStore(db, lastKey === undefined ? 0 : seqOfLogKey(lastKey), options);
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
    const fromRevision = Math.max(0, Math.trunc(options.fromRevision ?? 0));
    if (options.maxCount !== undefined && options.maxCount < 1) return [];
    const maxCount = options.maxCount === undefined ? -1 : Math.trunc(options.maxCount); // -1: no limit
    const seqs = await this.db.values({ gte: streamKey(streamId, fromRevision), lt: streamRange(streamId).lt, limit: maxCount }).all();
    if (seqs.length === 0) return [];
    const values = await this.db.getMany(seqs.map((seq) => LOG_START + seq));
    return values.map((value, i) => {
      if (value === undefined) throw new Error(`event store is corrupt: ${streamId} points at missing log entry ${seqs[i]}`);
      return decodeEvent(LOG_START + seqs[i]!, value);
    });
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

  /** Finishes queued appends, ends every subscription, releases the lock. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.draining;
    await Promise.all([...this.subscriptions].map((subscription) => subscription.close()));
    await this.db.close();
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
    const iterator = this.db.iterator({ gt: logKey(seq), lt: LOG_END });
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
    const plan = new AppendPlan(this.index, this.lastSeq, new Date().toISOString());
    const outcomes: Array<{ result?: AppendResult; error?: unknown }> = [];
    for (const request of group) {
      try {
        outcomes.push({ result: await plan.add(request.streamId, request.events, request.expected) });
      } catch (error) {
        outcomes.push({ error });
      }
    }
    if (plan.puts.length > 0) {
      try {
        // The chained form: several times faster than an array of operations for big groups.
        const batch = this.db.batch();
        for (let i = 0; i < plan.puts.length; i++) {
          const [key, value] = plan.puts[i]!;
          batch.put(key, value);
          // Three puts an event (log, stream index, id): the planning's pace (see EVENTS_PER_TURN).
          if ((i + 1) % (3 * EVENTS_PER_TURN) === 0) await nextTurn();
        }
        // The native batch holds copies now: what the planning kept goes before the fsync'd write,
        // which can outlast a young collection or two.
        plan.release();
        await batch.write({ sync: this.sync });
      } catch (error) {
        group.forEach((request, i) => {
          request.reject(outcomes[i]!.error ?? error);
        });
        return;
      }
      this.lastSeq = plan.lastSeq;
      for (const tap of this.taps) tap.push(plan.appended);
    }
    group.forEach((request, i) => {
      const outcome = outcomes[i]!;
      if (outcome.result) request.resolve(outcome.result);
      else request.reject(outcome.error);
    });
  }

  private assertOpen(): void {
    if (this.closed) throw new EventStoreError('store_closed', 'event store is closed');
  }
}


function isLockedError(error: unknown): boolean {
  const cause = error instanceof Error ? (error.cause as { code?: unknown } | undefined) : undefined;
  return cause?.code === 'LEVEL_LOCKED';
}
