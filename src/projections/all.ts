import { alertsProjection } from './alerts.js';
import { coreProjection } from './core.js';
import type { Projection } from './projection.js';
import { usageMetricsProjection } from './usageMetrics.js';
import { usageTotalsProjection } from './usageTotals.js';

/** Every projection the projector runs, in one place (the rebuild command uses it too). */
export const PROJECTIONS: Projection[] = [coreProjection, usageTotalsProjection, usageMetricsProjection, alertsProjection];
