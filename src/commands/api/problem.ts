import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import type { Problem } from '../../api/types.js';
import { DomainError, type ErrorCode } from '../../domain/errors.js';
import { redactTokens } from '../../domain/tokenFormat.js';
import { STORE_RETRY_AFTER_SECONDS, storeUnreachableReason } from '../../infra/storeErrors.js';
import { InvalidInput } from './input.js';

/** The one place where error codes become HTTP statuses. */
export const STATUS_OF: Record<ErrorCode, number> = {
  validation_failed: 400,
  unauthorized: 401,
  invalid_credentials: 401,
  forbidden: 403,
  token_disabled: 403,
  plan_feature_unavailable: 403,
  not_found: 404,
  conflict: 409,
  email_taken: 409,
  token_limit_reached: 409,
  alert_limit_reached: 409,
  token_revoked: 409,
  token_expired: 409,
  invalid_transition: 409,
  concurrency_conflict: 409,
  limit_above_account: 422,
  alert_not_applicable: 422,
  too_many_attempts: 429,
  too_many_exports: 429,
  overloaded: 503,
};

export const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** An answer its route's schema does not describe; raised only while the test suite checks answers. */
export class UndocumentedAnswer extends Error {
  override name = 'UndocumentedAnswer';
}

/**
 * A problem; its detail masks any token string in it: details repeat what the caller sent (a
 * path, a key, a `chain`), and answers end up in clients' logs and error reports.
 */
export function problem(status: number, code: string, detail: string, extensions: Record<string, unknown> = {}): Problem {
  return { type: `/problems/${code}`, title: TITLES[status] ?? 'Error', status, detail: redactTokens(detail), code, ...extensions };
}

export function sendProblem(reply: FastifyReply, p: Problem): FastifyReply {
  return reply.code(p.status).type('application/problem+json').send(p);
}

/** RFC 9457 problem+json for every error of the management API; a 500 never shows internals. */
export function toProblem(error: unknown): Problem {
  if (error instanceof DomainError) {
    return problem(STATUS_OF[error.code], error.code, error.message, error.details ?? {});
  }
  if (error instanceof InvalidInput) {
    // `in` names the part of the request (body, query, params); `path` the field in it, if any.
    const errors = error.issues.map((i) => ({ in: error.part, path: redactTokens(i.path.join('.')), message: redactTokens(i.message) }));
    const first = errors[0];
    return problem(400, 'validation_failed', first ? `${[error.part, first.path].filter(Boolean).join('.')}: ${first.message}` : 'Invalid request.', {
      errors,
    });
  }
  // Loud on purpose: it only happens under test (see answerSerializer), where the detail is the point.
  if (error instanceof UndocumentedAnswer) return problem(500, 'undocumented_answer', error.message);
  const fe = error as Partial<FastifyError>;
  if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    const code =
      fe.code === 'FST_ERR_CTP_BODY_TOO_LARGE'
        ? 'body_too_large'
        : fe.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE'
          ? 'unsupported_media_type'
          : fe.statusCode === 404
            ? 'not_found'
            : 'invalid_request';
    return problem(fe.statusCode, code, fe.message ?? 'Invalid request.');
  }
  // A store that cannot be reached is an outage to wait out, not a fault of ours or the caller's.
  if (storeUnreachableReason(error) !== null) return problem(503, 'store_unavailable', 'The database is not answering right now; retry shortly.');
  return problem(500, 'internal_error', 'Something went wrong on our side; it has been logged.');
}

export function problemErrorHandler(error: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const p = toProblem(error);
  if (p.code === 'store_unavailable') {
    // One short line a call, no stack: every call fails alike for as long as the outage lasts.
    request.log.warn(`store unreachable: ${storeUnreachableReason(error)}`);
    reply.header('retry-after', String(STORE_RETRY_AFTER_SECONDS));
  } else if (p.status >= 500) request.log.error({ err: error }, 'unhandled error');
  return sendProblem(reply, p);
}
