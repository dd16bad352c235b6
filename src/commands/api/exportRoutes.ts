import { Readable } from 'node:stream';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { fail } from '../../domain/errors.js';
import { EXPORT_FORMATS, type ExportFormat, PLAN_IDS, type Plan, type PlanCatalog } from '../../domain/plans.js';
import { problems } from './contract.js';
import type { ApiDeps } from './deps.js';
import { csvChunks } from './exports/csv.js';
import { jsonChunks } from './exports/json.js';
import { accountLimits, PeriodQuery, periodFor } from './metricsRoutes.js';
import { ownerOf } from './owner.js';

const CONTENT_TYPES: Record<ExportFormat, string> = {
  csv: 'text/csv; charset=utf-8; header=present',
  json: 'application/json; charset=utf-8',
  pdf: 'application/pdf',
};

/** The columns an auditor needs explained: the rest name themselves. */
const ROW_COLUMNS =
  '`charged` is true when the call used monthly quota (a month of rows summed gives its quota used; refused calls and invalid batch members are rows, not charged); `cache` says how a read was served (hit, miss, coalesced, hedged; none when no upstream was asked).';

const DESCRIPTIONS: Record<ExportFormat, string> = {
  csv: `One row per call, with a header row; streamed. On every plan. ${ROW_COLUMNS}`,
  json: `A header object (\`period\`, \`chain\`, \`method\`, \`retention\`: what the rows cover and the filters they were made with) and \`rows\`, one per call; streamed. Developer plans and above. ${ROW_COLUMNS}`,
  pdf: "A snapshot of the dashboard's figures for the period. Professional plans and above.",
};

/** What the files hold, for the document (they are streamed, not checked against it). */
const FILE_SCHEMAS: Record<ExportFormat, z.ZodType> = {
  csv: z.string(),
  json: z.looseObject({
    period: z.object({ start: z.string(), end: z.string() }),
    chain: z.string().nullable().describe('The `chain` filter the export was made with; null: every chain.'),
    method: z.string().nullable().describe('The `method` filter the export was made with (a method label); null: every method.'),
    rows: z.array(z.looseObject({})),
  }),
  pdf: z.string().meta({ contentMediaType: 'application/pdf', format: 'binary' }),
};

const ATTACHMENT = z
  .string()
  .regex(/^attachment; filename="[^"]+"$/)
  .describe(
    '`attachment; filename="usage-<start>-<end>[-<chain>][-method-<method>].<format>"` (times as YYYY-MM-DDTHHMM, UTC): the `chain` and `method` filters the file was made with, if any, the method with every run of characters other than letters, digits, `.`, `_` and `-` as one `_`, cut to 64 characters.',
  );

/** Refuses a format the plan does not include (403), naming the cheapest plan that has it. */
function checkExportOnPlan(plans: PlanCatalog, plan: Plan, format: ExportFormat): void {
  if (plan.exports.includes(format)) return;
  const needed = PLAN_IDS.find((id) => plans[id].exports.includes(format));
  const neededName = needed ? plans[needed].name : null;
  fail(
    'plan_feature_unavailable',
    `${format.toUpperCase()} exports are ${neededName ? `available on the ${neededName} plan${needed === 'unlimited' ? '' : ' and above'}` : 'not offered on any plan'}; this account is on ${plan.name}.`,
    { feature: `export:${format}`, plan: plan.id, ...(needed ? { required_plan: needed } : {}) },
  );
}

/**
 * Exports an account may have running at once. Each holds a page or two of rows (~1–2 MB) for as long as its client
 * takes to read it, and a client that stops reading is only cut off by a proxy: uncapped, one access token opened
 * hundreds of stalled exports. A dashboard opens one at a time.
 */
export const EXPORTS_PER_ACCOUNT = 3;
const EXPORT_RETRY_AFTER_SECONDS = 10;

/** One page of rows buffered ahead of the socket: a slow client slows the reads instead of filling memory. */
const STREAM_OPTIONS = { highWaterMark: 1 };

const fileStamp = (iso: string): string => iso.slice(0, 16).replace(':', '');
/** A method label as a file name can hold it (labels hold `/`, `{id}`, quotes, any Unicode): a hint; the JSON header says it exactly. */
const fileMethod = (method: string): string => method.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 64);

/** The file's name: its period and the filters it was made with, so that a saved partial export says it is one. */
export function exportFilename(period: { start: string; end: string }, chain: string | null, method: string | null, format: ExportFormat): string {
  return `usage-${fileStamp(period.start)}-${fileStamp(period.end)}${chain ? `-${chain}` : ''}${method ? `-method-${fileMethod(method)}` : ''}.${format}`;
}

/**
 * Usage exports (spec: CSV for raw data, JSON for integrations, PDF for dashboard snapshots),
 * per plan. CSV and JSON stream the raw rows a page at a time, so an export of millions of
 * calls holds one page in memory; both start answering before the last row is read.
 */
export const exportRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  /** Exports running per account on this server: taken before the first read, given back when the answer's connection closes. */
  const runningExports = new Map<string, number>();
  for (const format of EXPORT_FORMATS) {
    const schema = {
      summary: `The raw calls of a period as ${format.toUpperCase()} (an attachment)`,
      description: DESCRIPTIONS[format],
      tags: ['exports'],
      querystring: PeriodQuery,
      response: {
        200: {
          description: `The ${format.toUpperCase()} file.`,
          headers: { 'Content-Disposition': ATTACHMENT },
          content: { [CONTENT_TYPES[format].split(';')[0] as string]: { schema: FILE_SCHEMAS[format] } },
        },
        ...problems(403, 404, 429),
      },
    };
    app.get(`/api/v1/exports/usage.${format}`, { config: { auth: 'owner' }, schema }, async (request, reply) => {
      const { accountId } = ownerOf(request);
      const { account, plan, resolved } = await periodFor(request, deps, accountId);
      checkExportOnPlan(deps.plans, plan, format);
      const running = runningExports.get(accountId) ?? 0;
      if (running >= EXPORTS_PER_ACCOUNT) {
        reply.header('retry-after', String(EXPORT_RETRY_AFTER_SECONDS));
        fail('too_many_exports', `This account has ${running} exports running; at most ${EXPORTS_PER_ACCOUNT} at once. Retry once one has finished.`);
      }
      runningExports.set(accountId, running + 1);
      reply.raw.once('close', () => {
        const left = (runningExports.get(accountId) ?? 1) - 1;
        if (left > 0) runningExports.set(accountId, left);
        else runningExports.delete(accountId);
      });
      const { scope, period } = resolved;
      const method = scope.method ?? null;
      const filename = exportFilename(period, resolved.chain, method, format);
      reply.type(CONTENT_TYPES[format]).header('content-disposition', `attachment; filename="${filename}"`).header('cache-control', 'no-store');

      if (format === 'csv') return reply.send(Readable.from(csvChunks(deps.usage.requestRows(scope)), STREAM_OPTIONS));
      if (format === 'json') {
        const header = { period, chain: resolved.chain, method, retention: resolved.retention };
        return reply.send(Readable.from(jsonChunks(header, deps.usage.requestRows(scope)), STREAM_OPTIONS));
      }
      // pdfkit (~25 MB resident with its fonts) loads on the first PDF export, not at start-up.
      const [{ usagePdf }, report, errors, limits] = await Promise.all([
        import('./exports/pdf.js'),
        deps.usage.usage(scope),
        deps.usage.errorGroups(scope),
        accountLimits(deps, accountId, plan),
      ]);
      return reply.send(
        usagePdf({
          email: account.email,
          planName: plan.name,
          period,
          chain: resolved.chain,
          method,
          granularity: resolved.granularity,
          generatedAt: deps.now().toISOString(),
          report,
          errors: errors.errors,
          errorsOther: errors.errorsOther,
          limits,
        }),
      );
    });
  }
};
