import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The PostgreSQL the benchmarks make their databases on. */
export const BENCH_PG_ADMIN_URL = process.env.PG_BENCH_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** One statement on a connection of its own, closed after it; the rows it returned. */
export async function sql<T extends pg.QueryResultRow = pg.QueryResultRow>(url: string, text: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text, params)).rows;
  } finally {
    await client.end();
  }
}

/** A fresh database on the benchmarks' PostgreSQL for `run`, dropped after it, whether `run` succeeds or throws. */
export async function withBenchDatabase<T>(run: (url: string) => Promise<T>): Promise<T> {
  const name = `gw_bench_${randomBytes(4).toString('hex')}`;
  await sql(BENCH_PG_ADMIN_URL, `CREATE DATABASE ${name}`);
  try {
    return await run(Object.assign(new URL(BENCH_PG_ADMIN_URL), { pathname: `/${name}` }).toString());
  } finally {
    await sql(BENCH_PG_ADMIN_URL, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
}
