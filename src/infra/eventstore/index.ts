import { join } from 'node:path';
import { LevelEventStore } from './level.js';
import type { EventStore } from './port.js';

export { EventStoreError, type EventStoreErrorCode } from './errors.js';
export type { EsdbEventStore } from './esdb.js';
export { LevelEventStore, type LevelEventStoreOptions } from './level.js';

/**
 * EventStoreDB when a URL is given, else the embedded LevelDB store under `<dataDir>/eventstore`.
 * The EventStoreDB client (tens of MB of resident code) is imported only when it is used.
 */
export async function openEventStore(config: { eventstoreUrl?: string; dataDir: string }): Promise<EventStore> {
  if (config.eventstoreUrl) {
    const { EsdbEventStore } = await import('./esdb.js');
    return EsdbEventStore.connect(config.eventstoreUrl);
  }
  return LevelEventStore.open(join(config.dataDir, 'eventstore'));
}
