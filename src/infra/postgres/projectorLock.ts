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

export interface HeldProjectorLock {
  /**
   * What the lock guards failed on its own (a projection could not read or commit past a store
   * error): the lock is let go and taken again, which stops it and starts it anew.
   */
  restart(error: Error): Promise<void>;
  /** Stops taking the lock again (waits for an attempt under way); what it guards stays as it is. */
  stopRegaining(): Promise<void>;
  /** Stops taking it again and lets it go. */
  release(): Promise<void>;
}

/**
 * Takes the lock as `acquireProjectorLock` does, and keeps it for a process that serves more than
 * projections (`ROLE=all`): when its connection is lost (PostgreSQL restarted or away), `onLost`
 * stops what the lock guards, the lock is taken again in the background, retried every second
 * while PostgreSQL is unreachable (and waited for while another projector holds it), and
 * `onRegained` starts it again. Chain calls and the API go on meanwhile.
 */
export async function holdProjectorLock(
  url: string,
  options: { log: (message: string) => void; onLost: () => Promise<void>; onRegained: () => Promise<void> },
): Promise<HeldProjectorLock> {
  const stopping = new AbortController();
  let regaining: Promise<void> | null = null;
  /** False from a loss until the lock is taken again and what it guards has started. */
  let holding = true;
  const take = async (): Promise<ProjectorLock> => {
    // A connection lost before it held the lock fails the attempt (retried); only a held lock's loss stops projecting.
    let held = false;
    const lock = await acquireProjectorLock(url, { log: options.log, onLost: (error) => held && lost(error), signal: stopping.signal });
    held = true;
    return lock;
  };
  let current: ProjectorLock = await take();

  async function regain(): Promise<void> {
    // Let go first: a lock this process still holds on another connection would make it wait for itself.
    await current.release();
    await options.onLost();
    let saidWaiting = false;
    while (!stopping.signal.aborted) {
      try {
        current = await take();
      } catch (error) {
        if (stopping.signal.aborted) return;
        if (!saidWaiting) options.log(`projector lock: PostgreSQL not reachable yet (${(error as Error).message}); retrying every ${RETRY_MS / 1000} s`);
        saidWaiting = true;
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
        continue;
      }
      if (stopping.signal.aborted) return current.release();
      holding = true; // a loss from here on is this lock's: it queues the next round
      try {
        await options.onRegained();
        options.log('projector lock taken again: projecting resumed');
        return;
      } catch (error) {
        // PostgreSQL went away again while projecting started: let the lock go, stop what started, try again.
        options.log(`projector lock: projecting could not resume (${(error as Error).message}); trying again`);
        holding = false;
        await current.release();
        await options.onLost();
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    }
  }

  function lost(error: Error): void {
    if (stopping.signal.aborted || !holding) return;
    holding = false;
    options.log(`projector lock lost (${error.message}): projecting stops until it is taken again; chain calls and the API go on`);
    // One after the other: a lock lost again while projecting resumes waits for that to finish.
    regaining = (regaining ?? Promise.resolve()).then(regain).catch((e: unknown) => options.log(`projector lock: resuming failed (${(e as Error).message})`));
  }

  const stopRegaining = async (): Promise<void> => {
    stopping.abort();
    await regaining;
  };
  return {
    async restart(error) {
      // Already lost (what failed stopped with it, or is being started again): nothing more to do.
      if (stopping.signal.aborted || !holding) return;
      await current.release(); // its connection's loss is not reported twice
      lost(error);
    },
    stopRegaining,
    async release() {
      await stopRegaining();
      await current.release();
    },
  };
}
