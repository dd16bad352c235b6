import { csvChunks } from '../../commands/api/exports/csv.js';
import { jsonChunks } from '../../commands/api/exports/json.js';
import { InvalidInput } from '../../commands/api/input.js';
import { resolvePeriod } from '../../commands/api/metricsRoutes.js';
import { DomainError } from '../../domain/errors.js';
import { UsageQueries } from '../../projections/metricsQueries.js';
import { Queries } from '../../projections/queries.js';
import { type CommandSpec, EXIT, usageError } from '../command.js';
import { accountOrFail } from './accounts.js';

const FORMATS = ['csv', 'json'] as const;

/** The period's messages name the API's query parameters; here they are options. */
const OPTION_OF: Record<string, string> = { start: '--from', end: '--to', chain: '--chain' };
const asOptions = (message: string): string => message.replace(/\bquery\.(start|end|chain)\b/g, (_, key: string) => OPTION_OF[key] ?? key);

export const usageCommands: CommandSpec[] = [
  {
    name: 'usage export',
    args: [],
    summary: "an account's calls, one row each, as the dashboard's CSV or JSON export (to stdout)",
    details: [
      "The same rows and columns as GET /api/v1/exports/usage.<format>, whatever formats the account's plan includes.",
      '--from and --to are ISO 8601 (2024-05-01 or 2024-05-01T12:00:00Z); without --from, as far back as the plan keeps usage; without --to, now.',
    ].join('\n'),
    options: {
      account: { type: 'string', value: '<account>', required: true, description: 'the account' },
      // The period is the metrics' (resolvePeriod): whole minutes, or whole hours for a period over 14 days or starting over 8 days ago.
      from: {
        type: 'string',
        value: '<time>',
        description: 'from this time, rounded down to the minute (the hour for a period over 14 days or starting over 8 days ago); inclusive',
      },
      to: {
        type: 'string',
        value: '<time>',
        description: "until this time, rounded up to the minute (or hour) likewise; exclusive. JSON's period says what is covered",
      },
      chain: { type: 'string', value: '<chain>', description: "only this chain's calls" },
      format: { type: 'string', value: 'csv|json', description: 'csv (the default) or json' },
    },
    async run({ options, out, open }) {
      const accountId = String(options['account']);
      const format = options['format'] ?? 'csv';
      if (format !== 'csv' && format !== 'json') throw usageError(`--format: "${String(format)}" is not one of ${FORMATS.join(', ')}.`);
      const stores = await open();
      try {
        const account = await accountOrFail(new Queries(stores.readModels), accountId);
        const query = { start: options['from'], end: options['to'], chain: options['chain'] };
        let resolved: ReturnType<typeof resolvePeriod>;
        try {
          resolved = resolvePeriod(query, {
            accountId,
            plan: stores.plans[account.plan],
            now: new Date(),
            chainIds: stores
              .chains()
              .list()
              .map((c) => c.id),
          });
        } catch (error) {
          if (error instanceof InvalidInput)
            throw usageError(error.issues.map((i) => `${OPTION_OF[String(i.path[0])] ?? i.path.join('.')}: ${i.message}`).join('; '));
          if (error instanceof DomainError && error.code === 'validation_failed') throw usageError(asOptions(error.message));
          throw error;
        }
        const rows = new UsageQueries(stores.readModels).requestRows(resolved.scope);
        const chunks =
          format === 'csv'
            ? csvChunks(rows)
            : jsonChunks({ period: resolved.period, chain: resolved.chain, method: resolved.scope.method ?? null, retention: resolved.retention }, rows);
        for await (const chunk of chunks) await out.write(chunk);
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  },
];
