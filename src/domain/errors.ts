/**
 * Errors are values with a stable code. The HTTP layer maps codes to statuses in one place
 * (src/commands/api/problem.ts); the domain never knows about HTTP.
 */
export type ErrorCode =
  | 'validation_failed'
  | 'unauthorized'
  | 'forbidden'
  /** An API token its owner disabled: refused on the metrics call as on chain calls. */
  | 'token_disabled'
  | 'not_found'
  | 'conflict'
  | 'token_limit_reached'
  /** The plan's maximum of alert rules is taken (delete one or upgrade). */
  | 'alert_limit_reached'
  | 'plan_feature_unavailable'
  | 'limit_above_account'
  | 'token_revoked'
  | 'token_expired'
  | 'invalid_transition'
  | 'email_taken'
  | 'invalid_credentials'
  | 'concurrency_conflict'
  /** An alert rule that cannot apply to this account (e.g. a percentage of a limit it does not have). */
  | 'alert_not_applicable'
  /** Log-in failures or sign-ups over their limit for an email or a client address, until the window ends. */
  | 'too_many_attempts'
  /** An account's streamed exports at once are capped (each holds memory while its client reads). */
  | 'too_many_exports'
  /** More password hashing waiting than the process queues; the client may retry shortly. */
  | 'overloaded';

export class DomainError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'DomainError';
  }
}

export const fail = (code: ErrorCode, message: string, details?: Record<string, unknown>): never => {
  throw new DomainError(code, message, details);
};
