import type { TokenRecord } from '../../api/types.js';
import { AccountCommands } from '../../commands/accountCommands.js';
import { tokenHistoryJson } from '../../commands/tokenHistory.js';
import type { Position } from '../../infra/eventstore/port.js';
import { COLLECTIONS, type TokenDoc } from '../../projections/core.js';
import { Queries } from '../../projections/queries.js';
import { type CommandSpec, EXIT, type ExitCode, notFound, type RunContext } from '../command.js';
import type { Column } from '../output.js';
import type { Stores } from '../stores.js';
import { accountOrFail } from './accounts.js';

const PAGE = 500;

type TokenRow = TokenRecord & { account_id: string };

const TOKEN_COLUMNS: ReadonlyArray<Column<TokenRow>> = [
  ['ID', (t) => t.id],
  ['ACCOUNT', (t) => t.account_id],
  ['NAME', (t) => JSON.stringify(t.name)],
  ['STATUS', (t) => t.status],
  ['TOKEN', (t) => t.masked],
  ['CREATED', (t) => t.created_at],
  ['EXPIRES', (t) => t.expires_at],
  ['MONTH_USAGE', (t) => t.current_month_usage],
  ['MONTHLY_LIMIT', (t) => t.monthly_limit],
  ['RATE_LIMIT', (t) => t.rate_limit],
];

async function* allTokens(stores: Stores): AsyncGenerator<TokenDoc> {
  let gte = '';
  for (;;) {
    const page = await stores.readModels.range<TokenDoc>(COLLECTIONS.tokens, { gte, limit: PAGE });
    for (const { doc } of page) yield doc;
    const last = page[page.length - 1];
    if (page.length < PAGE || !last) return;
    gte = `${last.key}\0`;
  }
}

async function tokenOrFail(queries: Queries, tokenId: string): Promise<TokenDoc> {
  const token = await queries.tokenDoc(tokenId);
  if (!token) throw notFound(`No token ${tokenId}.`);
  return token;
}

/** A change of one token through the API's command handlers (an event on its stream), then the token as it is after. */
function tokenChange(name: string, summary: string, change: (commands: AccountCommands, token: TokenDoc) => Promise<Position | null>): CommandSpec {
  return {
    name,
    args: ['<token>'],
    summary,
    async run({ args: [tokenId = ''], out, open }: RunContext): Promise<ExitCode> {
      const stores = await open();
      try {
        const queries = new Queries(stores.readModels);
        const token = await tokenOrFail(queries, tokenId);
        const before = (await queries.tokenRecord(token)).status;
        const position = await change(new AccountCommands(stores.store, stores.plans), token);
        if (position !== null) await stores.applied(position);
        const record = await queries.tokenRecord(await tokenOrFail(queries, tokenId));
        const changed = record.status !== before;
        if (out.json) await out.line(JSON.stringify({ ...record, account_id: token.accountId, changed }));
        else await out.line(`token ${tokenId} (account ${token.accountId}): ${changed ? `${before} -> ` : 'already '}${record.status}`);
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  };
}

export const tokenCommands: CommandSpec[] = [
  {
    name: 'tokens list',
    args: [],
    summary: "list the API tokens (masked), with their status, limits and this month's usage",
    options: { account: { type: 'string', value: '<account>', description: "only this account's tokens" } },
    async run({ options, out, open }) {
      const stores = await open();
      try {
        const queries = new Queries(stores.readModels);
        const accountId = options['account'];
        const rows: TokenRow[] = [];
        if (typeof accountId === 'string') {
          await accountOrFail(queries, accountId);
          for (const t of await queries.tokens(accountId)) rows.push({ ...t, account_id: accountId });
        } else {
          for await (const doc of allTokens(stores)) rows.push({ ...(await queries.tokenRecord(doc)), account_id: doc.accountId });
        }
        await out.list(rows, TOKEN_COLUMNS);
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  },
  tokenChange('tokens disable', 'disable a token: gateways refuse it until it is enabled', (commands, t) =>
    commands.updateApiToken(t.accountId, t.id, { status: 'disabled' }),
  ),
  tokenChange('tokens enable', 'enable a disabled token again', (commands, t) => commands.updateApiToken(t.accountId, t.id, { status: 'active' })),
  tokenChange('tokens revoke', 'revoke a token for good (its slot on the plan is freed)', (commands, t) => commands.revokeApiToken(t.accountId, t.id)),
  {
    name: 'history',
    args: ['<token>'],
    summary: "each event of a token with its time and the token's state after it, and its account's plan changes in its life (audit)",
    async run({ args: [tokenId = ''], out, open }) {
      const stores = await open();
      try {
        const token = await tokenOrFail(new Queries(stores.readModels), tokenId);
        for (const h of await new AccountCommands(stores.store, stores.plans).apiTokenHistory(token.accountId, tokenId)) {
          // The entry as GET /api/v1/tokens/{id}/history gives it: both views of one audit trail say the same.
          if (out.json) await out.line(JSON.stringify({ ...tokenHistoryJson(h), position: h.position }));
          else if (h.kind === 'account') await out.line(`${h.at}  account ${h.type.padEnd(28)} plan=${h.plan.from}->${h.plan.to}`);
          else {
            const s = h.state;
            await out.line(
              `${h.at}  #${h.revision} ${h.type.padEnd(28)} status=${s.status} name=${JSON.stringify(s.name)} ` +
                `expires=${s.expiresAt ?? '-'} monthly_limit=${s.monthlyLimit ?? '-'} rate_limit=${s.rateLimit ?? '-'}`,
            );
          }
        }
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  },
];
