import { AccountCommands } from '../../commands/accountCommands.js';
import { DomainError } from '../../domain/errors.js';
import { PLAN_IDS, type PlanId } from '../../domain/plans.js';
import { type AccountDoc, COLLECTIONS } from '../../projections/core.js';
import { Queries } from '../../projections/queries.js';
import { type CommandSpec, EXIT, notFound, usageError } from '../command.js';
import type { Stores } from '../stores.js';

const PAGE = 500;

/** Every account in key order, a page at a time. */
async function* allAccounts(stores: Stores): AsyncGenerator<AccountDoc> {
  let gte = '';
  for (;;) {
    const page = await stores.readModels.range<AccountDoc>(COLLECTIONS.accounts, { gte, limit: PAGE });
    for (const { doc } of page) yield doc;
    const last = page[page.length - 1];
    if (page.length < PAGE || !last) return;
    gte = `${last.key}\0`;
  }
}

export async function accountOrFail(queries: Queries, accountId: string): Promise<AccountDoc> {
  const account = await queries.account(accountId);
  if (!account) throw notFound(`No account ${accountId}.`);
  return account;
}

const isPlanId = (value: string): value is PlanId => (PLAN_IDS as readonly string[]).includes(value);

export const accountCommands: CommandSpec[] = [
  {
    name: 'accounts list',
    args: [],
    summary: 'list the accounts: id, email, plan, created',
    options: { plan: { type: 'string', value: '<plan>', description: `only the accounts on this plan (${PLAN_IDS.join(', ')})` } },
    async run({ options, out, open }) {
      const plan = options['plan'];
      if (typeof plan === 'string' && !isPlanId(plan)) throw usageError(`--plan: unknown plan "${plan}"; plans: ${PLAN_IDS.join(', ')}.`);
      const stores = await open();
      try {
        const rows: Array<{ id: string; email: string; plan: PlanId; created_at: string }> = [];
        for await (const a of allAccounts(stores)) {
          if (plan === undefined || a.plan === plan) rows.push({ id: a.id, email: a.email, plan: a.plan, created_at: a.createdAt });
        }
        await out.list(rows, [
          ['ID', (r) => r.id],
          ['EMAIL', (r) => r.email],
          ['PLAN', (r) => r.plan],
          ['CREATED', (r) => r.created_at],
        ]);
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  },
  {
    name: 'accounts show',
    args: ['<account>'],
    summary: "one account: its plan, this month's requests and quota used, its tokens",
    async run({ args: [accountId = ''], out, open }) {
      const stores = await open();
      try {
        const queries = new Queries(stores.readModels);
        const account = await accountOrFail(queries, accountId);
        const plan = stores.plans[account.plan];
        // As GET /api/v1/account: every request of the month, and the quota used as the limiter counts it.
        const [requests, used, tokens] = await Promise.all([
          queries.accountMonthUsage(accountId),
          queries.accountQuotaUsage(accountId, stores.plans),
          queries.tokens(accountId),
        ]);
        const live = tokens.filter((t) => t.status !== 'revoked' && t.status !== 'expired').length;
        const limit = plan.monthly_requests;
        const view = {
          id: account.id,
          email: account.email,
          plan: account.plan,
          created_at: account.createdAt,
          month: new Date().toISOString().slice(0, 7),
          requests_this_month: requests,
          quota_used: used,
          monthly_limit: limit,
          remaining: limit === null ? null : Math.max(0, limit - used),
          live_tokens: live,
          max_tokens: plan.max_tokens,
        };
        await out.item(view, [
          ['id', view.id],
          ['email', view.email],
          ['plan', `${plan.id} (${plan.name})`],
          ['created', view.created_at],
          [`requests ${view.month}`, `${requests}`],
          // Tokens with their own monthly limit count apart (spec: Authentication 6).
          ['quota used', view.remaining === null ? `${used} (no monthly limit)` : `${used} of ${limit}, ${view.remaining} remaining`],
          ['tokens', `${live} live${plan.max_tokens === null ? '' : ` of ${plan.max_tokens}`}, ${tokens.length} in all`],
        ]);
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  },
  {
    name: 'plan set',
    args: ['<account>', '<plan>'],
    summary: `move an account to a plan (${PLAN_IDS.join(', ')})`,
    details: "Appends AccountPlanChanged, as PUT /api/v1/admin/accounts/<id>/plan does; gateways apply the plan's limits once a projector has applied it.",
    async run({ args: [accountId = '', plan = ''], out, open }) {
      if (!isPlanId(plan)) throw usageError(`Unknown plan "${plan}"; plans: ${PLAN_IDS.join(', ')}.`);
      const stores = await open();
      try {
        const commands = new AccountCommands(stores.store, stores.plans);
        // From the account's stream, not the read models: the change is decided on it.
        const from = (
          await commands.account(accountId).catch((error: unknown) => {
            throw error instanceof DomainError && error.code === 'not_found' ? notFound(`No account ${accountId}.`) : error;
          })
        ).plan;
        const position = await commands.changePlan(accountId, plan);
        if (position !== null) await stores.applied(position);
        const result = { account: accountId, from, to: plan, changed: position !== null };
        if (out.json) await out.line(JSON.stringify(result));
        else await out.line(result.changed ? `account ${accountId}: plan ${from} -> ${plan}` : `account ${accountId} is on ${plan} already`);
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  },
];
