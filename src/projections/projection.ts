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
  project(event: StoredEvent): ReadModelWrite[];
  /** Messages for the change feed after the writes are committed. */
  notifications?(event: StoredEvent): string[];
}
