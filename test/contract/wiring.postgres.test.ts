import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { openEventStore } from '../../src/infra/eventstore/index.js';
import { PostgresEventStore } from '../../src/infra/eventstore/postgres.js';
import { openReadModels } from '../../src/infra/readmodels/index.js';
import { PostgresReadModelStore } from '../../src/infra/readmodels/postgres.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { freePort, startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';

const dirs: string[] = [];
const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-pg-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('DATABASE_URL in the configuration', () => {
  const base = (): Record<string, string> => ({ DATA_DIR: tempDir(), REDIS_URL: 'redis://127.0.0.1:6379' });

  it('stands for EVENTSTORE_URL and MONGODB_URL, together or for either one, in the roles beside others', () => {
    const pgUrl = 'postgres://gw@db:5432/gw';
    expect(loadConfig({ ...base(), ROLE: 'gateway', DATABASE_URL: pgUrl }).databaseUrl).toBe(pgUrl);
    expect(() => loadConfig({ ...base(), ROLE: 'projector', DATABASE_URL: pgUrl, EVENTSTORE_URL: 'esdb://es:2113?tls=false' })).not.toThrow();
    expect(() => loadConfig({ ...base(), ROLE: 'api', DATABASE_URL: pgUrl, MONGODB_URL: 'mongodb://m:27017/gw' })).not.toThrow();
    expect(() => loadConfig({ ...base(), ROLE: 'api', EVENTSTORE_URL: 'esdb://es:2113?tls=false' })).toThrow(/ROLE=api .*DATABASE_URL may stand for either/);
    expect(() => loadConfig({ ...base(), DATABASE_URL: 'mysql://db/gw' })).toThrow(/DATABASE_URL/);
  });
});

const unavailable = await postgresUnavailable();

describe.skipIf(unavailable !== null)(unavailable ? `PostgreSQL wiring (skipped: ${unavailable})` : 'PostgreSQL wiring', () => {
  let db: TestDatabase;
  let redis: TestRedisServer;
  beforeAll(async () => {
    db = await createTestDatabase();
    redis = await startTestRedisServer();
  });
  afterAll(async () => {
    await redis?.stop();
    await db?.drop();
  });

  const stop = async (service: ServiceProcess): Promise<void> => {
    service.child.kill('SIGTERM');
    await service.exited;
  };

  it('opens both stores on PostgreSQL where no URL of their own is given', async () => {
    const store = await openEventStore({ databaseUrl: db.url, dataDir: tempDir() });
    const readModels = await openReadModels({ databaseUrl: db.url, dataDir: tempDir() });
    try {
      expect(store).toBeInstanceOf(PostgresEventStore);
      expect(readModels).toBeInstanceOf(PostgresReadModelStore);
    } finally {
      await store.close();
      await readModels.close();
    }
  });

  it('a service whose PostgreSQL does not come within STARTUP_TIMEOUT_SECONDS names it (without its password) and exits 1', { timeout: 30_000 }, async () => {
    const url = `postgres://gw:hunter2@127.0.0.1:${await freePort()}/gw`;
    const service = startService({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off', DATABASE_URL: url, STARTUP_TIMEOUT_SECONDS: '2' });
    expect(await service.exited).toBe(1);
    expect(service.output()).toMatch(/Waiting for PostgreSQL at postgres:\/\/gw:\*\*\*@127\.0\.0\.1:\d+\/gw/);
    expect(service.output()).toMatch(/Could not start: PostgreSQL at postgres:\/\/gw:\*\*\*@127\.0\.0\.1:\d+\/gw was not reachable within 2 s/);
    expect(service.output()).not.toMatch(/hunter2|ready at/);
  });

  it('a service refuses tables of a newer schema version at once, saying why', { timeout: 30_000 }, async () => {
    const other = await createTestDatabase();
    try {
      await (await PostgresReadModelStore.open(other.url)).close();
      const client = new pg.Client({ connectionString: other.url });
      await client.connect();
      await client.query(`UPDATE gw_schema SET version = 7 WHERE component = 'readmodels'`);
      await client.end();
      const service = startService({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off', DATABASE_URL: other.url, STARTUP_TIMEOUT_SECONDS: '60' });
      expect(await service.exited).toBe(1);
      expect(service.output()).toMatch(/readmodels tables in PostgreSQL are at schema version 7, written by a newer release/);
      expect(service.output()).not.toMatch(/ready at/);
    } finally {
      await other.drop();
    }
  });

  it('the api role does not name a data directory at start: it keeps nothing there', { timeout: 60_000 }, async () => {
    const service = startService({ LOCAL_DEVNET: 'off', ROLE: 'api', DATABASE_URL: db.url, REDIS_URL: redis.url, DATA_DIR: tempDir() });
    try {
      await service.ready;
      for (let i = 0; i < 50 && !/dashboard and API:/.test(service.output()); i++) await new Promise((r) => setTimeout(r, 100));
      expect(service.output()).toMatch(/dashboard and API: http:\/\/\S+\/\n/);
      expect(service.output()).not.toMatch(/data: /);
    } finally {
      await stop(service);
    }
  });

  it("a second projector waits for the first one's lock, says so, and takes over when it stops", { timeout: 60_000 }, async () => {
    const env = { LOCAL_DEVNET: 'off', ROLE: 'projector', DATABASE_URL: db.url, REDIS_URL: redis.url };
    const first = startService({ ...env, DATA_DIR: tempDir() });
    await first.ready;
    const second = startService({ ...env, DATA_DIR: tempDir() });
    try {
      for (let i = 0; i < 300 && !/Another projector holds the projector lock/.test(second.output()); i++) await new Promise((r) => setTimeout(r, 100));
      expect(second.output()).toMatch(/Another projector holds the projector lock \(PostgreSQL backend \d+.*\): this one waits/);
      expect(second.output()).not.toMatch(/ready at/);
      await stop(first);
      await second.ready;
    } finally {
      await stop(first);
      await stop(second);
    }
  });
});
