import { join } from 'node:path';
import { LevelReadModelStore } from './level.js';
import type { ReadModelStore } from './port.js';

export { ReadModelError, type ReadModelErrorCode } from './errors.js';
export { LevelReadModelStore } from './level.js';
export type { MongoReadModelOptions, MongoReadModelStore } from './mongo.js';
export type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from './port.js';

/**
 * MongoDB when a URL is given, otherwise LevelDB under `<dataDir>/readmodels`. The MongoDB
 * driver (tens of MB of resident code) is imported only when it is used. `bulkLoad`: for a
 * process that rebuilds the read models and exits (LevelDB only).
 */
export async function openReadModels(config: { mongodbUrl?: string; dataDir: string; bulkLoad?: boolean }): Promise<ReadModelStore> {
  if (config.mongodbUrl) {
    const { MongoReadModelStore } = await import('./mongo.js');
    return MongoReadModelStore.open(config.mongodbUrl);
  }
  return LevelReadModelStore.open(join(config.dataDir, 'readmodels'), { bulkLoad: config.bulkLoad ?? false });
}
