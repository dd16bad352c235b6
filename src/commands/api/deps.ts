import type { PlanCatalog } from '../../domain/plans.js';
import type { Position } from '../../infra/eventstore/port.js';
import type { AlertQueries } from '../../projections/alertsQueries.js';
import type { UsageQueries } from '../../projections/metricsQueries.js';
import type { Queries } from '../../projections/queries.js';
import type { AccountCommands } from '../accountCommands.js';
import type { AlertCommands } from '../alertCommands.js';
import type { AuthThrottle } from '../authThrottle.js';
import type { Sessions } from './sessions.js';

/** What the management API needs, passed to each plugin (no global state). */
export interface ApiDeps {
  commands: AccountCommands;
  queries: Queries;
  sessions: Sessions;
  /** Log-in and sign-up limits per email and client address. */
  authThrottle: AuthThrottle;
  plans: PlanCatalog;
  /** Resolves once the read models include the event at `position` (read-your-writes). */
  waitFor(position: Position | null): Promise<void>;
  /** Operator token for /api/v1/admin; admin routes refuse everything when unset. */
  adminToken: string | null;
  secureCookies: boolean;
  now(): Date;
  /** Usage metrics and raw rows (the metrics API and the exports). */
  usage: UsageQueries;
  /** Chain ids of the registry, to validate `?chain=`. */
  chainIds: readonly string[];
  alerts: AlertCommands;
  alertQueries: AlertQueries;
  /** A token's open WebSocket connections and subscriptions on this process's gateway; null where this process serves no chains. */
  liveWebSockets(tokenId: string): { connections: number; subscriptions: number } | null;
}
