import pg from 'pg';

/**
 * What the PostgreSQL adapters share: a pool per store on `DATABASE_URL`, and the versioned
 * schema each part of the service keeps there (`gw_schema`: one row per component).
 */
export type PostgresErrorCode = 'schema_too_new';

export class PostgresError extends Error {
  constructor(
    readonly code: PostgresErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'PostgresError';
  }
}

export interface Migration {
  /** The version the schema has once `sql` ran (1, 2, …). */
  version: number;
  sql: string;
}

/**
 * Everything that creates or alters tables runs under this advisory lock, so two processes
 * starting together do not race to create the same tables.
 */
const MIGRATION_LOCK = 4_244_000_001;

/** A new connection (or a wait for a free one) fails after this long. */
export const POSTGRES_CONNECT_TIMEOUT_MS = 5000;
/** A query unanswered this long fails and its connection is dropped; well above any one statement of ours (a catch-up batch's commit takes well under a second). */
export const POSTGRES_QUERY_TIMEOUT_MS = 30_000;

/**
 * `options` are the sessions' settings (`-c name=value …`); an `options` in `url` takes their
 * place. Connections are kept however long they sit idle (pg closes them after 10 s by
 * default): a new one costs a server process and its first queries warm that process's caches,
 * and a metrics call fans out eight queries at once, so after every quiet spell it paid for
 * eight (bench/postgres-metrics.ts: the first call after 11 s quiet).
 */
export function openPool(url: string, max: number, options?: string): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max,
    idleTimeoutMillis: 0,
    // A server that accepts connections but never answers (a stalled host, a half-open proxy) must
    // not hold a call for ever: the caller gets a store-unreachable error instead (503 on the API).
    connectionTimeoutMillis: POSTGRES_CONNECT_TIMEOUT_MS,
    query_timeout: POSTGRES_QUERY_TIMEOUT_MS,
    ...(options === undefined ? {} : { options }),
  });
  // An idle client whose server went away: the pool drops it, and the next query reconnects.
  pool.on('error', () => undefined);
  // A client checked out (a transaction between two statements) when its server goes away emits
  // 'error' with no listener of the pool's: that would stop the process. Its next statement fails
  // instead, and the transaction's caller sees that.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

/**
 * Brings `component`'s tables to the newest version this release knows. A database whose
 * version is newer than that was written by a later release: this one refuses to start rather
 * than read or write a layout it does not know.
 */
export async function migrate(pool: pg.Pool, component: string, migrations: readonly Migration[]): Promise<void> {
  const known = migrations.at(-1)?.version ?? 0;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS gw_schema (component text PRIMARY KEY, version integer NOT NULL)');
    const { rows } = await client.query<{ version: number }>('SELECT version FROM gw_schema WHERE component = $1', [component]);
    const current = rows[0]?.version ?? 0;
    if (current > known) {
      throw new PostgresError(
        'schema_too_new',
        `the ${component} tables in PostgreSQL are at schema version ${current}, written by a newer release; this one knows up to version ${known} and will not use them (run the newer release, or restore a database of this one)`,
      );
    }
    for (const migration of migrations) {
      if (migration.version > current) await client.query(migration.sql);
    }
    if (known > current) {
      await client.query('INSERT INTO gw_schema (component, version) VALUES ($1, $2) ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version', [
        component,
        known,
      ]);
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** Errors after which a transaction can simply be run again: serialization failure, deadlock. */
export function isRetryable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '40001' || code === '40P01';
}

/** Whether PostgreSQL answers at `url`, for the startup wait. */
export async function pingPostgres(url: string, timeoutMs: number): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  try {
    await client.connect();
    await client.query('SELECT 1');
  } finally {
    await client.end().catch(() => undefined);
  }
}
