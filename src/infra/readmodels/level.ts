import { ClassicLevel } from 'classic-level';
import type { Position } from '../eventstore/port.js';
import { applyChange, composeWrites } from './compose.js';
import { ReadModelError } from './errors.js';
import { resolveRange } from './keyRange.js';
import type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from './port.js';
import { SerialQueue } from './serialQueue.js';

type BatchOp = { type: 'put'; key: string; value: Doc } | { type: 'del'; key: string };

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

function docKey(collection: string, key: string): string {
  return collectionBase(collection) + key;
}

/** Just past the last key of a collection: `\x01` replaces the trailing separator. */
function collectionEnd(collection: string): string {
  return `d${SEPARATOR}${collection}\x01`;
}

function checkpointKey(projection: string): string {
  return `c${SEPARATOR}${projection}`;
}

/**
 * Read models in an embedded LevelDB. A commit's documents and its checkpoint go in one
 * atomic batch, and commits run one at a time so `inc` (read, add, write) cannot race.
 */
export class LevelReadModelStore implements ReadModelStore {
  private readonly queue = new SerialQueue();

  private constructor(private readonly db: ClassicLevel<string, Doc>) {}

  static async open(location: string): Promise<LevelReadModelStore> {
    const db = new ClassicLevel<string, Doc>(location, { keyEncoding: 'utf8', valueEncoding: 'json' });
    await db.open();
    return new LevelReadModelStore(db);
  }

  async get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null> {
    const doc = await this.db.get(docKey(collection, key));
    return (doc as T | undefined) ?? null;
  }

  async range<T extends Doc = Doc>(
    collection: string,
    options?: RangeOptions,
  ): Promise<Array<{ key: string; doc: T }>> {
    const range = resolveRange(options);
    if (range.empty) return [];
    const base = collectionBase(collection);
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
      const key = checkpointKey(projection);
      const stored = await this.db.get(key);
      if (typeof stored?.['position'] === 'string' && stored['position'] >= position) return;
      const ops = await this.batchFor(writes);
      ops.push({ type: 'put', key, value: { position } });
      await this.db.batch(ops);
    });
  }

  async checkpoint(projection: string): Promise<Position | null> {
    const stored = await this.db.get(checkpointKey(projection));
    return typeof stored?.['position'] === 'string' ? stored['position'] : null;
  }

  write(writes: ReadModelWrite[]): Promise<void> {
    return this.queue.run(async () => {
      const ops = await this.batchFor(writes);
      if (ops.length > 0) await this.db.batch(ops);
    });
  }

  reset(projection: string, collections: string[]): Promise<void> {
    return this.queue.run(async () => {
      // Checkpoint first: if we stop half way, the rebuild starts from scratch rather than
      // resuming from an old checkpoint over emptied collections.
      await this.db.del(checkpointKey(projection));
      for (const collection of collections) {
        await this.db.clear({ gte: collectionBase(collection), lt: collectionEnd(collection) });
      }
    });
  }

  async close(): Promise<void> {
    await this.queue.drain();
    await this.db.close();
  }

  /** Folds the writes per key, reads only the documents that updates build on, returns the batch. */
  private async batchFor(writes: ReadonlyArray<ReadModelWrite>): Promise<BatchOp[]> {
    const changes = composeWrites(writes).map((entry) => ({ ...entry, fullKey: docKey(entry.collection, entry.key) }));
    const updates = changes.filter((entry) => entry.change.kind === 'update');
    const storedDocs = updates.length > 0 ? await this.db.getMany(updates.map((entry) => entry.fullKey)) : [];
    const stored = new Map(updates.map((entry, index) => [entry.fullKey, storedDocs[index] ?? null]));
    return changes.map(({ fullKey, change }): BatchOp => {
      const doc = applyChange(stored.get(fullKey) ?? null, change);
      return doc === null ? { type: 'del', key: fullKey } : { type: 'put', key: fullKey, value: doc };
    });
  }
}
