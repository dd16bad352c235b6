/**
 * Errors are values with a stable code. The HTTP layer maps codes to statuses in one place
 * (src/commands/problem.ts); the domain never knows about HTTP.
 */
export type ErrorCode =
  | 'validation_failed'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'token_limit_reached'
  | 'plan_feature_unavailable'
  | 'limit_above_account'
  | 'token_revoked'
  | 'token_expired'
  | 'invalid_transition'
  | 'email_taken'
  | 'invalid_credentials'
  | 'concurrency_conflict'
  /** An alert rule that cannot apply to this account (e.g. a percentage of a limit it does not have). */
  | 'alert_not_applicable';

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
