import { randomBytes } from 'node:crypto';
import pg from 'pg';

/**
 * A database of its own for a test file on the machine's PostgreSQL (`PG_TEST_ADMIN_URL`,
 * default 127.0.0.1:5432 as `postgres`, trust auth), dropped at the end, so runs and files never
 * share tables. `.ci/run` starts the cluster when it is down; a developer machine without one
 * skips the PostgreSQL tests, saying why.
 */
export const PG_ADMIN_URL = process.env.PG_TEST_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface TestDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

/** Why PostgreSQL tests cannot run here, or null when they can. */
export async function postgresUnavailable(): Promise<string | null> {
  const client = new pg.Client({ connectionString: PG_ADMIN_URL, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return null;
  } catch (error) {
    return `PostgreSQL not reachable at ${PG_ADMIN_URL} (${error instanceof Error ? error.message : String(error)}); .ci/run starts it`;
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `gw_test_${randomBytes(6).toString('hex')}`;
  await admin((client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: () => admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

async function admin<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: PG_ADMIN_URL });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}
