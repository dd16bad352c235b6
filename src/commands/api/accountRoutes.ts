import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { Account } from '../../api/schemas.js';
import type { Account as AccountView } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import { floorTo, nextBucket } from '../../projections/usageBuckets.js';
import { problems } from './contract.js';
import type { ApiDeps } from './deps.js';
import { ownerOf } from './owner.js';
import { AccountParams, ChangePlan } from './schemas.js';

const nextMonthStart = (now: Date) => new Date(nextBucket(floorTo(now.getTime(), 'month'), 'month')).toISOString();

/** The account view (plan, limits, usage this month) and the operator's plan change. */
export const accountRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  const accountView = async (accountId: string): Promise<AccountView> => {
    const account = await deps.queries.account(accountId);
    if (!account) throw new DomainError('not_found', 'No such account.');
    const plan = deps.plans[account.plan];
    const [requests, used, tokens] = await Promise.all([
      deps.queries.accountMonthUsage(accountId),
      deps.queries.accountQuotaUsage(accountId, deps.plans),
      deps.queries.tokens(accountId),
    ]);
    const liveTokens = tokens.filter((t) => t.status !== 'revoked' && t.status !== 'expired').length;
    return {
      id: account.id,
      email: account.email,
      created_at: account.createdAt,
      plan,
      usage: {
        month: deps.now().toISOString().slice(0, 7),
        requests,
        monthly_limit: plan.monthly_requests,
        // Tokens with their own limit count apart: remaining is what the limiter has left for the others.
        remaining: plan.monthly_requests === null ? null : Math.max(0, plan.monthly_requests - used),
        resets_at: nextMonthStart(deps.now()),
      },
      tokens: { count: liveTokens, max: plan.max_tokens },
    };
  };

  const accountSchema = { summary: 'The account, its plan and its usage this month', tags: ['account'], response: { 200: Account, ...problems(404) } };
  app.get('/api/v1/account', { config: { auth: 'owner' }, schema: accountSchema }, async (request) => accountView(ownerOf(request).accountId));

  const changePlan = {
    summary: 'Move an account to another plan (operator)',
    tags: ['admin'],
    params: AccountParams,
    body: ChangePlan,
    response: { 200: Account, ...problems(404, 409) },
  };
  app.put('/api/v1/admin/accounts/:id/plan', { config: { auth: 'admin' }, schema: changePlan }, async (request) => {
    const { id } = request.params;
    const { plan } = request.body;
    await deps.commands.account(id);
    await deps.waitFor(await deps.commands.changePlan(id, plan));
    return accountView(id);
  });
};
