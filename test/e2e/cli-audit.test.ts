import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import type { StoredEvent } from '../../src/infra/eventstore/port.js';
import { openReadModels } from '../../src/infra/readmodels/index.js';
import type { AccountDoc } from '../../src/projections/core.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { startService } from '../support/serviceProcess.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';
import { textSink } from '../support/textSink.js';

/**
 * The operator CLI as an operator on call uses it: the README's examples pasted, bad input and
 * unreachable or damaged stores (one line on stderr, the right exit code), and on PostgreSQL the
 * same events as the management API. test/e2e/cli.test.ts covers each command's output.
 */

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const scratch: string[] = [];
const tempDir = (prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  scratch.push(dir);
  return dir;
};

let dataDir: string;
let accountId: string;
let tokenIds: string[];

beforeAll(async () => {
  const t = await startTestApp();
  dataDir = t.dataDir;
  const o = await owner(t.app);
  accountId = o.accountId;
  tokenIds = [];
  for (const name of ['one', 'two']) {
    tokenIds.push((await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name } })).json().id);
  }
  await t.close({ keepData: true });
}, 60_000);

afterAll(() => {
  for (const d of [dataDir, ...scratch]) if (d) rmSync(d, { recursive: true, force: true });
});

async function cli(args: string[], env: Record<string, string> = {}) {
  const stdout = textSink();
  const stderr = textSink();
  const code = await main(args, { stdout: stdout.stream, stderr: stderr.stream, env: { DATA_DIR: dataDir, LOCAL_DEVNET: 'off', ...env } });
  return { code, stdout: stdout.text(), stderr: stderr.text() };
}

/** One line on stderr, no stack trace. */
const oneLine = (stderr: string) => {
  expect(stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(stderr).not.toMatch(/^\s+at /m);
};

const copyOfData = (prefix: string) => {
  const copy = tempDir(prefix);
  cpSync(dataDir, copy, { recursive: true });
  return copy;
};

describe("the README's CLI examples, pasted into a shell", () => {
  /** The README's block of operator commands, placeholders filled in; `a|b|c` alternatives run one after the other. */
  function readmeExamples(): string[] {
    const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
    const block = /Operator commands[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
    return block
      .split('\n')
      .map((line) => line.replace(/\s+#.*$/, '').trim())
      .filter(Boolean)
      .flatMap((line) => {
        const choice = /\b(\w+(?:\|\w+)+) tok_…/.exec(line);
        return choice ? (choice[1] as string).split('|').map((verb) => line.replace(choice[1] as string, verb)) : [line];
      })
      .map((line) =>
        line
          .replaceAll('acc_…', accountId)
          .replaceAll('tok_…', tokenIds[0] as string)
          .replace(/\[--to …\]/, '')
          .replace('csv|json', 'csv')
          .replace(/[[\]]/g, ''),
      );
  }

  it('each runs and exits 0; the export redirected to a file is the CSV alone', { timeout: 180_000 }, () => {
    const examples = readmeExamples();
    expect(examples.length).toBeGreaterThanOrEqual(11);
    // npm as the operator runs it, in a package whose `cli` script runs this source (no dist/ needed).
    const pkg = tempDir('gw-cli-npm-');
    const { name, version } = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name, version, scripts: { cli: `cd ${REPO} && node --import tsx src/cli.ts` } }));
    // npm's own settings from a surrounding `npm test` (e.g. a silent log level) would hide what an operator sees.
    const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key)));
    const data = copyOfData('gw-cli-readme-');
    for (const example of examples) {
      expect(example).toMatch(/^npm run (-s )?cli -- /);
      const r = spawnSync('sh', ['-c', example], { cwd: pkg, env: { ...env, DATA_DIR: data, LOCAL_DEVNET: 'off' }, encoding: 'utf8' });
      expect(r.status, `${example}\n${r.stderr}`).toBe(0);
    }
    const csv = readFileSync(join(pkg, 'usage.csv'), 'utf8');
    expect(csv.split('\r\n')[0]).toBe(
      'time,request_id,token_id,chain,method,status,outcome,rpc_error_code,error_message,total_ms,upstream_ms,client_ip,upstream,charged,cache',
    );
  });
});

describe('the CLI as a process, its stdout piped to a reader that stops early', () => {
  it('ends quietly with 0, as a Unix filter does, not "error: write EPIPE" and 1', { timeout: 60_000 }, () => {
    for (const command of [`history ${tokenIds[0]} --json | true`, `tokens list | true`]) {
      const r = spawnSync('bash', ['-o', 'pipefail', '-c', `node --import tsx src/cli.ts ${command}`], {
        cwd: REPO,
        env: { ...process.env, DATA_DIR: dataDir, LOCAL_DEVNET: 'off' },
        encoding: 'utf8',
      });
      expect(r.stderr, command).toBe('');
      expect(r.status, command).toBe(0);
    }
  });
});

describe('operator CLI: bad input, one line and the right exit code', () => {
  it('verify --limit takes digits only: an empty, signed or exponent value is a usage error on one line', async () => {
    for (const value of ['', '1e3', '-1', '0x10']) {
      const r = await cli(['verify', '--json', '--limit', value]);
      expect(r.code, value).toBe(2);
      oneLine(r.stderr);
      expect(JSON.parse(r.stderr), value).toMatchObject({ error: 'usage', message: expect.stringContaining('--limit') });
      expect(r.stdout, value).toBe('');
    }
    // parseArgs's advice on its later lines is kept, on the one line.
    expect((await cli(['verify', '--limit', '-1'])).stderr).toMatch(/^error: .*--limit.* use '--limit=-XYZ'\.\n/);
    expect(await cli(['verify', '--limit', '0'])).toMatchObject({ code: 0, stdout: expect.stringMatching(/^consistent: /) });
  });

  it('an email, an empty id or a malformed one where an id goes: not found (3); a date that does not exist: usage (2)', async () => {
    for (const args of [
      ['accounts', 'show', 'owner@example.com'],
      ['accounts', 'show', ''],
      ['tokens', 'revoke', '../../etc/passwd'],
      ['history', 'gk_notanid'],
      ['plan', 'set', 'acc_x y', 'free'],
    ]) {
      const r = await cli([...args, '--json']);
      expect(r.code, args.join(' ')).toBe(3);
      oneLine(r.stderr);
      expect(JSON.parse(r.stderr).error).toBe('not_found');
    }
    for (const from of ['2024-02-30', '2024-13-01', '01/05/2024']) {
      const r = await cli(['usage', 'export', '--account', accountId, '--from', from, '--json']);
      expect(r.code, from).toBe(2);
      oneLine(r.stderr);
    }
  });

  it('the general help names every store setting the CLI reads, and how to keep npm out of stdout', async () => {
    const help = await cli(['--help']);
    expect(help.stdout).toContain('DATABASE_URL');
    expect(help.stdout).toContain('npm run -s cli --');
    expect((await cli(['verify', '--help'])).stdout).toMatch(/EVENTSTORE_URL or DATABASE_URL, stop the projector/);
  });
});

describe('operator CLI: stores that cannot be opened', () => {
  let blackhole: Server;
  const sockets = new Set<Socket>();
  beforeAll(async () => {
    // Accepts connections and never answers: a PostgreSQL behind a hung host or a full backlog.
    blackhole = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => blackhole.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => blackhole?.close(() => resolve()));
  });

  it('a PostgreSQL URL that refuses: one line naming PostgreSQL and DATABASE_URL, without the password; exit 1', async () => {
    const r = await cli(['accounts', 'list'], { DATABASE_URL: 'postgres://ops:s3cret@127.0.0.1:1/gateway' });
    expect(r.code).toBe(1);
    oneLine(r.stderr);
    expect(r.stderr).toMatch(/^error: PostgreSQL at postgres:\/\/ops:\*\*\*@127\.0\.0\.1:1\/gateway \(DATABASE_URL\): connect ECONNREFUSED/);
    expect(r.stderr).not.toContain('s3cret');
  });

  it('a PostgreSQL that accepts the connection and never answers: exit 1 after 10 s, not a CLI hanging for ever', { timeout: 30_000 }, async () => {
    const address = blackhole.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const started = Date.now();
    const r = await cli(['tokens', 'list', '--json'], { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/gateway` });
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stderr)).toMatchObject({ error: 'store_unavailable', message: expect.stringMatching(/no answer within 10 s$/) });
    expect(Date.now() - started).toBeLessThan(20_000);
  });

  it('a data directory LevelDB cannot open says which store and why (not "Database failed to open")', async () => {
    const copy = copyOfData('gw-cli-unwritable-');
    // The lock file LevelDB must create and lock is a directory: an IO error, whoever runs the test (root ignores permissions).
    const lock = join(copy, 'eventstore', 'log', 'LOCK');
    rmSync(lock, { force: true });
    mkdirSync(lock);
    const r = await cli(['accounts', 'list'], { DATA_DIR: copy });
    expect(r.code).toBe(1);
    oneLine(r.stderr);
    expect(r.stderr).toMatch(new RegExp(`^error: Cannot open the event store in ${copy}/eventstore: .*IO error: .*LOCK`));
  });

  it('an event log that lost its CURRENT file is refused and left as it was (LevelDB would open it empty and delete its tables)', async () => {
    const copy = copyOfData('gw-cli-damaged-');
    const log = join(copy, 'eventstore', 'log');
    rmSync(join(log, 'CURRENT'));
    const before = readdirSync(log).sort();
    expect(before.some((f) => f.endsWith('.ldb') || f.endsWith('.log'))).toBe(true);
    for (const args of [['accounts', 'list'], ['verify'], ['rebuild'], ['plan', 'set', accountId, 'developer']]) {
      const r = await cli(args, { DATA_DIR: copy });
      expect(r.code, args.join(' ')).toBe(1);
      oneLine(r.stderr);
      expect(r.stderr).toMatch(/^error: The event log in \S+ is damaged \(LevelDB files but no CURRENT file\); left untouched/);
    }
    expect(readdirSync(log).sort()).toEqual(before);
    expect(existsSync(join(log, 'CURRENT'))).toBe(false);
  });

  it('verify on read models lost whole: not a bare "consistent", it names the projections behind the log', async () => {
    const copy = copyOfData('gw-cli-lost-rm-');
    for (const dir of ['readmodels', 'readmodels-rows']) rmSync(join(copy, dir), { recursive: true });
    const text = await cli(['verify'], { DATA_DIR: copy });
    expect(text.stdout).toMatch(
      /^consistent: 0 documents equal, 0 differences; replayed core@none, .*; behind the log \(at \d+\), compared up to their checkpoint only: core, usage_totals, usage_metrics, alerts \(/,
    );
    const json = await cli(['verify', '--json'], { DATA_DIR: copy });
    expect(JSON.parse(json.stdout).summary).toMatchObject({
      differences: 0,
      head: expect.any(String),
      behind: ['core', 'usage_totals', 'usage_metrics', 'alerts'],
    });
    // Healthy: nothing behind.
    expect(JSON.parse((await cli(['verify', '--json'])).stdout).summary).toMatchObject({ differences: 0, behind: [] });
  });

  it('a data directory the running service holds: every command says to stop it first (exit 1), and works once it has stopped', {
    timeout: 90_000,
  }, async () => {
    const copy = copyOfData('gw-cli-held-');
    const service = startService({ DATA_DIR: copy, LOCAL_DEVNET: 'off', ADMIN_TOKEN, LOG_LEVEL: 'warn' });
    try {
      await service.ready;
      for (const args of [['accounts', 'list'], ['tokens', 'revoke', tokenIds[1] as string], ['verify'], ['rebuild']]) {
        const r = await cli(args, { DATA_DIR: copy });
        expect(r.code, args.join(' ')).toBe(1);
        expect(r.stderr).toBe(
          `error: ${copy} is open in another process: stop the service first (on the embedded default one process at a time opens DATA_DIR).\n`,
        );
      }
    } finally {
      service.child.kill('SIGTERM');
      await service.exited;
    }
    expect(await cli(['tokens', 'revoke', tokenIds[1] as string], { DATA_DIR: copy })).toMatchObject({
      code: 0,
      stdout: expect.stringContaining('-> revoked'),
    });
  });
});

const pgUnavailable = await postgresUnavailable();

describe.skipIf(pgUnavailable !== null)(`operator CLI beside the service on PostgreSQL${pgUnavailable ? ` (skipped: ${pgUnavailable})` : ''}`, () => {
  let db: TestDatabase;
  let t: TestApp | null = null;
  beforeAll(async () => {
    db = await createTestDatabase();
    t = await startTestApp({ env: { DATABASE_URL: db.url } });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await db?.drop();
  });
  const pgCli = (args: string[]) => cli(args, { DATABASE_URL: db.url, DATA_DIR: join(tempDir('gw-cli-pg-'), 'none') });

  /** A stream's events as comparable data: ids and times replaced by what they are. */
  const shape = (events: StoredEvent[], ids: Record<string, string>) =>
    events.map((e) => ({
      type: e.type,
      data: JSON.parse(
        JSON.stringify(e.data)
          .replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/g, '<time>')
          .replace(/"(acc|tok)_\w+"/g, (id) => `"${ids[id.slice(1, -1)] ?? id}"`)
          .replace(/"gk_[^"]*"|"[0-9a-f]{64}"|"scrypt\$[^"]*"/g, '"<secret>"')
          .replace(/"owner-\w+@example\.com"/g, '"<email>"'),
      ),
    }));

  it('plan set and tokens disable, enable, revoke append the events the API appends, and both histories read alike', { timeout: 90_000 }, async () => {
    const app = (t as TestApp).app;
    const store = (t as TestApp).runtime.store;
    const [viaApi, viaCli] = [await owner(app), await owner(app)];
    const tokenOf = async (o: typeof viaApi) =>
      (await app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'same' } })).json().id as string;
    const [apiToken, cliToken] = [await tokenOf(viaApi), await tokenOf(viaCli)];

    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    expect(
      (await app.inject({ method: 'PUT', url: `/api/v1/admin/accounts/${viaApi.accountId}/plan`, headers: admin, payload: { plan: 'developer' } })).statusCode,
    ).toBe(200);
    for (const status of ['disabled', 'active']) {
      expect((await app.inject({ method: 'PATCH', url: `/api/v1/tokens/${apiToken}`, headers: viaApi.auth, payload: { status } })).statusCode).toBe(200);
    }
    expect((await app.inject({ method: 'DELETE', url: `/api/v1/tokens/${apiToken}`, headers: viaApi.auth })).statusCode).toBe(200);

    for (const args of [
      ['plan', 'set', viaCli.accountId, 'developer'],
      ['tokens', 'disable', cliToken],
      ['tokens', 'enable', cliToken],
      ['tokens', 'revoke', cliToken],
    ]) {
      const r = await pgCli([...args, '--json']);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
      expect(() => JSON.parse(r.stdout)).not.toThrow();
    }

    for (const stream of ['account', 'token'] as const) {
      const [a, c] = await Promise.all(
        [
          [viaApi, apiToken],
          [viaCli, cliToken],
        ].map(async ([o, token]) => {
          const { accountId: id } = o as typeof viaApi;
          const events = await store.readStream(stream === 'account' ? `account-${id}` : `token-${token}`);
          return shape(events, { [id]: '<account>', [token as string]: '<token>' });
        }),
      );
      expect(c, stream).toEqual(a);
    }

    // The API's history of each token, and the CLI's, say the same.
    const apiHistory = async (o: typeof viaApi, token: string) =>
      (await app.inject({ method: 'GET', url: `/api/v1/tokens/${token}/history`, headers: o.auth })).json().events as Array<Record<string, unknown>>;
    const strip = (events: Array<Record<string, unknown>>): Array<Record<string, unknown>> =>
      events.map(({ at: _at, recorded_at: _recorded, position: _position, state, ...rest }) => ({ ...rest, status: (state as { status: string }).status }));
    const fromApi = await apiHistory(viaCli, cliToken);
    expect(strip(fromApi)).toEqual(strip(await apiHistory(viaApi, apiToken)));
    const cliHistory = (await pgCli(['history', cliToken, '--json'])).stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(cliHistory.map(({ position: _p, ...entry }) => entry)).toEqual(fromApi);
    expect(strip(fromApi).map((e) => `${e.type}:${e.status}`)).toEqual([
      'ApiTokenCreated:active',
      'AccountPlanChanged:active',
      'ApiTokenDisabled:disabled',
      'ApiTokenEnabled:active',
      'ApiTokenRevoked:revoked',
    ]);

    // The account as the API shows it after the CLI's changes.
    const account = (await app.inject({ method: 'GET', url: '/api/v1/account', headers: viaCli.auth })).json();
    expect(account).toMatchObject({ plan: { id: 'developer' }, tokens: { count: 0 } });
    expect(JSON.parse((await pgCli(['accounts', 'show', viaCli.accountId, '--json'])).stdout)).toMatchObject({ plan: 'developer', live_tokens: 0 });
  });

  it('verify on PostgreSQL: 0 when healthy, 1 naming a damaged document, 0 again after rebuild (projector stopped)', { timeout: 90_000 }, async () => {
    await (t as TestApp).close();
    t = null;
    const ok = await pgCli(['verify']);
    expect(ok.stdout, ok.stderr).toMatch(/^consistent: \d+ documents equal, 0 differences/m);
    expect(ok.code).toBe(0);

    const readModels = await openReadModels({ databaseUrl: db.url, dataDir: tempDir('gw-cli-pg-rm-') });
    let damaged = '';
    try {
      const [first] = await readModels.range<AccountDoc>('accounts', { limit: 1 });
      damaged = first?.key ?? '';
      await readModels.write([{ op: 'put', collection: 'accounts', key: damaged, doc: { ...(first?.doc as AccountDoc), plan: 'unlimited' } }]);
    } finally {
      await readModels.close();
    }
    const bad = await pgCli(['verify', '--json']);
    expect(bad.code).toBe(1);
    const lines = bad.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines[0]).toMatchObject({ collection: 'accounts', key: damaged, kind: 'differs', fields: ['plan'] });
    expect(lines.at(-1).summary).toMatchObject({ differences: 1 });

    expect(await pgCli(['rebuild', '--json'])).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(/^\{"rebuilt":\["core","usage_totals","usage_metrics","alerts"\],"ms":\d+\}\n$/),
    });
    expect((await pgCli(['verify'])).code).toBe(0);
  });
});
