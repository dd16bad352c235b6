import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { AccessTokenList, AccessTokenRecord, CreatedAccessToken } from '../../api/schemas.js';
import type { AccessTokenRecord as AccessTokenRecordType } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import { problems } from './contract.js';
import type { ApiDeps } from './deps.js';
import { ownerOf } from './owner.js';
import { AccessTokenParams, CreateAccessToken } from './schemas.js';

/** Personal access tokens (`gka_…`) for the management API; managed from a dashboard session. */
export const accessTokenRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  const tags = ['access-tokens'];
  const config = { auth: 'dashboard' } as const;
  const find = async (accountId: string, id: string): Promise<AccessTokenRecordType> => {
    const record = (await deps.queries.accessTokens(accountId)).find((t) => t.id === id);
    if (!record) throw new DomainError('not_found', 'No such access token.');
    return record;
  };

  const create = {
    summary: 'Create an access token (the token string is in this answer only)',
    tags,
    body: CreateAccessToken,
    response: { 201: CreatedAccessToken, ...problems(409) },
  };
  app.post('/api/v1/access-tokens', { config, schema: create }, async (request, reply) => {
    const { accountId } = ownerOf(request);
    const { name } = request.body;
    const created = await deps.commands.createAccessToken(accountId, name);
    await deps.waitFor(created.position);
    return reply.code(201).send({ ...(await find(accountId, created.accessTokenId)), token: created.token });
  });

  app.get('/api/v1/access-tokens', { config, schema: { summary: 'List access tokens', tags, response: { 200: AccessTokenList } } }, async (request) => ({
    access_tokens: await deps.queries.accessTokens(ownerOf(request).accountId),
  }));

  const revoke = { summary: 'Revoke an access token', tags, params: AccessTokenParams, response: { 200: AccessTokenRecord, ...problems(404, 409) } };
  app.delete('/api/v1/access-tokens/:id', { config, schema: revoke }, async (request) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    await deps.waitFor(await deps.commands.revokeAccessToken(accountId, id));
    return find(accountId, id);
  });
};
