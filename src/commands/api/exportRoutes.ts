import { Readable } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import { fail } from '../../domain/errors.js';
import { EXPORT_FORMATS, type ExportFormat, PLAN_IDS, type Plan, type PlanCatalog } from '../../domain/plans.js';
import type { ApiDeps } from './deps.js';
import { csvChunks } from './exports/csv.js';
import { jsonChunks } from './exports/json.js';
import { monthlyLimits, periodFor } from './metricsRoutes.js';
import { owner } from './owner.js';

const CONTENT_TYPES: Record<ExportFormat, string> = {
  csv: 'text/csv; charset=utf-8; header=present',
  json: 'application/json; charset=utf-8',
  pdf: 'application/pdf',
};

/** Refuses a format the plan does not include (403), naming the cheapest plan that has it. */
function checkExportOnPlan(plans: PlanCatalog, plan: Plan, format: ExportFormat): void {
  if (plan.exports.includes(format)) return;
  const needed = PLAN_IDS.find((id) => plans[id].exports.includes(format));
  const neededName = needed ? plans[needed].name : null;
  fail('plan_feature_unavailable',
    `${format.toUpperCase()} exports are ${neededName ? `available on the ${neededName} plan${needed === 'unlimited' ? '' : ' and above'}` : 'not offered on any plan'}; this account is on ${plan.name}.`,
    { feature: `export:${format}`, plan: plan.id, ...(needed ? { required_plan: needed } : {}) });
}

/** One page of rows buffered ahead of the socket: a slow client slows the reads instead of filling memory. */
const STREAM_OPTIONS = { highWaterMark: 1 };

const fileStamp = (iso: string): string => iso.slice(0, 16).replace(':', '');

/**
 * Usage exports (spec: CSV for raw data, JSON for integrations, PDF for dashboard snapshots),
 * per plan. CSV and JSON stream the raw rows a page at a time, so an export of millions of
 * calls holds one page in memory; both start answering before the last row is read.
 */
export const exportRoutes: FastifyPluginAsync<ApiDeps> = async (app, deps) => {
  for (const format of EXPORT_FORMATS) {
    app.get(`/api/v1/exports/usage.${format}`, async (request, reply) => {
      const { accountId } = await owner(request, deps, ['access_token', 'session']);
      const { account, plan, resolved } = await periodFor(request, deps, accountId);
      checkExportOnPlan(deps.plans, plan, format);
      const { scope, period } = resolved;
      const filename = `usage-${fileStamp(period.start)}-${fileStamp(period.end)}${resolved.chain ? `-${resolved.chain}` : ''}.${format}`;
      reply.type(CONTENT_TYPES[format]).header('content-disposition', `attachment; filename="${filename}"`).header('cache-control', 'no-store');

      if (format === 'csv') return reply.send(Readable.from(csvChunks(deps.usage.requestRows(scope)), STREAM_OPTIONS));
      if (format === 'json') {
        const header = { period, chain: resolved.chain, retention: resolved.retention };
        return reply.send(Readable.from(jsonChunks(header, deps.usage.requestRows(scope)), STREAM_OPTIONS));
      }
      // pdfkit (~25 MB resident with its fonts) loads on the first PDF export, not at start-up.
      const [{ usagePdf }, report, errors, used] = await Promise.all([
        import('./exports/pdf.js'),
        deps.usage.usage(scope),
        deps.usage.errorGroups(scope),
        deps.queries.accountMonthUsage(accountId),
      ]);
      return reply.send(usagePdf({
        email: account.email,
        planName: plan.name,
        period,
        chain: resolved.chain,
        granularity: resolved.granularity,
        generatedAt: deps.now().toISOString(),
        report,
        errors,
        limits: monthlyLimits(plan.monthly_requests, used, deps.now()),
      }));
    });
  }
};
