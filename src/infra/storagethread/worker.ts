/**
 * The storage thread (see ./index.ts): owns the embedded event store and read models, and runs
 * the usage ingester, the projector and the retention job beside them. Everything else reaches
 * the stores through the port given in `workerData`.
 */
import { type MessagePort, workerData } from 'node:worker_threads';
import type { PlanCatalog } from '../../domain/plans.js';
import type { UsageRecord } from '../../domain/usage.js';
import { startProjecting } from '../../projections/all.js';
import { INVALIDATION_TOPIC } from '../../projections/runner.js';
import { MemoryChangeFeed } from '../changefeed/index.js';
import { openEventStore } from '../eventstore/index.js';
import type { EventStore } from '../eventstore/port.js';
import { openReadModels } from '../readmodels/index.js';
import type { ReadModelStore } from '../readmodels/port.js';
import { MemoryUsageBackend, MemoryUsageQueue } from '../usage/index.js';
import { RpcServer, toWire } from './rpc.js';

export interface StorageThreadData {
  port: MessagePort;
  dataDir: string;
  consumer: string;
  plans: PlanCatalog;
  usageLingerMs?: number;
}

/** How often the projector's state (caught up, lag) is sent to the main thread, when it changed. */
const STATE_EVERY_MS = 200;

const data = workerData as StorageThreadData;
const { port } = data;

async function open(): Promise<void> {
  let store: EventStore | null = null;
  let readModels: ReadModelStore | null = null;
  try {
    store = await openEventStore({ dataDir: data.dataDir });
    // Shared: the main thread reads the same LevelDB directly (LevelReadModelStore.reader).
    readModels = await openReadModels({ dataDir: data.dataDir, sharedWithThreads: true });
  } catch (error) {
    await store?.close();
    port.postMessage({ t: 'notice', name: 'failed', value: toWire(error) });
    return;
  }
  serve(store, readModels);
}

function serve(store: EventStore, readModels: ReadModelStore): void {
  // The usage queue and the change feed are in-process ones here: the main thread feeds the one
  // and hears the other through the port.
  const queue = new MemoryUsageQueue(new MemoryUsageBackend(), data.consumer);
  const feed = new MemoryChangeFeed();
  const { projector, ingester, retention } = startProjecting({
    store,
    readModels,
    feed,
    usageQueue: queue,
    plans: data.plans,
    now: () => new Date(),
    lingerMs: data.usageLingerMs,
  });

  let sentState = '';
  const sendState = (): void => {
    const state = { caughtUp: projector.isCaughtUp, lagMs: projector.lastLagMs };
    const key = `${state.caughtUp}:${state.lagMs}`;
    if (key === sentState) return;
    sentState = key;
    server.notify('projector', state);
  };
  const stateTimer = setInterval(sendState, STATE_EVERY_MS);
  stateTimer.unref();
  void projector.caughtUp.then(sendState);

  const server = new RpcServer(
    port,
    {
      'store.append': (...args: Parameters<EventStore['append']>) => store.append(...args),
      'store.readStream': (...args: Parameters<EventStore['readStream']>) => store.readStream(...args),
      'store.headPosition': () => store.headPosition(),
      'store.truncateBefore': (...args: Parameters<EventStore['truncateBefore']>) => store.truncateBefore(...args),
      'readModels.commit': (...args: Parameters<ReadModelStore['commit']>) => readModels.commit(...args),
      'readModels.checkpoint': (projection: string) => readModels.checkpoint(projection),
      'readModels.write': (...args: Parameters<ReadModelStore['write']>) => readModels.write(...args),
      'readModels.reset': (...args: Parameters<ReadModelStore['reset']>) => readModels.reset(...args),
      'projector.start': () => projector.start(),
      'projector.stop': () => projector.stop(),
      'projector.waitFor': (position: string, timeoutMs?: number) => projector.waitFor(position, timeoutMs),
      'ingester.start': () => ingester.start(),
      'ingester.stop': () => ingester.stop(),
      'ingester.whenDrained': (timeoutMs?: number) => ingester.whenDrained(timeoutMs),
      'usage.depth': () => queue.depth(),
      'usage.appendedThrough': () => queue.backend.appendedThrough(),
      close: async () => {
        clearInterval(stateTimer);
        await retention.stop();
        await ingester.stop();
        await projector.stop();
        await queue.close();
        await feed.close();
        await readModels.close();
        await store.close();
      },
    },
    { 'store.subscribeToAll': (...args: Parameters<EventStore['subscribeToAll']>) => store.subscribeToAll(...args) },
    (name, value) => {
      if (name === 'usage') for (const record of value as UsageRecord[]) queue.enqueue(record);
    },
  );
  // The main thread's token cache hears of changes from here.
  void feed.subscribe(INVALIDATION_TOPIC, (message) => server.notify('invalidate', message));
  server.notify('ready', null);
}

void open();
