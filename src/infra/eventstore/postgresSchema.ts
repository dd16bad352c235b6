import type { Migration } from '../postgres/database.js';
import { EventStoreError } from './errors.js';
import type { Position, StoredEvent } from './port.js';

/**
 * The event log in PostgreSQL. Each event keeps the id of the transaction that wrote it (`tx`,
 * xid8) beside a sequence number (`seq`); the global order is (tx, seq). A sequence alone has
 * gaps that close late: a transaction can take seq 10, another seq 11 and commit first, and a
 * reader that passed 11 never sees 10. Readers here only read events of transactions older than
 * every transaction still running (`pg_snapshot_xmin(pg_current_snapshot())`): those are all
 * finished, so nothing can appear before what was read (the approach of emmett-postgresql and
 * Marten). An append takes its stream's advisory lock before its first write, so it gets its
 * transaction id only after the previous append to the stream committed: a stream's events are
 * in revision order in the global order too.
 */
export const EVENT_STORE_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE es_events (
        tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
        seq bigint GENERATED ALWAYS AS IDENTITY,
        stream_id text NOT NULL,
        revision bigint NOT NULL,
        event_id text NOT NULL,
        type text NOT NULL,
        data json NOT NULL,
        metadata json NOT NULL,
        created timestamptz NOT NULL,
        PRIMARY KEY (tx, seq)
      );
      CREATE UNIQUE INDEX es_events_stream_revision ON es_events (stream_id, revision);
      CREATE UNIQUE INDEX es_events_stream_event_id ON es_events (stream_id, event_id);
    `,
  },
  {
    // Retention (truncateBefore): a stream's events before `before_revision` are gone. Kept after
    // they are deleted, so that the stream's revisions go on from its last one even when none is left.
    version: 2,
    sql: `
      CREATE TABLE es_truncations (
        stream_id text PRIMARY KEY,
        before_revision bigint NOT NULL
      );
    `,
  },
];

/** Woken on every commit of an append (LISTEN/NOTIFY: delivered at commit, to this database's listeners). */
export const APPENDED_CHANNEL = 'gw_events_appended';

/** Advisory lock class of stream locks (the two-key form: apart from every single-key lock). */
export const STREAM_LOCK_CLASS = 4244;

const WIDTH = 20;
const pad = (n: string): string => n.padStart(WIDTH, '0');

/** `<tx:20>/<seq:20>`: string order is (tx, seq) order. */
export const formatPgPosition = (tx: string, seq: string): Position => `${pad(tx)}/${pad(seq)}`;

export function parsePgPosition(position: Position): { tx: string; seq: string } {
  const match = /^(\d{20})\/(\d{20})$/.exec(position);
  if (!match) throw new EventStoreError('invalid_position', `not a PostgreSQL event store position: ${JSON.stringify(position)}`);
  return { tx: BigInt(match[1]!).toString(), seq: BigInt(match[2]!).toString() };
}

/** A row of `es_events` as `pg` returns the columns that EVENT_COLUMNS selects. */
export interface EventRow {
  tx: string;
  seq: string;
  stream_id: string;
  revision: string;
  event_id: string;
  type: string;
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
  created: Date;
}

/** Of `es_events e` (qualified: `ORDER BY tx` would otherwise order by the text alias). */
export const EVENT_COLUMNS = 'e.tx::text AS tx, e.seq, e.stream_id, e.revision, e.event_id, e.type, e.data, e.metadata, e.created';

export function toStoredEvent(row: EventRow): StoredEvent {
  return {
    streamId: row.stream_id,
    revision: Number(row.revision),
    position: formatPgPosition(row.tx, row.seq),
    id: row.event_id,
    type: row.type,
    data: row.data,
    metadata: row.metadata,
    created: row.created.toISOString(),
  };
}
