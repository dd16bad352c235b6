import { join } from 'node:path';
import { LevelReadModelStore } from './level.js';
import { MongoReadModelStore } from './mongo.js';
import type { ReadModelStore } from './port.js';

export { ReadModelError, type ReadModelErrorCode } from './errors.js';
export { LevelReadModelStore } from './level.js';
export { MongoReadModelStore, type MongoReadModelOptions } from './mongo.js';
export type { Doc, RangeOptions, ReadModelStore, ReadModelWrite } from './port.js';

/** MongoDB when a URL is given, otherwise LevelDB under `<dataDir>/readmodels`. */
export async function openReadModels(config: { mongodbUrl?: string; dataDir: string }): Promise<ReadModelStore> {
  if (config.mongodbUrl) return MongoReadModelStore.open(config.mongodbUrl);
  return LevelReadModelStore.open(join(config.dataDir, 'readmodels'));
}
