import { type UsageRecord, usageStream } from '../../domain/usage.js';
import {
  encodeUsageBatch,
  MAX_CALLS_PER_EVENT,
  USAGE_BATCH_EVENT_TYPE,
  usageBatchEventId,
  usageCallsThrough,
  usageEventRequestIds,
} from '../../domain/usageBatch.js';
import { withinDeadline } from '../deadline.js';
import type { EventStore } from '../eventstore/port.js';
import { type BatchCodec, ExactlyOnceAppender, type ExactlyOnceOptions } from './exactlyOnce.js';
import type { QueuedUsage, UsageQueue } from './port.js';

export interface UsageIngesterOptions {
  queue: UsageQueue;
  store: EventStore;
  /**
   * Records read at once. Each account's records of a batch become one event, so the more a
   * batch holds, the more calls share an event's fixed bytes (bench/usage-bytes.ts, 200 accounts:
   * 71 B a call with 500, 59 B with 2,000).
   */
  batchSize?: number;
  /** How long one read waits for new records (also bounds how long `stop` waits on an idle queue). */
  readBlockMs?: number;
  /**
   * After a read that did not fill a batch, how long to let more records gather before
   * appending. Every append is an fsync'd write and a projection commit whatever its size:
   * under load, one append per ~100 ms instead of one per handful of calls costs a fraction
   * of the CPU. Usage may lag by that much; the dashboard's bound is 60 s.
   */
  lingerMs?: number;
  /** Serialized size budget of one append; the store refuses 1 MiB, so stay well under. */
  maxAppendBytes?: number;
  /** Backoff after a failed read or append: doubles from `initialMs` up to `maxMs`. */
  backoff?: { initialMs: number; maxMs: number };
  /** Clock tolerance and memory bounds of the exactly-once appends. */
  exactlyOnce?: ExactlyOnceOptions;
  /** Told about every failure (the loop itself never stops on one). */
  onError?: (error: unknown, stage: 'read' | 'append' | 'ack') => void;
}

export interface IngesterStats {
  batches: number;
  /** Records the store acknowledged (an identical batch two ingesters append at once is acknowledged to both). */
  appendedRecords: number;
  /** Records the stream held already (redelivered after a crash or a lost acknowledgement, or queued twice). */
  duplicatesDropped: number;
  /** Appends another ingester got in first (retried after reading what it appended). */
  appendConflicts: number;
  appendFailures: number;
  readFailures: number;
  ackFailures: number;
}

/** Fixed cost of a batch event beyond its calls (stream, id, type, times, its data's keys), for the size budget. */
const EVENT_OVERHEAD_BYTES = 400;

/** What the rest of a process uses of its usage ingester, whether it runs on this thread or on the storage thread. */
export interface Ingester {
  start(): void;
  stop(): Promise<void>;
  /** Resolves once everything enqueued so far is in the store and acknowledged. */
  whenDrained(timeoutMs?: number): Promise<void>;
}

/**
 * Moves usage records from the queue to the event store: reads a batch, appends each
 * account's records to `usage-<accountId>` as one compact `UsageBatchRecorded` event
 * (src/domain/usageBatch.ts) exactly once per request id (ExactlyOnceAppender: a redelivery
 * regroups records, so no event id alone tells what a stream holds), and acknowledges records
 * only after their append succeeded. A failed append is retried with backoff, never
 * acknowledged; a crash leaves records unacknowledged for the queue to hand out again.
 */
export class UsageIngester implements Ingester {
  private readonly queue: UsageQueue;
  private readonly appender: ExactlyOnceAppender<UsageRecord>;
  private readonly batchSize: number;
  private readonly readBlockMs: number;
  private readonly lingerMs: number;
  private readonly maxAppendBytes: number;
  private readonly backoff: { initialMs: number; maxMs: number };
  private readonly onError: (error: unknown, stage: 'read' | 'append' | 'ack') => void;
  private running = false;
  private loop: Promise<void> | null = null;
  private inFlight = false;
  private wakeSleeper: (() => void) | null = null;
  readonly stats: IngesterStats = {
    batches: 0,
    appendedRecords: 0,
    duplicatesDropped: 0,
    appendConflicts: 0,
    appendFailures: 0,
    readFailures: 0,
    ackFailures: 0,
  };

  constructor(options: UsageIngesterOptions) {
    this.queue = options.queue;
    this.appender = new ExactlyOnceAppender(options.store, usageBatchCodec, options.exactlyOnce);
    this.batchSize = options.batchSize ?? 2000;
    this.readBlockMs = options.readBlockMs ?? 250;
    this.lingerMs = options.lingerMs ?? 100;
    this.maxAppendBytes = options.maxAppendBytes ?? 256 * 1024;
    this.backoff = options.backoff ?? { initialMs: 50, maxMs: 5000 };
    this.onError = options.onError ?? (() => {});
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    // Another ingester on this queue may have stopped holding records it could not append.
    this.queue.redeliverHeld();
    this.loop = this.run();
  }

  /**
   * Stops after the batch in flight: its appends finish and are acknowledged. An append that
   * keeps failing is abandoned at its next retry (left unacknowledged, so it is not lost).
   */
  async stop(): Promise<void> {
    this.running = false;
    this.wakeSleeper?.();
    await this.loop;
    this.loop = null;
  }

  /** Resolves once everything enqueued so far is in the store and acknowledged (tests, graceful shutdown). */
  async whenDrained(timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    await withinDeadline(this.queue.flush(), deadline - Date.now(), () => new Error('usage queue flush: not done in time'));
    while ((await this.queue.depth()) > 0 || this.inFlight) {
      if (Date.now() > deadline) throw new Error(`usage ingester: queue not drained after ${timeoutMs} ms`);
      await sleep(20);
    }
  }

  private async run(): Promise<void> {
    let delay = this.backoff.initialMs;
    while (this.running) {
      let batch: QueuedUsage[];
      try {
        batch = await this.queue.read(this.batchSize, this.readBlockMs);
        delay = this.backoff.initialMs;
      } catch (error) {
        this.stats.readFailures += 1;
        this.onError(error, 'read');
        await this.pause(delay);
        delay = Math.min(delay * 2, this.backoff.maxMs);
        continue;
      }
      if (batch.length === 0) continue;
      if (batch.length < this.batchSize && this.lingerMs > 0) batch = await this.topUp(batch);
      this.inFlight = true;
      try {
        await this.ingest(batch);
        this.stats.batches += 1;
      } finally {
        this.inFlight = false;
      }
    }
  }

  /**
   * Each account's records go to its own stream, in order; the accounts' appends go together,
   * so that the store can write them in one commit (one synced write for the batch, not one per
   * account: with calls of 200 accounts in a batch, appending them one after the other kept the
   * embedded store to ~7,000 records a second).
   */
  private async ingest(batch: QueuedUsage[]): Promise<void> {
    await Promise.all(Array.from(groupByAccount(batch), ([accountId, items]) => this.ingestAccount(accountId, items)));
  }

  private async ingestAccount(accountId: string, items: QueuedUsage[]): Promise<void> {
    for (const chunk of chunkBySize(items, this.maxAppendBytes, MAX_CALLS_PER_EVENT)) {
      if (!(await this.appendWithRetry(accountId, chunk))) return;
      try {
        await this.queue.ack(chunk.map((item) => item.ackId));
      } catch (error) {
        // Appended but not acknowledged: handed out again later, and the append is then a no-op.
        this.stats.ackFailures += 1;
        this.onError(error, 'ack');
      }
    }
  }

  /** What arrives within `lingerMs` joins the batch (records already read stay held whatever happens). */
  private async topUp(batch: QueuedUsage[]): Promise<QueuedUsage[]> {
    await this.pause(this.lingerMs);
    try {
      const more = await this.queue.read(this.batchSize - batch.length, 0);
      return more.length === 0 ? batch : batch.concat(more);
    } catch (error) {
      this.stats.readFailures += 1;
      this.onError(error, 'read');
      return batch;
    }
  }

  /** True once appended; false when stopping gave up on it (left unacknowledged). */
  private async appendWithRetry(accountId: string, chunk: QueuedUsage[]): Promise<boolean> {
    const records = distinctRecords(chunk);
    const [since, until] = timeSpan(records);
    let delay = this.backoff.initialMs;
    for (;;) {
      try {
        const outcome = await this.appender.append(usageStream(accountId), records, since, until);
        this.stats.duplicatesDropped += chunk.length - records.length;
        this.stats.appendedRecords += outcome.appended;
        this.stats.duplicatesDropped += outcome.duplicates;
        this.stats.appendConflicts += outcome.conflicts;
        return true;
      } catch (error) {
        this.stats.appendFailures += 1;
        this.onError(error, 'append');
        if (!this.running) return false;
        await this.pause(delay);
        delay = Math.min(delay * 2, this.backoff.maxMs);
      }
    }
  }

  /** A backoff that `stop` cuts short. */
  private async pause(ms: number): Promise<void> {
    if (!this.running) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.wakeSleeper = done;
    });
    this.wakeSleeper = null;
  }
}

function groupByAccount(batch: QueuedUsage[]): Map<string, QueuedUsage[]> {
  const groups = new Map<string, QueuedUsage[]>();
  for (const item of batch) {
    const group = groups.get(item.record.accountId);
    if (group) group.push(item);
    else groups.set(item.record.accountId, [item]);
  }
  return groups;
}

/**
 * Splits one account's records so each append's serialized size stays within `maxBytes` (as
 * `BatchBytesBound` counts it) and its calls within `maxCalls`.
 */
export function chunkBySize(items: QueuedUsage[], maxBytes: number, maxCalls = Number.POSITIVE_INFINITY): QueuedUsage[][] {
  const chunks: QueuedUsage[][] = [];
  let current: QueuedUsage[] = [];
  let bound = new BatchBytesBound();
  for (const item of items) {
    bound.add(item.record);
    if (current.length > 0 && (bound.bytes > maxBytes || current.length >= maxCalls)) {
      chunks.push(current);
      current = [];
      bound = new BatchBytesBound();
      bound.add(item.record);
    }
    current.push(item);
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

/** Characters JSON escapes (or encodes in more than one UTF-8 byte). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it looks for
const NOT_PLAIN = /[\u0000-\u001f"\\\u007f-\uffff]/;

/** Serialized size of a string: exact for plain ASCII (nearly always), measured otherwise. */
const jsonStringBytes = (s: string | null): number => (s === null ? 4 : NOT_PLAIN.test(s) ? Buffer.byteLength(JSON.stringify(s)) : s.length + 2);

/** A call's numbers in a batch event at most: an index or a difference in each column, and its odd latencies, with their commas. */
const CALL_NUMBERS_BYTES = 160;
/** A shape's numbers and punctuation besides its strings. */
const SHAPE_FRAME_BYTES = 80;

/**
 * An upper bound of a compact batch event's JSON (src/domain/usageBatch.ts) as calls are added,
 * without encoding it: each call's numbers, its request id and time whole (they are stored as
 * differences unless odd), and the strings of its shape and its client IP the first time the
 * batch meets them (dictionaries hold each once). About 130 B a call of the gateway's records
 * against ~580 B of their JSON: one append carries ~2,000 calls, not ~450.
 */
export class BatchBytesBound {
  private readonly shapes = new Set<string>();
  private readonly ips = new Set<string>();
  /** The bound so far, with the event's envelope. */
  bytes = EVENT_OVERHEAD_BYTES;

  add(r: UsageRecord): void {
    let added = CALL_NUMBERS_BYTES + jsonStringBytes(r.requestId) + jsonStringBytes(r.at);
    if (!this.ips.has(r.clientIp)) {
      this.ips.add(r.clientIp);
      added += jsonStringBytes(r.clientIp);
    }
    // Lengths first: no two shapes read alike, whatever their strings hold.
    const strings = [r.tokenId, r.chain, r.method, r.errorMessage ?? '\u0000null', r.upstream ?? '\u0000null', r.cache ?? ''];
    const shape = `${strings.map((x) => `${x.length}:${x}`).join('')}${r.status}/${r.rpcErrorCode}/${r.retentionDays}/${r.charged}`;
    if (!this.shapes.has(shape)) {
      this.shapes.add(shape);
      added +=
        SHAPE_FRAME_BYTES +
        jsonStringBytes(r.tokenId) +
        jsonStringBytes(r.chain) +
        jsonStringBytes(r.method) +
        jsonStringBytes(r.errorMessage) +
        jsonStringBytes(r.upstream);
    }
    this.bytes += added;
  }
}

/** A chunk's records, a record queued twice (a re-sent XADD) once. */
function distinctRecords(chunk: QueuedUsage[]): UsageRecord[] {
  const seen = new Set<string>();
  const records: UsageRecord[] = [];
  for (const { record } of chunk) {
    if (seen.has(record.requestId)) continue;
    seen.add(record.requestId);
    records.push(record);
  }
  return records;
}

/** Usage records as the appender batches them: keyed by request id, one compact event per append. */
export const usageBatchCodec: BatchCodec<UsageRecord> = {
  keyOf: (record) => record.requestId,
  eventOf: (records, callsBefore) => ({
    id: usageBatchEventId(records),
    type: USAGE_BATCH_EVENT_TYPE,
    data: encodeUsageBatch((records[0] as UsageRecord).accountId, records, callsBefore),
  }),
  keysOf: usageEventRequestIds,
  // A last event that does not say (not a usage event, or gone): numbers past any its stream could have used.
  itemsThrough: (stored, revision) => (stored === undefined ? null : usageCallsThrough(stored)) ?? (revision + 1) * MAX_CALLS_PER_EVENT,
};

/** The earliest and latest `at` of the records (ms); NaN when one is not a time. */
function timeSpan(records: UsageRecord[]): [number, number] {
  let oldest = Number.POSITIVE_INFINITY;
  let newest = Number.NEGATIVE_INFINITY;
  for (const record of records) {
    const at = Date.parse(record.at);
    oldest = Math.min(oldest, at);
    newest = Math.max(newest, at);
  }
  return [oldest, newest];
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
