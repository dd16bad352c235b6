/**
 * A push-to-pull bridge: a producer pushes items, then ends or fails; one consumer pulls them
 * with `next()` (items pushed before an end or a failure are still delivered first).
 * `onFull` / `onDrained` let the producer pause while the consumer is behind.
 */
export class AsyncQueue<T> implements AsyncIterator<T> {
  private readonly items: T[] = [];
  private pending: { resolve: (result: IteratorResult<T>) => void; reject: (error: unknown) => void } | undefined;
  private state: 'open' | 'ended' | { error: unknown } = 'open';
  private full = false;

  constructor(
    private readonly highWater: number,
    private readonly onFull: () => void,
    private readonly onDrained: () => void,
  ) {}

  push(item: T): void {
    if (this.state !== 'open') return;
    const pending = this.pending;
    if (pending) {
      this.pending = undefined;
      pending.resolve({ value: item, done: false });
      return;
    }
    this.items.push(item);
    if (!this.full && this.items.length >= this.highWater) {
      this.full = true;
      this.onFull();
    }
  }

  /** No more items; with `discard`, the ones not yet pulled are dropped too. */
  end(options: { discard?: boolean } = {}): void {
    if (options.discard) this.items.length = 0;
    if (this.state !== 'open') return;
    this.state = 'ended';
    const pending = this.pending;
    this.pending = undefined;
    pending?.resolve({ value: undefined, done: true });
  }

  fail(error: unknown): void {
    if (this.state !== 'open') return;
    this.state = { error };
    const pending = this.pending;
    this.pending = undefined;
    pending?.reject(error);
  }

  next(): Promise<IteratorResult<T>> {
    if (this.items.length > 0) {
      const value = this.items.shift() as T;
      if (this.full && this.items.length <= this.highWater / 2) {
        this.full = false;
        this.onDrained();
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.state === 'ended') return Promise.resolve({ value: undefined, done: true });
    if (this.state !== 'open') return Promise.reject(this.state.error);
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
    });
  }
}
