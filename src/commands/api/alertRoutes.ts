import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { Alert, AlertList, AlertNotifications } from '../../api/schemas.js';
import type { Alert as AlertRecord } from '../../api/types.js';
import type { ChannelInput, RuleInput } from '../../domain/alert.js';
import { ALERT_TYPES } from '../../domain/alertEvents.js';
import { DomainError } from '../../domain/errors.js';
import { ALERT_ID_PATTERN } from '../alertCommands.js';
import { ID_PATTERN } from '../ids.js';
import { problems } from './contract.js';
import type { ApiDeps } from './deps.js';
import { InvalidInput } from './input.js';
import { ownerOf } from './owner.js';

// ── Request schemas: shapes and formats here; ranges per type in the domain (ruleFromInput) ──

const httpUrl = z
  .string()
  .max(2048, 'at most 2048 characters')
  .refine((v) => {
    try {
      const u = new URL(v);
      return (u.protocol === 'https:' || u.protocol === 'http:') && !u.username && !u.password;
    } catch {
      return false;
    }
  }, 'an http or https URL without credentials');

const ChannelIn = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('email'), to: z.email().max(254) }),
  z.strictObject({ type: z.literal('webhook'), url: httpUrl }),
  z.strictObject({ type: z.literal('chat'), url: httpUrl }),
  z.strictObject({ type: z.literal('incident'), routing_key: z.string().regex(/^[A-Za-z0-9_-]{8,64}$/, '8 to 64 letters, digits, - or _') }),
  z.strictObject({ type: z.literal('sms'), to: z.string().regex(/^\+[1-9]\d{6,14}$/, 'a phone number in E.164 form, e.g. +14155550100') }),
]);
const Channels = z
  .array(ChannelIn)
  .min(1, 'at least one channel')
  .max(10, 'at most 10 channels')
  .superRefine((channels, ctx) => {
    const seen = new Set<string>();
    channels.forEach((c, i) => {
      const key = JSON.stringify(c);
      if (seen.has(key)) ctx.addIssue({ code: 'custom', path: [i], message: 'the same channel is listed twice' });
      seen.add(key);
    });
  });

const TokenId = z.string().regex(ID_PATTERN, 'not a token id').regex(/^tok_/, 'not a tok_ id'); // not startsWith: see schemas.ts
const ruleFields = {
  type: z.enum(ALERT_TYPES),
  condition: z.string().max(40).nullable().optional(),
  threshold: z.number(),
  window_minutes: z.number().int().nullable().optional(),
  token_id: TokenId.nullable().optional(),
  min_requests: z.number().int().nullable().optional(),
  baseline_hours: z.number().int().nullable().optional(),
};
const name = z.string().trim().min(1, 'required').max(100, 'at most 100 characters');

export const CreateAlert = z.strictObject({ name, ...ruleFields, channels: Channels, enabled: z.boolean().optional() });
export const PatchAlert = z
  .strictObject({
    name: name.optional(),
    type: ruleFields.type.optional(),
    condition: ruleFields.condition,
    threshold: ruleFields.threshold.optional(),
    window_minutes: ruleFields.window_minutes,
    token_id: ruleFields.token_id,
    min_requests: ruleFields.min_requests,
    baseline_hours: ruleFields.baseline_hours,
    channels: Channels.optional(),
    enabled: z.boolean().optional(),
  })
  .refine((p) => Object.keys(p).length > 0, 'give at least one field to change');
export const AlertParams = z.strictObject({ id: z.string().regex(ALERT_ID_PATTERN, 'not an alr_ id') });
const NotificationsQuery = z.strictObject({ limit: z.coerce.number().int().min(1).max(200).optional() });

type RuleBody = Partial<Pick<z.infer<typeof CreateAlert>, keyof typeof ruleFields>>;

function ruleInput(body: RuleBody): Partial<RuleInput> {
  return {
    type: body.type,
    condition: body.condition,
    threshold: body.threshold,
    windowMinutes: body.window_minutes,
    tokenId: body.token_id,
    minRequests: body.min_requests,
    baselineHours: body.baseline_hours,
  };
}

const channelInput = (c: z.infer<typeof ChannelIn>): ChannelInput => (c.type === 'incident' ? { type: 'incident', routingKey: c.routing_key } : c);

/** The record, with the `whsec_` secret of each webhook channel this call created: the only time it is shown. */
const withSecrets = (record: AlertRecord, secrets: Record<string, string>): AlertRecord => ({
  ...record,
  channels: record.channels.map((c) => {
    const secret = secrets[c.id];
    return secret && c.type === 'webhook' ? { ...c, secret } : c;
  }),
});

const FieldErrors = z.array(z.object({ path: z.string(), message: z.string() }));

/**
 * The rule's own checks (ranges per type, src/domain/alert.ts) refuse as the body's schema does:
 * `body.threshold: …`, each error `in: "body"`, like every other 400 of the API.
 */
async function checkedAsBody<T>(command: Promise<T>): Promise<T> {
  try {
    return await command;
  } catch (error) {
    const fields = error instanceof DomainError && error.code === 'validation_failed' ? FieldErrors.safeParse(error.details?.errors) : null;
    if (!fields?.success) throw error;
    throw new InvalidInput(
      'body',
      fields.data.map(({ path, message }) => ({ code: 'custom', path: path.split('.'), message })),
    );
  }
}

/** Alert rules: create, list, get, edit, delete, and the delivery attempts of their notifications. */
export const alertRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  const tags = ['alerts'];
  const config = { auth: 'owner' } as const;
  const record = async (accountId: string, alertId: string): Promise<AlertRecord> => {
    const r = await deps.alertQueries.alert(accountId, alertId);
    if (!r) throw new DomainError('not_found', 'No such alert.');
    return r;
  };

  const create = {
    summary: "Create an alert rule (a webhook channel's signing secret is in this answer only)",
    description:
      "The plan's `max_alerts` caps the rules an account has (deleting one frees its place): at the cap, 409 `alert_limit_reached` with `maxAlerts` and `plan`. After a downgrade the rules over the new cap stay; none is added until below it.",
    tags,
    body: CreateAlert,
    response: { 201: Alert, ...problems(403, 404, 409, 422) },
  };
  app.post('/api/v1/alerts', { config, schema: create }, async (request, reply) => {
    const { accountId } = ownerOf(request);
    const body = request.body;
    const created = await checkedAsBody(
      deps.alerts.create(accountId, {
        name: body.name,
        rule: { ...ruleInput(body), type: body.type, threshold: body.threshold },
        channels: body.channels.map(channelInput),
        enabled: body.enabled,
      }),
    );
    await deps.waitFor(created.position);
    return reply.code(201).send(withSecrets(await record(accountId, created.alertId), created.secrets));
  });

  app.get('/api/v1/alerts', { config, schema: { summary: 'List alert rules', tags, response: { 200: AlertList } } }, async (request) => ({
    alerts: await deps.alertQueries.alerts(ownerOf(request).accountId),
  }));

  const get = { summary: 'Get an alert rule', tags, params: AlertParams, response: { 200: Alert, ...problems(404) } };
  app.get('/api/v1/alerts/:id', { config, schema: get }, async (request) => record(ownerOf(request).accountId, request.params.id));

  const edit = {
    summary: 'Edit an alert rule: its name, rule, channels, or enable/disable it',
    tags,
    params: AlertParams,
    body: PatchAlert,
    response: { 200: Alert, ...problems(403, 404, 409, 422) },
  };
  app.patch('/api/v1/alerts/:id', { config, schema: edit }, async (request) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    const body = request.body;
    const { name, channels, enabled, ...rule } = body;
    const changesRule = Object.values(rule).some((v) => v !== undefined);
    const updated = await checkedAsBody(
      deps.alerts.update(accountId, id, {
        name,
        enabled,
        channels: channels?.map(channelInput),
        rule: changesRule ? ruleInput(rule) : undefined,
      }),
    );
    await deps.waitFor(updated.position);
    return withSecrets(await record(accountId, id), updated.secrets);
  });

  const remove = { summary: 'Delete an alert rule', tags, params: AlertParams, response: { 204: z.undefined().describe('Deleted.'), ...problems(404, 409) } };
  app.delete('/api/v1/alerts/:id', { config, schema: remove }, async (request, reply) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    await deps.waitFor(await deps.alerts.delete(accountId, id));
    return reply.code(204).send();
  });

  const notifications = {
    summary: "The delivery attempts of an alert's notifications, newest first",
    tags,
    params: AlertParams,
    querystring: NotificationsQuery,
    response: { 200: AlertNotifications, ...problems(404) },
  };
  app.get('/api/v1/alerts/:id/notifications', { config, schema: notifications }, async (request) => {
    const { accountId } = ownerOf(request);
    const { id } = request.params;
    const { limit } = request.query;
    await record(accountId, id);
    return { alert_id: id, notifications: await deps.alertQueries.notifications(id, limit) };
  });
};
