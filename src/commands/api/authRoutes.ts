import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { LoggedIn, SignedUp } from '../../api/schemas.js';
import type { LoggedIn as LoggedInAnswer, SignedUp as SignedUpAnswer } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import { jsonWithHeaders, problems } from './contract.js';
import type { ApiDeps } from './deps.js';
import { invalidField } from './input.js';
import { Credentials } from './schemas.js';
import { MAX_SESSION_COOKIES, readCookies, SESSION_COOKIE, sessionCookie } from './sessions.js';

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

/**
 * What a new password may not be (NIST SP 800-63B, context-specific words): the email, its part
 * before the @, or blanks only, an attacker's first guesses. Sign-up only: log-in never judges a
 * password, so an existing one keeps working.
 */
function refusedPassword(email: string, password: string): string | null {
  const guess = password.trim().toLowerCase();
  if (guess === '') return 'must not be blank';
  const normalized = email.trim().toLowerCase();
  if (guess === normalized || guess === normalized.slice(0, normalized.lastIndexOf('@'))) return 'must not be the email address or its name part';
  return null;
}

const SESSION_SET_COOKIE = {
  'Set-Cookie': z
    .string()
    .regex(new RegExp(`^${SESSION_COOKIE}=`))
    .describe(
      `The session: \`${SESSION_COOKIE}=…; Path=/; HttpOnly; SameSite=Strict; Expires=…\` (\`Secure\` with SECURE_COOKIES=true, or when the request came over HTTPS: \`X-Forwarded-Proto: https\` behind TRUST_PROXY).`,
    ),
};

const SESSION_CLEARED_COOKIE = {
  'Set-Cookie': z
    .string()
    .regex(new RegExp(`^${SESSION_COOKIE}=;.*Max-Age=0`))
    .describe(`The session cookie, cleared: \`${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0\` (\`Secure\` as at log-in).`),
};

/** Sign-up, log-in and log-out for the dashboard: a session cookie (httpOnly, SameSite=Strict). */
export const authRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  const tags = ['auth'];
  // A request that came over HTTPS (X-Forwarded-Proto behind TRUST_PROXY) gets a Secure cookie even without SECURE_COOKIES.
  const secure = (request: FastifyRequest) => deps.secureCookies || request.protocol === 'https';
  const signUp = { summary: 'Sign up: creates the account and opens a session (the `gw_session` cookie)', tags, body: Credentials };
  app.post(
    '/api/v1/auth/signup',
    {
      config: { auth: 'public' },
      schema: { ...signUp, response: { 201: jsonWithHeaders(SignedUp, SESSION_SET_COOKIE, 'Signed up; the session is open.'), ...problems(409, 429, 503) } },
    },
    async (request, reply) => {
      const { email, password } = request.body;
      const refused = refusedPassword(email, password);
      if (refused) invalidField('body', 'password', refused);
      const { accountId, position } = await retryAfter(
        reply,
        deps.authThrottle.signUp(request.ip, () => deps.commands.signUp(email, password)),
      );
      await deps.waitFor(position);
      const session = await deps.sessions.open(accountId);
      reply.header('set-cookie', sessionCookie(session.id, session.expiresAt, secure(request)));
      // satisfies: an answer declared with its headers is not typed by the provider.
      return reply.code(201).send({ id: accountId, email: email.trim().toLowerCase(), plan: 'free' } satisfies SignedUpAnswer);
    },
  );

  const logIn = { summary: 'Log in: opens a session (the `gw_session` cookie)', tags, body: Credentials };
  app.post(
    '/api/v1/auth/login',
    {
      config: { auth: 'public' },
      schema: { ...logIn, response: { 200: jsonWithHeaders(LoggedIn, SESSION_SET_COOKIE, 'Logged in; the session is open.'), ...problems(401, 429, 503) } },
    },
    async (request, reply) => {
      const { email, password } = request.body;
      const accountId = await retryAfter(
        reply,
        deps.authThrottle.logIn(email, request.ip, () => deps.commands.authenticate(email, password)),
      );
      if (!accountId) throw new DomainError('invalid_credentials', 'Wrong email or password.');
      const session = await deps.sessions.open(accountId);
      reply.header('set-cookie', sessionCookie(session.id, session.expiresAt, secure(request)));
      return { id: accountId } satisfies LoggedInAnswer;
    },
  );

  const logOut = { summary: 'Log out: ends the session and clears its cookie', tags };
  app.post(
    '/api/v1/auth/logout',
    {
      config: { auth: 'public' },
      schema: { ...logOut, response: { 204: { description: 'Logged out; the session cookie is cleared.', headers: SESSION_CLEARED_COOKIE } } },
    },
    async (request, reply) => {
      for (const sessionId of readCookies(request.headers.cookie, SESSION_COOKIE).slice(0, MAX_SESSION_COOKIES)) {
        await deps.sessions.close(sessionId);
      }
      reply.header('set-cookie', sessionCookie('', null, secure(request)));
      return reply.code(204).send();
    },
  );
};
