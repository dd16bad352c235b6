/**
 * Per stream, an event id at least as large (in string order) as every id in the stream, so
 * the append plan knows an id above it is new without a lookup. Usage events carry ids in time
 * order (src/domain/usage.ts), so nearly every id the ingester appends is above its stream's
 * ceiling. The lookups they no longer make were the store's costliest per event: each one that
 * missed charged LevelDB a "seek" on a table, and enough of them compact that table: 467 MB of
 * the index store's compactions for ~500,000 usage events against 135 MB without them
 * (docs/decisions.md, "Usage event ids in time order").
 *
 * A ceiling is learnt once per stream from the id index (its last key: ids sort within their
 * stream) and raised as the store appends. It only has to stay an upper bound, so a ceiling
 * raised by an append that then failed to commit is still right. At most `capacity` streams
 * are remembered; the first learnt is forgotten first, and learnt again when next needed.
 */
export class IdCeilings {
  private readonly ceilings = new Map<string, string>();

  constructor(private readonly capacity: number) {}

  /** The stream's ceiling ('' for a stream without events), or undefined when not known yet. */
  get(streamId: string): string | undefined {
    return this.ceilings.get(streamId);
  }

  /** Records what the id index says is the stream's largest id ('' when it holds none). */
  learn(streamId: string, largestId: string): void {
    if (this.ceilings.size >= this.capacity && !this.ceilings.has(streamId)) {
      const oldest = this.ceilings.keys().next();
      if (!oldest.done) this.ceilings.delete(oldest.value);
    }
    this.ceilings.set(streamId, largestId);
  }

  /** After an append to a known stream: its ceiling goes up to `id` if that is larger. */
  raise(streamId: string, id: string): void {
    const ceiling = this.ceilings.get(streamId);
    if (ceiling !== undefined && id > ceiling) this.ceilings.set(streamId, id);
  }
}
