import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { LoggedIn, SignedUp } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import type { ApiDeps } from './deps.js';
import { parseInput } from './input.js';
import { Credentials } from './schemas.js';
import { readCookie, SESSION_COOKIE, sessionCookie } from './sessions.js';

/** A refusal that says when to come back (too many attempts, a full hashing queue) carries `Retry-After`. */
async function retryAfter<T>(reply: FastifyReply, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    const seconds = error instanceof DomainError ? error.details?.retryAfterSeconds : undefined;
    if (typeof seconds === 'number') reply.header('retry-after', String(seconds));
    throw error;
  }
}

/** Sign-up, log-in and log-out for the dashboard: a session cookie (httpOnly, SameSite=Strict). */
export const authRoutes: FastifyPluginAsync<ApiDeps> = async (app, deps) => {
  app.post('/api/v1/auth/signup', async (request, reply) => {
    const { email, password } = parseInput('body', Credentials, request.body);
    const { accountId, position } = await retryAfter(reply, deps.authThrottle.signUp(request.ip, () => deps.commands.signUp(email, password)));
    await deps.waitFor(position);
    const session = await deps.sessions.open(accountId);
    reply.header('set-cookie', sessionCookie(session.id, session.expiresAt, deps.secureCookies));
    return reply.code(201).send({ id: accountId, email: email.trim().toLowerCase(), plan: 'free' } satisfies SignedUp);
  });

  app.post('/api/v1/auth/login', async (request, reply): Promise<LoggedIn> => {
    const { email, password } = parseInput('body', Credentials, request.body);
    const accountId = await retryAfter(reply, deps.authThrottle.logIn(email, request.ip, () => deps.commands.authenticate(email, password)));
    if (!accountId) throw new DomainError('invalid_credentials', 'Wrong email or password.');
    const session = await deps.sessions.open(accountId);
    reply.header('set-cookie', sessionCookie(session.id, session.expiresAt, deps.secureCookies));
    return { id: accountId };
  });

  app.post('/api/v1/auth/logout', async (request, reply) => {
    const sessionId = readCookie(request.headers.cookie, SESSION_COOKIE);
    if (sessionId) await deps.sessions.close(sessionId);
    reply.header('set-cookie', sessionCookie('', null, deps.secureCookies));
    return reply.code(204).send();
  });
};
