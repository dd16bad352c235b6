import {
  type AnyBulkWriteOperation,
  type ClientSession,
  type Collection,
  type Db,
  type Filter,
  MongoBulkWriteError,
  MongoClient,
  MongoServerError,
  type UpdateFilter,
} from 'mongodb';
import type { Position } from '../eventstore/port.js';
import { type ComposedChange, composeWrites, type KeyChange } from './compose.js';
import { ReadModelError } from './errors.js';
import { resolveRange } from './keyRange.js';
import type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from './port.js';
import { SerialQueue } from './serialQueue.js';

/**
 * A read-model document as stored: `_id` is the key, `_pos` the position that last changed it,
 * `_expiresAt` when the TTL index drops it (only documents written with an expiry).
 */
interface StoredDoc {
  _id: string;
  _pos?: string;
  _expiresAt?: Date;
  [field: string]: unknown;
}

interface CheckpointDoc {
  _id: string;
  position: string;
}

const COLLECTION_PREFIX = 'rm_';
const CHECKPOINTS = 'rm_checkpoints';
const DUPLICATE_KEY = 11000;
/** The TTL index of a collection that received documents with an expiry: each goes at its own `_expiresAt`. */
const TTL_INDEX = { key: { _expiresAt: 1 }, name: 'rm_expires_at', expireAfterSeconds: 0 } as const;

export interface MongoReadModelOptions {
  /** Database name; defaults to the one in the URL (or the driver's default). */
  dbName?: string;
  /**
   * `auto` commits in a transaction when the server supports them (replica set or mongos);
   * `never` always uses the per-document `_pos` guards (what a standalone server gets).
   */
  transactions?: 'auto' | 'never';
}

/** Whether the server can run multi-document transactions: replica set members and mongos can. */
async function supportsTransactions(db: Db): Promise<boolean> {
  const hello = await db.command({ hello: 1 });
  return typeof hello['setName'] === 'string' || hello['msg'] === 'isdbgrid';
}

/** `_id`/`_pos`/`_expiresAt` are the store's own fields; a document's fields of those names are not kept. */
function userFields(doc: Doc): Doc {
  const { _id, _pos, _expiresAt, ...fields } = doc;
  return fields;
}

function toDoc<T extends Doc>(stored: StoredDoc): T {
  const { _id, _pos, _expiresAt, ...fields } = stored;
  return fields as T;
}

/** Expiries per collection and key (the furthest when several writes give one), or null when no write has one. */
type Expiries = Map<string, Map<string, number>>;

function expiriesOf(writes: ReadModelWrite[]): Expiries | null {
  let expiries: Expiries | null = null;
  for (const write of writes) {
    if (write.op === 'delete' || write.expiresAt === undefined) continue;
    expiries ??= new Map();
    let byKey = expiries.get(write.collection);
    if (!byKey) {
      byKey = new Map();
      expiries.set(write.collection, byKey);
    }
    byKey.set(write.key, Math.max(write.expiresAt, byKey.get(write.key) ?? Number.NEGATIVE_INFINITY));
  }
  return expiries;
}

/** Every write error of a bulk is a duplicate key (an upsert whose guard found a newer `_pos`). */
function onlyDuplicateKeys(error: unknown): boolean {
  if (error instanceof MongoBulkWriteError) {
    const writeErrors = Array.isArray(error.writeErrors) ? error.writeErrors : [error.writeErrors];
    return error.err === undefined && writeErrors.length > 0 && writeErrors.every((e) => e.code === DUPLICATE_KEY);
  }
  return error instanceof MongoServerError && error.code === DUPLICATE_KEY;
}

/**
 * How a commit's position guards its writes: `guarded` filters every upsert on an older
 * `_pos` (standalone servers, where a replay must skip documents already written);
 * `stamped` only records `_pos` (inside a transaction the checkpoint check is enough).
 */
type Stamp = { position: Position; guarded: boolean } | undefined;

function toOperation(key: string, change: KeyChange, stamp: Stamp, expiresAt: number | undefined): AnyBulkWriteOperation<StoredDoc> {
  if (change.kind === 'replace' && change.doc === null) return { deleteOne: { filter: { _id: key } } };
  const filter: Filter<StoredDoc> = stamp?.guarded ? { _id: key, _pos: { $not: { $gte: stamp.position } } } : { _id: key };
  const positionField = stamp ? { _pos: stamp.position } : {};
  const expiry = expiresAt === undefined ? undefined : new Date(expiresAt);
  if (change.kind === 'replace') {
    const replacement = { ...userFields(change.doc ?? {}), ...positionField, ...(expiry ? { _expiresAt: expiry } : {}) };
    return { replaceOne: { filter, replacement, upsert: true } };
  }
  const inc = userFields(change.inc);
  const set = { ...userFields(change.set), ...positionField };
  // The driver's typing cannot tell that `inc` never names `_id`/`_pos` (userFields removed them).
  // `$max`: an expiry only moves later, whatever order the writes to a key come in.
  const update = {
    ...(Object.keys(set).length > 0 || (expiry === undefined && Object.keys(inc).length === 0) ? { $set: set } : {}),
    ...(Object.keys(inc).length > 0 ? { $inc: inc } : {}),
    ...(expiry ? { $max: { _expiresAt: expiry } } : {}),
  } as UpdateFilter<StoredDoc>;
  return { updateOne: { filter, update, upsert: true } };
}

/**
 * Read models in MongoDB: one collection per read-model collection (`rm_<name>`, `_id` =
 * key, fields at top level), checkpoints in `rm_checkpoints`. Commits are transactions when
 * the server has them; otherwise each document write is idempotent on its own (`_pos`
 * guard) and the checkpoint only moves forward, so a replay after a crash changes nothing.
 */
export class MongoReadModelStore implements ReadModelStore {
  /** In-process order: concurrent commits from this process never skip each other's writes. */
  private readonly queue = new SerialQueue();
  private readonly checkpoints: Collection<CheckpointDoc>;
  /** Collections whose TTL index this process has made sure of. */
  private readonly expiring = new Set<string>();
  readonly expires = true;

  private constructor(
    private readonly client: MongoClient,
    private readonly db: Db,
    private readonly useTransactions: boolean,
  ) {
    this.checkpoints = db.collection<CheckpointDoc>(CHECKPOINTS);
  }

  static async open(url: string, options: MongoReadModelOptions = {}): Promise<MongoReadModelStore> {
    const client = new MongoClient(url);
    await client.connect();
    try {
      const db = client.db(options.dbName);
      const useTransactions = options.transactions !== 'never' && (await supportsTransactions(db));
      return new MongoReadModelStore(client, db, useTransactions);
    } catch (error) {
      await client.close();
      throw error;
    }
  }

  /** True when commits run as multi-document transactions. */
  get transactional(): boolean {
    return this.useTransactions;
  }

  async get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null> {
    const stored = await this.collection(collection).findOne({ _id: key });
    return stored ? toDoc<T>(stored) : null;
  }

  async range<T extends Doc = Doc>(collection: string, options?: RangeOptions): Promise<Array<{ key: string; doc: T }>> {
    const range = resolveRange(options);
    if (range.empty) return [];
    const filter: Filter<StoredDoc> = {
      _id: range.lt !== undefined ? { $gte: range.gte, $lt: range.lt } : { $gte: range.gte },
    };
    const cursor = this.collection(collection)
      .find(filter)
      .sort({ _id: range.reverse ? -1 : 1 });
    if (range.limit !== undefined) cursor.limit(range.limit);
    const found = await cursor.toArray();
    return found.map((stored) => ({ key: stored._id, doc: toDoc<T>(stored) }));
  }

  commit(projection: string, position: Position, writes: ReadModelWrite[]): Promise<void> {
    const changes = composeWrites(writes);
    const expiries = expiriesOf(writes);
    return this.queue.run(async () => {
      // Outside the transaction: an index cannot be created inside one.
      await this.ensureTtlIndexes(expiries);
      return this.useTransactions
        ? this.commitInTransaction(projection, position, changes, expiries)
        : this.commitGuarded(projection, position, changes, expiries);
    });
  }

  async checkpoint(projection: string): Promise<Position | null> {
    const stored = await this.checkpoints.findOne({ _id: projection });
    return stored?.position ?? null;
  }

  write(writes: ReadModelWrite[]): Promise<void> {
    const changes = composeWrites(writes);
    const expiries = expiriesOf(writes);
    return this.queue.run(async () => {
      await this.ensureTtlIndexes(expiries);
      await this.apply(changes, expiries, undefined, undefined);
    });
  }

  reset(projection: string, collections: string[]): Promise<void> {
    return this.queue.run(async () => {
      // Checkpoint first: a reset cut short makes the rebuild start over, never resume from
      // an old checkpoint over dropped collections.
      await this.checkpoints.deleteOne({ _id: projection });
      // The driver ignores a drop of a collection that does not exist.
      for (const name of collections) {
        await this.collection(name).drop();
        this.expiring.delete(name);
      }
    });
  }

  async close(): Promise<void> {
    await this.queue.drain();
    await this.client.close();
  }

  private collection(name: string): Collection<StoredDoc> {
    if (name.length === 0 || `${COLLECTION_PREFIX}${name}` === CHECKPOINTS) {
      throw new ReadModelError('invalid_collection_name', `invalid collection name ${JSON.stringify(name)}`);
    }
    return this.db.collection<StoredDoc>(`${COLLECTION_PREFIX}${name}`);
  }

  /** The TTL index on each collection that gets documents with an expiry (createIndex is a no-op when it exists). */
  private async ensureTtlIndexes(expiries: Expiries | null): Promise<void> {
    if (expiries === null) return;
    for (const name of expiries.keys()) {
      if (this.expiring.has(name)) continue;
      const { key, ...options } = TTL_INDEX;
      await this.collection(name).createIndex(key, options);
      this.expiring.add(name);
    }
  }

  private async commitInTransaction(projection: string, position: Position, changes: ComposedChange[], expiries: Expiries | null): Promise<void> {
    const session = this.client.startSession();
    try {
      // withTransaction retries the whole callback on transient errors, so it re-checks the checkpoint.
      await session.withTransaction(async () => {
        const stored = await this.checkpoints.findOne({ _id: projection }, { session });
        if (stored && stored.position >= position) return;
        await this.apply(changes, expiries, { position, guarded: false }, session);
        await this.checkpoints.updateOne({ _id: projection }, { $set: { position } }, { upsert: true, session });
      });
    } finally {
      await session.endSession();
    }
  }

  private async commitGuarded(projection: string, position: Position, changes: ComposedChange[], expiries: Expiries | null): Promise<void> {
    const stored = await this.checkpoints.findOne({ _id: projection });
    if (stored && stored.position >= position) return;
    await this.apply(changes, expiries, { position, guarded: true }, undefined);
    try {
      // Only forward: a lost race against a newer checkpoint ends in a duplicate key, which is fine.
      await this.checkpoints.updateOne({ _id: projection, position: { $not: { $gte: position } } }, { $set: { position } }, { upsert: true });
    } catch (error) {
      if (!onlyDuplicateKeys(error)) throw error;
    }
  }

  /** One bulk per collection; keys are distinct after composing, so order does not matter. */
  private async apply(changes: ComposedChange[], expiries: Expiries | null, stamp: Stamp, session: ClientSession | undefined): Promise<void> {
    const byCollection = new Map<string, AnyBulkWriteOperation<StoredDoc>[]>();
    for (const { collection, key, change } of changes) {
      const operations = byCollection.get(collection) ?? [];
      operations.push(toOperation(key, change, stamp, expiries?.get(collection)?.get(key)));
      byCollection.set(collection, operations);
    }
    for (const [name, operations] of byCollection) {
      try {
        // Unordered so that one skipped (duplicate-key) upsert does not stop the others.
        await this.collection(name).bulkWrite(operations, { ordered: false, ...(session ? { session } : {}) });
      } catch (error) {
        if (!(stamp?.guarded && onlyDuplicateKeys(error))) throw error;
      }
    }
  }
}
