import pg from 'pg';
import { POSTGRES_CONNECT_TIMEOUT_MS } from './database.js';

/** The session advisory lock that the one projector of a PostgreSQL deployment holds. */
const PROJECTOR_LOCK = 4_244_000_002;
const RETRY_MS = 1000;
/** While waiting, the reminder that the process is still waiting comes this often. */
const REMIND_MS = 60_000;

export interface ProjectorLock {
  release(): Promise<void>;
}

/**
 * Takes the projector lock, waiting while another process holds it: a second projector
 * started by mistake waits (and says so) instead of projecting and ingesting beside the first.
 * It holds the lock on a connection of its own until `release`; should that connection be lost,
 * the lock goes with it and `onLost` is told (the process must stop projecting).
 */
export async function acquireProjectorLock(
  url: string,
  options: { log: (message: string) => void; onLost: (error: Error) => void; signal?: AbortSignal },
): Promise<ProjectorLock> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: POSTGRES_CONNECT_TIMEOUT_MS });
  let released = false;
  const lost = (error: Error): void => {
    if (released) return;
    released = true;
    options.onLost(error);
  };
  client.on('error', lost);
  client.on('end', () => lost(new Error('the connection holding the projector lock ended')));
  await client.connect();
  try {
    let said = 0;
    for (;;) {
      const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [PROJECTOR_LOCK]);
      if (rows[0]?.locked) break;
      if (options.signal?.aborted) throw new Error('stopped while waiting for the projector lock');
      if (Date.now() - said >= REMIND_MS) {
        const holder = await client.query<{ pid: number; addr: string | null }>(
          `SELECT a.pid, a.client_addr::text AS addr FROM pg_locks l JOIN pg_stat_activity a USING (pid)
           WHERE l.locktype = 'advisory' AND l.granted AND l.objid = $1::bigint AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          [PROJECTOR_LOCK % 2 ** 32],
        );
        const who = holder.rows[0] ? ` (PostgreSQL backend ${holder.rows[0].pid}${holder.rows[0].addr ? ` from ${holder.rows[0].addr}` : ''})` : '';
        options.log(`Another projector holds the projector lock${who}: this one waits until it stops (only one projector may run)`);
        said = Date.now();
      }
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
    }
  } catch (error) {
    released = true;
    await client.end().catch(() => undefined);
    throw error;
  }
  return {
    async release() {
      if (released) return;
      released = true;
      await client.end().catch(() => undefined);
    },
  };
}
