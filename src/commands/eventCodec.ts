import { randomUUID } from 'node:crypto';
import { DomainEvent } from '../domain/events.js';
import type { NewEvent, StoredEvent } from '../infra/eventstore/port.js';

/** A domain event as stored: type name as the event type, schema version in the metadata. */
export const encodeEvent = (event: DomainEvent, id: string = randomUUID()): NewEvent => ({
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
