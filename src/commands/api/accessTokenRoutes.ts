import type { FastifyPluginAsync } from 'fastify';
import type { AccessTokenList, AccessTokenRecord, CreatedAccessToken } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import type { ApiDeps } from './deps.js';
import { parseInput } from './input.js';
import { owner } from './owner.js';
import { AccessTokenParams, CreateAccessToken } from './schemas.js';

/** Personal access tokens (`gka_…`) for the management API; managed from a dashboard session. */
export const accessTokenRoutes: FastifyPluginAsync<ApiDeps> = async (app, deps) => {
  const find = async (accountId: string, id: string): Promise<AccessTokenRecord> => {
    const record = (await deps.queries.accessTokens(accountId)).find((t) => t.id === id);
    if (!record) throw new DomainError('not_found', 'No such access token.');
    return record;
  };

  app.post('/api/v1/access-tokens', async (request, reply) => {
    const { accountId } = await owner(request, deps, ['session']);
    const { name } = parseInput('body', CreateAccessToken, request.body);
    const created = await deps.commands.createAccessToken(accountId, name);
    await deps.waitFor(created.position);
    return reply.code(201).send({ ...(await find(accountId, created.accessTokenId)), token: created.token } satisfies CreatedAccessToken);
  });

  app.get('/api/v1/access-tokens', async (request): Promise<AccessTokenList> => {
    const { accountId } = await owner(request, deps, ['session']);
    return { access_tokens: await deps.queries.accessTokens(accountId) };
  });

  app.delete('/api/v1/access-tokens/:id', async (request) => {
    const { accountId } = await owner(request, deps, ['session']);
    const { id } = parseInput('params', AccessTokenParams, request.params);
    await deps.waitFor(await deps.commands.revokeAccessToken(accountId, id));
    return find(accountId, id);
  });
};
