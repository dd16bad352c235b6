import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../config.js';
import type { PlanCatalog } from '../domain/plans.js';
import { type ChainRegistry, loadChains } from '../gateway/chains.js';
import { EventStoreError, openEventStore } from '../infra/eventstore/index.js';
import type { EventStore, Position } from '../infra/eventstore/port.js';
import { pingPostgres } from '../infra/postgres/database.js';
import { openReadModels } from '../infra/readmodels/index.js';
import type { ReadModelStore } from '../infra/readmodels/port.js';
import { redactUrl } from '../infra/startup.js';
import { PROJECTIONS } from '../projections/all.js';
import { ProjectionRunner } from '../projections/runner.js';
import { CliError, EXIT } from './command.js';

/** What the commands work on: the log, the read models, and the configuration's plans and chains. */
export interface Stores {
  store: EventStore;
  readModels: ReadModelStore;
  plans: PlanCatalog;
  chains: () => ChainRegistry;
  /**
   * Resolves once the read models show the event at `position`, which this process appended.
   * Only a projector publishes the change feed, so only then do running gateways drop what
   * they cached of the token or account.
   */
  applied(position: Position): Promise<void>;
  close(): Promise<void>;
}

export interface StoresOptions {
  /** Read models opened for a rebuild's bulk load (LevelDB only). */
  bulkLoad?: boolean;
}

export type OpenStores = (options?: StoresOptions) => Promise<Stores>;

/** How long a change waits for a projector running elsewhere to apply it. */
const PROJECTOR_WAIT_MS = 10_000;

/**
 * The stores the environment names, as the service opens them. On the embedded default (no
 * EVENTSTORE_URL or DATABASE_URL) this process is the only one with the log open, so it projects its own
 * changes. With EVENTSTORE_URL or DATABASE_URL the service's projector (ROLE=all or projector) does: it
 * applies them to the read models and publishes them on the change feed (Redis with REDIS_URL)
 * to every gateway; the CLI waits until the read models show them.
 */
export function storesFromEnv(env: Record<string, string | undefined>): OpenStores {
  return async (options = {}) => {
    const config = loadConfig(env);
    const shared = Boolean(config.eventstoreUrl || config.databaseUrl); // a log other processes append to and project
    if (!shared && !existsSync(join(config.dataDir, 'eventstore'))) {
      throw new CliError(EXIT.failed, 'no_data', `No event store in DATA_DIR=${config.dataDir}: set DATA_DIR to the service's data directory.`);
    }
    // pg waits for a server that accepts the connection and never answers as long as TCP does (for ever): one ping with a deadline first.
    if (config.databaseUrl && !(config.eventstoreUrl && config.mongodbUrl)) {
      const url = config.databaseUrl;
      await pingPostgres(url, POSTGRES_CONNECT_MS).catch((error: unknown) => {
        const silent = error instanceof Error && /timeout/i.test(error.message);
        throw unreachable(`PostgreSQL at ${redactUrl(url)} (DATABASE_URL)`, silent ? `no answer within ${POSTGRES_CONNECT_MS / 1000} s` : error);
      });
    }
    const logName = config.eventstoreUrl
      ? `the event store (EventStoreDB at ${redactUrl(config.eventstoreUrl)}, EVENTSTORE_URL)`
      : config.databaseUrl
        ? `the event store (PostgreSQL at ${redactUrl(config.databaseUrl)}, DATABASE_URL)`
        : `the event store in ${join(config.dataDir, 'eventstore')}`;
    const store = await openEventStore({ eventstoreUrl: config.eventstoreUrl, databaseUrl: config.databaseUrl, dataDir: config.dataDir }).catch(
      (error: unknown) => {
        if (error instanceof EventStoreError && error.code === 'store_damaged') throw new CliError(EXIT.failed, 'store_damaged', error.message);
        if (error instanceof EventStoreError && error.code === 'store_locked') {
          throw new CliError(
            EXIT.failed,
            'store_locked',
            `${config.dataDir} is open in another process: stop the service first (on the embedded default one process at a time opens DATA_DIR).`,
          );
        }
        throw unreachable(`Cannot open ${logName}`, error);
      },
    );
    const modelsName = config.mongodbUrl
      ? `the read models (MongoDB at ${redactUrl(config.mongodbUrl)}, MONGODB_URL)`
      : config.databaseUrl
        ? `the read models (PostgreSQL at ${redactUrl(config.databaseUrl)}, DATABASE_URL)`
        : `the read models in ${config.dataDir}`;
    let readModels: ReadModelStore;
    try {
      readModels = await openReadModels({
        mongodbUrl: config.mongodbUrl,
        databaseUrl: config.databaseUrl,
        dataDir: config.dataDir,
        bulkLoad: options.bulkLoad ?? false,
      });
    } catch (error) {
      await store.close();
      throw unreachable(`Cannot open ${modelsName}`, error);
    }
    return {
      store,
      readModels,
      plans: config.plans,
      chains: () => loadChains({ env: config.env }),
      applied: shared ? (position) => projectedElsewhere(readModels, position) : () => projectHere(store, readModels),
      async close() {
        await readModels.close();
        await store.close();
      },
    };
  };
}

/** How long the CLI waits for PostgreSQL to answer before it says it cannot reach it. */
const POSTGRES_CONNECT_MS = 10_000;

/** A store that could not be opened, as one line: what, where, and the driver's reason (LevelDB's is in its cause). */
function unreachable(what: string, error: unknown): CliError {
  if (error instanceof CliError) return error;
  const reasons: string[] = [];
  for (let e: unknown = error; e !== undefined && reasons.length < 3; e = e instanceof Error ? e.cause : undefined) {
    const message = e instanceof Error ? e.message : String(e);
    if (message && !reasons.includes(message)) reasons.push(message);
  }
  return new CliError(EXIT.failed, 'store_unavailable', `${what}: ${reasons.join(': ') || 'no reason given'}`);
}

/** Catches the read models up with the log: this process's change, and whatever the service left unprojected before it. */
async function projectHere(store: EventStore, readModels: ReadModelStore): Promise<void> {
  const runner = new ProjectionRunner(store, readModels, PROJECTIONS);
  await runner.start();
  try {
    await runner.caughtUp;
  } finally {
    await runner.stop();
  }
}

/** Polls every projection's checkpoint until it reaches `position`. */
export async function projectedElsewhere(readModels: ReadModelStore, position: Position, waitMs = PROJECTOR_WAIT_MS): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const checkpoints = await Promise.all(PROJECTIONS.map((p) => readModels.checkpoint(p.name)));
    if (checkpoints.every((c) => c !== null && c >= position)) return;
    if (Date.now() >= deadline) {
      throw new CliError(
        EXIT.failed,
        'not_projected',
        `The change is recorded (position ${position}) but no projector applied it within ${waitMs / 1000} s: gateways see it once a projector (ROLE=all or projector) runs.`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
