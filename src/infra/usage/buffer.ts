/**
 * A bounded FIFO of serialized records waiting to be sent, with O(1) amortized removal from the
 * front (a plain `shift`/`splice` would copy up to a million entries on every send).
 * Beyond `capacity`, new items are dropped and counted: memory stays bounded through a long
 * outage, and the count tells the operator how much went unrecorded.
 */
export class SendBuffer {
  private items: string[] = [];
  private head = 0;
  dropped = 0;

  constructor(readonly capacity: number) {}

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: string): void {
    if (this.length >= this.capacity) {
      this.dropped += 1;
      return;
    }
    this.items.push(item);
  }

  /** The oldest `max` items, left in place until `drop` confirms they were sent. */
  peek(max: number): string[] {
    return this.items.slice(this.head, this.head + max);
  }

  drop(count: number): void {
    const end = Math.min(this.head + count, this.items.length);
    // Sent items are let go at once: left in the array until it is compacted (up to thousands
    // of records under steady traffic), each would outlive a few young-generation GCs and be
    // copied into the old generation, lengthening every scavenge pause.
    for (let i = this.head; i < end; i++) this.items[i] = '';
    this.head = end;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head > 4096 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}
