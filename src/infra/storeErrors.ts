/**
 * Whether an error says that a store (PostgreSQL, MongoDB) could not be reached or stopped
 * answering, rather than that the request was wrong or our code failed: what the management API
 * answers with 503 and `Retry-After` instead of a 500, and what /readyz reports.
 */

/** How long a caller is told to wait while a store is unreachable (`Retry-After`): about what a database restart takes. */
export const STORE_RETRY_AFTER_SECONDS = 5;

/** Socket errors of a connection that could not be made or was cut. */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/** PostgreSQL's SQLSTATEs of a server going away: class 08 (connection exception), and shutdown or start-up (57P01-57P03). */
const POSTGRES_STATES = /^(08|57P0[123])/;

/** node-postgres reports these without a code. */
const POSTGRES_MESSAGES = [
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Query read timeout',
  'Client has encountered a connection error and is not queryable',
];

/** MongoDB driver errors of an unreachable or unanswering server. */
const MONGO_NAMES = new Set(['MongoNetworkError', 'MongoNetworkTimeoutError', 'MongoServerSelectionError', 'MongoTopologyClosedError']);

/** The reason a store is unreachable (the error's message), or null when `error` is something else; `cause` chains are followed. */
export function storeUnreachableReason(error: unknown): string | null {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && (NETWORK_CODES.has(code) || POSTGRES_STATES.test(code))) return e.message || code;
    if (MONGO_NAMES.has(e.name)) return e.message;
    if (POSTGRES_MESSAGES.some((m) => e instanceof Error && e.message.startsWith(m))) return e.message;
  }
  return null;
}
