import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { CreatedToken, TokenHistory, TokenList, TokenRecord } from '../../api/schemas.js';
import type { TokenRecord as TokenRecordType } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import { tokenHistoryJson } from '../tokenHistory.js';
import { problems } from './contract.js';
import type { ApiDeps } from './deps.js';
import { ownerOf } from './owner.js';
import { CreateApiToken, PatchApiToken, TokenParams } from './schemas.js';

/** API tokens: create (the token string shown once), list, get, edit and toggle, revoke, audit history (with the account's plan changes in the token's life). */
export const tokenRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  const tags = ['tokens'];
  const config = { auth: 'owner' } as const;
  const record = async (accountId: string, tokenId: string): Promise<TokenRecordType> => {
    const r = await deps.queries.token(accountId, tokenId);
    if (!r) throw new DomainError('not_found', 'No such token.');
    return r;
  };

  const create = {
    summary: 'Create an API token (the token string is in this answer only)',
    tags,
    body: CreateApiToken,
    response: { 201: CreatedToken, ...problems(403, 409, 422) },
  };
  app.post('/api/v1/tokens', { config, schema: create }, async (request, reply) => {
    const { accountId } = ownerOf(request);
    const body = request.body;
    const created = await deps.commands.createApiToken(accountId, {
      name: body.name,
      description: body.description,
      expiresInDays: body.expires_in_days,
      monthlyLimit: body.monthly_limit,
      rateLimit: body.rate_limit,
    });
    await deps.waitFor(created.position);
    return reply.code(201).send({ ...(await record(accountId, created.tokenId)), token: created.token });
  });

  app.get('/api/v1/tokens', { config, schema: { summary: 'List API tokens', tags, response: { 200: TokenList } } }, async (request) => ({
    tokens: await deps.queries.tokens(ownerOf(request).accountId),
  }));

  const get = { summary: 'Get an API token', tags, params: TokenParams, response: { 200: TokenRecord, ...problems(404) } };
  app.get('/api/v1/tokens/:id', { config, schema: get }, async (request) => record(ownerOf(request).accountId, request.params.id));

  const edit = {
    summary: 'Edit an API token: name, description, limits, or enable/disable it',
    tags,
    params: TokenParams,
    body: PatchApiToken,
    response: { 200: TokenRecord, ...problems(403, 404, 409, 422) },
  };
  app.patch('/api/v1/tokens/:id', { config, schema: edit }, async (request) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    const patch = request.body;
    const position = await deps.commands.updateApiToken(accountId, id, {
      name: patch.name,
      description: patch.description,
      status: patch.status,
      monthlyLimit: patch.monthly_limit,
      rateLimit: patch.rate_limit,
    });
    await deps.waitFor(position);
    return record(accountId, id);
  });

  const revoke = {
    summary: 'Revoke an API token (it stays listed, revoked)',
    tags,
    params: TokenParams,
    response: { 200: TokenRecord, ...problems(404, 409) },
  };
  app.delete('/api/v1/tokens/:id', { config, schema: revoke }, async (request) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    await deps.waitFor(await deps.commands.revokeApiToken(accountId, id));
    return record(accountId, id);
  });

  // No parameters, and none ignored: an auditor's `?since=` or `?limit=` is a 400, not silently the whole history.
  const history = {
    summary: 'The audit history of an API token',
    tags,
    params: TokenParams,
    querystring: z.strictObject({}),
    response: { 200: TokenHistory, ...problems(404) },
  };
  app.get('/api/v1/tokens/:id/history', { config, schema: history }, async (request) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    const history = await deps.commands.apiTokenHistory(accountId, id);
    return { token_id: id, events: history.map(tokenHistoryJson) };
  });
};
