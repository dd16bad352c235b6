import type pg from 'pg';
import type { Position } from '../eventstore/port.js';
import { isRetryable, migrate, openPool } from '../postgres/database.js';
import { type ComposedChange, composeWrites } from './compose.js';
import { ReadModelError } from './errors.js';
import { resolveRange } from './keyRange.js';
import type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from './port.js';
import { READ_MODEL_MIGRATIONS } from './postgresSchema.js';
import { SerialQueue } from './serialQueue.js';

export interface PostgresReadModelOptions {
  /** Connections (default 10). */
  poolSize?: number;
}

/**
 * Ranges are read in key order, the primary key's order. With PostgreSQL's default
 * random_page_cost (4, priced for spinning disks) the planner reads a range of thousands of
 * documents by a bitmap scan and a sort instead: 8.1 ms against 2.1 ms by the index for a 7-day
 * roll-up range of 5,090 documents (bench/postgres-metrics.ts). Read models are small and stay
 * cached, where a page out of order costs about what the next one does.
 */
export const READ_SESSION_SETTINGS = '-c random_page_cost=1.1';

/** A call that meets a deadlock (two writers' keys in different orders cannot, but a reset can) runs again, this many times in all. */
const ATTEMPTS = 5;

/**
 * Read models in PostgreSQL (`DATABASE_URL`); layout and SQL in postgresSchema.ts. A commit is
 * one statement (`rm_commit`): its documents and its checkpoint in one transaction, skipped
 * whole when the checkpoint is at or past its position. Any number of processes may read and
 * write: updates are `INSERT … ON CONFLICT DO UPDATE` computed by the server, so no increment
 * is lost to a concurrent one. Expiry is the retention job's, as on LevelDB (`expires` unset).
 */
export class PostgresReadModelStore implements ReadModelStore {
  private closed = false;
  /** Per projection, its commits in call order: one at a later position must not land first and make an earlier one look stale. */
  private readonly commits = new Map<string, SerialQueue>();

  private constructor(private readonly pool: pg.Pool) {}

  static async open(url: string, options: PostgresReadModelOptions = {}): Promise<PostgresReadModelStore> {
    const pool = openPool(url, options.poolSize ?? 10, READ_SESSION_SETTINGS);
    try {
      await migrate(pool, 'readmodels', READ_MODEL_MIGRATIONS);
    } catch (error) {
      await pool.end();
      throw error;
    }
    return new PostgresReadModelStore(pool);
  }

  async get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null> {
    this.assertOpen();
    const { rows } = await this.pool.query<{ doc: T }>('SELECT doc FROM rm_docs WHERE collection = $1 AND key = $2', [checkName(collection), key]);
    return rows[0]?.doc ?? null;
  }

  async range<T extends Doc = Doc>(collection: string, options?: RangeOptions): Promise<Array<{ key: string; doc: T }>> {
    this.assertOpen();
    const range = resolveRange(options);
    if (range.empty) return [];
    const direction = range.reverse ? 'DESC' : 'ASC';
    const lower = beforeNul(range.gte);
    const upper = range.lt === undefined ? null : beforeNul(range.lt);
    const { rows } = await this.pool.query<{ key: string; doc: T }>(
      `SELECT key, doc FROM rm_docs WHERE collection = $1 AND key ${lower.cut ? '>' : '>='} $2 AND ($3::text IS NULL OR key ${upper?.cut ? '<=' : '<'} $3) ORDER BY key ${direction} LIMIT $4`,
      [checkName(collection), lower.key, upper?.key ?? null, range.limit ?? null],
    );
    return rows;
  }

  async commit(projection: string, position: Position, writes: ReadModelWrite[]): Promise<void> {
    this.assertOpen();
    const params = toParams(composeWrites(writes));
    let queue = this.commits.get(projection);
    if (queue === undefined) {
      queue = new SerialQueue();
      this.commits.set(projection, queue);
    }
    await queue.run(() => this.retrying(() => this.pool.query('SELECT rm_commit($1, $2, $3, $4, $5, $6, $7)', [projection, position, ...params])));
  }

  async checkpoint(projection: string): Promise<Position | null> {
    this.assertOpen();
    const { rows } = await this.pool.query<{ position: string }>('SELECT position FROM rm_checkpoints WHERE projection = $1', [projection]);
    return rows[0]?.position ?? null;
  }

  async write(writes: ReadModelWrite[]): Promise<void> {
    this.assertOpen();
    if (writes.length === 0) return;
    const params = toParams(composeWrites(writes));
    await this.retrying(() => this.pool.query('SELECT rm_apply($1, $2, $3, $4, $5)', params));
  }

  async reset(projection: string, collections: string[]): Promise<void> {
    this.assertOpen();
    for (const collection of collections) checkName(collection);
    await this.retrying(async () => {
      const client = await this.pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        // Under the projection's lock, as its commits: none lands half way through.
        await client.query('SELECT pg_advisory_xact_lock(4245, hashtext($1))', [projection]);
        await client.query('DELETE FROM rm_checkpoints WHERE projection = $1', [projection]);
        await client.query('DELETE FROM rm_docs WHERE collection = ANY ($1::text[])', [collections]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch((e: unknown) => {
          broken = e instanceof Error ? e : new Error(String(e));
        });
        throw error;
      } finally {
        client.release(broken);
      }
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.commits.values()].map((queue) => queue.drain()));
    await this.pool.end();
  }

  private async retrying<T>(run: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await run();
      } catch (error) {
        if (attempt >= ATTEMPTS || !isRetryable(error)) throw error;
      }
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new ReadModelError('closed', 'read model store is closed');
  }
}

function checkName(collection: string): string {
  if (collection.length === 0) throw new ReadModelError('invalid_collection_name', `invalid collection name ${JSON.stringify(collection)}`);
  return collection;
}

/**
 * `rm_apply`'s arrays: per key its collection, key, and either a document (put), nothing
 * (delete), or the fields to set and the amounts to add (update). Ordered by collection and key,
 * so that every writer locks rows in the same order and two commits cannot deadlock.
 */
function toParams(changes: ComposedChange[]): [string[], string[], Array<string | null>, Array<string | null>, Array<string | null>] {
  const sorted = [...changes].sort((a, b) => (a.collection < b.collection ? -1 : a.collection > b.collection ? 1 : a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const collections: string[] = [];
  const keys: string[] = [];
  const docs: Array<string | null> = [];
  const sets: Array<string | null> = [];
  const incs: Array<string | null> = [];
  for (const { collection, key, change } of sorted) {
    collections.push(checkName(collection));
    keys.push(key);
    if (change.kind === 'replace') {
      docs.push(change.doc === null ? null : JSON.stringify(change.doc));
      sets.push(null);
      incs.push(null);
    } else {
      docs.push(null);
      sets.push(JSON.stringify(change.set));
      incs.push(JSON.stringify(change.inc));
    }
  }
  return [collections, keys, docs, sets, incs];
}

/**
 * PostgreSQL text cannot hold NUL, and keys never do: readers page on with `last.key + '\0'`
 * ("just past the last key"). In byte order no NUL-free key lies between `s` and `s\0…`, so
 * such a bound is the part before its NUL, made strict (`>` for a lower bound, `<=` for an upper).
 */
function beforeNul(bound: string): { key: string; cut: boolean } {
  const nul = bound.indexOf('\0');
  return nul === -1 ? { key: bound, cut: false } : { key: bound.slice(0, nul), cut: true };
}
