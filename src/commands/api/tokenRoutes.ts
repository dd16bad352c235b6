import type { FastifyPluginAsync } from 'fastify';
import type { CreatedToken, TokenHistory, TokenList, TokenRecord } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import type { ApiDeps } from './deps.js';
import { parseInput } from './input.js';
import { owner } from './owner.js';
import { CreateApiToken, PatchApiToken, TokenParams } from './schemas.js';

/** API tokens: create (the token string shown once), list, get, edit and toggle, revoke, audit history. */
export const tokenRoutes: FastifyPluginAsync<ApiDeps> = async (app, deps) => {
  const record = async (accountId: string, tokenId: string): Promise<TokenRecord> => {
    const r = await deps.queries.token(accountId, tokenId);
    if (!r) throw new DomainError('not_found', 'No such token.');
    return r;
  };
  const ownerOf = (request: Parameters<typeof owner>[0]) => owner(request, deps, ['session', 'access_token']);

  app.post('/api/v1/tokens', async (request, reply) => {
    const { accountId } = await ownerOf(request);
    const body = parseInput('body', CreateApiToken, request.body);
    const created = await deps.commands.createApiToken(accountId, {
      name: body.name,
      description: body.description,
      expiresInDays: body.expires_in_days,
      monthlyLimit: body.monthly_limit,
      rateLimit: body.rate_limit,
    });
    await deps.waitFor(created.position);
    return reply.code(201).send({ ...(await record(accountId, created.tokenId)), token: created.token } satisfies CreatedToken);
  });

  app.get('/api/v1/tokens', async (request): Promise<TokenList> => {
    const { accountId } = await ownerOf(request);
    return { tokens: await deps.queries.tokens(accountId) };
  });

  app.get('/api/v1/tokens/:id', async (request) => {
    const { accountId } = await ownerOf(request);
    const { id } = parseInput('params', TokenParams, request.params);
    return record(accountId, id);
  });

  app.patch('/api/v1/tokens/:id', async (request) => {
    const { accountId } = await ownerOf(request);
    const { id } = parseInput('params', TokenParams, request.params);
    const patch = parseInput('body', PatchApiToken, request.body);
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

  app.delete('/api/v1/tokens/:id', async (request) => {
    const { accountId } = await ownerOf(request);
    const { id } = parseInput('params', TokenParams, request.params);
    await deps.waitFor(await deps.commands.revokeApiToken(accountId, id));
    return record(accountId, id);
  });

  app.get('/api/v1/tokens/:id/history', async (request): Promise<TokenHistory> => {
    const { accountId } = await ownerOf(request);
    const { id } = parseInput('params', TokenParams, request.params);
    const history = await deps.commands.apiTokenHistory(accountId, id);
    return {
      token_id: id,
      events: history.map((h) => ({
        revision: h.revision,
        type: h.type,
        at: h.at,
        recorded_at: h.recordedAt,
        state: {
          name: h.state.name, description: h.state.description, status: h.state.status, masked: h.state.masked,
          expires_at: h.state.expiresAt, monthly_limit: h.state.monthlyLimit, rate_limit: h.state.rateLimit,
        },
      })),
    };
  });
};
