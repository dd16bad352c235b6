import type pg from 'pg';
import { EventStoreError } from './errors.js';
import type { Position, SubscribeOptions, Subscription, SubscriptionItem } from './port.js';
import { EVENT_COLUMNS, type EventRow, formatPgPosition, parsePgPosition, toStoredEvent } from './postgresSchema.js';

const READ_BATCH = 1000;
/** Without a wake-up (a lost LISTEN connection, an append by an older release), a live subscription still looks this often. */
const POLL_MS = 1000;
/** While events wait behind an older transaction still running: how soon to look again, at first and at most. */
const PENDING_FIRST_MS = 2;
const PENDING_MAX_MS = 100;

/** Wake-ups from the store's LISTEN connection, counted so that none is missed between a read and the wait after it. */
export interface Wakeups {
  /** Resolves once LISTEN is in place (or could not be: the subscription then polls). */
  ready(): Promise<void>;
  /** How many wake-ups so far. */
  count(): number;
  /** Resolves on the first wake-up after the `seen`-th, or after `ms`, or on `interrupt`. */
  wait(seen: number, ms: number, interrupt: AbortSignal): Promise<void>;
}

/**
 * The read of one batch: the events after the cursor of transactions below the horizon (the
 * oldest transaction still running: all older ones are finished), the horizon itself, and
 * whether committed events lie beyond it (then they wait for an older transaction to end).
 * One statement, so one snapshot gives all three; the horizon and that check once per read
 * (in the CTE), each one index lookup.
 */
const READ_SQL = `
  WITH h AS MATERIALIZED (
    SELECT s.xmin, coalesce((SELECT p.tx FROM es_events p ORDER BY p.tx DESC LIMIT 1) >= s.xmin, false) AS pending
    FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) s)
  SELECT h.xmin::text AS horizon, h.pending, r.*
  FROM h LEFT JOIN LATERAL (
    SELECT ${EVENT_COLUMNS} FROM es_events e
    WHERE (e.tx, e.seq) > ($1::xid8, $2::bigint) AND e.tx < h.xmin AND ($3::text[] IS NULL OR e.stream_id ^@ ANY ($3::text[]))
    ORDER BY e.tx, e.seq
    LIMIT $4
  ) r ON true`;

type ReadRow = { horizon: string; pending: boolean } & ({ [K in keyof EventRow]: EventRow[K] } | { [K in keyof EventRow]: null });

/**
 * Catch-up then live, by reading the log from a cursor: after a batch shorter than asked, the
 * cursor moves to the horizon (every event before it was read), and the subscription waits for
 * a wake-up from an append's NOTIFY. The cursor only moves forward, over what was delivered or
 * could never be, so history and live neither overlap nor leave a hole.
 */
export class PostgresSubscription implements Subscription {
  private started = false;
  private readonly closing = new AbortController();
  private readonly prefixes: string[] | null;
  private cursor: Position;

  constructor(
    private readonly pool: pg.Pool,
    private readonly wakeups: Wakeups,
    options: SubscribeOptions,
    private readonly forget: (subscription: PostgresSubscription) => void,
  ) {
    this.prefixes = options.streamPrefixes && options.streamPrefixes.length > 0 ? [...options.streamPrefixes] : null;
    if (options.after !== undefined) parsePgPosition(options.after);
    this.cursor = options.after ?? formatPgPosition('0', '0');
  }

  [Symbol.asyncIterator](): AsyncIterator<SubscriptionItem> {
    if (this.started) throw new EventStoreError('subscription_in_use', 'a subscription can be iterated only once');
    this.started = true;
    return this.run();
  }

  async close(): Promise<void> {
    this.closing.abort();
    this.forget(this);
  }

  private get closed(): boolean {
    return this.closing.signal.aborted;
  }

  private async *run(): AsyncGenerator<SubscriptionItem> {
    let caughtUpSent = false;
    let pendingDelay = PENDING_FIRST_MS;
    try {
      await this.wakeups.ready();
      while (!this.closed) {
        const seen = this.wakeups.count();
        let rows: ReadRow[];
        try {
          ({ rows } = await this.pool.query<ReadRow>(READ_SQL, [...this.cursorParams(), this.prefixes, READ_BATCH]));
        } catch (error) {
          if (this.closed) return; // the store closed its pool under our feet
          throw error;
        }
        const first = rows[0];
        if (this.closed || !first) return;
        let read = 0;
        for (const row of rows) {
          if (row.tx === null) continue;
          read++;
          const event = toStoredEvent(row);
          this.cursor = event.position;
          yield { kind: 'event', event };
          if (this.closed) return;
        }
        if (read === READ_BATCH) continue;
        const horizon = formatPgPosition(first.horizon, '0');
        if (horizon > this.cursor) this.cursor = horizon;
        if (first.pending) {
          // Committed events wait behind an older transaction: look again soon, not at the next NOTIFY.
          await this.wakeups.wait(Number.POSITIVE_INFINITY, pendingDelay, this.closing.signal);
          pendingDelay = Math.min(pendingDelay * 2, PENDING_MAX_MS);
          continue;
        }
        pendingDelay = PENDING_FIRST_MS;
        if (!caughtUpSent) {
          caughtUpSent = true;
          yield { kind: 'caughtUp', position: this.cursor };
          continue; // the consumer may have taken its time: look at the log again before waiting
        }
        await this.wakeups.wait(seen, POLL_MS, this.closing.signal);
      }
    } finally {
      this.closing.abort();
      this.forget(this);
    }
  }

  private cursorParams(): [string, string] {
    const { tx, seq } = parsePgPosition(this.cursor);
    return [tx, seq];
  }
}
