import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { type OpenStores, projectedElsewhere } from '../../src/cli/stores.js';
import { type Difference, verifyReadModels } from '../../src/cli/verify.js';
import { AccountCommands } from '../../src/commands/accountCommands.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { hashToken } from '../../src/domain/tokenFormat.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { TokenCache } from '../../src/gateway/tokenCache.js';
import { RedisChangeFeed } from '../../src/infra/changefeed/redis.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { LevelReadModelStore, openReadModels } from '../../src/infra/readmodels/index.js';
import { PROJECTIONS } from '../../src/projections/all.js';
import type { TokenDoc } from '../../src/projections/core.js';
import { Queries } from '../../src/projections/queries.js';
import { purgeAccountUsage } from '../../src/projections/retention.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { ADMIN_TOKEN, owner, startTestApp } from '../support/testApp.js';
import { textSink } from '../support/textSink.js';

const CLI = fileURLToPath(new URL('../../src/cli.ts', import.meta.url));
const CALLS = 12;

let dataDir: string;
let a: { accountId: string; email: string };
let b: { accountId: string; email: string };
/** a's two tokens, then b's one. */
let tokens: string[];
const scratch: string[] = [];

/** A history made through the API in process, then the app closed: the CLI opens the data directory after it, as an operator would. */
beforeAll(async () => {
  const t = await startTestApp();
  dataDir = t.dataDir;
  const ownerA = await owner(t.app);
  const ownerB = await owner(t.app);
  await t.app.inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${ownerB.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan: 'developer' },
  });
  tokens = [];
  for (const [o, name] of [
    [ownerA, 'one'],
    [ownerA, 'two'],
    [ownerB, 'three'],
  ] as const) {
    tokens.push((await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name } })).json().id);
  }
  const calls: UsageRecord[] = Array.from({ length: CALLS }, (_, i) => ({
    requestId: `req-${i}`,
    at: new Date(Date.now() - i * 1000).toISOString(),
    accountId: ownerA.accountId,
    tokenId: tokens[0] as string,
    chain: 'eth',
    method: i % 2 ? 'eth_blockNumber' : 'eth_call',
    status: 200,
    rpcErrorCode: null,
    errorMessage: null,
    totalMs: 3,
    upstreamMs: 2,
    clientIp: '127.0.0.1',
    upstream: 'u1',
  }));
  for (const r of calls) await t.runtime.store.append(usageStream(r.accountId), [{ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: r }], 'any');
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
  await t.close({ keepData: true });
  a = ownerA;
  b = ownerB;
}, 60_000);

afterAll(() => {
  for (const d of [dataDir, ...scratch]) if (d) rmSync(d, { recursive: true, force: true });
});

/** The CLI in process, on the test's data directory. */
async function cli(args: string[], options: { open?: OpenStores; env?: Record<string, string> } = {}) {
  const stdout = textSink();
  const stderr = textSink();
  const code = await main(args, {
    stdout: stdout.stream,
    stderr: stderr.stream,
    env: { DATA_DIR: dataDir, LOCAL_DEVNET: 'off', ...options.env },
    ...(options.open ? { open: options.open } : {}),
  });
  return { code, stdout: stdout.text(), stderr: stderr.text() };
}
const jsonLines = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));

describe('operator CLI: help and bad input', () => {
  it('--help lists every command with its arguments, and the exit codes; <command> --help shows its options', async () => {
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    for (const usage of [
      'accounts list',
      'accounts show <account>',
      'plan set <account> <plan>',
      'tokens list',
      'tokens disable <token>',
      'tokens enable <token>',
      'tokens revoke <token>',
      'history <token>',
      'usage export --account <account>',
      'rebuild',
      'verify',
      '--json',
    ]) {
      expect(help.stdout).toMatch(new RegExp(`^ {2}${usage.replace(/[<>]/g, '.')}\\s`, 'm'));
    }
    expect(help.stdout).toMatch(/^ {2}2 {2}usage: unknown command or option/m);
    expect(help.stdout).toMatch(/^ {2}3 {2}not found/m);
    const one = await cli(['usage', 'export', '--help']);
    expect(one.code).toBe(0);
    expect(one.stdout).toContain('Usage: npm run cli -- usage export --account <account> [--from <time>] [--to <time>] [--chain <chain>] [--format csv|json]');
    const group = await cli(['tokens', '--help']);
    expect(group).toMatchObject({ code: 0, stdout: expect.stringContaining('tokens <list|disable|enable|revoke>') });
  });

  it('an unknown command, option or argument, or a missing one, prints the usage and exits 2', async () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /No command given/],
      [['frobnicate'], /Unknown command "frobnicate"/],
      [['tokens'], /Unknown tokens command; one of: list, disable, enable, revoke/],
      [['tokens', 'burn', 'x'], /Unknown tokens command "burn"/],
      [['accounts', 'list', '--bogus'], /--bogus/],
      [['accounts', 'list', 'extra'], /Unexpected argument "extra"/],
      [['accounts', 'list', '--plan', 'gold'], /--plan: unknown plan "gold"/],
      [['plan', 'set', 'acc_x'], /Missing <plan>/],
      [['plan', 'set', 'acc_x', 'gold'], /Unknown plan "gold"; plans: free, developer, professional, unlimited/],
      [['usage', 'export'], /--account <account> is required/],
      [['verify', '--limit', 'many'], /--limit/],
    ];
    for (const [args, message] of cases) {
      const r = await cli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr.split('\n')[0], args.join(' ')).toMatch(new RegExp(`^error: .*${message.source}`));
      expect(r.stderr, args.join(' ')).toMatch(/Usage: npm run cli -- /);
      expect(r.stdout).toBe('');
    }
    // With --json: one JSON line on stderr, nothing else.
    const r = await cli(['accounts', 'list', '--bogus', '--json']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(r.stderr)).toMatchObject({ error: 'usage', exit_code: 2, message: expect.stringContaining('--bogus') });
  });

  it('an unknown account or token exits 3; a data directory without a log, or one the service holds, exits 1', async () => {
    for (const args of [
      ['accounts', 'show', 'acc_nope'],
      ['plan', 'set', 'acc_nope', 'developer'],
      ['tokens', 'list', '--account', 'acc_nope'],
      ['tokens', 'disable', 'tok_nope'],
      ['tokens', 'revoke', 'tok_nope'],
      ['history', 'tok_nope'],
      ['usage', 'export', '--account', 'acc_nope'],
    ]) {
      const r = await cli(args);
      expect(r.code, args.join(' ')).toBe(3);
      expect(r.stderr, args.join(' ')).toMatch(/^error: No (account|token) \S+nope\.\n$/);
    }
    const json = await cli(['history', 'tok_nope', '--json']);
    expect(JSON.parse(json.stderr)).toEqual({ error: 'not_found', message: 'No token tok_nope.', exit_code: 3 });

    const empty = mkdtempSync(join(tmpdir(), 'gw-cli-empty-'));
    scratch.push(empty);
    expect(await cli(['accounts', 'list'], { env: { DATA_DIR: join(empty, 'nothing') } })).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/^error: No event store in DATA_DIR=/),
    });
    const held = await LevelEventStore.open(join(dataDir, 'eventstore'));
    try {
      expect(await cli(['accounts', 'list'])).toMatchObject({ code: 1, stderr: expect.stringMatching(/is open in another process: stop the service first/) });
    } finally {
      await held.close();
    }
  });
});

describe('operator CLI: commands', () => {
  it('accounts list: aligned text, JSON lines, by plan', async () => {
    const text = await cli(['accounts', 'list']);
    expect(text.code).toBe(0);
    const lines = text.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ID\s+EMAIL\s+PLAN\s+CREATED$/);
    expect(lines).toHaveLength(3);
    const emailColumn = (lines[0] as string).indexOf('EMAIL');
    for (const line of lines.slice(1)) expect(line.slice(emailColumn)).toMatch(/^owner-\S+@example\.com\s+(free|developer)\s+\d{4}-/);
    const rows = jsonLines((await cli(['accounts', 'list', '--json'])).stdout);
    expect(rows).toHaveLength(2);
    expect(rows).toContainEqual({ id: a.accountId, email: a.email, plan: 'free', created_at: expect.any(String) });
    expect(jsonLines((await cli(['--json', 'accounts', 'list', '--plan', 'developer'])).stdout)).toEqual([expect.objectContaining({ id: b.accountId })]);
  });

  it("accounts show: the plan, this month's usage and the tokens", async () => {
    const text = await cli(['accounts', 'show', a.accountId]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^plan\s+free \(Free\)$/m);
    expect(text.stdout).toMatch(new RegExp(`^requests \\d{4}-\\d{2}\\s+${CALLS}$`, 'm'));
    expect(text.stdout).toMatch(new RegExp(`^quota used\\s+${CALLS} of \\d+, \\d+ remaining$`, 'm'));
    expect(text.stdout).toMatch(/^tokens\s+2 live of \d+, 2 in all$/m);
    const json = JSON.parse((await cli(['accounts', 'show', a.accountId, '--json'])).stdout);
    expect(json).toMatchObject({ id: a.accountId, email: a.email, plan: 'free', requests_this_month: CALLS, quota_used: CALLS, live_tokens: 2 });
  });

  it('plan set: appends the plan change through the command handlers, the read models show it', async () => {
    const set = await cli(['plan', 'set', b.accountId, 'professional']);
    expect(set).toMatchObject({ code: 0, stdout: `account ${b.accountId}: plan developer -> professional\n` });
    expect(JSON.parse((await cli(['accounts', 'show', b.accountId, '--json'])).stdout).plan).toBe('professional');
    expect(JSON.parse((await cli(['plan', 'set', b.accountId, 'professional', '--json'])).stdout)).toEqual({
      account: b.accountId,
      from: 'professional',
      to: 'professional',
      changed: false,
    });
    const store = await LevelEventStore.open(join(dataDir, 'eventstore'));
    try {
      const events = await store.readStream(`account-${b.accountId}`);
      expect(events.filter((e) => e.type === 'AccountPlanChanged').map((e) => e.data)).toEqual([
        expect.objectContaining({ from: 'free', to: 'developer' }),
        expect.objectContaining({ from: 'developer', to: 'professional' }),
      ]);
    } finally {
      await store.close();
    }
  });

  it("tokens list: every token or one account's, masked, with the month's usage", async () => {
    const all = jsonLines((await cli(['tokens', 'list', '--json'])).stdout);
    expect(all.map((t) => t.id).sort()).toEqual([...tokens].sort());
    expect(all.find((t) => t.id === tokens[0])).toMatchObject({
      account_id: a.accountId,
      name: 'one',
      status: 'active',
      current_month_usage: CALLS,
      masked: expect.stringMatching(/^gk_/),
    });
    const text = await cli(['tokens', 'list', '--account', a.accountId]);
    const lines = text.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ID\s+ACCOUNT\s+NAME\s+STATUS\s+TOKEN\s+CREATED\s+EXPIRES\s+MONTH_USAGE\s+MONTHLY_LIMIT\s+RATE_LIMIT$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/)[0])).toEqual(tokens.slice(0, 2));
  });

  it("tokens disable, enable, revoke: events on the token's stream, seen in its history; a revoked token cannot change (exit 1)", async () => {
    const [first = '', second = ''] = tokens;
    expect((await cli(['tokens', 'disable', first])).stdout).toBe(`token ${first} (account ${a.accountId}): active -> disabled\n`);
    expect((await cli(['tokens', 'disable', first])).stdout).toBe(`token ${first} (account ${a.accountId}): already disabled\n`);
    expect(JSON.parse((await cli(['tokens', 'enable', first, '--json'])).stdout)).toMatchObject({ id: first, status: 'active', changed: true });
    expect((await cli(['tokens', 'revoke', second])).stdout).toBe(`token ${second} (account ${a.accountId}): active -> revoked\n`);
    const refused = await cli(['tokens', 'disable', second]);
    expect(refused).toMatchObject({ code: 1, stderr: 'error: The token is revoked; a revoked token cannot change.\n' });
    expect(JSON.parse((await cli(['tokens', 'enable', second, '--json'])).stderr)).toMatchObject({ error: 'token_revoked', exit_code: 1 });

    const history = await cli(['history', first]);
    expect(history.code).toBe(0);
    const lines = history.stdout.trim().split('\n');
    expect(lines.map((l) => l.split(/\s+/)[2])).toEqual(['ApiTokenCreated', 'ApiTokenDisabled', 'ApiTokenEnabled']);
    expect(lines[1]).toMatch(/^\S+Z {2}#1 ApiTokenDisabled\s+status=disabled name="one" expires=- monthly_limit=- rate_limit=-$/);
    const json = jsonLines((await cli(['history', second, '--json'])).stdout);
    expect(json.map((h) => [h.revision, h.type, h.state.status])).toEqual([
      [0, 'ApiTokenCreated', 'active'],
      [1, 'ApiTokenRevoked', 'revoked'],
    ]);
    expect(JSON.parse((await cli(['accounts', 'show', a.accountId, '--json'])).stdout).live_tokens).toBe(1);
  });

  it("usage export: the API's CSV and JSON rows for an account, whatever its plan includes; bad periods are usage errors", async () => {
    const csv = await cli(['usage', 'export', '--account', a.accountId]);
    expect(csv.code).toBe(0);
    const lines = csv.stdout.split('\r\n').filter(Boolean);
    expect(lines[0]).toBe(
      'time,request_id,token_id,chain,method,status,outcome,rpc_error_code,error_message,total_ms,upstream_ms,client_ip,upstream,charged,cache',
    );
    expect(lines).toHaveLength(CALLS + 1);
    // The free plan has no JSON export; the operator's export does not ask the plan.
    const json = JSON.parse((await cli(['usage', 'export', '--account', a.accountId, '--format', 'json', '--chain', 'eth'])).stdout);
    expect(json.rows).toHaveLength(CALLS);
    expect(json.rows[0]).toMatchObject({ token_id: tokens[0], chain: 'eth', status: 200, outcome: 'success' });
    const old = JSON.parse((await cli(['usage', 'export', '--account', a.accountId, '--format', 'json', '--from', '2020-01-01', '--to', '2020-01-02'])).stdout);
    expect(old.rows).toEqual([]);
    expect(old.retention).toMatchObject({ retentionDays: 7, clamped: true });
    for (const [args, message] of [
      [['--from', 'yesterday'], /^error: --from: must be an ISO 8601 timestamp/],
      [['--from', '2030-01-02', '--to', '2030-01-01'], /^error: --to: must not be more than a day in the future/],
      [['--from', new Date().toISOString().slice(0, 10), '--to', '2020-01-01'], /^error: --to: must be after start/],
      [['--chain', 'nope'], /^error: --chain: unknown chain "nope"/],
      [['--format', 'pdf'], /^error: --format: "pdf" is not one of csv, json/],
    ] as Array<[string[], RegExp]>) {
      const r = await cli(['usage', 'export', '--account', a.accountId, ...args]);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toMatch(message);
    }
  });

  it('verify: 0 on read models the log explains; 1 naming a tampered document; 0 again after a rebuild', async () => {
    const ok = await cli(['verify']);
    expect(ok.stdout).toMatch(/^consistent: \d+ documents equal, 0 differences; replayed core@\S+, usage_totals@\S+/m);
    expect(ok.code).toBe(0);

    const readModels = await openReadModels({ dataDir });
    try {
      const doc = await readModels.get<TokenDoc>('tokens', tokens[2] as string);
      await readModels.write([{ op: 'put', collection: 'tokens', key: tokens[2] as string, doc: { ...doc, name: 'tampered' } }]);
      await readModels.write([{ op: 'delete', collection: 'accounts', key: a.accountId }]);
    } finally {
      await readModels.close();
    }
    const bad = await cli(['verify']);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toContain(`tokens/${tokens[2]}  differs in name\n`);
    expect(bad.stdout).toContain(`accounts/${a.accountId}  missing (the replay has it, the read models do not)\n`);
    expect(bad.stdout).toMatch(/^INCONSISTENT: \d+ documents equal, 2 differences/m);
    const json = jsonLines((await cli(['verify', '--json', '--limit', '1'])).stdout);
    expect(json).toHaveLength(2);
    expect(json[1].summary).toMatchObject({ differences: 2 });

    expect((await cli(['rebuild'])).stdout).toMatch(/^rebuilt core, usage_totals, usage_metrics, alerts in \d+ ms\n$/);
    expect((await cli(['verify'])).code).toBe(0);
  });
});

describe('verify and the retention job', () => {
  it('usage past its retention is no difference, whether the retention job has deleted it yet or not', { timeout: 30_000 }, async () => {
    const copy = mkdtempSync(join(tmpdir(), 'gw-cli-retention-'));
    scratch.push(copy);
    cpSync(dataDir, copy, { recursive: true });
    // Ten days on, a's calls are past the free plan's seven.
    const later = new Date(Date.now() + 10 * 86_400_000);
    const store = await LevelEventStore.open(join(copy, 'eventstore'));
    const live = await openReadModels({ dataDir: copy });
    const verify = async () => {
      const found: Difference[] = [];
      const result = await verifyReadModels({
        store,
        live,
        projections: PROJECTIONS,
        plans: DEFAULT_PLANS,
        now: later,
        report: async (d) => void found.push(d),
      });
      return { found, result };
    };
    try {
      expect((await live.range('usage_request_blocks', { prefix: `${a.accountId}/` })).length).toBeGreaterThan(0);
      expect((await verify()).found).toEqual([]);
      expect(await purgeAccountUsage(live, a.accountId, later, 7)).toBeGreaterThan(0);
      const { found, result } = await verify();
      expect(found).toEqual([]);
      expect(result.documents).toBeGreaterThan(10);
    } finally {
      await live.close();
      await store.close();
    }
  });
});

describe('verify and events not projected yet', () => {
  it('compares each projection up to its checkpoint: events a stopped service left unprojected are no difference', async () => {
    const copy = mkdtempSync(join(tmpdir(), 'gw-cli-behind-'));
    scratch.push(copy);
    cpSync(dataDir, copy, { recursive: true });
    const store = await LevelEventStore.open(join(copy, 'eventstore'));
    const call: UsageRecord = {
      requestId: 'req-late',
      at: new Date().toISOString(),
      accountId: a.accountId,
      tokenId: tokens[0] as string,
      chain: 'eth',
      method: 'eth_call',
      status: 200,
      rpcErrorCode: null,
      errorMessage: null,
      totalMs: 1,
      upstreamMs: 1,
      clientIp: '127.0.0.1',
      upstream: 'u1',
    };
    try {
      await store.append(usageStream(a.accountId), [{ id: usageEventId(call), type: USAGE_EVENT_TYPE, data: call }], 'any');
    } finally {
      await store.close();
    }
    const r = await cli(['verify'], { env: { DATA_DIR: copy } });
    expect(r.stdout).toMatch(/^consistent: /m);
    expect(r.code).toBe(0);
  });
});

describe('operator CLI beside a running service (EVENTSTORE_URL, MONGODB_URL, REDIS_URL)', () => {
  let redis: TestRedisServer;
  beforeAll(async () => {
    redis = await startTestRedisServer();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it("a change reaches a gateway's token cache through the projector's change feed; without a projector the CLI says so and exits 1", {
    timeout: 30_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cli-beside-'));
    scratch.push(dir);
    // The stores the service and the CLI share (EventStoreDB and MongoDB in production).
    const store = await LevelEventStore.open(join(dir, 'eventstore'));
    const readModels = await LevelReadModelStore.open(join(dir, 'readmodels'));
    // The projector process, publishing on Redis; a gateway process, listening there.
    const projectorFeed = new RedisChangeFeed(redis.url);
    const gatewayFeed = new RedisChangeFeed(redis.url);
    const projector = new ProjectionRunner(store, readModels, PROJECTIONS, projectorFeed);
    const cache = new TokenCache(new Queries(readModels));
    try {
      await Promise.all([projectorFeed.whenReady(), gatewayFeed.whenReady()]);
      await projector.start();
      await cache.listen(gatewayFeed);
      const commands = new AccountCommands(store, DEFAULT_PLANS);
      const { accountId } = await commands.signUp('beside@example.com', 'a long password');
      const created = await commands.createApiToken(accountId, { name: 'live' });
      await projector.waitFor(created.position);
      const hash = hashToken(created.token);
      expect(await cache.get(hash)).toMatchObject({ status: 'active' });

      const open: OpenStores = async () => ({
        store,
        readModels,
        plans: DEFAULT_PLANS,
        chains: () => {
          throw new Error('not used');
        },
        applied: (position) => projectedElsewhere(readModels, position, 1000),
        close: async () => undefined,
      });
      const disabled = await cli(['tokens', 'disable', created.tokenId], { open });
      expect(disabled).toMatchObject({ code: 0, stdout: `token ${created.tokenId} (account ${accountId}): active -> disabled\n` });
      // Dropped from the cache by the projector's message, not by its TTL (a minute).
      for (let i = 0; i < 100 && cache.cached(hash); i++) await new Promise((r) => setTimeout(r, 20));
      expect(cache.cached(hash)).toBeUndefined();
      expect(await cache.get(hash)).toMatchObject({ status: 'disabled' });

      await projector.stop();
      const unprojected = await cli(['tokens', 'enable', created.tokenId], { open });
      expect(unprojected.code).toBe(1);
      expect(unprojected.stderr).toMatch(/^error: The change is recorded \(position \S+\) but no projector applied it within 1 s/);
    } finally {
      await projector.stop();
      await cache.close();
      await projectorFeed.close();
      await gatewayFeed.close();
      await readModels.close();
      await store.close();
    }
  });
});

describe('the CLI as a process', () => {
  const run = (args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', CLI, ...args], { env: { ...process.env, DATA_DIR: dataDir, LOCAL_DEVNET: 'off' }, encoding: 'utf8' });

  it('prints its help (0), refuses an unknown command with the usage (2), and verifies in a process with the rebuild flags (0)', { timeout: 60_000 }, () => {
    const help = run(['--help']);
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: npm run cli -- <command>/);
    const unknown = run(['frobnicate']);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/^error: Unknown command "frobnicate"\.\n\nUsage: npm run cli -- <command>/);
    const verify = run(['verify', '--json']);
    expect(verify.status, verify.stderr).toBe(0);
    expect(JSON.parse(verify.stdout).summary).toMatchObject({ differences: 0 });
  });
});
