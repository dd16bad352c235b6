import { ClassicLevel } from 'classic-level';
import type { Position } from '../eventstore/port.js';
import { composeWrites, consumeUpdate } from './compose.js';
import { ReadModelError } from './errors.js';
import { KeyFilter } from './keyFilter.js';
import { resolveRange } from './keyRange.js';
import type { Doc, RangeOptions, ReadModelReader, ReadModelStore, ReadModelWrite } from './port.js';
import { SerialQueue } from './serialQueue.js';

type LevelBatch = ReturnType<ClassicLevel<string, Doc>['batch']>;

/*
 * Key layout (utf8): documents under `d\0<collection>\0<key>`, checkpoints under
 * `c\0<projection>`. \0 sorts below every other character, so a collection's keys are
 * contiguous and ordered by key; collection names must not contain \0.
 */
const SEPARATOR = '\x00';

function collectionBase(collection: string): string {
  if (collection.length === 0 || collection.includes(SEPARATOR)) {
    throw new ReadModelError('invalid_collection_name', `invalid collection name ${JSON.stringify(collection)}`);
  }
  return `d${SEPARATOR}${collection}${SEPARATOR}`;
}

/** Just past the last key of a collection: `\x01` replaces the trailing separator. */
function collectionEnd(collection: string): string {
  return `d${SEPARATOR}${collection}\x01`;
}

function checkpointKey(projection: string): string {
  return `c${SEPARATOR}${projection}`;
}

/**
 * Documents that `inc`/`merge` recently built, so that the next commit adding to the same
 * roll-up (the current hour, day, month...) does not read it back from LevelDB. Only ever
 * filled with what a successful batch wrote, and never handed out: callers get documents from
 * LevelDB. Bounded by two generations (a document not written during the last two is dropped):
 * no per-entry bookkeeping, and no deletions at the head of a Map, which V8 walks over again
 * on every `keys().next()`. By collection, then key: the key's hash is already computed.
 */
class RecentDocs {
  private current = new Map<string, Map<string, Doc>>();
  private previous = new Map<string, Map<string, Doc>>();
  private currentSize = 0;

  constructor(private readonly generationSize: number) {}

  get(collection: string, key: string): Doc | undefined {
    return this.current.get(collection)?.get(key) ?? this.previous.get(collection)?.get(key);
  }

  remember(collection: string, key: string, doc: Doc): void {
    let docs = this.current.get(collection);
    if (docs === undefined) {
      docs = new Map();
      this.current.set(collection, docs);
    }
    const before = docs.size;
    docs.set(key, doc);
    this.currentSize += docs.size - before;
    if (this.currentSize >= this.generationSize) {
      this.previous = this.current;
      this.current = new Map();
      this.currentSize = 0;
    }
  }

  forget(collection: string, key: string): void {
    if (this.current.get(collection)?.delete(key)) this.currentSize--;
    this.previous.get(collection)?.delete(key);
  }

  clear(): void {
    this.current = new Map();
    this.previous = new Map();
    this.currentSize = 0;
  }
}

/**
 * A replay writes a few documents per event all over the key space (accounts are random), so
 * LevelDB spends much of it compacting. Table files of 8 MB instead of 2 MB took the
 * 1,000,000-event replay from ~15,500 to ~17,000 events/s, and cost no memory. Bigger
 * memtables (`writeBufferSize` 32 MB) halve the compaction CPU too, but the memtable fills up
 * to that size before it is written out and a restart reads it back from the log: +30 MB of
 * RSS after projecting 100,000 tokens and after the restart, so the service keeps the default
 * (4 MB); a rebuild's process opens the store with `bulkLoad` (below).
 */
const LEVELDB_TUNING = { maxFileSize: 8 * 1024 * 1024 } as const;

/**
 * A rebuild's process (`bulkLoad`) writes the whole log's read models once and exits: a 32 MB
 * memtable there halves LevelDB's compaction work for the memory of a process that ends. The
 * next open (4 MB) writes a bigger log out to tables as it reads it back, not into memory.
 */
const BULK_LOAD_WRITE_BUFFER = 32 * 1024 * 1024;

export interface LevelReadModelOptions {
  /** For a process that rebuilds the read models and exits (`npm run cli -- rebuild`): a bigger memtable. */
  bulkLoad?: boolean;
  /**
   * The directory is opened by other threads of this process too (classic-level's
   * `multithreading`: one LevelDB shared by all of them). One of them writes; the others only
   * `get` and `range` (`LevelReadModelStore.reader`), which see each write once it is done.
   */
  sharedWithThreads?: boolean;
}

/** Up to twice this many documents: the live roll-ups of thousands of tokens, a few MB. */
const RECENT_DOCS_GENERATION = 10_000;

/** 2^26 bits (8 MB), allocated at the first reset: under 1 % false positives up to ~5 million documents. */
const FRESH_FILTER_LOG2_BITS = 26;

/**
 * Read models in an embedded LevelDB. A commit's documents and its checkpoint go in one
 * atomic batch, and commits run one at a time so `inc` (read, add, write) cannot race.
 * LevelDB lets one process open the directory, so this object sees every write: it can keep
 * the checkpoints and recently updated documents in memory instead of reading them back.
 */
export class LevelReadModelStore implements ReadModelStore {
  private readonly queue = new SerialQueue();
  private readonly bases = new Map<string, string>();
  private readonly checkpoints = new Map<string, Position | null>();
  private readonly recent = new RecentDocs(RECENT_DOCS_GENERATION);
  /**
   * Collections emptied by `reset` since this store was opened, and a filter of every key
   * written to them since: an update of a key the filter has never seen starts from nothing,
   * without a read. In a rebuild most updates create documents (a new minute, hour or day).
   */
  private readonly fresh = new Set<string>();
  private freshKeys: KeyFilter | null = null;
  /** Documents read back to apply updates, and reads skipped because the key was known to be new. */
  readonly stats = { documentsRead: 0, readsSkipped: 0 };

  private constructor(private readonly db: ClassicLevel<string, Doc>) {}

  static async open(location: string, options: LevelReadModelOptions = {}): Promise<LevelReadModelStore> {
    const db = new ClassicLevel<string, Doc>(location, {
      keyEncoding: 'utf8',
      valueEncoding: 'json',
      ...LEVELDB_TUNING,
      ...(options.bulkLoad ? { writeBufferSize: BULK_LOAD_WRITE_BUFFER } : {}),
      multithreading: options.sharedWithThreads ?? false,
    });
    await db.open();
    return new LevelReadModelStore(db);
  }

  /**
   * Another thread's view of a directory its writer opened with `sharedWithThreads`: reads only.
   * (Its writes would bypass the writer's memory of checkpoints and recent documents.)
   */
  static async reader(location: string): Promise<ReadModelReader> {
    return LevelReadModelStore.open(location, { sharedWithThreads: true });
  }

  async get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null> {
    const doc = await this.db.get(this.docKey(collection, key));
    return (doc as T | undefined) ?? null;
  }

  async range<T extends Doc = Doc>(collection: string, options?: RangeOptions): Promise<Array<{ key: string; doc: T }>> {
    const range = resolveRange(options);
    if (range.empty) return [];
    const base = this.base(collection);
    const entries = await this.db
      .iterator({
        gte: base + range.gte,
        lt: range.lt !== undefined ? base + range.lt : collectionEnd(collection),
        reverse: range.reverse,
        ...(range.limit !== undefined ? { limit: range.limit } : {}),
      })
      .all();
    return entries.map(([fullKey, doc]) => ({ key: fullKey.slice(base.length), doc: doc as T }));
  }

  commit(projection: string, position: Position, writes: ReadModelWrite[]): Promise<void> {
    return this.queue.run(async () => {
      const stored = await this.storedCheckpoint(projection);
      if (stored !== null && stored >= position) return;
      await this.writeBatch(writes, (batch) => batch.put(checkpointKey(projection), { position }));
      this.checkpoints.set(projection, position);
    });
  }

  checkpoint(projection: string): Promise<Position | null> {
    return this.storedCheckpoint(projection);
  }

  write(writes: ReadModelWrite[]): Promise<void> {
    return this.queue.run(() => this.writeBatch(writes));
  }

  reset(projection: string, collections: string[]): Promise<void> {
    return this.queue.run(async () => {
      this.recent.clear();
      this.checkpoints.delete(projection);
      // Checkpoint first: if we stop half way, the rebuild starts from scratch rather than
      // resuming from an old checkpoint over emptied collections.
      await this.db.del(checkpointKey(projection));
      for (const collection of collections) {
        await this.db.clear({ gte: this.base(collection), lt: collectionEnd(collection) });
      }
      // Empty now, and this store sees every write from here on (it is the directory's only writer).
      this.freshKeys ??= new KeyFilter(FRESH_FILTER_LOG2_BITS);
      for (const collection of collections) this.fresh.add(collection);
    });
  }

  async close(): Promise<void> {
    await this.queue.drain();
    await this.db.close();
  }

  private async storedCheckpoint(projection: string): Promise<Position | null> {
    const known = this.checkpoints.get(projection);
    if (known !== undefined) return known;
    const stored = await this.db.get(checkpointKey(projection));
    const position = typeof stored?.['position'] === 'string' ? stored['position'] : null;
    this.checkpoints.set(projection, position);
    return position;
  }

  private base(collection: string): string {
    let base = this.bases.get(collection);
    if (base === undefined) {
      base = collectionBase(collection);
      this.bases.set(collection, base);
    }
    return base;
  }

  private docKey(collection: string, key: string): string {
    return this.base(collection) + key;
  }

  /**
   * Folds the writes per key, reads (in one getMany) only the documents that updates build on
   * and that are neither among the recent ones nor known to be new, writes everything in one
   * atomic batch.
   */
  private async writeBatch(writes: ReadonlyArray<ReadModelWrite>, addToBatch?: (batch: LevelBatch) => void): Promise<void> {
    const changes = composeWrites(writes);
    const fullKeys = new Array<string>(changes.length);
    const stored = new Array<Doc | null>(changes.length).fill(null);
    const unknown: number[] = [];
    const freshKeys = this.freshKeys;
    for (let i = 0; i < changes.length; i++) {
      const { collection, key, change } = changes[i]!;
      const fullKey = this.docKey(collection, key);
      fullKeys[i] = fullKey;
      if (change.kind !== 'update') {
        if (freshKeys !== null && change.doc !== null && this.fresh.has(collection)) freshKeys.add(key);
        continue;
      }
      // Added before the write: should the write fail, the key is only a false positive later.
      // Bare keys of every fresh collection share the filter: a key of another one is a false positive too, not a miss.
      // Checked before the recent documents: those were all written since the reset, so are in the filter.
      if (freshKeys !== null && this.fresh.has(collection) && !freshKeys.add(key)) {
        this.stats.readsSkipped++;
        continue;
      }
      const recent = this.recent.get(collection, key);
      if (recent !== undefined) stored[i] = recent;
      else unknown.push(i);
    }
    if (unknown.length > 0) {
      const read = await this.db.getMany(unknown.map((i) => fullKeys[i]!));
      this.stats.documentsRead += unknown.length;
      for (let j = 0; j < unknown.length; j++) stored[unknown[j]!] = read[j] ?? null;
    }
    const updated = new Array<Doc | null>(changes.length).fill(null);
    const batch = this.db.batch();
    try {
      for (let i = 0; i < changes.length; i++) {
        const { collection, key, change } = changes[i]!;
        const fullKey = fullKeys[i]!;
        if (change.kind === 'update') {
          const doc = consumeUpdate(stored[i] ?? null, change);
          updated[i] = doc;
          batch.put(fullKey, doc);
        } else {
          this.recent.forget(collection, key);
          if (change.doc === null) batch.del(fullKey);
          else batch.put(fullKey, change.doc);
        }
      }
      addToBatch?.(batch);
    } catch (error) {
      await batch.close();
      throw error;
    }
    await batch.write();
    for (let i = 0; i < changes.length; i++) {
      const doc = updated[i];
      if (!doc) continue;
      const { collection, key } = changes[i]!;
      this.recent.remember(collection, key, doc);
    }
  }
}
