import { join } from 'node:path';
import { LevelEventStore } from './level.js';
import type { EventStore } from './port.js';

export { EventStoreError, type EventStoreErrorCode } from './errors.js';
export type { EsdbEventStore } from './esdb.js';
export { LevelEventStore, type LevelEventStoreOptions } from './level.js';
export type { PostgresEventStore } from './postgres.js';

/**
 * EventStoreDB when its URL is given, else PostgreSQL when DATABASE_URL is, else the embedded
 * LevelDB store under `<dataDir>/eventstore`. The EventStoreDB client (tens of MB of resident
 * code) and the PostgreSQL one are imported only when used.
 */
export async function openEventStore(config: { eventstoreUrl?: string; databaseUrl?: string; dataDir: string }): Promise<EventStore> {
  if (config.eventstoreUrl) {
    const { EsdbEventStore } = await import('./esdb.js');
    return EsdbEventStore.connect(config.eventstoreUrl);
  }
  if (config.databaseUrl) {
    const { PostgresEventStore } = await import('./postgres.js');
    return PostgresEventStore.open(config.databaseUrl);
  }
  return LevelEventStore.open(join(config.dataDir, 'eventstore'));
}
