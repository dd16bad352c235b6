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
import { USAGE_EVENT_TYPES } from './usageRecord.js';
import { usageTotalsProjection } from './usageTotals.js';

/** Every projection the projector runs, in one place (the rebuild command uses it too). */
export const PROJECTIONS: Projection[] = [coreProjection, usageTotalsProjection, usageMetricsProjection, alertsProjection];

/**
 * How long a live batch of usage events may gather more before its commit. Nobody waits for one
 * (the API waits for the projector only after its own commands, whose events commit within
 * 5 ms), and each roll-up, raw-row block and client-IP document a batch touches is written once
 * for all its calls: with calls spread over many accounts, a batch of a few ms wrote ~4
 * documents a call. 250 ms keeps the projection lag well under its 1 s bound.
 */
export const USAGE_LINGER_MS = 250;

export interface ProjectingParts {
  projector: ProjectionRunner;
  ingester: UsageIngester;
  retention: RetentionJob;
}

/**
 * What runs beside the stores where a process projects (on its main thread, or on the
 * embedded default's storage thread): the projector, the usage ingester, the retention job
 * (the usage read models' and the usage log's).
 * The projector and the ingester start when told; the retention job starts at once.
 */
export function startProjecting(options: {
  store: EventStore;
  readModels: ReadModelStore;
  feed: ChangeFeed;
  usageQueue: UsageQueue;
  plans: PlanCatalog;
  now: () => Date;
  /** How long a live usage batch gathers more before its commit (default USAGE_LINGER_MS). */
  lingerMs?: number;
}): ProjectingParts {
  const { store, readModels, now } = options;
  return {
    projector: new ProjectionRunner(store, readModels, PROJECTIONS, options.feed, () => now().getTime(), {
      types: USAGE_EVENT_TYPES,
      ms: options.lingerMs ?? USAGE_LINGER_MS,
    }),
    ingester: new UsageIngester({ queue: options.usageQueue, store }),
    retention: startRetentionJob({ readModels, store, plans: options.plans, now, onError: (e) => console.error('usage retention pass failed:', e) }),
  };
}
