/** Failures of the event store that are not a revision conflict (that one is `WrongExpectedRevisionError` in the port). */
export type EventStoreErrorCode =
  | 'invalid_append'
  | 'duplicate_event_ids'
  | 'append_too_large'
  | 'invalid_position'
  | 'invalid_truncation'
  | 'store_locked'
  | 'store_damaged'
  | 'store_closed'
  | 'store_failed'
  | 'subscription_in_use'
  | 'position_unavailable';

export class EventStoreError extends Error {
  constructor(
    readonly code: EventStoreErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'EventStoreError';
  }
}
