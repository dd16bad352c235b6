import type { PlanCatalog } from '../domain/plans.js';
import type { ChangeFeed } from '../infra/changefeed/port.js';
import type { EventStore } from '../infra/eventstore/port.js';
import type { ReadModelStore } from '../infra/readmodels/port.js';
import { UsageIngester } from '../infra/usage/ingester.js';
import type { UsageQueue } from '../infra/usage/port.js';
import { alertsProjection } from './alerts.js';
import { coreProjection } from './core.js';
import type { Projection } from './projection.js';
import { type RetentionJob, startRetentionJob } from './retention.js';
import { ProjectionRunner } from './runner.js';
import { usageMetricsProjection } from './usageMetrics.js';
import { usageTotalsProjection } from './usageTotals.js';

/** Every projection the projector runs, in one place (the rebuild command uses it too). */
export const PROJECTIONS: Projection[] = [coreProjection, usageTotalsProjection, usageMetricsProjection, alertsProjection];

export interface ProjectingParts {
  projector: ProjectionRunner;
  ingester: UsageIngester;
  retention: RetentionJob;
}

/**
 * What runs beside the stores where a process projects (on its main thread, or on the
 * embedded default's storage thread): the projector, the usage ingester, the retention job.
 * The projector and the ingester start when told; the retention job starts at once.
 */
export function startProjecting(options: {
  store: EventStore;
  readModels: ReadModelStore;
  feed: ChangeFeed;
  usageQueue: UsageQueue;
  plans: PlanCatalog;
  now: () => Date;
  /** The embedded store skips or refuses every id a stream holds: the ingester need not remember them. */
  storeKnowsEveryId: boolean;
}): ProjectingParts {
  const { store, readModels, now } = options;
  return {
    projector: new ProjectionRunner(store, readModels, PROJECTIONS, options.feed, () => now().getTime()),
    ingester: new UsageIngester({ queue: options.usageQueue, store, exactlyOnce: { storeKnowsEveryId: options.storeKnowsEveryId } }),
    retention: startRetentionJob({ readModels, plans: options.plans, now, onError: (e) => console.error('usage retention pass failed:', e) }),
  };
}
