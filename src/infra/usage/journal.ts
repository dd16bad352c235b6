import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { UsageRecord } from '../../domain/usage.js';
import type { UsageSink } from './port.js';
import { recordFromWire, toWire } from './wire.js';

/**
 * The embedded default's usage journal: every record is written to a file before its call is
 * answered, so a process killed (kill -9, a crash, the OOM killer) loses none of what it served.
 * The records of one event-loop turn are written together, with one write at the end of the turn
 * (setImmediate), and the turn's answers leave once it returned: the file is then in the kernel's
 * page cache, which outlives the process. Power loss can still lose what the kernel had not
 * written back yet, unless `fsync` (USAGE_JOURNAL_FSYNC=always) syncs each turn's write.
 *
 * Files are segments, `<n>.ndjson`, one record a line (its wire form, JSON). A segment is sealed
 * once large or old enough, and deleted once every record in it was appended to the event store
 * (a watermark from the queue: `release`). At start every segment left is read back (`open`):
 * its records go to the queue again, idempotently (their event ids derive from the request ids),
 * and the segments are deleted like the others once appended. A line cut short (a write torn by
 * a crash) or not a valid record is skipped and counted, never guessed at.
 */
export interface UsageJournalOptions {
  dir: string;
  /** Sync each turn's write to the disk (survives power loss; a disk flush per turn). */
  fsync?: boolean;
  /** A segment is sealed past this many bytes... */
  segmentBytes?: number;
  /** ...or once its first record is this old (at the next `sealIfOlder`). */
  segmentAgeMs?: number;
}

interface Segment {
  path: string;
  /** The journal's count of records once its last one was written: deletable when the watermark reaches it. */
  end: number;
}

export interface JournalReplay {
  records: UsageRecord[];
  /** Lines that were not a whole, valid record (a torn last write, corruption). */
  skipped: number;
  segments: number;
}

const SEGMENT_BYTES = 4 * 1024 * 1024;
const SEGMENT_AGE_MS = 2000;
const SEGMENT_NAME = /^(\d{16})\.ndjson$/;
const NEWLINE = 0x0a;

export class UsageJournal {
  private fd: number | null = null;
  private openPath = '';
  private openBytes = 0;
  private openedAtMs = 0;
  private nextSegment: number;
  /** Records handed to `append`, replayed ones included: the sequence the queue's watermark counts. */
  private appended = 0;
  /** This turn's lines, written at its end. */
  private pending = '';
  private pendingCount = 0;
  private waiters: Array<() => void> = [];
  private immediate: NodeJS.Immediate | null = null;
  private readonly sealed: Segment[] = [];
  private readonly fsync: boolean;
  private readonly segmentBytes: number;
  private readonly segmentAgeMs: number;
  /** Records whose write failed (a disk error): still queued, but a crash before they are stored loses them. */
  unjournaled = 0;

  private constructor(
    readonly dir: string,
    options: UsageJournalOptions,
    replayed: Segment[],
    count: number,
    nextSegment: number,
    private readonly onError: (error: unknown) => void,
  ) {
    this.fsync = options.fsync ?? false;
    this.segmentBytes = options.segmentBytes ?? SEGMENT_BYTES;
    this.segmentAgeMs = options.segmentAgeMs ?? SEGMENT_AGE_MS;
    this.sealed.push(...replayed);
    this.appended = count;
    this.nextSegment = nextSegment;
  }

  /**
   * Opens the journal in `options.dir` and reads back what a previous run left: those records
   * count as the journal's first ones, so they must reach the queue before any new record.
   */
  static open(options: UsageJournalOptions, onError: (error: unknown) => void = () => {}): { journal: UsageJournal; replay: JournalReplay } {
    mkdirSync(options.dir, { recursive: true });
    const names = readdirSync(options.dir)
      .filter((name) => SEGMENT_NAME.test(name))
      .sort();
    const replay: JournalReplay = { records: [], skipped: 0, segments: names.length };
    const segments: Segment[] = [];
    for (const name of names) {
      const path = join(options.dir, name);
      replay.skipped += readSegment(readFileSync(path), replay.records);
      segments.push({ path, end: replay.records.length });
    }
    const last = names.at(-1);
    const next = last === undefined ? 1 : Number(SEGMENT_NAME.exec(last)?.[1]) + 1;
    return { journal: new UsageJournal(options.dir, options, segments, replay.records.length, next, onError), replay };
  }

  /** Written at the end of this turn; `whenWritten` says when. The record must not change afterwards. */
  append(record: UsageRecord): void {
    this.appended += 1;
    this.pendingCount += 1;
    this.pending += `${JSON.stringify(toWire(record))}\n`;
    this.immediate ??= setImmediate(this.write);
  }

  /** Calls `done` once every record appended so far is written: at once when none is waiting. */
  whenWritten(done: () => void): void {
    if (this.immediate === null) done();
    else this.waiters.push(done);
  }

  /** Writes this turn's records now (at close). */
  flush(): void {
    if (this.immediate === null) return;
    clearImmediate(this.immediate);
    this.write();
  }

  private readonly write = (): void => {
    this.immediate = null;
    const text = this.pending;
    const count = this.pendingCount;
    const waiters = this.waiters;
    this.pending = '';
    this.pendingCount = 0;
    this.waiters = [];
    try {
      const bytes = Buffer.from(text);
      const fd = this.segmentFd();
      for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at);
      if (this.fsync) fsyncSync(fd);
      this.openBytes += bytes.length;
    } catch (error) {
      // Answered anyway: a full or failing disk must not stop the gateway. The records are still
      // queued; only a crash before they are stored loses them.
      this.unjournaled += count;
      this.onError(error);
    }
    for (const done of waiters) done();
    if (this.openBytes >= this.segmentBytes) this.seal();
  };

  private segmentFd(): number {
    if (this.fd !== null) return this.fd;
    this.openPath = join(this.dir, `${String(this.nextSegment++).padStart(16, '0')}.ndjson`);
    this.fd = openSync(this.openPath, 'a');
    this.openBytes = 0;
    this.openedAtMs = Date.now();
    return this.fd;
  }

  /** Seals the open segment when it is older than the segment age, so that it can be deleted once stored. */
  sealIfOlder(nowMs = Date.now()): void {
    if (this.fd !== null && nowMs - this.openedAtMs >= this.segmentAgeMs) this.seal();
  }

  private seal(): void {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    // Records of this turn not yet written belong to the next segment.
    this.sealed.push({ path: this.openPath, end: this.appended - this.pendingCount });
    try {
      closeSync(fd);
    } catch (error) {
      this.onError(error);
    }
  }

  /** Whether a sealed segment waits for its records to be stored. */
  get hasSealed(): boolean {
    return this.sealed.length > 0;
  }

  /** The first `appendedThrough` records are stored: deletes the sealed segments that hold only those. */
  release(appendedThrough: number): void {
    while (this.sealed.length > 0 && (this.sealed[0] as Segment).end <= appendedThrough) {
      const segment = this.sealed.shift() as Segment;
      try {
        unlinkSync(segment.path);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') this.onError(error);
      }
    }
  }

  /** Writes what is pending and closes the open segment (kept for the next start unless released). */
  close(): void {
    this.flush();
    this.seal();
  }
}

/** The valid records of a segment's bytes, appended to `into`; returns how many lines were not one. */
function readSegment(bytes: Buffer, into: UsageRecord[]): number {
  let skipped = 0;
  let start = 0;
  while (start < bytes.length) {
    const end = bytes.indexOf(NEWLINE, start);
    // No newline: the last write was cut short.
    if (end < 0) return skipped + 1;
    const record = parseLine(bytes.toString('utf8', start, end));
    if (record) into.push(record);
    else if (end > start) skipped += 1;
    start = end + 1;
  }
  return skipped;
}

function parseLine(line: string): UsageRecord | null {
  try {
    return recordFromWire(JSON.parse(line));
  } catch {
    return null;
  }
}

/** How often sealed segments are checked against the queue's watermark (and old ones sealed). */
const TIDY_EVERY_MS = 1000;

/**
 * A usage sink whose records are journaled before they are handed to the queue behind it:
 * `whenHandedOver` calls back once they are written. `storedThrough` is the queue's
 * watermark, in the order records were enqueued: how many of them are in the event store.
 */
export class JournaledUsageSink implements UsageSink {
  private readonly timer: NodeJS.Timeout;
  private tidying = false;

  constructor(
    readonly journal: UsageJournal,
    private readonly inner: UsageSink,
    private readonly storedThrough: () => Promise<number>,
    private readonly onError: (error: unknown) => void = () => {},
  ) {
    this.timer = setInterval(() => void this.tidy(), TIDY_EVERY_MS);
    this.timer.unref();
  }

  /** Hands a previous run's records to the queue again (before any new record: the watermark counts them first). */
  replay(records: UsageRecord[]): void {
    for (const record of records) this.inner.enqueue(record);
  }

  enqueue(record: UsageRecord): void {
    this.journal.append(record);
    this.inner.enqueue(record);
  }

  whenHandedOver(done: () => void): void {
    this.journal.whenWritten(done);
  }

  depth(): Promise<number> {
    return this.inner.depth();
  }

  async flush(): Promise<void> {
    this.journal.flush();
    await this.inner.flush();
  }

  /** Seals old segments and deletes those stored. */
  async tidy(): Promise<void> {
    if (this.tidying) return;
    this.tidying = true;
    try {
      this.journal.sealIfOlder();
      if (this.journal.hasSealed) this.journal.release(await this.storedThrough());
    } catch (error) {
      this.onError(error);
    } finally {
      this.tidying = false;
    }
  }

  /** After the ingester drained: what is stored is deleted, the rest stays for the next start. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.journal.close();
    await this.inner.close();
    try {
      this.journal.release(await this.storedThrough());
    } catch (error) {
      this.onError(error);
    }
  }
}

/**
 * The journal in `options.dir` in front of `inner`: what a previous run left is replayed into
 * `inner` first (said on stderr, with the lines skipped), then every new record is journaled.
 */
export function openJournaledSink(
  options: UsageJournalOptions,
  inner: UsageSink,
  appendedThrough: () => Promise<number>,
  log: (message: string) => void = (m) => console.error(m),
): JournaledUsageSink {
  let failures = 0;
  const onError = (error: unknown): void => {
    // A failing disk fails every turn: said once in a while, not thousands of times a second.
    if (failures++ % 1000 === 0) log(`usage journal: ${error instanceof Error ? error.message : String(error)} (${failures} failure(s) so far)`);
  };
  const { journal, replay } = UsageJournal.open(options, onError);
  if (replay.segments > 0) {
    log(
      `usage journal: ${replay.records.length} record(s) from ${replay.segments} segment(s) of a previous run queued again (stored ones are skipped); ${replay.skipped} line(s) skipped, not a whole record`,
    );
  }
  const sink = new JournaledUsageSink(journal, inner, appendedThrough, onError);
  sink.replay(replay.records);
  return sink;
}
