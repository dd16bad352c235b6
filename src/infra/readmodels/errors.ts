export type ReadModelErrorCode = 'invalid_collection_name' | 'closed' | 'not_idempotent';

export class ReadModelError extends Error {
  constructor(
    readonly code: ReadModelErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ReadModelError';
  }
}
