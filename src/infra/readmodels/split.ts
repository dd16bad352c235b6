import type { Position } from '../eventstore/port.js';
import { ReadModelError } from './errors.js';
import type { Doc, RangeOptions, ReadModelReader, ReadModelStore, ReadModelWrite } from './port.js';

/** Moved per write while documents of a store of their own are taken out of the main one. */
const MOVE_BATCH = 1000;

/**
 * Reads of read models kept in two stores: the collections `own` picks from `rows`, the rest from
 * `main`. Alone, another thread's view of a split store's two directories (see
 * LevelReadModelStore.reader); SplitReadModelStore writes too.
 */
export class SplitReadModelReader<S extends ReadModelReader = ReadModelReader> implements ReadModelReader {
  constructor(
    protected readonly main: S,
    protected readonly rows: S,
    protected readonly own: (collection: string) => boolean,
  ) {}

  get<T extends Doc = Doc>(collection: string, key: string): Promise<T | null> {
    return this.storeOf(collection).get<T>(collection, key);
  }

  range<T extends Doc = Doc>(collection: string, options?: RangeOptions): Promise<Array<{ key: string; doc: T }>> {
    return this.storeOf(collection).range<T>(collection, options);
  }

  async close(): Promise<void> {
    await Promise.all([this.main.close(), this.rows.close()]);
  }

  protected storeOf(collection: string): S {
    return this.own(collection) ? this.rows : this.main;
  }
}

/**
 * Read models kept in two stores: the collections `own` picks in a store of their own (`rows`),
 * the rest, with every checkpoint, in `main`. The embedded default keeps its raw rows there
 * (docs/decisions.md): LevelDB compacts a table written from memory together with every older
 * table whose keys lie between its first and last key, and in one store each commit's tables
 * spanned the roll-ups, totals and checkpoints on both sides of the raw rows, so every older
 * row was rewritten again and again. Alone, an account's rows only grow at the end of its keys.
 *
 * A commit writes its `own` documents first, then the rest with the checkpoint: a crash between
 * the two leaves documents that replaying the same events writes again, the same. So `own`
 * collections take only writes that give the same document when applied twice (put, merge,
 * delete); an `inc` there is refused.
 */
export class SplitReadModelStore extends SplitReadModelReader<ReadModelStore> implements ReadModelStore {
  readonly expires?: boolean;

  constructor(main: ReadModelStore, rows: ReadModelStore, own: (collection: string) => boolean) {
    super(main, rows, own);
    this.expires = main.expires;
  }

  /**
   * Moves whatever documents of `ownCollections` (those `own` picks that may hold documents) the
   * main store still holds (a store made before they had one of their own, or a move a crash cut
   * short) into `rows`, then answers the split store.
   */
  static async open(
    main: ReadModelStore,
    rows: ReadModelStore,
    own: (collection: string) => boolean,
    ownCollections: readonly string[],
  ): Promise<SplitReadModelStore> {
    for (const collection of ownCollections) {
      for (;;) {
        const docs = await main.range(collection, { limit: MOVE_BATCH });
        if (docs.length === 0) break;
        // Copied before they are deleted: an interrupted move is taken up again at the next open.
        await rows.write(docs.map(({ key, doc }) => ({ op: 'put', collection, key, doc })));
        await main.write(docs.map(({ key }) => ({ op: 'delete', collection, key })));
      }
    }
    return new SplitReadModelStore(main, rows, own);
  }

  async commit(projection: string, position: Position, writes: ReadModelWrite[]): Promise<void> {
    const [rows, rest] = this.split(writes);
    if (rows.length > 0) {
      const stored = await this.main.checkpoint(projection);
      if (stored !== null && stored >= position) return;
      await this.rows.write(rows);
    }
    await this.main.commit(projection, position, rest);
  }

  checkpoint(projection: string): Promise<Position | null> {
    return this.main.checkpoint(projection);
  }

  async write(writes: ReadModelWrite[]): Promise<void> {
    const [rows, rest] = this.split(writes);
    if (rows.length > 0) await this.rows.write(rows);
    if (rest.length > 0) await this.main.write(rest);
  }

  async reset(projection: string, collections: string[]): Promise<void> {
    // The main store first: it drops the checkpoint before anything else, so a reset cut short is a rebuild from the start.
    await this.main.reset(
      projection,
      collections.filter((c) => !this.own(c)),
    );
    const own = collections.filter((c) => this.own(c));
    if (own.length > 0) await this.rows.reset(projection, own);
  }

  /** The writes to `own` collections, and the rest. */
  private split(writes: ReadModelWrite[]): [ReadModelWrite[], ReadModelWrite[]] {
    const rows: ReadModelWrite[] = [];
    for (const w of writes) {
      if (!this.own(w.collection)) continue;
      if (w.op === 'inc') throw new ReadModelError('not_idempotent', `${w.collection} is kept apart from the checkpoints: an inc there could count twice`);
      rows.push(w);
    }
    return rows.length === 0 ? [rows, writes] : [rows, writes.filter((w) => !this.own(w.collection))];
  }
}
