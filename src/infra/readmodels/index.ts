import { join } from 'node:path';
import { type LevelReadModelOptions, LevelReadModelStore } from './level.js';
import type { ReadModelStore } from './port.js';

export { ReadModelError, type ReadModelErrorCode } from './errors.js';
export { LevelReadModelStore } from './level.js';
export type { MongoReadModelOptions, MongoReadModelStore } from './mongo.js';
export type { Doc, RangeOptions, ReadModelReader, ReadModelStore, ReadModelWrite } from './port.js';

/**
 * MongoDB when a URL is given, otherwise LevelDB under `<dataDir>/readmodels`. The MongoDB
 * driver (tens of MB of resident code) is imported only when it is used. `bulkLoad` and
 * `sharedWithThreads`: LevelDB only (LevelReadModelOptions).
 */
export async function openReadModels(config: { mongodbUrl?: string; dataDir: string } & LevelReadModelOptions): Promise<ReadModelStore> {
  if (config.mongodbUrl) {
    const { MongoReadModelStore } = await import('./mongo.js');
    return MongoReadModelStore.open(config.mongodbUrl);
  }
  return LevelReadModelStore.open(embeddedReadModelsDir(config.dataDir), { bulkLoad: config.bulkLoad ?? false, sharedWithThreads: config.sharedWithThreads ?? false });
}

/** Where the embedded read models live under DATA_DIR. */
export function embeddedReadModelsDir(dataDir: string): string {
  return join(dataDir, 'readmodels');
}
