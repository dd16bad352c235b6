import { join } from 'node:path';
import { type LevelReadModelOptions, LevelReadModelStore } from './level.js';
import type { ReadModelReader, ReadModelStore } from './port.js';
import { SplitReadModelReader, SplitReadModelStore } from './split.js';

export { ReadModelError, type ReadModelErrorCode } from './errors.js';
export { LevelReadModelStore } from './level.js';
export type { MongoReadModelOptions, MongoReadModelStore } from './mongo.js';
export type { Doc, RangeOptions, ReadModelReader, ReadModelStore, ReadModelWrite } from './port.js';
export type { PostgresReadModelStore } from './postgres.js';

/**
 * MongoDB when its URL is given, else PostgreSQL when DATABASE_URL is, otherwise LevelDB under `<dataDir>/readmodels`, with the raw rows
 * under `<dataDir>/readmodels-rows` (EMBEDDED_OWN_STORE). The MongoDB
 * driver (tens of MB of resident code) is imported only when it is used. `bulkLoad` and
 * `sharedWithThreads`: LevelDB only (LevelReadModelOptions).
 */
export async function openReadModels(config: { mongodbUrl?: string; databaseUrl?: string; dataDir: string } & LevelReadModelOptions): Promise<ReadModelStore> {
  if (config.mongodbUrl) {
    const { MongoReadModelStore } = await import('./mongo.js');
    return MongoReadModelStore.open(config.mongodbUrl);
  }
  if (config.databaseUrl) {
    const { PostgresReadModelStore } = await import('./postgres.js');
    return PostgresReadModelStore.open(config.databaseUrl);
  }
  const options = { bulkLoad: config.bulkLoad ?? false, sharedWithThreads: config.sharedWithThreads ?? false };
  const main = await LevelReadModelStore.open(embeddedReadModelsDir(config.dataDir), options);
  try {
    return await SplitReadModelStore.open(main, await LevelReadModelStore.open(embeddedRowsDir(config.dataDir), options), inOwnStore, EMBEDDED_OWN_STORE);
  } catch (error) {
    await main.close();
    throw error;
  }
}

/**
 * Collections the embedded default keeps in a LevelDB of their own (src/infra/readmodels/split.ts):
 * the raw rows of the usage projection (USAGE_METRICS.requestBlocks, written with `put` only),
 * nearly all the bytes the read models take per call.
 */
export const EMBEDDED_OWN_STORE: readonly string[] = ['usage_request_blocks'];
const inOwnStore = (collection: string): boolean => EMBEDDED_OWN_STORE.includes(collection);

/** Another thread's view of the embedded read models that a writer opened with `sharedWithThreads`: reads only. */
export async function openEmbeddedReader(dataDir: string): Promise<ReadModelReader> {
  const main = await LevelReadModelStore.reader(embeddedReadModelsDir(dataDir));
  try {
    return new SplitReadModelReader(main, await LevelReadModelStore.reader(embeddedRowsDir(dataDir)), inOwnStore);
  } catch (error) {
    await main.close();
    throw error;
  }
}

/** Where the embedded read models live under DATA_DIR. */
export function embeddedReadModelsDir(dataDir: string): string {
  return join(dataDir, 'readmodels');
}

/** Where the embedded read models' raw rows live under DATA_DIR (EMBEDDED_OWN_STORE). */
export function embeddedRowsDir(dataDir: string): string {
  return join(dataDir, 'readmodels-rows');
}
