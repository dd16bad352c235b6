import type { EventStore } from '../infra/eventstore/port.js';
import type { ReadModelStore } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';
import { ProjectionRunner } from './runner.js';

/**
 * Node flags of a rebuild's process (`npm run cli -- rebuild` restarts itself with them; the
 * replay benchmark too, so that it measures what an operator's rebuild gets). A rebuild
 * allocates a few short-lived objects per event: with a 64 MB young generation (16 MB by
 * default) far fewer of them survive a scavenge into the old generation. Only for rebuilds:
 * the young generation is resident memory for as long as a process runs, and the service's
 * RSS target is 200 MB.
 */
export const REBUILD_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=64'];

/** Whether this process runs with every flag of REBUILD_NODE_FLAGS. */
export const hasRebuildFlags = (execArgv: readonly string[] = process.execArgv): boolean => REBUILD_NODE_FLAGS.every((f) => execArgv.includes(f));

/**
 * Drops the projections' read models and checkpoints, then replays the whole log into them: what
 * retention left of it (src/projections/logRetention.ts), the closed months' summaries and the
 * calls still kept. `now` (epoch ms, the clock by default) decides which replayed usage
 * documents have expired already and are not written.
 */
export async function rebuildProjections(
  store: EventStore,
  readModels: ReadModelStore,
  projections: Projection[],
  options: { now?: () => number } = {},
): Promise<{ ms: number }> {
  const started = performance.now();
  for (const p of projections) await readModels.reset(p.name, p.collections);
  const runner = new ProjectionRunner(store, readModels, projections, null, options.now);
  await runner.start();
  await runner.caughtUp;
  await runner.stop();
  return { ms: performance.now() - started };
}
