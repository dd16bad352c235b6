import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import ajvFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components, paths } from '../../clients/typescript/schema.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../support/testApp.js';
import { usageCall } from '../support/usageCall.js';

/**
 * The live service against its own OpenAPI document: every documented operation is driven with
 * valid input and with bad input (missing and unknown fields, wrong types, malformed and unknown
 * ids, no or wrong credentials, limits), and every answer must be one the document describes:
 * a status the operation lists, a body valid against that status's schema for its content type
 * (ajv, JSON Schema 2020-12 as OpenAPI 3.1 has it), and the headers the status documents.
 */

type Method = 'get' | 'put' | 'post' | 'patch' | 'delete';
type OperationKey = {
  [P in keyof paths]: { [M in Method]: [NonNullable<paths[P][M]>] extends [never] ? never : `${Uppercase<M>} ${P & string}` }[Method];
}[keyof paths];
type Schemas = components['schemas'];

interface HeaderObject {
  description?: string;
  required?: boolean;
  schema?: object;
}
interface ResponseObject {
  description: string;
  headers?: Record<string, HeaderObject>;
  content?: Record<string, { schema?: object }>;
}
interface OperationObject {
  security?: Array<Record<string, string[]>>;
  parameters?: Array<{ in: string; name: string; required?: boolean }>;
  requestBody?: { content: Record<string, { schema?: object }> };
  responses: Record<string, ResponseObject>;
}
interface OpenApiDocument {
  paths: Record<string, Partial<Record<Method, OperationObject>>>;
  components: { schemas: Record<string, object> };
}

interface Request {
  params?: Record<string, string>;
  query?: Record<string, string>;
  /** A JSON body. */
  body?: unknown;
  /** A body sent as it is, with its content type. */
  raw?: { type: string; data: string };
  headers?: Record<string, string>;
}
interface Answer {
  status: number;
  headers: Headers;
  mediaType: string;
  text: string;
  json: unknown;
}

const PASSWORD = 'correct horse battery';
const PROBLEM = 'application/problem+json';
const COMPONENTS = 'https://chain-gateway.test/components';

let t: TestApp;
let baseUrl: string;
let document: OpenApiDocument;
const ajv = new Ajv2020({ strict: true, allErrors: true });
// A CommonJS module: its function is its `default` too.
ajvFormats.default(ajv);
// OpenAPI's own format for a file's bytes.
ajv.addFormat('binary', true);
const validators = new Map<object, ValidateFunction>();
/** The statuses each operation answered in this file. */
const seen = new Map<OperationKey, Set<number>>();

const pointingAtComponents = <T>(schema: T): T => JSON.parse(JSON.stringify(schema).replaceAll('"#/components/schemas/', `"${COMPONENTS}#/$defs/`));

beforeAll(async () => {
  // Every call comes from an address of its own (X-Forwarded-For), so low limits touch only the calls that test them.
  t = await startTestApp({ env: { TRUST_PROXY: 'true', LOGIN_MAX_FAILURES: '3', SIGNUP_MAX_PER_ADDRESS: '3' } });
  baseUrl = await t.app.listen({ host: '127.0.0.1', port: 0 });
  document = (await (await fetch(`${baseUrl}/api/v1/openapi.json`)).json()) as OpenApiDocument;
  ajv.addSchema({ $id: COMPONENTS, $defs: pointingAtComponents(document.components.schemas) });
});
afterAll(async () => {
  await t?.close();
});

function validate(schema: object, value: unknown, what: string): string[] {
  const check = validators.get(schema) ?? ajv.compile(pointingAtComponents(schema));
  validators.set(schema, check);
  if (check(value)) return [];
  return (check.errors ?? []).map((e) => `${what}${e.instancePath} ${e.message} ${JSON.stringify(e.params)} (schema ${e.schemaPath})`);
}

function operationOf(key: OperationKey): OperationObject | undefined {
  const [method, path] = key.split(' ') as [string, string];
  return document.paths[path]?.[method.toLowerCase() as Method];
}

/** What in `answer` the document does not describe; a 500 is a failure here whatever it says. */
function mismatches(key: OperationKey, answer: Answer): string[] {
  const operation = operationOf(key);
  if (!operation) return ['the document does not describe this operation'];
  // Under test an answer that breaks its schema is a 500 saying how (src/commands/api/contract.ts); none is expected here.
  if (answer.status === 500) return [`answered 500: ${answer.text.slice(0, 1500)}`];
  const response = operation.responses[String(answer.status)];
  if (!response)
    return [`answered ${answer.status}, which it does not document (${Object.keys(operation.responses).join(', ')}): ${answer.text.slice(0, 300)}`];
  const found: string[] = [];
  for (const [name, header] of Object.entries(response.headers ?? {})) {
    const value = answer.headers.get(name);
    if (value === null) {
      if (header.required) found.push(`no ${name} header, which ${answer.status} documents as always sent`);
    } else if (header.schema) {
      found.push(...validate(header.schema, value, `header ${name}`));
    }
  }
  if (!response.content) {
    if (answer.text !== '') found.push(`a body (${answer.mediaType}), where ${answer.status} documents none`);
    return found;
  }
  const media = response.content[answer.mediaType];
  if (!media) return [...found, `content type "${answer.mediaType}" is not one of ${Object.keys(response.content).join(', ')}`];
  const isJson = /[/+]json$/.test(answer.mediaType);
  if (isJson && answer.json === undefined) return [...found, `not JSON: ${answer.text.slice(0, 300)}`];
  if (media.schema) found.push(...validate(media.schema, isJson ? answer.json : answer.text, 'body'));
  if (answer.mediaType === PROBLEM && (answer.json as { status?: unknown }).status !== answer.status) {
    found.push(`the problem's status ${String((answer.json as { status?: unknown }).status)} is not the answer's ${answer.status}`);
  }
  return found;
}

let addresses = 0;
const freshAddress = (): string => {
  addresses += 1;
  return `10.${(addresses >> 16) & 255}.${(addresses >> 8) & 255}.${addresses & 255}`;
};

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Sends `request` to the operation over HTTP, expects `status`, and checks the answer against the document. */
async function call(key: OperationKey, request: Request, status: number): Promise<Answer> {
  const [method, template] = key.split(' ') as [string, string];
  const path = template.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(request.params?.[name] ?? `{${name}}`));
  const url = new URL(path, baseUrl);
  for (const [name, value] of Object.entries(request.query ?? {})) url.searchParams.set(name, value);
  const headers: Record<string, string> = { 'x-forwarded-for': freshAddress(), ...request.headers };
  let body: string | undefined;
  if (request.raw) {
    headers['content-type'] = request.raw.type;
    body = request.raw.data;
  } else if (request.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(request.body);
  }
  const response = await fetch(url, { method, headers, body });
  const bytes = Buffer.from(await response.arrayBuffer());
  const mediaType = (response.headers.get('content-type') ?? '').split(';')[0]?.trim() ?? '';
  const text = bytes.toString(mediaType === 'application/pdf' ? 'latin1' : 'utf8');
  const answer = { status: response.status, headers: response.headers, mediaType, text, json: /[/+]json$/.test(mediaType) ? parsed(text) : undefined };
  seen.set(key, (seen.get(key) ?? new Set()).add(answer.status));
  expect(mismatches(key, answer), `${key} → ${answer.status}: the answer differs from the document`).toEqual([]);
  expect(answer.status, `${key}: ${answer.text.slice(0, 500)}`).toBe(status);
  return answer;
}

/** The body, typed as the document's schema `name`: `call` has validated it against that schema. */
const read = <K extends keyof Schemas>(answer: Answer, _name: K): Schemas[K] => answer.json as Schemas[K];

async function problem(key: OperationKey, request: Request, status: number, code: string): Promise<Schemas['Problem']> {
  const answer = await call(key, request, status);
  expect(answer.mediaType).toBe(PROBLEM);
  const body = read(answer, 'Problem');
  expect(body.code, body.detail).toBe(code);
  return body;
}

interface Owner {
  email: string;
  accountId: string;
  session: Record<string, string>;
  bearer: Record<string, string>;
}

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
const freshEmail = () => `conformance-${Math.random().toString(36).slice(2)}@example.com`;

async function signUp(plan?: Schemas['SignedUp']['plan']): Promise<Owner> {
  const email = freshEmail();
  const signedUp = await call('POST /api/v1/auth/signup', { body: { email, password: PASSWORD } }, 201);
  const session = { cookie: String(signedUp.headers.getSetCookie()[0]).split(';')[0] as string };
  const accountId = read(signedUp, 'SignedUp').id;
  if (plan) await call('PUT /api/v1/admin/accounts/{id}/plan', { params: { id: accountId }, body: { plan }, headers: admin }, 200);
  const created = await call('POST /api/v1/access-tokens', { body: { name: 'conformance' }, headers: session }, 201);
  return { email, accountId, session, bearer: { authorization: `Bearer ${read(created, 'CreatedAccessToken').token}` } };
}

async function createToken(o: Owner, body: Record<string, unknown> = { name: 'backend' }) {
  return read(await call('POST /api/v1/tokens', { body, headers: o.bearer }, 201), 'CreatedToken');
}

/** Usage as the ingester appends it, once the projections have it. */
async function appendUsage(records: UsageRecord[]): Promise<void> {
  for (const accountId of new Set(records.map((r) => r.accountId))) {
    const events = records.filter((r) => r.accountId === accountId).map((r) => ({ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: { ...r } }));
    await t.runtime.store.append(usageStream(accountId), events, 'any');
  }
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
}

const unknownId = (prefix: string) => `${prefix}_0000000000000000`;

describe('every documented operation with valid input, and its refusals', () => {
  it('GET /api/v1/openapi.json answers the document', async () => {
    const answer = await call('GET /api/v1/openapi.json', {}, 200);
    expect(answer.json).toEqual(document);
  });

  it('documents the headers the API promises (docs/decisions.md), as always sent', () => {
    const promised: Array<[OperationKey, number, string]> = [
      ['POST /api/v1/auth/signup', 201, 'Set-Cookie'],
      ['POST /api/v1/auth/login', 200, 'Set-Cookie'],
      ['POST /api/v1/auth/logout', 204, 'Set-Cookie'],
      ['POST /api/v1/auth/signup', 429, 'Retry-After'],
      ['POST /api/v1/auth/login', 429, 'Retry-After'],
      ['POST /api/v1/auth/signup', 503, 'Retry-After'],
      ['POST /api/v1/auth/login', 503, 'Retry-After'],
      ['GET /api/v1/exports/usage.csv', 200, 'Content-Disposition'],
      ['GET /api/v1/exports/usage.json', 200, 'Content-Disposition'],
      ['GET /api/v1/exports/usage.pdf', 200, 'Content-Disposition'],
    ];
    const undocumented = promised.filter(([key, status, header]) => operationOf(key)?.responses[status]?.headers?.[header]?.required !== true);
    expect(undocumented).toEqual([]);
  });

  it('signs up, logs in and out, with the session cookie; refuses a taken email, wrong credentials and bad bodies', async () => {
    const email = freshEmail();
    const signedUp = await call('POST /api/v1/auth/signup', { body: { email: email.toUpperCase(), password: PASSWORD } }, 201);
    expect(read(signedUp, 'SignedUp')).toMatchObject({ email, plan: 'free' });
    await problem('POST /api/v1/auth/signup', { body: { email, password: PASSWORD } }, 409, 'email_taken');
    await problem('POST /api/v1/auth/signup', { body: { email: freshEmail() } }, 400, 'validation_failed');
    await problem('POST /api/v1/auth/signup', { body: { email: freshEmail(), password: 12345678 } }, 400, 'validation_failed');

    const loggedIn = await call('POST /api/v1/auth/login', { body: { email, password: PASSWORD } }, 200);
    expect(read(loggedIn, 'LoggedIn').id).toBe(read(signedUp, 'SignedUp').id);
    const session = { cookie: String(loggedIn.headers.getSetCookie()[0]).split(';')[0] as string };
    await call('GET /api/v1/account', { headers: session }, 200);
    await problem('POST /api/v1/auth/login', { body: { email, password: 'not the password' } }, 401, 'invalid_credentials');
    await problem('POST /api/v1/auth/login', { body: { email: freshEmail(), password: PASSWORD } }, 401, 'invalid_credentials');
    await problem('POST /api/v1/auth/login', { body: { email: 'not an email', password: PASSWORD } }, 400, 'validation_failed');

    await call('POST /api/v1/auth/logout', { headers: session }, 204);
    await call('POST /api/v1/auth/logout', {}, 204);
    await problem('GET /api/v1/account', { headers: session }, 401, 'unauthorized');
  });

  it('creates, lists and revokes access tokens; a revoked one no longer authenticates', async () => {
    const o = await signUp();
    const created = read(await call('POST /api/v1/access-tokens', { body: { name: 'ci' }, headers: o.session }, 201), 'CreatedAccessToken');
    expect(created.token).toMatch(/^gka_/);
    const listed = read(await call('GET /api/v1/access-tokens', { headers: o.session }, 200), 'AccessTokenList');
    expect(listed.access_tokens.map((a) => a.id)).toContain(created.id);
    const revoked = read(await call('DELETE /api/v1/access-tokens/{id}', { params: { id: created.id }, headers: o.session }, 200), 'AccessTokenRecord');
    expect(revoked.status).toBe('revoked');
    await call('DELETE /api/v1/access-tokens/{id}', { params: { id: created.id }, headers: o.session }, 200);
    await problem('GET /api/v1/tokens', { headers: { authorization: `Bearer ${created.token}` } }, 401, 'unauthorized');
    // Access tokens are managed from a session only.
    await problem('POST /api/v1/access-tokens', { body: { name: 'more' }, headers: o.bearer }, 401, 'unauthorized');
  });

  it('creates, lists, gets, renames, disables, enables, limits, reads the history of and revokes an API token', async () => {
    const o = await signUp('professional');
    const token = await createToken(o, { name: 'backend', description: 'the indexer', expires_in_days: 30, monthly_limit: 1000, rate_limit: 5 });
    expect(token).toMatchObject({ name: 'backend', status: 'active', monthly_limit: 1000, rate_limit: 5 });
    expect(token.expires_at).not.toBeNull();
    const listed = read(await call('GET /api/v1/tokens', { headers: o.bearer }, 200), 'TokenList');
    expect(listed.tokens.map((x) => x.id)).toEqual([token.id]);
    await call('GET /api/v1/tokens/{id}', { params: { id: token.id }, headers: o.session }, 200);
    const edit = (body: Record<string, unknown>) => call('PATCH /api/v1/tokens/{id}', { params: { id: token.id }, body, headers: o.bearer }, 200);
    expect(read(await edit({ name: 'indexer' }), 'TokenRecord').name).toBe('indexer');
    expect(read(await edit({ description: '' }), 'TokenRecord').description).toBe('');
    expect(read(await edit({ status: 'disabled' }), 'TokenRecord').status).toBe('disabled');
    expect(read(await edit({ status: 'active' }), 'TokenRecord').status).toBe('active');
    expect(read(await edit({ monthly_limit: null, rate_limit: 2 }), 'TokenRecord')).toMatchObject({ monthly_limit: null, rate_limit: 2 });
    // A downgrade in the token's life: the history's account entry, as the document has it.
    await call('PUT /api/v1/admin/accounts/{id}/plan', { params: { id: o.accountId }, body: { plan: 'developer' }, headers: admin }, 200);
    const history = read(await call('GET /api/v1/tokens/{id}/history', { params: { id: token.id }, headers: o.bearer }, 200), 'TokenHistory');
    expect(history.events.map((e) => e.type)).toContain('ApiTokenRenamed');
    expect(history.events.at(-1)).toMatchObject({ kind: 'account', type: 'AccountPlanChanged', plan: { from: 'professional', to: 'developer' } });
    const revoked = read(await call('DELETE /api/v1/tokens/{id}', { params: { id: token.id }, headers: o.bearer }, 200), 'TokenRecord');
    expect(revoked.status).toBe('revoked');
    await call('DELETE /api/v1/tokens/{id}', { params: { id: token.id }, headers: o.bearer }, 200);
    await problem('PATCH /api/v1/tokens/{id}', { params: { id: token.id }, body: { name: 'again' }, headers: o.bearer }, 409, 'token_revoked');
    await problem('POST /api/v1/tokens', { body: { name: 'big', monthly_limit: 1e12 }, headers: o.bearer }, 422, 'limit_above_account');
    await problem(
      'PATCH /api/v1/tokens/{id}',
      { params: { id: (await createToken(o)).id }, body: { rate_limit: 1e9 }, headers: o.bearer },
      422,
      'limit_above_account',
    );

    const free = await signUp();
    await problem('POST /api/v1/tokens', { body: { name: 'limited', monthly_limit: 10 }, headers: free.bearer }, 403, 'plan_feature_unavailable');
    const freeToken = await createToken(free);
    await problem(
      'PATCH /api/v1/tokens/{id}',
      { params: { id: freeToken.id }, body: { rate_limit: 1 }, headers: free.bearer },
      403,
      'plan_feature_unavailable',
    );
    await createToken(free);
    await problem('POST /api/v1/tokens', { body: { name: 'third' }, headers: free.bearer }, 409, 'token_limit_reached');
  });

  it("answers the account, and the operator's plan change", async () => {
    const o = await signUp();
    const account = read(await call('GET /api/v1/account', { headers: o.bearer }, 200), 'Account');
    expect(account).toMatchObject({ id: o.accountId, email: o.email, plan: { id: 'free' }, tokens: { count: 0 } });
    const changed = read(
      await call('PUT /api/v1/admin/accounts/{id}/plan', { params: { id: o.accountId }, body: { plan: 'unlimited' }, headers: admin }, 200),
      'Account',
    );
    expect(changed.plan.id).toBe('unlimited');
    expect(changed.usage.remaining).toBeNull();
    await problem('PUT /api/v1/admin/accounts/{id}/plan', { params: { id: unknownId('acc') }, body: { plan: 'free' }, headers: admin }, 404, 'not_found');
    await problem('PUT /api/v1/admin/accounts/{id}/plan', { params: { id: o.accountId }, body: { plan: 'gold' }, headers: admin }, 400, 'validation_failed');
    await problem('PUT /api/v1/admin/accounts/{id}/plan', { params: { id: o.accountId }, body: { plan: 'free' }, headers: o.bearer }, 401, 'unauthorized');
  });

  it("answers an account's metrics and a token's, with usage recorded, with each credential the call takes", async () => {
    const o = await signUp('developer');
    const limited = await createToken(o, { name: 'limited', monthly_limit: 5000 });
    const plain = await createToken(o, { name: 'plain' });
    const now = Date.now();
    const at = (minutesAgo: number) => new Date(now - minutesAgo * 60_000).toISOString();
    await appendUsage([
      usageCall(o.accountId, limited.id, at(30)),
      usageCall(o.accountId, limited.id, at(20), {
        requestId: 'r-upstream',
        status: 502,
        rpcErrorCode: -32603,
        errorMessage: 'upstream failed',
        upstreamMs: null,
      }),
      usageCall(o.accountId, plain.id, at(10), { chain: 'sol', method: 'getSlot', clientIp: '2001:db8::1' }),
      usageCall(o.accountId, plain.id, at(5), { requestId: 'r-limited', status: 429, rpcErrorCode: -32005, errorMessage: 'rate limited', charged: false }),
    ]);
    const user = read(await call('GET /api/v1/metrics/user', { headers: o.bearer }, 200), 'UserMetrics');
    expect(user.totals.requests).toBe(4);
    expect(user.errors.length).toBeGreaterThan(0);
    await call('GET /api/v1/metrics/user', { headers: o.session, query: { start: at(60), end: at(0), chain: 'eth', method: 'eth_call' } }, 200);
    await call('GET /api/v1/metrics/user', { headers: { authorization: `Bearer ${limited.token}` }, query: { start: '2000-01-01' } }, 200);
    await call('GET /api/v1/metrics/user', { headers: o.bearer, query: { start: at(60 * 24 * 20) } }, 200);
    const own = read(await call('GET /api/v1/metrics/tokens/{id}', { params: { id: limited.id }, headers: o.bearer }, 200), 'TokenMetrics');
    expect(own.limits.appliesTo).toBe('token');
    const shared = read(await call('GET /api/v1/metrics/tokens/{id}', { params: { id: plain.id }, headers: o.session }, 200), 'TokenMetrics');
    expect(shared.limits).toMatchObject({ appliesTo: 'account', tokenUsed: expect.any(Number) });
    expect(shared.clientIps.map((c) => c.ip)).toContain('2001:db8::1');

    await problem('GET /api/v1/metrics/user', { headers: o.bearer, query: { start: 'yesterday' } }, 400, 'validation_failed');
    await problem('GET /api/v1/metrics/user', { headers: o.bearer, query: { start: at(1), end: at(2) } }, 400, 'validation_failed');
    await problem('GET /api/v1/metrics/user', { headers: o.bearer, query: { chain: 'nochain' } }, 400, 'validation_failed');
    await problem('GET /api/v1/metrics/tokens/{id}', { params: { id: plain.id }, headers: o.bearer, query: { granularity: 'hour' } }, 400, 'validation_failed');
    // The API token authenticates the metrics call only, and only while active.
    await problem('GET /api/v1/metrics/tokens/{id}', { params: { id: plain.id }, headers: { authorization: `Bearer ${plain.token}` } }, 401, 'unauthorized');
    await call('PATCH /api/v1/tokens/{id}', { params: { id: plain.id }, body: { status: 'disabled' }, headers: o.bearer }, 200);
    await problem('GET /api/v1/metrics/user', { headers: { authorization: `Bearer ${plain.token}` } }, 403, 'token_disabled');
    await call('DELETE /api/v1/tokens/{id}', { params: { id: plain.id }, headers: o.bearer }, 200);
    await problem('GET /api/v1/metrics/user', { headers: { authorization: `Bearer ${plain.token}` } }, 401, 'unauthorized');
  });

  it('exports usage as CSV, JSON and PDF attachments on the plans that include them', async () => {
    const o = await signUp('professional');
    const token = await createToken(o);
    await appendUsage([usageCall(o.accountId, token.id, new Date(Date.now() - 60_000).toISOString(), { requestId: 'r-export' })]);
    const csv = await call('GET /api/v1/exports/usage.csv', { headers: o.bearer }, 200);
    expect(csv.text.split('\n').length).toBeGreaterThan(2);
    const json = await call('GET /api/v1/exports/usage.json', { headers: o.session, query: { chain: 'eth' } }, 200);
    expect((json.json as { rows: unknown[] }).rows).toHaveLength(1);
    const pdf = await call('GET /api/v1/exports/usage.pdf', { headers: o.bearer }, 200);
    expect(pdf.text.startsWith('%PDF-')).toBe(true);
    for (const answer of [csv, json, pdf]) expect(answer.headers.get('content-disposition')).toMatch(/^attachment; filename="usage-.+"$/);

    const free = await signUp();
    await call('GET /api/v1/exports/usage.csv', { headers: free.bearer }, 200);
    await problem('GET /api/v1/exports/usage.json', { headers: free.bearer }, 403, 'plan_feature_unavailable');
    await problem('GET /api/v1/exports/usage.pdf', { headers: free.session }, 403, 'plan_feature_unavailable');
    await problem('GET /api/v1/exports/usage.csv', { headers: free.bearer, query: { end: 'soon' } }, 400, 'validation_failed');
  });

  it('creates, lists, gets, edits, deletes alert rules and lists their notifications', async () => {
    const o = await signUp('unlimited');
    const token = await createToken(o);
    const channels = [
      { type: 'email', to: 'ops@example.com' },
      { type: 'webhook', url: 'https://hooks.example.com/gw' },
      { type: 'chat', url: 'https://chat.example.com/hook' },
      { type: 'incident', routing_key: 'R0UT1NGKEY' },
      { type: 'sms', to: '+14155550100' },
    ];
    const created = read(
      await call(
        'POST /api/v1/alerts',
        { body: { name: 'errors', type: 'error_rate', threshold: 5, window_minutes: 15, token_id: token.id, channels }, headers: o.bearer },
        201,
      ),
      'Alert',
    );
    expect(created.channels.find((c) => c.type === 'webhook')).toMatchObject({ secret: expect.stringMatching(/^whsec_/) });
    const listed = read(await call('GET /api/v1/alerts', { headers: o.session }, 200), 'AlertList');
    expect(listed.alerts.map((a) => a.id)).toEqual([created.id]);
    await call('GET /api/v1/alerts/{id}', { params: { id: created.id }, headers: o.bearer }, 200);
    const params = { id: created.id };
    const edited = read(
      await call(
        'PATCH /api/v1/alerts/{id}',
        { params, body: { name: 'slow', type: 'response_time', threshold: 800, enabled: false }, headers: o.bearer },
        200,
      ),
      'Alert',
    );
    expect(edited).toMatchObject({ name: 'slow', type: 'response_time', enabled: false });
    await call(
      'PATCH /api/v1/alerts/{id}',
      { params, body: { channels: [{ type: 'webhook', url: 'https://hooks.example.com/other' }] }, headers: o.bearer },
      200,
    );
    await call('GET /api/v1/alerts/{id}/notifications', { params, query: { limit: '5' }, headers: o.bearer }, 200);
    await problem('GET /api/v1/alerts/{id}/notifications', { params, query: { limit: '0' }, headers: o.bearer }, 400, 'validation_failed');
    await problem(
      'POST /api/v1/alerts',
      { body: { name: 'quota', type: 'usage_threshold', threshold: 80, channels: channels.slice(0, 1) }, headers: o.bearer },
      422,
      'alert_not_applicable',
    );
    await problem(
      'POST /api/v1/alerts',
      { body: { name: 'x', type: 'error_rate', threshold: 5, token_id: unknownId('tok'), channels: channels.slice(0, 1) }, headers: o.bearer },
      404,
      'not_found',
    );
    await problem(
      'POST /api/v1/alerts',
      { body: { name: 'x', type: 'error_rate', threshold: -5, channels: channels.slice(0, 1) }, headers: o.bearer },
      400,
      'validation_failed',
    );
    await problem(
      'POST /api/v1/alerts',
      { body: { name: 'x', type: 'error_rate', threshold: 5, channels: [channels[0], channels[0]] }, headers: o.bearer },
      400,
      'validation_failed',
    );
    await call('DELETE /api/v1/alerts/{id}', { params, headers: o.bearer }, 204);
    await problem('GET /api/v1/alerts/{id}', { params, headers: o.bearer }, 404, 'not_found');
    await problem('DELETE /api/v1/alerts/{id}', { params, headers: o.bearer }, 404, 'not_found');

    const free = await signUp();
    await problem(
      'POST /api/v1/alerts',
      { body: { name: 'hook', type: 'error_rate', threshold: 5, channels: channels.slice(1, 2) }, headers: free.bearer },
      403,
      'plan_feature_unavailable',
    );
    const freeAlert = read(
      await call(
        'POST /api/v1/alerts',
        { body: { name: 'mail', type: 'error_rate', threshold: 5, channels: channels.slice(0, 1) }, headers: free.bearer },
        201,
      ),
      'Alert',
    );
    const freeParams = { id: freeAlert.id };
    await problem(
      'PATCH /api/v1/alerts/{id}',
      { params: freeParams, body: { channels: channels.slice(1, 2) }, headers: free.bearer },
      403,
      'plan_feature_unavailable',
    );
    const mail = { name: 'mail', type: 'error_rate', threshold: 5, channels: channels.slice(0, 1) };
    for (let i = 1; i < 5; i++) await call('POST /api/v1/alerts', { body: mail, headers: free.bearer }, 201);
    await problem('POST /api/v1/alerts', { body: mail, headers: free.bearer }, 409, 'alert_limit_reached');
    const second = read(
      await call('POST /api/v1/alerts', { body: { name: 'errors', type: 'error_rate', threshold: 5, channels: channels.slice(0, 1) }, headers: o.bearer }, 201),
      'Alert',
    );
    await problem(
      'PATCH /api/v1/alerts/{id}',
      { params: { id: second.id }, body: { type: 'usage_threshold', threshold: 80 }, headers: o.bearer },
      422,
      'alert_not_applicable',
    );
  });

  it('refuses too many sign-ups and failed log-ins with 429 and Retry-After', async () => {
    const address = { 'x-forwarded-for': '192.0.2.77' };
    for (let i = 0; i < 3; i += 1) await call('POST /api/v1/auth/signup', { body: { email: freshEmail(), password: PASSWORD }, headers: address }, 201);
    await problem('POST /api/v1/auth/signup', { body: { email: freshEmail(), password: PASSWORD }, headers: address }, 429, 'too_many_attempts');

    const o = await signUp();
    for (let i = 0; i < 3; i += 1)
      await problem('POST /api/v1/auth/login', { body: { email: o.email, password: 'wrong password' } }, 401, 'invalid_credentials');
    const locked = await call('POST /api/v1/auth/login', { body: { email: o.email, password: PASSWORD } }, 429);
    expect(Number(locked.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('refuses log-ins and sign-ups beyond the password hashing queue with 503 and Retry-After', async () => {
    const send = async (key: 'POST /api/v1/auth/login' | 'POST /api/v1/auth/signup'): Promise<Answer> => {
      const response = await fetch(new URL(key.split(' ')[1] as string, baseUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-forwarded-for': freshAddress() },
        body: JSON.stringify({ email: freshEmail(), password: PASSWORD }),
      });
      const text = await response.text();
      const answer = {
        status: response.status,
        headers: response.headers,
        mediaType: (response.headers.get('content-type') ?? '').split(';')[0] ?? '',
        text,
        json: parsed(text),
      };
      seen.set(key, (seen.get(key) ?? new Set()).add(answer.status));
      expect(mismatches(key, answer), `${key} → ${answer.status}`).toEqual([]);
      return answer;
    };
    // One hash runs and 64 wait: of 90 log-ins sent together some are refused at once; the
    // sign-ups sent after the first refusal find the queue still full (it drains at ~20 a second).
    let firstRefusal: () => void = () => {};
    const refusedOnce = new Promise<void>((resolve) => {
      firstRefusal = resolve;
    });
    const logIns = Promise.all(
      Array.from({ length: 90 }, async () => {
        const answer = await send('POST /api/v1/auth/login');
        if (answer.status === 503) firstRefusal();
        return answer;
      }),
    );
    await refusedOnce;
    const signUps = await Promise.all(Array.from({ length: 5 }, () => send('POST /api/v1/auth/signup')));
    for (const answer of [...(await logIns), ...signUps]) expect([401, 201, 503]).toContain(answer.status);
    const refusedSignUps = signUps.filter((a) => a.status === 503);
    expect(refusedSignUps.length).toBeGreaterThan(0);
    expect(refusedSignUps[0]?.headers.get('retry-after')).toBe('1');
    expect((await logIns).find((a) => a.status === 503)?.headers.get('retry-after')).toBe('1');
  });
});

describe('bad input to every documented operation', () => {
  let o: Owner;
  let token: Schemas['CreatedToken'];
  let alertId: string;
  let accessTokenId: string;

  beforeAll(async () => {
    o = await signUp('unlimited');
    token = await createToken(o);
    const alert = await call(
      'POST /api/v1/alerts',
      { body: { name: 'errors', type: 'error_rate', threshold: 5, channels: [{ type: 'email', to: 'ops@example.com' }] }, headers: o.bearer },
      201,
    );
    alertId = read(alert, 'Alert').id;
    accessTokenId = read(await call('POST /api/v1/access-tokens', { body: { name: 'spare' }, headers: o.session }, 201), 'CreatedAccessToken').id;
  });

  const period = () => ({ start: new Date(Date.now() - 3_600_000).toISOString(), end: new Date().toISOString(), chain: 'eth', method: 'eth_call' });
  /** A valid request to each operation (the type makes it name every operation of the generated client), without its credential. */
  const examples = (): Record<OperationKey, Request> => ({
    'GET /api/v1/openapi.json': {},
    'POST /api/v1/auth/signup': { body: { email: freshEmail(), password: PASSWORD } },
    'POST /api/v1/auth/login': { body: { email: o.email, password: PASSWORD } },
    'POST /api/v1/auth/logout': {},
    'GET /api/v1/account': {},
    'PUT /api/v1/admin/accounts/{id}/plan': { params: { id: o.accountId }, body: { plan: 'unlimited' } },
    'POST /api/v1/access-tokens': { body: { name: 'ci' } },
    'GET /api/v1/access-tokens': {},
    'DELETE /api/v1/access-tokens/{id}': { params: { id: accessTokenId } },
    'POST /api/v1/tokens': { body: { name: 'backend', description: 'the indexer', expires_in_days: 7, monthly_limit: 100, rate_limit: 1 } },
    'GET /api/v1/tokens': {},
    'GET /api/v1/tokens/{id}': { params: { id: token.id } },
    'PATCH /api/v1/tokens/{id}': { params: { id: token.id }, body: { name: 'renamed', description: 'changed', monthly_limit: 50 } },
    'DELETE /api/v1/tokens/{id}': { params: { id: token.id } },
    'GET /api/v1/tokens/{id}/history': { params: { id: token.id } },
    'GET /api/v1/metrics/user': { query: period() },
    'GET /api/v1/metrics/tokens/{id}': { params: { id: token.id }, query: period() },
    'GET /api/v1/exports/usage.csv': { query: period() },
    'GET /api/v1/exports/usage.json': { query: period() },
    'GET /api/v1/exports/usage.pdf': { query: period() },
    'POST /api/v1/alerts': {
      body: { name: 'slow', type: 'response_time', threshold: 800, window_minutes: 10, channels: [{ type: 'email', to: 'ops@example.com' }] },
    },
    'GET /api/v1/alerts': {},
    'GET /api/v1/alerts/{id}': { params: { id: alertId } },
    'PATCH /api/v1/alerts/{id}': { params: { id: alertId }, body: { name: 'renamed', threshold: 10 } },
    'DELETE /api/v1/alerts/{id}': { params: { id: alertId } },
    'GET /api/v1/alerts/{id}/notifications': { params: { id: alertId }, query: { limit: '10' } },
  });

  const operations = (): OperationKey[] =>
    Object.entries(document.paths).flatMap(([path, methods]) => Object.keys(methods).map((m) => `${m.toUpperCase()} ${path}` as OperationKey));

  /** The credential the operation names first in its `security`. */
  function credentialFor(key: OperationKey): Record<string, string> {
    const scheme = Object.keys(operationOf(key)?.security?.[0] ?? {})[0];
    if (scheme === 'apiToken') return { authorization: `Bearer ${token.token}` };
    if (scheme === 'accessToken') return o.bearer;
    if (scheme === 'session') return o.session;
    if (scheme === 'adminToken') return admin;
    return {};
  }

  /** A value of another JSON type than `value`. */
  const wrongType = (value: unknown): unknown => (typeof value === 'string' ? 12345 : 'a string');

  it('has a valid example for every documented operation', () => {
    expect(operations().filter((key) => !(key in examples()))).toEqual([]);
  });

  it('refuses a call without its credential, or with a wrong one (401)', async () => {
    for (const key of operations()) {
      if ((operationOf(key)?.security ?? []).length === 0) continue;
      const request = examples()[key];
      await problem(key, request, 401, 'unauthorized');
      await problem(key, { ...request, headers: { authorization: 'Bearer gka_not-a-token' } }, 401, 'unauthorized');
      await problem(key, { ...request, headers: { cookie: 'gw_session=not-a-session' } }, 401, 'unauthorized');
    }
  });

  it('refuses a malformed id (400) and answers an unknown one 404', async () => {
    for (const key of operations()) {
      const request = examples()[key];
      for (const [name, value] of Object.entries(request.params ?? {})) {
        const headers = credentialFor(key);
        const malformed = await problem(key, { ...request, headers, params: { ...request.params, [name]: 'not-an-id' } }, 400, 'validation_failed');
        expect(malformed.errors).toContainEqual(expect.objectContaining({ in: 'params', path: name }));
        const unknown = unknownId(value.split('_')[0] as string);
        await problem(key, { ...request, headers, params: { ...request.params, [name]: unknown } }, 404, 'not_found');
      }
    }
  });

  it('refuses an unknown query parameter and a bad value of each (400)', async () => {
    for (const key of operations()) {
      const request = examples()[key];
      const headers = credentialFor(key);
      const query = (operationOf(key)?.parameters ?? []).filter((p) => p.in === 'query');
      if (query.length === 0) continue;
      await problem(key, { ...request, headers, query: { ...request.query, unexpected: '1' } }, 400, 'validation_failed');
      for (const { name } of query) {
        await problem(key, { ...request, headers, query: { ...request.query, [name]: 'not-a-value-'.repeat(30) } }, 400, 'validation_failed');
      }
    }
  });

  it('refuses a body with a missing field, a wrong type, an unknown field, not an object or not JSON (400), not JSON by type (415), too large (413)', async () => {
    for (const key of operations()) {
      const request = examples()[key];
      const headers = credentialFor(key);
      const bad = (change: Partial<Request>) => ({ ...request, headers, ...change });
      const body = request.body as Record<string, unknown> | undefined;
      if (operationOf(key)?.requestBody && body) {
        const missing = await problem(key, bad({ body: {} }), 400, 'validation_failed');
        expect(missing.errors?.[0]?.in).toBe('body');
        for (const [field, value] of Object.entries(body)) {
          const wrong = await problem(key, bad({ body: { ...body, [field]: wrongType(value) } }), 400, 'validation_failed');
          expect(wrong.errors).toContainEqual(expect.objectContaining({ in: 'body', path: field }));
        }
        await problem(key, bad({ body: { ...body, unexpected: true } }), 400, 'validation_failed');
        await problem(key, bad({ body: [body] }), 400, 'validation_failed');
      }
      if (key.startsWith('GET ')) continue;
      // Fastify reads a body on every method but GET: a client's stray body gets one of these answers.
      await problem(key, bad({ raw: { type: 'application/json', data: '{"name":' } }), 400, 'invalid_request');
      await problem(key, bad({ raw: { type: 'text/plain', data: 'name=x' } }), 415, 'unsupported_media_type');
      await problem(key, bad({ raw: { type: 'application/json', data: `"${'x'.repeat(1_100_000)}"` } }), 413, 'body_too_large');
    }
  });

  it('answers every example as valid, deletions last', async () => {
    const successOf = (key: OperationKey) => Object.keys(operationOf(key)?.responses ?? {}).find((s) => s.startsWith('2'));
    const ordered = operations().sort((a, b) => Number(a.startsWith('DELETE')) - Number(b.startsWith('DELETE')));
    for (const key of ordered) {
      await call(key, { ...examples()[key], headers: credentialFor(key) }, Number(successOf(key)));
    }
  });
});

describe('coverage', () => {
  it('drove every documented operation to a success and to a refusal', () => {
    const missing = Object.entries(document.paths).flatMap(([path, methods]) =>
      Object.keys(methods).flatMap((method) => {
        const key = `${method.toUpperCase()} ${path}` as OperationKey;
        const statuses = [...(seen.get(key) ?? [])];
        const refused = key === 'GET /api/v1/openapi.json' || statuses.some((s) => s >= 400);
        return statuses.some((s) => s < 300) && refused ? [] : [`${key}: ${statuses.join(', ') || 'never called'}`];
      }),
    );
    expect(missing).toEqual([]);
  });
});
