/**
 * Serialized records waiting to be sent, already laid out as the stream entries they will be
 * sent as: each entry one Buffer holding a JSON array of up to `perEntry` records, written as
 * records arrive. A record's bytes live outside V8's heap from its call on: records wait up
 * to a send interval (20 ms), and as strings on the heap each young collection copied them and
 * some were promoted, garbage the old generation then grew by (bench/HISTORY.md).
 *
 * Bounded: beyond `capacity` records, new ones are dropped and counted, so memory stays bounded
 * through a long outage and the count tells the operator how much went unrecorded.
 */
export class EntryBuffer {
  /** Oldest first; the last one may still be open for records. Entries before `head` were sent. */
  private entries: Array<Entry | null> = [];
  private head = 0;
  private records = 0;
  /**
   * Buffers of sent entries, for the next ones: a new Buffer per entry is memory outside the
   * heap that V8 answers with full collections (measured: 0.67 a second at 1,000 calls/s).
   */
  private readonly spare: Buffer[] = [];
  dropped = 0;

  constructor(
    readonly capacity: number,
    private readonly perEntry: number,
  ) {}

  /** Records waiting, in every entry. */
  get length(): number {
    return this.records;
  }

  push(json: string): void {
    if (this.records >= this.capacity) {
      this.dropped += 1;
      return;
    }
    let open = this.entries.length > this.head ? (this.entries[this.entries.length - 1] as Entry) : null;
    if (open === null || open.sealed || open.count >= this.perEntry) {
      open = new Entry(this.spare.pop() ?? Buffer.allocUnsafe(INITIAL_ENTRY_BYTES));
      this.entries.push(open);
    }
    open.append(json);
    this.records += 1;
  }

  /**
   * The oldest entries holding at most `maxRecords` records together (at least one entry),
   * sealed: what arrives from now on goes into a new entry. Left in place until `drop`
   * confirms they were sent.
   */
  peek(maxRecords: number): Entry[] {
    const out: Entry[] = [];
    let records = 0;
    for (let i = this.head; i < this.entries.length; i++) {
      const entry = this.entries[i] as Entry;
      if (out.length > 0 && records + entry.count > maxRecords) break;
      entry.seal();
      out.push(entry);
      records += entry.count;
    }
    return out;
  }

  /** The oldest `count` entries were sent: let them go. */
  drop(count: number): void {
    const end = Math.min(this.head + count, this.entries.length);
    for (let i = this.head; i < end; i++) {
      const entry = this.entries[i] as Entry;
      this.records -= entry.count;
      if (this.spare.length < SPARE_BUFFERS) this.spare.push(entry.release());
      this.entries[i] = null;
    }
    this.head = end;
    if (this.head === this.entries.length) {
      this.entries = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
  }
}

/** Bytes an entry starts with room for: about 100 records of a plain call. */
const INITIAL_ENTRY_BYTES = 32 * 1024;
/** Sent entries' buffers kept for reuse: a send takes up to five entries (500 records). */
const SPARE_BUFFERS = 8;
const OPEN = 0x5b; // [
const SEPARATOR = 0x2c; // ,
const CLOSE = 0x5d; // ]

/** One stream entry's records as a JSON array, in a Buffer of its own (outside V8's heap). */
export class Entry {
  private used = 0;
  count = 0;
  sealed = false;

  constructor(private bytes: Buffer) {}

  /** Its buffer, for another entry once this one was sent. */
  release(): Buffer {
    return this.bytes;
  }

  append(json: string): void {
    // UTF-8 takes at most 3 bytes per UTF-16 unit; one more for the separator and the closing bracket.
    this.reserve(json.length * 3 + 2);
    this.bytes[this.used++] = this.count === 0 ? OPEN : SEPARATOR;
    this.used += this.bytes.write(json, this.used, 'utf8');
    this.count += 1;
  }

  seal(): void {
    if (this.sealed) return;
    this.reserve(1);
    this.bytes[this.used++] = CLOSE;
    this.sealed = true;
  }

  /** The entry's JSON array (sealed entries only). */
  get body(): Buffer {
    return this.bytes.subarray(0, this.used);
  }

  private reserve(more: number): void {
    if (this.used + more <= this.bytes.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.bytes.length * 2, this.used + more));
    this.bytes.copy(grown, 0, 0, this.used);
    this.bytes = grown;
  }
}
