import pg from 'pg';
import { isRetryable, migrate, openPool, POSTGRES_CONNECT_TIMEOUT_MS } from '../postgres/database.js';
import { checkExpectedRevision, validateAppend, validateTruncation } from './appendRules.js';
import { EventStoreError } from './errors.js';
import { MAX_APPEND_BYTES } from './levelAppendPlan.js';
import type { AppendResult, EventStore, ExpectedRevision, NewEvent, Position, StoredEvent, SubscribeOptions, Subscription } from './port.js';
import {
  APPENDED_CHANNEL,
  EVENT_COLUMNS,
  EVENT_STORE_MIGRATIONS,
  type EventRow,
  formatPgPosition,
  STREAM_LOCK_CLASS,
  toStoredEvent,
} from './postgresSchema.js';
import { PostgresSubscription, type Wakeups } from './postgresSubscription.js';

export interface PostgresEventStoreOptions {
  /** Connections for appends and reads (default 10); subscriptions take one more, to LISTEN. */
  poolSize?: number;
}

/** Appends that meet a deadlock or serialization failure are run again, this many times in all. */
const ATTEMPTS = 5;

/** Rows a truncation deletes per statement: each its own short transaction, so that nothing waits long behind one. */
const TRUNCATE_CHUNK = 5000;

/** The revision of a stream's last event: its newest row's, or the one before its truncation point when a truncation left none. */
const HEAD_SQL = `coalesce((SELECT revision FROM es_events WHERE stream_id = $1 ORDER BY revision DESC LIMIT 1),
                          (SELECT before_revision - 1 FROM es_truncations WHERE stream_id = $1))`;

/**
 * The event store on PostgreSQL (`DATABASE_URL`): for a topology of several processes without
 * EventStoreDB. Table layout and the global order: postgresSchema.ts; subscriptions:
 * postgresSubscription.ts. Every append is one transaction under its stream's advisory lock,
 * which makes revision checks and id lookups race-free across processes.
 */
export class PostgresEventStore implements EventStore {
  private closed = false;
  private readonly subscriptions = new Set<PostgresSubscription>();
  private readonly listener: Listener;

  private constructor(
    private readonly pool: pg.Pool,
    url: string,
  ) {
    this.listener = new Listener(url);
  }

  /** Connects and brings the tables to this release's schema (refusing a newer one). */
  static async open(url: string, options: PostgresEventStoreOptions = {}): Promise<PostgresEventStore> {
    const pool = openPool(url, options.poolSize ?? 10);
    try {
      await migrate(pool, 'eventstore', EVENT_STORE_MIGRATIONS);
    } catch (error) {
      await pool.end();
      throw error;
    }
    return new PostgresEventStore(pool, url);
  }

  async append(streamId: string, events: NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    this.assertOpen();
    validateAppend(streamId, events, expected);
    const encoded = encode(streamId, events);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.appendOnce(streamId, events, encoded, expected);
      } catch (error) {
        if (attempt >= ATTEMPTS || !isRetryable(error)) throw error;
      }
    }
  }

  async readStream(streamId: string, options: { fromRevision?: number; maxCount?: number } = {}): Promise<StoredEvent[]> {
    this.assertOpen();
    const fromRevision = Math.max(0, Math.trunc(options.fromRevision ?? 0));
    if (options.maxCount !== undefined && options.maxCount < 1) return [];
    const limit = options.maxCount === undefined ? null : Math.trunc(options.maxCount);
    const { rows } = await this.pool.query<EventRow>(
      // Rows before the truncation point are being deleted (or were left by an interrupted truncation): not read.
      `SELECT ${EVENT_COLUMNS} FROM es_events e
       WHERE e.stream_id = $1 AND e.revision >= greatest($2::bigint, coalesce((SELECT t.before_revision FROM es_truncations t WHERE t.stream_id = $1), 0))
       ORDER BY e.revision LIMIT $3`,
      [streamId, fromRevision, limit],
    );
    return rows.map(toStoredEvent);
  }

  /**
   * Moves the stream's truncation point (under its stream lock, so that it is measured against
   * the head an append would see), then deletes the rows before it a chunk at a time. An
   * interrupted truncation leaves rows that stream reads skip already; the next truncation of
   * the stream deletes them. VACUUM (autovacuum) gives their space back to the table.
   */
  async truncateBefore(streamId: string, revision: number): Promise<void> {
    this.assertOpen();
    validateTruncation(streamId, revision);
    let cut: number | null = null;
    for (let attempt = 1; ; attempt++) {
      try {
        cut = await this.moveTruncationPoint(streamId, revision);
        break;
      } catch (error) {
        if (attempt >= ATTEMPTS || !isRetryable(error)) throw error;
      }
    }
    if (cut === null) return;
    for (;;) {
      const { rowCount } = await this.pool.query(
        `DELETE FROM es_events WHERE (tx, seq) IN (SELECT tx, seq FROM es_events WHERE stream_id = $1 AND revision < $2 LIMIT ${TRUNCATE_CHUNK})`,
        [streamId, cut],
      );
      if ((rowCount ?? 0) < TRUNCATE_CHUNK) return;
    }
  }

  /** The stream's truncation point after this one (null: the stream does not exist). */
  private async moveTruncationPoint(streamId: string, revision: number): Promise<number | null> {
    return this.withStreamLocked(streamId, async (client) => {
      const { rows } = await client.query<{ head: string | null }>(`SELECT ${HEAD_SQL} AS head`, [streamId]);
      const head = rows[0]?.head == null ? null : Number(rows[0].head);
      if (head === null) {
        return null;
      }
      const { rows: moved } = await client.query<{ before_revision: string }>(
        `INSERT INTO es_truncations (stream_id, before_revision) VALUES ($1, $2)
           ON CONFLICT (stream_id) DO UPDATE SET before_revision = greatest(es_truncations.before_revision, EXCLUDED.before_revision)
           RETURNING before_revision`,
        [streamId, Math.min(revision, head + 1)],
      );
      return Number(moved[0]!.before_revision);
    });
  }

  subscribeToAll(options: SubscribeOptions = {}): Subscription {
    this.assertOpen();
    const subscription = new PostgresSubscription(this.pool, this.listener, options, (s) => this.forget(s));
    this.subscriptions.add(subscription);
    return subscription;
  }

  async headPosition(): Promise<Position | null> {
    this.assertOpen();
    const { rows } = await this.pool.query<{ tx: string; seq: string }>(
      'SELECT e.tx::text AS tx, e.seq FROM es_events e ORDER BY e.tx DESC, e.seq DESC LIMIT 1',
    );
    const head = rows[0];
    return head ? formatPgPosition(head.tx, head.seq) : null;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subscriptions].map((subscription) => subscription.close()));
    await this.listener.close();
    await this.pool.end();
  }

  private forget(subscription: PostgresSubscription): void {
    this.subscriptions.delete(subscription);
    if (this.subscriptions.size === 0) void this.listener.close();
  }

  /**
   * Runs `body` in a transaction that holds the stream's lock, taken before any write (the
   * transaction gets its id, its place in the global order, only once it holds the stream), and
   * commits it; an error rolls it back, and a connection whose rollback failed is not reused.
   */
  private async withStreamLocked<T>(streamId: string, body: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query(`BEGIN; SELECT pg_advisory_xact_lock(${STREAM_LOCK_CLASS}, hashtext(${client.escapeLiteral(streamId)}))`);
      const result = await body(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch((rollbackError: unknown) => {
        broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      });
      throw error;
    } finally {
      client.release(broken);
    }
  }

  private async appendOnce(streamId: string, events: NewEvent[], encoded: Encoded, expected: ExpectedRevision): Promise<AppendResult> {
    return this.withStreamLocked(streamId, async (client) => {
      const { rows } = await client.query<{ head: string | null; found: Array<[string, number, string, string]> | null }>(
        `SELECT ${HEAD_SQL} AS head,
                  (SELECT json_agg(json_build_array(event_id, revision, tx::text, seq::text)) FROM es_events
                    WHERE stream_id = $1 AND event_id = ANY ($2::text[])
                      -- Rows a truncation has not deleted yet are gone all the same: their ids are free again.
                      AND revision >= coalesce((SELECT t.before_revision FROM es_truncations t WHERE t.stream_id = $1), 0)) AS found`,
        [streamId, events.map((event) => event.id)],
      );
      const head = rows[0]?.head == null ? undefined : Number(rows[0].head);
      const plan = planAppend(streamId, events, expected, head, rows[0]?.found ?? []);
      if ('done' in plan) {
        return plan.done;
      }
      const keep = plan.keep;
      const { rows: inserted } = await client.query<{ tx: string; seq: string; revision: string }>(
        `WITH ins AS (
             INSERT INTO es_events (stream_id, revision, event_id, type, data, metadata, created)
             SELECT $1, $2::bigint + n, id, type, data, metadata, $7
             FROM unnest($3::text[], $4::text[], $5::json[], $6::json[]) WITH ORDINALITY AS u(id, type, data, metadata, n)
             ORDER BY n
             RETURNING tx, seq, revision)
           SELECT tx::text AS tx, seq::text AS seq, revision::text AS revision, pg_notify('${APPENDED_CHANNEL}', '') IS NULL AS notified
           FROM ins ORDER BY ins.seq DESC LIMIT 1`,
        [
          streamId,
          head ?? -1,
          keep.map((i) => events[i]!.id),
          keep.map((i) => events[i]!.type),
          keep.map((i) => encoded.data[i]!),
          keep.map((i) => encoded.metadata[i]!),
          new Date().toISOString(),
        ],
      );
      const last = inserted[0]!;
      return { nextExpectedRevision: Number(last.revision), position: formatPgPosition(last.tx, last.seq) };
    });
  }

  private assertOpen(): void {
    if (this.closed) throw new EventStoreError('store_closed', 'event store is closed');
  }
}

interface Encoded {
  data: string[];
  metadata: string[];
}

/** The events' JSON, refused beyond the same size as the other stores' (MAX_APPEND_BYTES). */
function encode(streamId: string, events: NewEvent[]): Encoded {
  const data = events.map((event) => JSON.stringify(event.data));
  const metadata = events.map((event) => JSON.stringify(event.metadata ?? {}));
  let bytes = 0;
  for (const json of [...data, ...metadata]) bytes += Buffer.byteLength(json);
  if (bytes > MAX_APPEND_BYTES) throw new EventStoreError('append_too_large', `append to ${streamId} exceeds ${MAX_APPEND_BYTES} bytes`, { streamId });
  return { data, metadata };
}

/**
 * The embedded store's rules for retries (levelAppendPlan.ts): ids all in the stream already →
 * nothing written, answered as the first time; some of them → with `any` the others are
 * appended, else refused; none → the expected revision decides. `found`: [id, revision, tx, seq].
 */
function planAppend(
  streamId: string,
  events: NewEvent[],
  expected: ExpectedRevision,
  head: number | undefined,
  found: Array<[string, number, string, string]>,
): { done: AppendResult } | { keep: number[] } {
  const all = events.map((_, i) => i);
  if (found.length === 0) {
    checkExpectedRevision(streamId, expected, head);
    return { keep: all };
  }
  if (found.length < events.length) {
    if (expected !== 'any') {
      throw new EventStoreError(
        'duplicate_event_ids',
        `append to ${streamId} repeats ${found.length} of its ${events.length} event ids already in the stream`,
        { streamId, ids: found.map(([id]) => id) },
      );
    }
    const seen = new Set(found.map(([id]) => id));
    return { keep: all.filter((i) => !seen.has(events[i]!.id)) };
  }
  const [, revision, tx, seq] = found.reduce((a, b) => (b[1] > a[1] ? b : a));
  return { done: { nextExpectedRevision: revision, position: formatPgPosition(tx, seq) } };
}

/**
 * The store's one LISTEN connection, opened with the first subscription and closed with the
 * last. Every NOTIFY of an append wakes every subscription. When the connection fails,
 * subscriptions go on by polling, and the next subscription to wait connects again.
 */
class Listener implements Wakeups {
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private wakeups = 0;
  /** Moves on at each close, so a connection that completes after it is not kept. */
  private generation = 0;
  private readonly waiters = new Set<() => void>();

  constructor(private readonly url: string) {}

  ready(): Promise<void> {
    this.connecting ??= this.connect();
    return this.connecting;
  }

  count(): number {
    return this.wakeups;
  }

  wait(seen: number, ms: number, interrupt: AbortSignal): Promise<void> {
    if (this.wakeups > seen || interrupt.aborted) return Promise.resolve();
    if (this.client === null) void this.ready();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        interrupt.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
      interrupt.addEventListener('abort', done);
    });
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = null;
    this.connecting = null;
    this.generation++;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const generation = this.generation;
    const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: POSTGRES_CONNECT_TIMEOUT_MS });
    const lost = (): void => {
      if (this.generation === generation && this.client === client) {
        this.client = null;
        this.connecting = null;
        this.wake(); // notifications may have been missed: every subscription reads again (and connects again)
      }
      void client.end().catch(() => undefined);
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', () => this.wake());
    try {
      await client.connect();
      await client.query(`LISTEN ${APPENDED_CHANNEL}`);
    } catch {
      // Subscriptions poll until a later wait connects again.
      if (this.generation === generation) this.connecting = null;
      void client.end().catch(() => undefined);
      return;
    }
    if (this.generation === generation) this.client = client;
    else await client.end().catch(() => undefined); // closed while connecting
  }

  private wake(): void {
    this.wakeups++;
    for (const waiter of [...this.waiters]) waiter();
  }
}
