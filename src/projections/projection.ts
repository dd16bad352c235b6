import type { StoredEvent } from '../infra/eventstore/port.js';
import type { ReadModelWrite } from '../infra/readmodels/port.js';

/**
 * A projection is pure: from one stored event to the read-model writes it causes, plus the
 * change notifications other processes need (e.g. gateways dropping a cached token). The
 * runner applies the writes with the checkpoint, so replaying never double-counts.
 */
export interface Projection {
  name: string;
  /** Collections it owns: dropped and rebuilt together. */
  collections: string[];
  /**
   * The event types it handles, when it handles only some: the runner does not call it for
   * the others (a replay is mostly usage events, which most projections ignore).
   */
  eventTypes?: ReadonlySet<string>;
  project(event: StoredEvent): ReadModelWrite[];
  /**
   * The writes of several events at once, with the effect of `project` applied to each in
   * order: for projections that fold what they count (a replay projects thousands of events
   * into the same documents). The runner uses it when present. Writes expiring at or before
   * `nowMs` may be left out (the runner drops them anyway): a replay of old calls need not
   * build documents that are not kept.
   */
  projectBatch?(events: readonly StoredEvent[], nowMs?: number): ReadModelWrite[];
  /** Messages for the change feed after the writes are committed. */
  notifications?(event: StoredEvent): string[];
}
