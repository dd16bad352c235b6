import { randomUUID } from 'node:crypto';
import type { NewEvent, StoredEvent } from '../infra/eventstore/port.js';
import { DomainEvent } from './events.js';

/** What every event of ours looks like before it is stored: a type name, a schema version, its data. */
export interface VersionedEvent {
  type: string;
  version: number;
  data: Record<string, unknown>;
}

/** An event as stored: type name as the event type, schema version in the metadata. */
export const encodeEvent = (event: VersionedEvent, id: string = randomUUID()): NewEvent => ({
  id,
  type: event.type,
  data: event.data,
  metadata: { version: event.version },
});

/** Null for events that are not domain events (usage records, alert events...). */
export function decodeEvent(stored: StoredEvent): DomainEvent | null {
  const parsed = DomainEvent.safeParse({ type: stored.type, version: stored.metadata['version'] ?? 1, data: stored.data });
  return parsed.success ? parsed.data : null;
}
