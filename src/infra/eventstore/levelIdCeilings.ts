/**
 * Per stream, an event id at least as large (in string order) as every id in the stream, so
 * the append plan knows an id above it is new without a lookup. Usage events carry ids in time
 * order (`timeOrderedId`, src/domain/usage.ts), so nearly every id the ingester appends is above its stream's
 * ceiling. The lookups they no longer make were the store's costliest per event: each one that
 * missed charged LevelDB a "seek" on a table, and enough of them compact that table: 282 MB of
 * the index store's compactions for ~450,000 usage events against 86 MB without them
 * (docs/decisions.md, "Usage event ids in time order").
 *
 * A ceiling is learnt once per stream from the id index (its last key: ids sort within their
 * stream) and raised as the store appends. It only has to stay an upper bound, so a ceiling
 * raised by an append that then failed to commit is still right. At most `capacity` streams
 * are remembered; the first learnt is forgotten first, and learnt again when next needed.
 */
export class IdCeilings {
  /** null: learnt, but no ceiling this side can trust (see `learn`). */
  private readonly ceilings = new Map<string, string | null>();

  constructor(private readonly capacity: number) {}

  /** The stream's ceiling ('' for a stream without events), or undefined when there is none to go by. */
  get(streamId: string): string | undefined {
    return this.ceilings.get(streamId) ?? undefined;
  }

  /** Whether the stream's last id was read already (it may not have given a ceiling). */
  knows(streamId: string): boolean {
    return this.ceilings.has(streamId);
  }

  /**
   * Records the stream's largest id as the id index orders it ('' when it holds none). LevelDB
   * orders UTF-8 bytes, JavaScript UTF-16 code units: the two agree below U+D800, so the largest
   * id is a ceiling for `>` only when it has no character from there up; otherwise the stream
   * has no ceiling and its ids are all looked up.
   */
  learn(streamId: string, largestId: string): void {
    if (this.ceilings.size >= this.capacity && !this.ceilings.has(streamId)) {
      const oldest = this.ceilings.keys().next();
      if (!oldest.done) this.ceilings.delete(oldest.value);
    }
    this.ceilings.set(streamId, ORDERS_DIFFER.test(largestId) ? null : largestId);
  }

  /** After an append to a stream with a ceiling: it goes up to `id` if that is larger. */
  raise(streamId: string, id: string): void {
    const ceiling = this.ceilings.get(streamId);
    if (typeof ceiling === 'string' && id > ceiling) this.ceilings.set(streamId, id);
  }
}

/** Characters that UTF-8 byte order and UTF-16 code unit order may place differently. */
const ORDERS_DIFFER = /[\uD800-\uFFFF]/;
