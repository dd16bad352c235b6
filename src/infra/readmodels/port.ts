import type { Position } from '../eventstore/port.js';

/**
 * The read-model port: named collections of JSON documents under string keys, ordered by key
 * so that range scans by prefix serve every query (secondary indexes are collections that the
 * projections write themselves, e.g. `tokens_by_hash`). Maps onto LevelDB (key prefixes) and
 * MongoDB (one collection each, `_id` = key).
 */
export type Doc = Record<string, unknown>;

export type ReadModelWrite =
  /** Replaces the whole document. */
  | ({ op: 'put'; collection: string; key: string; doc: Doc } & Expiry)
  /** Sets top-level fields, creating the document when missing. */
  | ({ op: 'merge'; collection: string; key: string; fields: Doc } & Expiry)
  /** Adds to numeric top-level fields (missing counts as 0), sets `set` fields; creates when missing. */
  | ({ op: 'inc'; collection: string; key: string; inc: Record<string, number>; set?: Doc } & Expiry)
  | { op: 'delete'; collection: string; key: string };

/**
 * When the document may be dropped (epoch ms), for stores that expire documents themselves
 * (`expires`: MongoDB's TTL index). A document keeps the furthest expiry its writes gave it.
 * Other stores ignore it: the usage retention job deletes there.
 */
export interface Expiry {
  expiresAt?: number;
}

export interface RangeOptions {
  prefix?: string;
  /** Inclusive lower bound on the key. */
  gte?: string;
  /** Exclusive upper bound on the key. */
  lt?: string;
  limit?: number;
  reverse?: boolean;
}

/** The reading half of the port, with its own `close`: what a thread that does not write needs. */
export type ReadModelReader = Pick<ReadModelStore, 'get' | 'range' | 'close'>;

export interface ReadModelStore {
  /** True when the store drops documents past their `expiresAt` by itself. */
  readonly expires?: boolean;
  get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null>;
  range<T extends Doc = Doc>(collection: string, options?: RangeOptions): Promise<Array<{ key: string; doc: T }>>;
  /**
   * Applies a projection's writes for events up to `position` together with its checkpoint.
   * Atomic where the store allows; idempotent always: writes for a position at or before the
   * stored checkpoint change nothing.
   */
  commit(projection: string, position: Position, writes: ReadModelWrite[]): Promise<void>;
  checkpoint(projection: string): Promise<Position | null>;
  /** Writes outside any projection (e.g. sessions); not replayed on rebuild. */
  write(writes: ReadModelWrite[]): Promise<void>;
  /** Drops the collections and the projection's checkpoint, for a rebuild. */
  reset(projection: string, collections: string[]): Promise<void>;
  close(): Promise<void>;
}
