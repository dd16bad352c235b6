import type { Position as EsdbPosition, RecordedEvent } from '@eventstore/db-client';
import { EventStoreError } from './errors.js';
import type { Position, StoredEvent } from './port.js';

/**
 * An EventStoreDB position as one ordered string: `<commit:20>:<prepare:20>`, zero-padded so
 * that comparing strings compares (commit, prepare).
 */
export const formatEsdbPosition = (position: EsdbPosition): Position =>
  `${position.commit.toString().padStart(20, '0')}:${position.prepare.toString().padStart(20, '0')}`;

export function parseEsdbPosition(position: Position): EsdbPosition {
  const match = /^(\d{20}):(\d{20})$/.exec(position);
  if (!match) throw new EventStoreError('invalid_position', `not an EventStoreDB position: ${JSON.stringify(position)}`);
  return { commit: BigInt(match[1]!), prepare: BigInt(match[2]!) };
}

/** Events the server writes for itself (stream metadata, stats, links) are not ours. */
export const isSystemEvent = (event: RecordedEvent): boolean => event.type.startsWith('$') || event.streamId.startsWith('$');

export function toStoredEvent(event: RecordedEvent): StoredEvent {
  if (!event.position) {
    throw new EventStoreError(
      'position_unavailable',
      `EventStoreDB sent ${event.streamId}@${event.revision} without its position (needs server 22.10 or later)`,
    );
  }
  return {
    streamId: event.streamId,
    revision: Number(event.revision),
    position: formatEsdbPosition(event.position),
    id: event.id,
    type: event.type,
    data: asRecord(event.data),
    metadata: asRecord(event.metadata),
    created: event.created.toISOString(),
  };
}

/** Stream metadata as the server stores it, in its own names (`$tb`, `$maxAge`, `$acl`, ...). */
export type RawStreamMetadata = Record<string, unknown>;

/** The metadata a `$metadata` event holds; anything but a JSON object is refused rather than written over. */
export function readRawMetadata(event: RecordedEvent): RawStreamMetadata {
  let data: unknown = event.data;
  if (data instanceof Uint8Array) {
    try {
      data = data.length === 0 ? {} : JSON.parse(Buffer.from(data).toString('utf8'));
    } catch {
      data = undefined;
    }
  }
  if (typeof data === 'object' && data !== null && !Array.isArray(data)) return data as RawStreamMetadata;
  throw new EventStoreError('store_failed', `the metadata of ${event.streamId.slice(2)} is not a JSON object`, { streamId: event.streamId });
}

/** We write JSON objects; anything else (written by another client) is wrapped rather than dropped. */
function asRecord(value: unknown): Record<string, unknown> {
  if (value instanceof Uint8Array) {
    if (value.length === 0) return {};
    const text = Buffer.from(value).toString('utf8');
    try {
      return asRecord(JSON.parse(text));
    } catch {
      return { base64: Buffer.from(value).toString('base64') };
    }
  }
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value as Record<string, unknown>;
  return value === undefined || value === null ? {} : { value };
}
