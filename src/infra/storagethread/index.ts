import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { MessageChannel, Worker, type WorkerOptions } from 'node:worker_threads';
import type { PlanCatalog } from '../../domain/plans.js';
import type { Projector } from '../../projections/runner.js';
import { INVALIDATION_TOPIC } from '../../projections/runner.js';
import { MemoryChangeFeed } from '../changefeed/index.js';
import type { EventStore, Position } from '../eventstore/port.js';
import { openEmbeddedReader } from '../readmodels/index.js';
import type { ReadModelReader, ReadModelStore } from '../readmodels/port.js';
import type { Ingester } from '../usage/ingester.js';
import { RemoteEventStore, RemoteReadModelStore, reviveStorageError, ThreadUsageQueue } from './remote.js';
import { RpcClient, type WireError } from './rpc.js';
import type { StorageThreadData } from './worker.js';

/**
 * The embedded default's storage on a thread of its own: the event store and read models
 * (LevelDB), the usage ingester and the projector run there, so the main thread's event loop
 * serves calls and the API without their batches and their garbage. Measured before it was
 * built: the embedded gateway added 1.19 ms at p99 over direct at 1,000 req/s with its usage
 * not ingested at all, against 2.68 ms with ingestion and projection on the main thread
 * (bench/plans.json, docs/decisions.md). The main thread reaches the stores through the same
 * ports (remote.ts): the read models' reads straight from their LevelDB, shared by both
 * threads, and everything else over the port; records go over in batches; token changes come
 * back as notices.
 */
export interface StorageThread {
  store: EventStore;
  readModels: ReadModelStore;
  /** Hears the projector's change notices (token revoked, disabled...). */
  feed: MemoryChangeFeed;
  usageQueue: ThreadUsageQueue;
  projector: Projector;
  ingester: Ingester;
  /** Stops the ingester (drain it first: `ingester.whenDrained`) and the projector, closes the stores, ends the thread. */
  close(): Promise<void>;
}

export interface StorageThreadOptions {
  dataDir: string;
  consumer: string;
  plans: PlanCatalog;
  /** The thread stopped while the process still needed it (a crash there). */
  onFailure?: (error: Error) => void;
  /** How long usage records gather on this side before they go over (default USAGE_SEND_EVERY_MS). */
  usageSendEveryMs?: number;
  /** How long the projector there lets a live usage batch gather more (default USAGE_LINGER_MS). */
  usageLingerMs?: number;
}

/** The worker's entry: compiled JavaScript in a build; under the test runner the TypeScript source, through tsx. */
function workerEntry(): URL {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new URL('./worker.js', here);
  const tsx = pathToFileURL(createRequire(here).resolve('tsx/esm/api')).href.replace(/\.cjs$/, '.mjs');
  const source = `import { tsImport } from ${JSON.stringify(tsx)}; await tsImport(${JSON.stringify(new URL('./worker.ts', here).href)}, ${JSON.stringify(here)});`;
  return new URL(`data:text/javascript,${encodeURIComponent(source)}`);
}

/** The main thread's handle on the projector over there: its state arrives as notices. */
class RemoteProjector implements Projector {
  isCaughtUp = false;
  lastLagMs: number | null = null;
  private caughtUpResolve!: () => void;
  readonly caughtUp = new Promise<void>((resolve) => {
    this.caughtUpResolve = resolve;
  });

  constructor(private readonly rpc: RpcClient) {}

  update(state: { caughtUp: boolean; lagMs: number | null }): void {
    this.lastLagMs = state.lagMs;
    if (state.caughtUp && !this.isCaughtUp) {
      this.isCaughtUp = true;
      this.caughtUpResolve();
    }
  }

  start(): Promise<void> {
    return this.rpc.call('projector.start');
  }

  stop(): Promise<void> {
    return this.rpc.call('projector.stop');
  }

  waitFor(position: Position, timeoutMs?: number): Promise<void> {
    return this.rpc.call('projector.waitFor', position, timeoutMs);
  }
}

class RemoteIngester implements Ingester {
  constructor(
    private readonly rpc: RpcClient,
    private readonly queue: ThreadUsageQueue,
  ) {}

  start(): void {
    void this.rpc.call('ingester.start').catch(() => undefined);
  }

  stop(): Promise<void> {
    return this.rpc.call('ingester.stop');
  }

  /** Everything enqueued on this side first goes over, then is ingested there. */
  async whenDrained(timeoutMs?: number): Promise<void> {
    await this.queue.flush();
    await this.rpc.call('ingester.whenDrained', timeoutMs);
  }
}

/** How the thread is started: a test keeps the Worker to stop it as a crash would. */
export type StartWorker = (entry: URL, options: WorkerOptions) => Worker;

/**
 * The storage thread's young generation, MB a semi-space, where the process has 8
 * (`--max-semi-space-size=8`, for the gateway's RSS: docs/operations.md). Usage records and
 * their events wait there for their commits (an ingester batch, the projector's 250 ms); with
 * 8 MB, collected ~45 times a second, nearly all of them reached the old generation. With 32:
 * 14 % less CPU a record with calls spread over 200 accounts, a third less at 1,000 calls a
 * second, level with one account; ~30–45 MB more RSS under that load (docs/decisions.md).
 */
const STORAGE_SEMI_SPACE_MB = 32;

/** The process's own `--max-semi-space-size` (its last one, from the command line or NODE_OPTIONS); 0 when not set. */
export function processSemiSpaceMb(execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ''): number {
  let mb = 0;
  for (const arg of [...nodeOptions.split(/\s+/), ...execArgv]) {
    const m = /^--max[-_]semi[-_]space[-_]size=(\d+)$/.exec(arg);
    if (m) mb = Number(m[1]);
  }
  return mb;
}

/**
 * V8 sizes an isolate's heap from its flags before a Worker's `resourceLimits`
 * (Heap::ConfigureHeap), and the flags are the process's: the thread's semi-space is set there
 * while its isolate starts (before it runs any code, so by 'online'), then put back. Heaps
 * already made (the main thread's) keep their size.
 */
export const startStorageWorker: StartWorker = (entry, options) => {
  const semiSpace = (mb: number): void => setFlagsFromString(`--max-semi-space-size=${mb}`);
  const putBack = (): void => semiSpace(processSemiSpaceMb());
  semiSpace(STORAGE_SEMI_SPACE_MB);
  let worker: Worker;
  try {
    worker = new Worker(entry, options);
  } catch (error) {
    putBack();
    throw error;
  }
  // A thread that fails to start exits without coming online. Putting back twice does no harm.
  worker.once('online', putBack).once('exit', putBack);
  return worker;
};

export async function openStorageThread(options: StorageThreadOptions, start: StartWorker = startStorageWorker): Promise<StorageThread> {
  const { port1, port2 } = new MessageChannel();
  const data: StorageThreadData = {
    port: port2,
    dataDir: options.dataDir,
    consumer: options.consumer,
    plans: options.plans,
    usageLingerMs: options.usageLingerMs,
  };
  const worker = start(workerEntry(), { workerData: data, transferList: [port2] });
  const feed = new MemoryChangeFeed();
  let projector: RemoteProjector | null = null;
  let closing = false;
  /** Set once the thread stopped by itself: nothing over there is left to close. */
  let crashed = false;
  let ready!: () => void;
  let failed!: (error: Error) => void;
  const started = new Promise<void>((resolve, reject) => {
    ready = resolve;
    failed = reject;
  });
  const rpc = new RpcClient(port1, reviveStorageError, (name, value) => {
    if (name === 'invalidate') void feed.publish(INVALIDATION_TOPIC, value as string);
    else if (name === 'projector') projector?.update(value as { caughtUp: boolean; lagMs: number | null });
    else if (name === 'ready') ready();
    else if (name === 'failed') failed(reviveStorageError(value as WireError));
  });
  const stopped = new Promise<void>((resolve) => {
    let reported = false;
    // An error is followed by an exit: one report.
    const gone = (error: Error): void => {
      if (reported) return;
      reported = true;
      if (!closing) crashed = true;
      rpc.fail(error);
      failed(error);
      if (!closing) options.onFailure?.(error);
      resolve();
    };
    worker.once('error', (error) => gone(error));
    worker.once('exit', (code) => gone(new Error(`storage thread stopped (exit code ${code})`)));
  });

  let reader: ReadModelReader;
  try {
    await started;
    // Opened after the thread's writer, sharing its LevelDB.
    reader = await openEmbeddedReader(options.dataDir);
  } catch (error) {
    closing = true;
    await worker.terminate();
    throw error;
  }
  projector = new RemoteProjector(rpc);
  const usageQueue = new ThreadUsageQueue(rpc, options.usageSendEveryMs);
  return {
    store: new RemoteEventStore(rpc),
    readModels: new RemoteReadModelStore(rpc, reader),
    feed,
    usageQueue,
    projector,
    ingester: new RemoteIngester(rpc, usageQueue),
    async close() {
      if (closing) return stopped;
      closing = true;
      await usageQueue.close();
      try {
        await reader.close();
        if (!crashed) await rpc.call('close');
      } finally {
        port1.close();
        await worker.terminate();
        await stopped;
      }
    },
  };
}
