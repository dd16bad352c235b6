import { Cluster, type Redis } from 'ioredis';
import type { UsageRecord } from '../../domain/usage.js';
import { withinDeadline } from '../deadline.js';
import { closeClient, FAIL_FAST, keySlot, parseRedisUrl, type RedisClient, type Reply, redisClient, replies, waitForReady } from '../redis/client.js';
import { type Entry, EntryBuffer } from './buffer.js';
import { DEFAULT_QUEUE_CAPACITY } from './memory.js';
import type { QueuedUsage, UsageQueue } from './port.js';
import { recordFromWire, toWire } from './wire.js';

export interface RedisUsageQueueOptions {
  /** This process's name in the consumer group; a restart under the same name resumes its pending records first. */
  consumer: string;
  /** The stream's name; with several `streams`, the prefix of theirs (`<stream>:{<i>}`). */
  stream?: string;
  /** How many streams the records are spread over, by account (DEFAULT_STREAMS). Every process must use the same number. */
  streams?: number;
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
  /** Where a loss is told, one line each time (stderr by default): records dropped, a stream's group gone, replicas short. */
  log?: (message: string) => void;
  /**
   * Replicas that must have a send's records before its answers leave (REDIS_USAGE_WAIT_REPLICAS):
   * after each send's XADDs, `WAIT <n> <replicaWaitMs>` on the connection that carried them, to
   * each master written. 0 (default): answers leave on the master's acknowledgement, no WAIT sent.
   */
  waitReplicas?: number;
  /** How long such a WAIT waits at most (REDIS_USAGE_WAIT_MS, default REPLICA_WAIT_MS); short of replicas by then, the answers leave all the same. */
  replicaWaitMs?: number;
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
/**
 * A failed send is tried again after RETRY_SEND_MS, doubling up to MAX_RETRY_SEND_MS while sends
 * keep failing, and while failing a send carries one entry per stream until one is taken: a
 * Redis that refuses writes (OOM, READONLY, MISCONF…) was sent up to `flushBatch` records per
 * stream ten times a second (5 s of OOM with 2,000 records buffered: 250 XADDs refused, 3.0 MB
 * sent to a Redis short of memory).
 */
const RETRY_SEND_MS = 100;
const MAX_RETRY_SEND_MS = 1000;
/** A scrape of /metrics must not hang on a stalled Redis: past this, `depth` counts the buffer alone. */
const DEPTH_TIMEOUT_MS = 1000;
/**
 * How long answers wait for their records' XADD when Redis does not reply (stalled): past it
 * they leave, the records stay buffered, and until a send succeeds again answers do not wait.
 * Well above a loaded machine's round trip to Redis, well below a client's patience.
 */
const HANDOVER_TIMEOUT_MS = 250;
/**
 * How long a WAIT for replicas waits at most when none is given: a replica's acknowledgement takes
 * a round trip between master and replica (well under a millisecond on one machine, a few across
 * zones); this is for a replica lagging behind a burst, not a dead one.
 */
export const REPLICA_WAIT_MS = 100;
/**
 * A master whose replicas fell short of a WAIT is asked again this often, not after every send:
 * meanwhile its answers leave on the master's acknowledgement (counted), instead of each waiting
 * `replicaWaitMs` for replicas that are gone.
 */
const SHORT_REPLICAS_RETRY_MS = 1000;

type StreamEntry = [id: string, fields: string[] | null];

/** Streams the records are spread over when `streams` is not given: one on one Redis, 16 on a cluster (about five per master of three). */
const DEFAULT_STREAMS = { single: 1, cluster: 16 } as const;
/** While nothing comes, a blocking read waits on each stream in turn for this long divided among them: a record in any waits about this long at most. */
const BLOCK_ROUND_MS = 200;
const MIN_BLOCK_SLICE_MS = 5;
/** How often a stream of an earlier version that is not there is looked for again. */
const LEGACY_CHECK_MS = 1000;

/**
 * The stream a record goes to: a hash of its account (FNV-1a), so one account's records keep
 * their order in one stream and the ingester appends them as they came.
 */
export function streamIndexOf(accountId: string, streams: number): number {
  if (streams === 1) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < accountId.length; i++) hash = Math.imul(hash ^ accountId.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % streams;
}

/** Sequence numbers of the records in a buffer, oldest first: which answers may leave once a stream's sends are confirmed. */
class Sequence {
  private items: number[] = [];
  private head = 0;

  push(n: number): void {
    this.items.push(n);
  }

  /** The oldest, or Infinity when none waits. */
  first(): number {
    return this.head < this.items.length ? (this.items[this.head] as number) : Number.POSITIVE_INFINITY;
  }

  drop(count: number): void {
    this.head = Math.min(this.head + count, this.items.length);
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}

/** One stream with its consumer group, and what this process sends to it and reads from it. */
interface Shard {
  index: number;
  stream: string;
  /** The stream's cluster slot: its WAIT goes to that slot's master. */
  slot: number;
  /** Records in the stream and not yet acknowledged (approximate: see depth). Same hash slot as the stream. */
  countKey: string;
  /** Null for a stream an earlier version wrote (`usage` before there were several): read until empty, never written. */
  buffer: EntryBuffer | null;
  /** The sequence number of each record in `buffer`. */
  sequence: Sequence;
  ownPendingCursor: string | null;
  claimCursor: string;
  lastClaimScan: number;
  /** For the earlier version's stream: whether it was there when last looked for, and when that was. */
  present: boolean;
  checkedAt: number;
  /** Its consumer group was there (read through, or made) in this process's life: a NOGROUP now means Redis lost it. */
  grouped: boolean;
}

/** A WAIT sent to one master after a send's XADDs there: its streams, and its reply (null: not asked, the master is short of replicas). */
interface ReplicaWait {
  master: string;
  shards: Shard[];
  reply: Promise<Reply> | null;
}

const NOT_ASKED: Promise<Reply> = Promise.resolve([null, null]);

/**
 * XACK, XDEL and the count key down, as one: sent as three commands, a master restarting between
 * them kept entries acknowledged but not deleted, read by no one again and counted in the depth
 * for good (the ingester never drained). KEYS: stream, count key; ARGV: group, records counted,
 * entry ids (in slices: Lua's unpack takes a few thousand at most).
 */
const ACK_LUA = `
local group = ARGV[1]
local counted = tonumber(ARGV[2])
local i = 3
while i <= #ARGV do
  local last = math.min(i + 499, #ARGV)
  redis.call('XACK', KEYS[1], group, unpack(ARGV, i, last))
  redis.call('XDEL', KEYS[1], unpack(ARGV, i, last))
  i = last + 1
end
if counted > 0 then redis.call('DECRBY', KEYS[2], counted) end
return 1
`;

/** The ack script, as ioredis adds it to a client at run time (untyped). */
interface AckCommand {
  usageAck(stream: string, countKey: string, group: string, counted: number, ...entryIds: string[]): Promise<unknown>;
}

/**
 * The usage queue on Redis streams with a consumer group each.
 *
 * - Records are spread over `streams` streams by account (`<stream>:{<i>}`, each its own hash tag,
 *   so on a cluster they spread over the masters while each lives in one slot); with one, the
 *   stream is `<stream>` itself, as before there were several. With several, `<stream>` is still
 *   read until empty: records an earlier version (or a gateway not yet upgraded) left there.
 * - `enqueue` pushes to an in-memory buffer per stream, sent at the end of the turn with XADDs
 *   of up to ENTRY_RECORDS records each (one send under way at a time, to every stream at once;
 *   what arrives meanwhile goes right after); `whenHandedOver` calls back once Redis acknowledged
 *   every record enqueued before, whatever its stream, so a gateway killed after answering has
 *   lost nothing. While Redis is away the buffers keep up to `bufferCapacity` records in all
 *   and drain when it is back; answers do not wait meanwhile. A send cut mid-way is re-sent from
 *   each stream's first unconfirmed XADD, so a record may reach a stream twice: the ingester's
 *   deterministic event ids absorb that.
 * - With `waitReplicas` > 0, each send ends with a WAIT per master written, on the connection that
 *   carried its XADDs, and its answers leave once that returns: a failover of the master right
 *   after an answer does not lose the record. Short of replicas by `replicaWaitMs`, the answers
 *   leave all the same, counted (`unreplicated`) and told once per master (see askReplicas).
 * - Records are handed out and acknowledged one by one, as the port says: a read hands out at
 *   most `max` (the rest of an entry waits for the next read), and an entry is acknowledged
 *   once every record of it was. A consumer that restarts gets its entries again whole.
 * - No MAXLEN trimming (it could drop unacknowledged records): `ack` does XACK then XDEL, so
 *   a stream holds exactly the records not yet acknowledged.
 * - `read` returns, in order: this consumer's own pending records from a previous run, records
 *   idle past `claimIdleMs` in other (crashed) consumers, then new records; each from every
 *   stream, one XREADGROUP per stream (a cluster refuses one over keys of several slots). While
 *   nothing comes, it blocks on each stream in turn, a slice of BLOCK_ROUND_MS each.
 * - A Redis that comes back empty (restarted without persistence) loses the groups: each is
 *   created again on its first NOGROUP.
 */
/** An entry read and not wholly acknowledged: its records left, those acknowledged, and whether it is handed out now. */
interface UnackedEntry {
  left: number;
  counted: number;
  acked: number[];
  out: boolean;
}

export class RedisUsageQueue implements UsageQueue {
  private readonly writer: RedisClient;
  /** The writer, with the ack script defined on it. */
  private readonly scripts: AckCommand;
  /** Blocking reads get their own connection, so they never delay sends and acks. */
  private readonly reader: RedisClient;
  /** The streams written to (by account), then the earlier version's, if it is another. */
  private readonly shards: Shard[];
  private readonly writeShards: number;
  private readonly group: string;
  private readonly consumer: string;
  private readonly claimIdleMs: number;
  private readonly handoverTimeoutMs: number;
  private readonly flushBatch: number;
  private readonly closeTimeoutMs: number;
  private readonly bufferCapacity: number;
  /** Records waiting in the buffers, in all. */
  private bufferedRecords = 0;
  private droppedRecords = 0;
  /** Records of entries read but not yet handed out. */
  private held: QueuedUsage[] = [];
  /** Entries read by this process (`<shard>:<entry id>`): their records not yet acknowledged, and whether the count key counts them. */
  private readonly unacked = new Map<string, UnackedEntry>();
  /** The next send, at the end of this turn; or after a failed one, its retry. */
  private nextSend: NodeJS.Immediate | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  /** Records put in a buffer (each one's sequence number), and the last of the unbroken run from the first whose XADD Redis acknowledged. */
  private accepted = 0;
  private acknowledged = 0;
  /** Answers waiting for the records enqueued before them (`through`) to be acknowledged; in order. */
  private waiters: Array<{ through: number; done: () => void }> = [];
  /** The last send failed or got no reply in time: answers do not wait until one succeeds. */
  private failing = false;
  /** The next retry's delay: doubles while sends fail. */
  private retryDelayMs = RETRY_SEND_MS;
  /** Records dropped since the buffer filled (told when it does, and when a send succeeds again). */
  private droppedUntold = 0;
  private sending: Promise<void> | null = null;
  /** Where the next read starts among the streams, so that none waits behind the others. */
  private nextShard = 0;
  private closed = false;
  /** Set once `close` gave up waiting: nothing is sent any more. */
  private disconnected = false;
  /** Stream entries that were not a valid record: acknowledged and deleted, and counted. */
  malformed = 0;
  private readonly log: (message: string) => void;
  /** Streams whose group Redis lost, told once the read that found them is over. */
  private lostGroups: string[] = [];
  private readonly waitReplicas: number;
  private readonly replicaWaitMs: number;
  /** Records whose answers left without `waitReplicas` replicas confirming them (WAIT short or failed, or not asked while short). */
  private unreplicatedRecords = 0;
  /** Masters (host:port) whose replicas fell short: since when, when a WAIT was last sent there, records answered unconfirmed since. */
  private readonly shortMasters = new Map<string, { since: number; askedAt: number; records: number }>();

  constructor(redisUrl: string, options: RedisUsageQueueOptions) {
    const base = options.stream ?? 'usage';
    const streams = options.streams ?? (parseRedisUrl(redisUrl).kind === 'cluster' ? DEFAULT_STREAMS.cluster : DEFAULT_STREAMS.single);
    this.group = options.group ?? 'ingester';
    this.consumer = options.consumer;
    this.claimIdleMs = options.claimIdleMs ?? 30_000;
    this.handoverTimeoutMs = options.handoverTimeoutMs ?? HANDOVER_TIMEOUT_MS;
    this.flushBatch = options.flushBatch ?? 500;
    this.closeTimeoutMs = options.closeTimeoutMs ?? 2000;
    this.bufferCapacity = options.bufferCapacity ?? DEFAULT_QUEUE_CAPACITY;
    this.log = options.log ?? ((message) => console.error(message));
    this.waitReplicas = options.waitReplicas ?? 0;
    this.replicaWaitMs = options.replicaWaitMs ?? REPLICA_WAIT_MS;
    if (!Number.isInteger(this.waitReplicas) || this.waitReplicas < 0)
      throw new Error(`usage queue: waitReplicas must be a whole number ≥ 0, not ${this.waitReplicas}`);
    if (!Number.isInteger(this.replicaWaitMs) || this.replicaWaitMs < 1)
      throw new Error(`usage queue: replicaWaitMs must be a whole number ≥ 1, not ${this.replicaWaitMs}`);
    const shard = (index: number, stream: string, countKey: string, written: boolean): Shard => ({
      index,
      stream,
      slot: keySlot(stream),
      countKey,
      buffer: written ? new EntryBuffer(this.bufferCapacity, ENTRY_RECORDS) : null,
      sequence: new Sequence(),
      ownPendingCursor: '0',
      claimCursor: '0-0',
      lastClaimScan: 0,
      present: written,
      checkedAt: 0,
      grouped: false,
    });
    this.shards =
      streams === 1
        ? [shard(0, base, `{${base}}:records`, true)]
        : Array.from({ length: streams }, (_, i) => shard(i, `${base}:{${i}}`, `${base}:{${i}}:records`, true));
    this.writeShards = this.shards.length;
    if (streams > 1) this.shards.push(shard(streams, base, `{${base}}:records`, false));
    this.writer = redisClient(redisUrl, FAIL_FAST);
    this.writer.defineCommand('usageAck', { numberOfKeys: 2, lua: ACK_LUA });
    this.scripts = this.writer as unknown as AckCommand;
    this.reader = redisClient(redisUrl, FAIL_FAST);
    this.writer.on('ready', () => {
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.retryTimer = null;
      this.sendSoon();
    });
  }

  /** The streams records are written to. */
  get streams(): string[] {
    return this.shards.slice(0, this.writeShards).map((shard) => shard.stream);
  }

  /** Records refused because the buffer was full (Redis away too long). */
  get dropped(): number {
    return this.droppedRecords;
  }

  /** Records waiting in memory to be sent. */
  get buffered(): number {
    return this.bufferedRecords;
  }

  /** Records whose calls were answered without the replicas asked for (`waitReplicas`) confirming them; always 0 without. */
  get unreplicated(): number {
    return this.unreplicatedRecords;
  }

  async whenReady(timeoutMs = 5000): Promise<void> {
    await Promise.all([waitForReady(this.writer, timeoutMs), waitForReady(this.reader, timeoutMs)]);
  }

  enqueue(record: UsageRecord): void {
    if (this.closed || this.bufferedRecords >= this.bufferCapacity) {
      this.droppedRecords += 1;
      if (!this.closed && this.droppedUntold++ === 0) {
        this.log(
          `usage queue: ${this.bufferCapacity} usage records wait in memory for Redis, its bound: the records of further calls ` +
            'are dropped (served and never recorded) until Redis takes them again',
        );
      }
      return;
    }
    let serialized: string;
    try {
      serialized = JSON.stringify(toWire(record));
    } catch {
      this.malformed += 1;
      return;
    }
    const shard = this.shards[streamIndexOf(record.accountId, this.writeShards)] as Shard;
    (shard.buffer as EntryBuffer).push(serialized);
    this.bufferedRecords += 1;
    this.accepted += 1;
    shard.sequence.push(this.accepted);
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
    while (this.bufferedRecords > 0 && !this.disconnected) {
      try {
        await this.send();
      } catch {
        await sleep(RETRY_SEND_MS);
      }
    }
  }

  async read(max: number, blockMs = 0): Promise<QueuedUsage[]> {
    const taken = this.held.splice(0, max);
    /** Entries to ask for: at least one, fewer when they are full. */
    const entries = (): number => Math.max(1, Math.ceil((max - taken.length) / ENTRY_RECORDS));
    const take = (records: QueuedUsage[]): void => {
      const room = max - taken.length;
      for (let i = 0; i < records.length; i++) (i < room ? taken : this.held).push(records[i] as QueuedUsage);
    };
    const first = this.nextShard;
    this.nextShard = (this.nextShard + 1) % this.shards.length;
    const order = this.shards.map((_, i) => this.shards[(first + i) % this.shards.length] as Shard);
    try {
      const readable: Shard[] = [];
      for (const shard of order) if (await this.isReadable(shard)) readable.push(shard);
      for (const shard of readable) {
        if (taken.length >= max || shard.ownPendingCursor === null) continue;
        await this.withGroup(shard, async () => {
          const own = await this.readGroup(shard, entries(), 0, shard.ownPendingCursor ?? '0');
          const last = own.at(-1);
          shard.ownPendingCursor = last ? last[0] : null;
          take(await this.accept(shard, own));
        });
      }
      for (const shard of readable) {
        if (taken.length < max) await this.withGroup(shard, async () => take(await this.claimAbandoned(shard, entries())));
      }
      // New entries, a few rounds per stream while they come full and leave room (entries hold 1 to ENTRY_RECORDS records).
      // One stream alone is waited on at once; several, in turn below.
      const alone = this.shards.length === 1;
      for (const shard of readable) {
        for (let round = 0; taken.length < max && round < FRESH_READ_ROUNDS; round++) {
          const asked = entries();
          const block = alone && taken.length === 0 && round === 0 ? blockMs : 0;
          const fresh = await this.withGroup(shard, () => this.readGroup(shard, asked, block, '>'));
          take(await this.accept(shard, fresh));
          if (fresh.length < asked) break;
        }
      }
      if (!alone && taken.length === 0 && blockMs > 0) await this.blockInTurn(order, blockMs, entries, take, () => taken.length > 0);
    } catch (error) {
      // What this read took already (held, or read before the failure) is in this consumer's
      // pending list and nowhere else: handed out by the next read, not dropped with the error.
      this.held = taken.concat(this.held);
      // A read Redis answered but whose answer was lost (Redis stopped, the connection dropped)
      // left entries in this consumer's pending list that this process never saw: the next read
      // goes through that list again, instead of waiting claimIdleMs for them (`accept` skips
      // the entries it already has).
      for (const shard of this.shards) shard.ownPendingCursor = '0';
      throw error;
    } finally {
      this.tellLostGroups();
    }
    return taken;
  }

  /**
   * One line for the streams whose group Redis lost (flushed, or restarted without persistence):
   * what they held and the ingester had not appended is gone, and nothing else would tell.
   */
  private tellLostGroups(): void {
    if (this.lostGroups.length === 0) return;
    const streams = this.lostGroups.join(', ');
    this.lostGroups = [];
    this.log(
      `usage queue: Redis lost the consumer group of ${streams} (flushed, or restarted without persistence): ` +
        'the usage records it held that were not yet in the event store are lost; made again, reading on from what arrives now',
    );
  }

  /**
   * Waits up to `blockMs` for new entries on the written streams, one at a time for a slice of
   * BLOCK_ROUND_MS (a blocking XREADGROUP holds its connection; one per stream would take
   * `streams` connections per ingester). The earlier version's stream is only swept.
   */
  private async blockInTurn(order: Shard[], blockMs: number, entries: () => number, take: (records: QueuedUsage[]) => void, got: () => boolean): Promise<void> {
    const written = order.filter((shard) => shard.buffer !== null);
    const slice = Math.max(MIN_BLOCK_SLICE_MS, Math.floor(BLOCK_ROUND_MS / written.length));
    const deadline = Date.now() + blockMs;
    for (let i = 0; !got() && !this.closed; i++) {
      const left = deadline - Date.now();
      if (left <= 0) return;
      const shard = written[i % written.length] as Shard;
      const fresh = await this.withGroup(shard, () => this.readGroup(shard, entries(), Math.max(1, Math.min(slice, left)), '>'));
      take(await this.accept(shard, fresh));
    }
  }

  /** A written stream always; the earlier version's only while it is there (looked for at most every LEGACY_CHECK_MS). */
  private async isReadable(shard: Shard): Promise<boolean> {
    if (shard.buffer !== null || shard.present) return true;
    const now = Date.now();
    if (now - shard.checkedAt < LEGACY_CHECK_MS) return false;
    shard.checkedAt = now;
    shard.present = (await this.writer.exists(shard.stream)) === 1;
    return shard.present;
  }

  redeliverHeld(): void {
    // Everything read and not acknowledged is in this consumer's pending list: read it again from
    // the start, each entry's records not yet acknowledged handed out anew.
    this.held = [];
    for (const entry of this.unacked.values()) entry.out = false;
    for (const shard of this.shards) shard.ownPendingCursor = '0';
  }

  async ack(ackIds: string[]): Promise<void> {
    const done = new Map<Shard, { entryIds: string[]; counted: number }>();
    for (const ackId of ackIds) {
      const colon = ackId.indexOf(':');
      const shard = this.shards[Number(ackId.slice(0, colon))];
      if (colon < 0 || shard === undefined) continue;
      const slash = ackId.lastIndexOf('/');
      const key = slash < 0 ? ackId : ackId.slice(0, slash);
      const entry = this.unacked.get(key);
      let counted = 0;
      if (entry === undefined) {
        if (slash >= 0) continue;
      } else {
        entry.left -= 1;
        if (entry.left > 0) {
          entry.acked.push(Number(ackId.slice(slash + 1)));
          continue;
        }
        this.unacked.delete(key);
        counted = entry.counted;
      }
      const acked = done.get(shard) ?? { entryIds: [], counted: 0 };
      done.set(shard, acked);
      acked.entryIds.push(key.slice(colon + 1));
      acked.counted += counted;
    }
    const failed = (await Promise.allSettled([...done].map(([shard, { entryIds, counted }]) => this.acknowledge(shard, entryIds, counted)))).find(
      (result) => result.status === 'rejected',
    );
    if (failed) throw failed.reason;
  }

  /**
   * XACK and XDEL of whole entries of one stream, and its count key down by the records they
   * counted, in one script: all or none, so an entry is either gone or still pending (claimed
   * again, and its records found recorded already).
   */
  private async acknowledge(shard: Shard, entryIds: string[], counted: number): Promise<void> {
    if (entryIds.length === 0) return;
    await this.scripts.usageAck(shard.stream, shard.countKey, this.group, counted, ...entryIds);
  }

  /**
   * Buffered records plus the records in the streams, which hold only unacknowledged ones
   * (counted as they are added and acknowledged; approximate after a send was cut mid-way,
   * and set back to zero whenever a stream is empty).
   */
  async depth(): Promise<number> {
    try {
      const answered = await withinDeadline(
        replies(this.shards.flatMap((shard) => [this.writer.xlen(shard.stream), this.writer.get(shard.countKey)])),
        DEPTH_TIMEOUT_MS,
        () => new Error(`usage queue: no reply from Redis within ${DEPTH_TIMEOUT_MS} ms`),
      );
      let inStreams = 0;
      const emptied: Array<Promise<unknown>> = [];
      for (const [i, shard] of this.shards.entries()) {
        const [lengthReply, countReply] = [answered[2 * i], answered[2 * i + 1]];
        const failed = lengthReply?.[0] ?? countReply?.[0];
        if (failed) throw failed;
        const length = Number(lengthReply?.[1] ?? 0);
        const count = (countReply?.[1] ?? null) as string | null;
        if (length === 0) {
          if (count !== null && count !== '0') emptied.push(this.writer.set(shard.countKey, 0));
        } else inStreams += Math.max(Number(count ?? 0), length);
      }
      await Promise.all(emptied);
      return this.bufferedRecords + inStreams;
    } catch {
      return this.bufferedRecords;
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
    if (this.nextSend || this.sending || this.retryTimer || this.closed || this.bufferedRecords === 0) return;
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
        }, this.retryDelayMs);
        this.retryDelayMs = Math.min(this.retryDelayMs * 2, MAX_RETRY_SEND_MS);
      },
    );
  };

  /** One send at a time. */
  private send(): Promise<void> {
    if (this.sending) return this.sending;
    // A WAIT for replicas may take its whole bound on top of the XADDs' reply.
    const stalled = setTimeout(this.fail, this.handoverTimeoutMs + (this.waitReplicas > 0 ? this.replicaWaitMs : 0));
    this.sending = this.sendAll()
      .then(
        () => {
          this.failing = false;
          this.retryDelayMs = RETRY_SEND_MS;
          if (this.droppedUntold > 0) {
            this.log(`usage queue: Redis takes usage records again; ${this.droppedUntold} were dropped meanwhile (served and never recorded)`);
            this.droppedUntold = 0;
          }
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
   * Sends what is buffered now, to every stream at once, one batch of up to `flushBatch`
   * records per stream at a time. What arrives meanwhile waits for the next send: draining it
   * too, round trip after round trip, made sends of a few records each under load.
   */
  private async sendAll(): Promise<void> {
    const left = this.shards.map((shard) => shard.buffer?.length ?? 0);
    let failure: unknown = null;
    // After a failed send, one entry per stream until Redis takes one.
    let probing = this.failing;
    while (failure === null && left.some((n) => n > 0)) {
      const sending: Array<Promise<unknown>> = [];
      const batches: Array<{ shard: Shard; entries: Entry[]; from: number }> = [];
      for (const [i, shard] of this.shards.entries()) {
        if ((left[i] as number) <= 0 || shard.buffer === null) continue;
        const entries = shard.buffer.peek(Math.min(probing ? ENTRY_RECORDS : this.flushBatch, left[i] as number));
        batches.push({ shard, entries, from: sending.length });
        for (const entry of entries) {
          left[i] = (left[i] as number) - entry.count;
          sending.push(this.writer.xadd(shard.stream, '*', COUNT_FIELD, entry.count, BATCH_FIELD, entry.body), this.writer.incrby(shard.countKey, entry.count));
        }
      }
      // Sent right behind the XADDs, on their connections, before any reply: a WAIT covers what its connection wrote before it.
      const waits = this.waitReplicas > 0 ? this.askReplicas(batches.map((batch) => batch.shard)) : null;
      const answered = await replies(sending);
      // Without WAIT, the path is as it was: nothing more allocated per send.
      const confirmedRecords = waits === null ? null : new Map<Shard, number>();
      for (const { shard, entries, from } of batches) {
        // Only the unbroken run of confirmed XADDs leaves the buffer; the rest is sent again.
        let confirmed = 0;
        let records = 0;
        while (confirmed < entries.length && answered[from + 2 * confirmed]?.[0] === null) records += (entries[confirmed++] as Entry).count;
        (shard.buffer as EntryBuffer).drop(confirmed);
        shard.sequence.drop(records);
        this.bufferedRecords -= records;
        confirmedRecords?.set(shard, records);
        if (confirmed < entries.length) failure ??= answered[from + 2 * confirmed]?.[0] ?? new Error('usage queue: XADD not confirmed');
      }
      if (waits !== null && confirmedRecords !== null) {
        const waited = await Promise.all(waits.map((wait) => wait.reply ?? NOT_ASKED));
        for (const [i, wait] of waits.entries()) this.noteReplicas(wait, waited[i] as Reply, confirmedRecords);
      }
      this.acknowledged = Math.min(this.accepted, Math.min(...this.shards.map((shard) => shard.sequence.first())) - 1);
      this.release(false);
      probing = false;
    }
    if (failure !== null) throw failure;
  }

  /**
   * One `WAIT waitReplicas replicaWaitMs` per master that the XADDs just sent went to, on the
   * connection that carried them (WAIT counts the replicas that have what its own connection
   * wrote): on a cluster, the connection of the streams' slot's master in the client's slot map,
   * the one the XADDs were just routed through. A master short of replicas is asked again only
   * every SHORT_REPLICAS_RETRY_MS (`reply` null meanwhile).
   */
  private askReplicas(written: Shard[]): ReplicaWait[] {
    const byMaster = new Map<string, ReplicaWait>();
    const now = Date.now();
    for (const shard of written) {
      const master = this.masterOf(shard);
      const known = byMaster.get(master.name);
      if (known) {
        known.shards.push(shard);
        continue;
      }
      const short = this.shortMasters.get(master.name);
      let reply: Promise<Reply> | null = null;
      if (short === undefined || now - short.askedAt >= SHORT_REPLICAS_RETRY_MS) {
        if (short) short.askedAt = now;
        // Settled into a Reply at once: the XADDs' replies are awaited first, and a rejection must not go unhandled meanwhile.
        reply = master.connection
          ? master.connection.wait(this.waitReplicas, this.replicaWaitMs).then(
              (count): Reply => [null, count],
              (error: unknown): Reply => [error instanceof Error ? error : new Error(String(error)), null],
            )
          : Promise.resolve([new Error("the client's slot map names no master for it"), null]);
      }
      byMaster.set(master.name, { master: master.name, shards: [shard], reply });
    }
    return [...byMaster.values()];
  }

  /** The connection a stream's XADD went through, and its master's host:port. */
  private masterOf(shard: Shard): { name: string; connection: Redis | null } {
    const writer = this.writer;
    if (!(writer instanceof Cluster)) return { name: `${writer.options.host}:${writer.options.port}`, connection: writer };
    // As ioredis routes a keyed write: the first node of the slot's entry in the slot map (its pool's key is host:port).
    const name = writer.slots[shard.slot]?.[0];
    if (name === undefined) return { name: `the master of slot ${shard.slot}`, connection: null };
    return { name, connection: writer.nodes('master').find((node) => `${node.options.host}:${node.options.port}` === name) ?? null };
  }

  /**
   * What a WAIT said of the records its master confirmed this round: enough replicas, or not (too
   * few by the bound, an error, or not asked while the master is short). Short, they are counted;
   * a master's shortfall is told when it starts and when its replicas confirm again, not per send.
   */
  private noteReplicas(wait: ReplicaWait, reply: Reply, confirmedRecords: Map<Shard, number>): void {
    const records = wait.shards.reduce((sum, shard) => sum + (confirmedRecords.get(shard) ?? 0), 0);
    // Nothing written there this round (the XADDs failed: Redis away, told elsewhere): the WAIT says nothing.
    if (records === 0) return;
    const short = this.shortMasters.get(wait.master);
    const [error, value] = reply;
    if (wait.reply !== null && error === null && Number(value) >= this.waitReplicas) {
      if (short) {
        this.shortMasters.delete(wait.master);
        this.log(
          `usage queue: ${this.waitReplicas} replica(s) of ${wait.master} confirm usage records again after ${((Date.now() - short.since) / 1000).toFixed(1)} s; ` +
            `the answers of ${short.records} records left meanwhile without their confirmation`,
        );
      }
      return;
    }
    this.unreplicatedRecords += records;
    if (short) {
      short.records += records;
      return;
    }
    const now = Date.now();
    this.shortMasters.set(wait.master, { since: now, askedAt: now, records });
    const why = error ? `WAIT failed (${error.message})` : `WAIT found ${Number(value)} of ${this.waitReplicas} replica(s) within ${this.replicaWaitMs} ms`;
    this.log(
      `usage queue: ${why} on ${wait.master}: answers leave without their usage records' replication confirmed there ` +
        `(a failover of it may lose them; counted in gateway_usage_unreplicated_total), asking again every ${SHORT_REPLICAS_RETRY_MS / 1000} s`,
    );
  }

  private async readGroup(shard: Shard, count: number, blockMs: number, from: string): Promise<StreamEntry[]> {
    const args: (string | number)[] = ['GROUP', this.group, this.consumer, 'COUNT', count];
    if (blockMs > 0) args.push('BLOCK', blockMs);
    args.push('STREAMS', shard.stream, from);
    const reply = (await this.reader.call('XREADGROUP', ...args)) as [string, StreamEntry[]][] | null;
    return reply?.[0]?.[1] ?? [];
  }

  /** Takes over records other consumers have held past `claimIdleMs` (they crashed, most likely). */
  private async claimAbandoned(shard: Shard, max: number): Promise<QueuedUsage[]> {
    const now = Date.now();
    const interval = Math.min(CLAIM_SCAN_INTERVAL_MS, this.claimIdleMs);
    if (shard.claimCursor === '0-0' && now - shard.lastClaimScan < interval) return [];
    shard.lastClaimScan = now;
    const reply = (await this.writer.call('XAUTOCLAIM', shard.stream, this.group, this.consumer, this.claimIdleMs, shard.claimCursor, 'COUNT', max)) as [
      string,
      StreamEntry[],
      ...unknown[],
    ];
    shard.claimCursor = reply[0];
    return this.accept(shard, reply[1]);
  }

  /**
   * Parses entries into their records, each acknowledged as `<shard>:<entry id>/<index>`. A
   * record that is not valid is counted and skipped; an entry with none is acknowledged and
   * deleted at once, never retried forever.
   */
  private async accept(shard: Shard, entries: StreamEntry[]): Promise<QueuedUsage[]> {
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
      const key = `${shard.index}:${id}`;
      const known = this.unacked.get(key);
      // Already handed out or held (this consumer's pending list read again after a failure).
      if (known?.out) continue;
      // Handed out again after redeliverHeld: only its records not acknowledged yet.
      const acked = known?.acked ?? [];
      this.unacked.set(key, known === undefined ? { left: records.length, counted, acked, out: true } : { ...known, out: true });
      for (let i = 0; i < records.length; i++) {
        if (!acked.includes(i)) accepted.push({ ackId: `${key}/${i}`, record: records[i] as UsageRecord });
      }
    }
    await this.acknowledge(shard, rejected, rejectedCounted);
    return accepted;
  }

  /** Runs a group command on a stream, creating its group first when Redis does not know it. */
  private async withGroup<T>(shard: Shard, command: () => Promise<T>): Promise<T> {
    try {
      const result = await command();
      shard.grouped = true;
      return result;
    } catch (error) {
      if (!(error instanceof Error) || !error.message.includes('NOGROUP')) throw error;
      if (shard.grouped) this.lostGroups.push(shard.stream);
      shard.grouped = false;
      await this.createGroup(shard);
      shard.grouped = true;
      return command();
    }
  }

  private async createGroup(shard: Shard): Promise<void> {
    try {
      // The earlier version's stream is never made here: it is read only while it is there.
      await this.writer.call('XGROUP', 'CREATE', shard.stream, this.group, '0', ...(shard.buffer === null ? [] : ['MKSTREAM']));
    } catch (error) {
      if (!(error instanceof Error) || !error.message.includes('BUSYGROUP')) throw error;
    }
    // A new group has no pending records, of ours or anyone's.
    shard.ownPendingCursor = null;
    shard.claimCursor = '0-0';
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
