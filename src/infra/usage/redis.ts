import type { Redis } from 'ioredis';
import type { UsageRecord } from '../../domain/usage.js';
import { withinDeadline } from '../deadline.js';
import { FAIL_FAST, closeClient, connectRedis, replies, waitForReady } from '../limits/redisConnection.js';
import { type Entry, EntryBuffer } from './buffer.js';
import { DEFAULT_QUEUE_CAPACITY } from './memory.js';
import type { QueuedUsage, UsageQueue } from './port.js';
import { recordFromWire, toWire } from './wire.js';

export interface RedisUsageQueueOptions {
  /** This process's name in the consumer group; a restart under the same name resumes its pending records first. */
  consumer: string;
  stream?: string;
  group?: string;
  /** A record another consumer read but did not acknowledge for this long is claimed (XAUTOCLAIM). */
  claimIdleMs?: number;
  /** Records buffered in memory at most while Redis is away; beyond, dropped and counted. */
  bufferCapacity?: number;
  /** A send is a pipeline of at most this many records (ENTRY_RECORDS to an XADD). */
  flushBatch?: number;
  /** How long an answer waits for its record's XADD at most, when Redis does not reply (default HANDOVER_TIMEOUT_MS). */
  handoverTimeoutMs?: number;
  /** `close` waits this long at most for the buffer to reach Redis. */
  closeTimeoutMs?: number;
}

/**
 * An entry's records: a JSON array (`b`) of `n` records, each a WireRecord. Entries of earlier
 * versions hold one record (`r`), as a JSON object.
 */
const BATCH_FIELD = 'b';
const COUNT_FIELD = 'n';
const SINGLE_FIELD = 'r';
/**
 * Records per stream entry at most. One XADD, and later one XACK and XDEL, per entry instead of
 * per record: per call, the gateway builds and writes a fraction of a Redis command, and Redis
 * runs a fraction of three.
 */
const ENTRY_RECORDS = 100;
/** A read asks for new entries at most this many times. */
const FRESH_READ_ROUNDS = 8;
/** XAUTOCLAIM scans at most this often: claiming is for crashed consumers, not the hot path. */
const CLAIM_SCAN_INTERVAL_MS = 1000;
const RETRY_SEND_MS = 100;
/** A scrape of /metrics must not hang on a stalled Redis: past this, `depth` counts the buffer alone. */
const DEPTH_TIMEOUT_MS = 1000;
/**
 * How long answers wait for their records' XADD when Redis does not reply (stalled): past it
 * they leave, the records stay buffered, and until a send succeeds again answers do not wait.
 * Well above a loaded machine's round trip to Redis, well below a client's patience.
 */
const HANDOVER_TIMEOUT_MS = 250;

type StreamEntry = [id: string, fields: string[] | null];

/**
 * The usage queue on a Redis stream with a consumer group.
 *
 * - `enqueue` pushes to an in-memory buffer, sent at the end of the turn with pipelined XADDs
 *   of up to ENTRY_RECORDS records each (one send under way at a time; what arrives meanwhile
 *   goes right after); `whenHandedOver` calls back once Redis acknowledged them, so a gateway
 *   killed after answering has lost nothing. While Redis is away the buffer keeps up to
 *   `bufferCapacity` records and drains when it is back; answers do not wait meanwhile. A pipeline cut mid-way is re-sent whole from its first
 *   unconfirmed XADD, so a record may reach the stream twice: the ingester's deterministic
 *   event ids absorb that.
 * - Records are handed out and acknowledged one by one, as the port says: a read hands out at
 *   most `max` (the rest of an entry waits for the next read), and an entry is acknowledged
 *   once every record of it was. A consumer that restarts gets its entries again whole.
 * - No MAXLEN trimming (it could drop unacknowledged records): `ack` does XACK then XDEL, so
 *   the stream holds exactly the records not yet acknowledged.
 * - `read` returns, in order: this consumer's own pending records from a previous run, records
 *   idle past `claimIdleMs` in other (crashed) consumers, then new records.
 * - A Redis that comes back empty (restarted without persistence) loses the group: it is
 *   created again on the first NOGROUP.
 */
export class RedisUsageQueue implements UsageQueue {
  private readonly writer: Redis;
  /** Blocking reads get their own connection, so they never delay sends and acks. */
  private readonly reader: Redis;
  private readonly stream: string;
  private readonly group: string;
  private readonly consumer: string;
  private readonly claimIdleMs: number;
  private readonly handoverTimeoutMs: number;
  private readonly flushBatch: number;
  private readonly closeTimeoutMs: number;
  private readonly buffer: EntryBuffer;
  /** Records in the stream and not yet acknowledged (approximate: see depth). Same hash slot as the stream. */
  private readonly countKey: string;
  /** Records of entries read but not yet handed out. */
  private held: QueuedUsage[] = [];
  /** Entries read by this process: their records not yet acknowledged, and whether the count key counts them. */
  private readonly unacked = new Map<string, { left: number; counted: number }>();
  /** The next send, at the end of this turn; or after a failed one, its retry. */
  private nextSend: NodeJS.Immediate | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  /** Records put in the buffer, and of them, in order, those whose XADD Redis acknowledged. */
  private accepted = 0;
  private acknowledged = 0;
  /** Answers waiting for the records enqueued before them (`through`) to be acknowledged; in order. */
  private waiters: Array<{ through: number; done: () => void }> = [];
  /** The last send failed or got no reply in time: answers do not wait until one succeeds. */
  private failing = false;
  private sending: Promise<void> | null = null;
  private ownPendingCursor: string | null = '0';
  private claimCursor = '0-0';
  private lastClaimScan = 0;
  private closed = false;
  /** Set once `close` gave up waiting: nothing is sent any more. */
  private disconnected = false;
  /** Stream entries that were not a valid record: acknowledged and deleted, and counted. */
  malformed = 0;

  constructor(redisUrl: string, options: RedisUsageQueueOptions) {
    this.stream = options.stream ?? 'usage';
    this.group = options.group ?? 'ingester';
    this.consumer = options.consumer;
    this.claimIdleMs = options.claimIdleMs ?? 30_000;
    this.handoverTimeoutMs = options.handoverTimeoutMs ?? HANDOVER_TIMEOUT_MS;
    this.flushBatch = options.flushBatch ?? 500;
    this.closeTimeoutMs = options.closeTimeoutMs ?? 2000;
    this.buffer = new EntryBuffer(options.bufferCapacity ?? DEFAULT_QUEUE_CAPACITY, ENTRY_RECORDS);
    this.countKey = `{${this.stream}}:records`;
    this.writer = connectRedis(redisUrl, FAIL_FAST);
    this.reader = connectRedis(redisUrl, FAIL_FAST);
    this.writer.on('ready', () => {
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.retryTimer = null;
      this.sendSoon();
    });
  }

  /** Records refused because the buffer was full (Redis away too long). */
  get dropped(): number {
    return this.buffer.dropped;
  }

  /** Records waiting in memory to be sent. */
  get buffered(): number {
    return this.buffer.length;
  }

  async whenReady(timeoutMs = 5000): Promise<void> {
    await Promise.all([waitForReady(this.writer, timeoutMs), waitForReady(this.reader, timeoutMs)]);
  }

  enqueue(record: UsageRecord): void {
    if (this.closed) {
      this.buffer.dropped += 1;
      return;
    }
    let serialized: string;
    try {
      serialized = JSON.stringify(toWire(record));
    } catch {
      this.malformed += 1;
      return;
    }
    const dropped = this.buffer.dropped;
    this.buffer.push(serialized);
    if (this.buffer.dropped !== dropped) return;
    this.accepted += 1;
    this.sendSoon();
  }

  /**
   * Once Redis acknowledged the XADD of every record enqueued so far. At once while Redis is
   * away or failing (the records wait in the buffer, lost if the process dies meanwhile): an
   * outage must not stall the answers.
   */
  whenHandedOver(done: () => void): void {
    if (this.acknowledged >= this.accepted || this.failing || this.writer.status !== 'ready') done();
    else this.waiters.push({ through: this.accepted, done });
  }

  /** Answers whose records Redis acknowledged leave; with `all`, every waiting one. */
  private release(all: boolean): void {
    let i = 0;
    while (i < this.waiters.length && (all || (this.waiters[i] as { through: number }).through <= this.acknowledged)) i += 1;
    if (i === 0) return;
    const leaving = this.waiters.slice(0, i);
    this.waiters = this.waiters.slice(i);
    for (const waiter of leaving) waiter.done();
  }

  async flush(): Promise<void> {
    while (this.buffer.length > 0 && !this.disconnected) {
      try {
        await this.send();
      } catch {
        await sleep(RETRY_SEND_MS);
      }
    }
  }

  async read(max: number, blockMs = 0): Promise<QueuedUsage[]> {
    return this.withGroup(async () => {
      const taken = this.held.splice(0, max);
      /** Entries to ask for: at least one, fewer when they are full. */
      const entries = (): number => Math.max(1, Math.ceil((max - taken.length) / ENTRY_RECORDS));
      const take = (records: QueuedUsage[]): void => {
        const room = max - taken.length;
        for (let i = 0; i < records.length; i++) (i < room ? taken : this.held).push(records[i] as QueuedUsage);
      };
      try {
        if (taken.length < max && this.ownPendingCursor !== null) {
          const own = await this.readGroup(entries(), 0, this.ownPendingCursor);
          const last = own.at(-1);
          this.ownPendingCursor = last ? last[0] : null;
          take(await this.accept(own));
        }
        if (taken.length < max) take(await this.claimAbandoned(entries()));
        // New entries, a few rounds while they come full and leave room (entries hold 1 to ENTRY_RECORDS records).
        for (let round = 0; taken.length < max && round < FRESH_READ_ROUNDS; round++) {
          const asked = entries();
          const fresh = await this.readGroup(asked, taken.length === 0 && round === 0 ? blockMs : 0, '>');
          take(await this.accept(fresh));
          if (fresh.length < asked) break;
        }
      } catch (error) {
        // What this read took already (held, or read before the failure) is in this consumer's
        // pending list and nowhere else: handed out by the next read, not dropped with the error.
        this.held = taken.concat(this.held);
        throw error;
      }
      return taken;
    });
  }

  async ack(ackIds: string[]): Promise<void> {
    const done: string[] = [];
    let counted = 0;
    for (const ackId of ackIds) {
      const slash = ackId.lastIndexOf('/');
      const entryId = slash < 0 ? ackId : ackId.slice(0, slash);
      const entry = this.unacked.get(entryId);
      if (entry === undefined) {
        if (slash < 0) done.push(entryId);
        continue;
      }
      entry.left -= 1;
      if (entry.left > 0) continue;
      this.unacked.delete(entryId);
      done.push(entryId);
      counted += entry.counted;
    }
    await this.acknowledge(done, counted);
  }

  /** XACK and XDEL of whole entries, and the count key down by the records they counted. */
  private async acknowledge(entryIds: string[], counted: number): Promise<void> {
    if (entryIds.length === 0) return;
    const sent = [this.writer.xack(this.stream, this.group, ...entryIds), this.writer.xdel(this.stream, ...entryIds)];
    if (counted > 0) sent.push(this.writer.decrby(this.countKey, counted));
    const failed = (await replies(sent)).find(([error]) => error !== null);
    if (failed?.[0]) throw failed[0];
  }

  /**
   * Buffered records plus the records in the stream, which holds only unacknowledged ones
   * (counted as they are added and acknowledged; approximate after a send was cut mid-way,
   * and set back to zero whenever the stream is empty).
   */
  async depth(): Promise<number> {
    try {
      const [lengthReply, countReply] = await withinDeadline(
        replies([this.writer.xlen(this.stream), this.writer.get(this.countKey)]),
        DEPTH_TIMEOUT_MS,
        () => new Error(`usage queue: no reply from Redis within ${DEPTH_TIMEOUT_MS} ms`),
      );
      const failed = lengthReply?.[0] ?? countReply?.[0];
      if (failed) throw failed;
      const length = Number(lengthReply?.[1] ?? 0);
      const count = (countReply?.[1] ?? null) as string | null;
      if (length === 0) {
        if (count !== null && count !== '0') await this.writer.set(this.countKey, 0);
        return this.buffer.length;
      }
      return this.buffer.length + Math.max(Number(count ?? 0), length);
    } catch {
      return this.buffer.length;
    }
  }

  /** Sends what is buffered (waiting at most `closeTimeoutMs` if Redis is away), then disconnects. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.nextSend) clearImmediate(this.nextSend);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.flush(), new Promise((resolve) => (timer = setTimeout(resolve, this.closeTimeoutMs)))]);
    clearTimeout(timer);
    this.disconnected = true;
    // Answers still waiting leave (their records are lost with the process, as after a failed send).
    this.release(true);
    this.reader.disconnect();
    await closeClient(this.writer);
  }

  /**
   * A send at the end of this turn, pipelined, when none is under way: its answers wait for it.
   * What arrives during a send goes with the next one, right after it.
   */
  private sendSoon(): void {
    if (this.nextSend || this.sending || this.retryTimer || this.closed || this.buffer.length === 0) return;
    this.nextSend = setImmediate(this.sendNow);
  }

  private readonly sendNow = (): void => {
    this.nextSend = null;
    this.send().then(
      () => this.sendSoon(),
      () => {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          this.sendSoon();
        }, RETRY_SEND_MS);
      },
    );
  };

  /** One send at a time. */
  private send(): Promise<void> {
    if (this.sending) return this.sending;
    const stalled = setTimeout(this.fail, this.handoverTimeoutMs);
    this.sending = this.sendAll()
      .then(
        () => {
          this.failing = false;
        },
        (error: unknown) => {
          this.fail();
          throw error;
        },
      )
      .finally(() => {
        clearTimeout(stalled);
        this.sending = null;
      });
    return this.sending;
  }

  /** A send failed or got no reply in time: the answers waiting leave, and the next ones do not wait until a send succeeds. */
  private readonly fail = (): void => {
    this.failing = true;
    this.release(true);
  };

  /**
   * Sends what is buffered now, one pipeline at a time. What arrives meanwhile waits for the
   * next send: draining it too, round trip after round trip, made pipelines of a few records
   * each under load.
   */
  private async sendAll(): Promise<void> {
    let left = this.buffer.length;
    while (left > 0) {
      const entries = this.buffer.peek(Math.min(this.flushBatch, left));
      const sending: Array<Promise<unknown>> = [];
      for (const entry of entries) {
        left -= entry.count;
        sending.push(this.writer.xadd(this.stream, '*', COUNT_FIELD, entry.count, BATCH_FIELD, entry.body), this.writer.incrby(this.countKey, entry.count));
      }
      const answered = await replies(sending);
      // Only the unbroken run of confirmed XADDs leaves the buffer; the rest is sent again.
      let confirmed = 0;
      while (confirmed < entries.length && answered[2 * confirmed]?.[0] === null) confirmed += 1;
      for (let i = 0; i < confirmed; i++) this.acknowledged += (entries[i] as Entry).count;
      this.buffer.drop(confirmed);
      this.release(false);
      if (confirmed < entries.length) throw answered[2 * confirmed]?.[0] ?? new Error('usage queue: XADD not confirmed');
    }
  }

  private async readGroup(count: number, blockMs: number, from: string): Promise<StreamEntry[]> {
    const args: (string | number)[] = ['GROUP', this.group, this.consumer, 'COUNT', count];
    if (blockMs > 0) args.push('BLOCK', blockMs);
    args.push('STREAMS', this.stream, from);
    const reply = (await this.reader.call('XREADGROUP', ...args)) as [string, StreamEntry[]][] | null;
    return reply?.[0]?.[1] ?? [];
  }

  /** Takes over records other consumers have held past `claimIdleMs` (they crashed, most likely). */
  private async claimAbandoned(max: number): Promise<QueuedUsage[]> {
    const now = Date.now();
    const interval = Math.min(CLAIM_SCAN_INTERVAL_MS, this.claimIdleMs);
    if (this.claimCursor === '0-0' && now - this.lastClaimScan < interval) return [];
    this.lastClaimScan = now;
    const reply = (await this.writer.call('XAUTOCLAIM', this.stream, this.group, this.consumer, this.claimIdleMs, this.claimCursor, 'COUNT', max)) as [
      string,
      StreamEntry[],
      ...unknown[],
    ];
    this.claimCursor = reply[0];
    return this.accept(reply[1]);
  }

  /**
   * Parses entries into their records, each acknowledged as `<entry id>/<index>`. A record that
   * is not valid is counted and skipped; an entry with none is acknowledged and deleted at once,
   * never retried forever.
   */
  private async accept(entries: StreamEntry[]): Promise<QueuedUsage[]> {
    const accepted: QueuedUsage[] = [];
    const rejected: string[] = [];
    let rejectedCounted = 0;
    for (const [id, fields] of entries) {
      const { records, invalid, counted } = parseEntry(fields);
      this.malformed += invalid;
      if (records.length === 0) {
        rejected.push(id);
        rejectedCounted += counted;
        continue;
      }
      this.unacked.set(id, { left: records.length, counted });
      for (let i = 0; i < records.length; i++) accepted.push({ ackId: `${id}/${i}`, record: records[i] as UsageRecord });
    }
    await this.acknowledge(rejected, rejectedCounted);
    return accepted;
  }

  /** Runs a group command, creating the group first when Redis does not know it. */
  private async withGroup<T>(command: () => Promise<T>): Promise<T> {
    try {
      return await command();
    } catch (error) {
      if (!(error instanceof Error) || !error.message.includes('NOGROUP')) throw error;
      await this.createGroup();
      return command();
    }
  }

  private async createGroup(): Promise<void> {
    try {
      await this.writer.call('XGROUP', 'CREATE', this.stream, this.group, '0', 'MKSTREAM');
    } catch (error) {
      if (!(error instanceof Error) || !error.message.includes('BUSYGROUP')) throw error;
    }
    // A new group has no pending records, of ours or anyone's.
    this.ownPendingCursor = null;
    this.claimCursor = '0-0';
  }
}

const fieldOf = (fields: string[] | null, name: string): string | undefined => {
  const index = fields?.indexOf(name) ?? -1;
  return index >= 0 && index % 2 === 0 ? fields?.[index + 1] : undefined;
};

/** An entry's valid records, how many were not, and how many the count key counts for it (those written with a count). */
function parseEntry(fields: string[] | null): { records: UsageRecord[]; invalid: number; counted: number } {
  const batch = fieldOf(fields, BATCH_FIELD);
  const single = fieldOf(fields, SINGLE_FIELD);
  const counted = Number(fieldOf(fields, COUNT_FIELD) ?? 0) || 0;
  let items: unknown[];
  try {
    if (batch !== undefined) {
      const parsed: unknown = JSON.parse(batch);
      items = Array.isArray(parsed) ? parsed : [parsed];
    } else items = single === undefined ? [undefined] : [JSON.parse(single)];
  } catch {
    return { records: [], invalid: 1, counted };
  }
  const records: UsageRecord[] = [];
  for (const item of items) {
    const record = recordFromWire(item);
    if (record) records.push(record);
  }
  return { records, invalid: items.length - records.length, counted };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
