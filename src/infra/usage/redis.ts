import type { Redis } from 'ioredis';
import { UsageRecord } from '../../domain/usage.js';
import { FAIL_FAST, closeClient, connectRedis, waitForReady } from '../limits/redisConnection.js';
import { SendBuffer } from './buffer.js';
import { DEFAULT_QUEUE_CAPACITY } from './memory.js';
import type { QueuedUsage, UsageQueue } from './port.js';

export interface RedisUsageQueueOptions {
  /** This process's name in the consumer group; a restart under the same name resumes its pending records first. */
  consumer: string;
  stream?: string;
  group?: string;
  /** A record another consumer read but did not acknowledge for this long is claimed (XAUTOCLAIM). */
  claimIdleMs?: number;
  /** Records buffered in memory at most while Redis is away; beyond, dropped and counted. */
  bufferCapacity?: number;
  /** The buffer is sent this often... */
  flushIntervalMs?: number;
  /** ...in pipelines of at most this many XADDs. */
  flushBatch?: number;
  /** `close` waits this long at most for the buffer to reach Redis. */
  closeTimeoutMs?: number;
}

const FIELD = 'r';
/** XAUTOCLAIM scans at most this often: claiming is for crashed consumers, not the hot path. */
const CLAIM_SCAN_INTERVAL_MS = 1000;
const RETRY_SEND_MS = 100;

type StreamEntry = [id: string, fields: string[] | null];

/**
 * The usage queue on a Redis stream with a consumer group.
 *
 * - `enqueue` only pushes to an in-memory buffer; a timer sends it with pipelined XADDs.
 *   While Redis is away the buffer keeps up to `bufferCapacity` records and drains when it
 *   is back. A pipeline cut mid-way is re-sent whole from its first unconfirmed XADD, so a
 *   record may reach the stream twice: the ingester's deterministic event ids absorb that.
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
  private readonly flushIntervalMs: number;
  private readonly flushBatch: number;
  private readonly closeTimeoutMs: number;
  private readonly buffer: SendBuffer;
  private flushTimer: NodeJS.Timeout | null = null;
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
    this.flushIntervalMs = options.flushIntervalMs ?? 5;
    this.flushBatch = options.flushBatch ?? 500;
    this.closeTimeoutMs = options.closeTimeoutMs ?? 2000;
    this.buffer = new SendBuffer(options.bufferCapacity ?? DEFAULT_QUEUE_CAPACITY);
    this.writer = connectRedis(redisUrl, FAIL_FAST);
    this.reader = connectRedis(redisUrl, FAIL_FAST);
    this.writer.on('ready', () => this.scheduleSend(0));
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
      serialized = JSON.stringify(record);
    } catch {
      this.malformed += 1;
      return;
    }
    this.buffer.push(serialized);
    this.scheduleSend(this.flushIntervalMs);
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
      const taken: QueuedUsage[] = [];
      if (this.ownPendingCursor !== null) {
        const own = await this.readGroup(max, 0, this.ownPendingCursor);
        const last = own.at(-1);
        this.ownPendingCursor = last ? last[0] : null;
        taken.push(...(await this.accept(own)));
      }
      if (taken.length < max) taken.push(...(await this.claimAbandoned(max - taken.length)));
      if (taken.length < max) {
        const fresh = await this.readGroup(max - taken.length, taken.length === 0 ? blockMs : 0, '>');
        taken.push(...(await this.accept(fresh)));
      }
      return taken;
    });
  }

  async ack(ackIds: string[]): Promise<void> {
    if (ackIds.length === 0) return;
    const replies = await this.writer
      .pipeline()
      .xack(this.stream, this.group, ...ackIds)
      .xdel(this.stream, ...ackIds)
      .exec();
    const failed = replies?.find(([error]) => error !== null);
    if (failed?.[0]) throw failed[0];
  }

  /** Buffered records plus the stream's length (which holds only unacknowledged records). */
  async depth(): Promise<number> {
    try {
      return this.buffer.length + (await this.writer.xlen(this.stream));
    } catch {
      return this.buffer.length;
    }
  }

  /** Sends what is buffered (waiting at most `closeTimeoutMs` if Redis is away), then disconnects. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.flushTimer) clearTimeout(this.flushTimer);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.flush(), new Promise((resolve) => (timer = setTimeout(resolve, this.closeTimeoutMs)))]);
    clearTimeout(timer);
    this.disconnected = true;
    this.reader.disconnect();
    await closeClient(this.writer);
  }

  private scheduleSend(delayMs: number): void {
    if (this.flushTimer || this.closed || this.buffer.length === 0) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = null;
      this.send().then(
        () => this.scheduleSend(0),
        () => this.scheduleSend(RETRY_SEND_MS),
      );
    }, delayMs);
  }

  /** Sends the whole buffer, one pipeline at a time; one send at a time. */
  private send(): Promise<void> {
    this.sending ??= this.sendAll().finally(() => {
      this.sending = null;
    });
    return this.sending;
  }

  private async sendAll(): Promise<void> {
    while (this.buffer.length > 0) {
      const batch = this.buffer.peek(this.flushBatch);
      const pipeline = this.writer.pipeline();
      for (const item of batch) pipeline.xadd(this.stream, '*', FIELD, item);
      const replies = (await pipeline.exec()) ?? [];
      // Only the unbroken run of confirmed XADDs leaves the buffer; the rest is sent again.
      let confirmed = 0;
      while (confirmed < batch.length && replies[confirmed]?.[0] === null) confirmed += 1;
      this.buffer.drop(confirmed);
      if (confirmed < batch.length) throw replies[confirmed]?.[0] ?? new Error('usage queue: XADD not confirmed');
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

  /** Parses entries; one that is not a valid record is acknowledged and deleted, never retried forever. */
  private async accept(entries: StreamEntry[]): Promise<QueuedUsage[]> {
    const accepted: QueuedUsage[] = [];
    const rejected: string[] = [];
    for (const [id, fields] of entries) {
      const record = parseRecord(fields);
      if (record) accepted.push({ ackId: id, record });
      else rejected.push(id);
    }
    if (rejected.length > 0) {
      this.malformed += rejected.length;
      await this.ack(rejected);
    }
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

function parseRecord(fields: string[] | null): UsageRecord | null {
  const index = fields?.indexOf(FIELD) ?? -1;
  const raw = index >= 0 ? fields?.[index + 1] : undefined;
  if (raw === undefined) return null;
  try {
    const parsed = UsageRecord.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
