import type { FastifyPluginAsync } from 'fastify';
import type { Account } from '../../api/types.js';
import { DomainError } from '../../domain/errors.js';
import { floorTo, nextBucket } from '../../projections/usageBuckets.js';
import type { ApiDeps } from './deps.js';
import { parseInput } from './input.js';
import { owner, requireAdmin } from './owner.js';
import { AccountParams, ChangePlan } from './schemas.js';

const nextMonthStart = (now: Date) => new Date(nextBucket(floorTo(now.getTime(), 'month'), 'month')).toISOString();

/** The account view (plan, limits, usage this month) and the operator's plan change. */
export const accountRoutes: FastifyPluginAsync<ApiDeps> = async (app, deps) => {
  const accountView = async (accountId: string): Promise<Account> => {
    const account = await deps.queries.account(accountId);
    if (!account) throw new DomainError('not_found', 'No such account.');
    const plan = deps.plans[account.plan];
    const [used, tokens] = await Promise.all([deps.queries.accountMonthUsage(accountId), deps.queries.tokens(accountId)]);
    const liveTokens = tokens.filter((t) => t.status !== 'revoked' && t.status !== 'expired').length;
    return {
      id: account.id,
      email: account.email,
      created_at: account.createdAt,
      plan,
      usage: {
        month: deps.now().toISOString().slice(0, 7),
        requests: used,
        monthly_limit: plan.monthly_requests,
        remaining: plan.monthly_requests === null ? null : Math.max(0, plan.monthly_requests - used),
        resets_at: nextMonthStart(deps.now()),
      },
      tokens: { count: liveTokens, max: plan.max_tokens },
    };
  };

  app.get('/api/v1/account', async (request) => {
    const { accountId } = await owner(request, deps, ['session', 'access_token']);
    return accountView(accountId);
  });

  app.put('/api/v1/admin/accounts/:id/plan', async (request) => {
    requireAdmin(request, deps);
    const { id } = parseInput('params', AccountParams, request.params);
    const { plan } = parseInput('body', ChangePlan, request.body);
    await deps.commands.account(id);
    await deps.waitFor(await deps.commands.changePlan(id, plan));
    return accountView(id);
  });
};
