import { join } from 'node:path';
import { EsdbEventStore } from './esdb.js';
import { LevelEventStore } from './level.js';
import type { EventStore } from './port.js';

export { EventStoreError, type EventStoreErrorCode } from './errors.js';
export { EsdbEventStore } from './esdb.js';
export { LevelEventStore, type LevelEventStoreOptions } from './level.js';

/** EventStoreDB when a URL is given, else the embedded LevelDB store under `<dataDir>/eventstore`. */
export async function openEventStore(config: { eventstoreUrl?: string; dataDir: string }): Promise<EventStore> {
  if (config.eventstoreUrl) return EsdbEventStore.connect(config.eventstoreUrl);
  return LevelEventStore.open(join(config.dataDir, 'eventstore'));
}
