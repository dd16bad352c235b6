import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { redactNodeUrl } from '../../src/gateway/chains.js';
import { redactUrl } from '../../src/infra/startup.js';
import { createTestDatabase, postgresUnavailable, type TestDatabase } from '../support/postgres.js';
import { freePorts, waitForPort } from '../support/redisServer.js';

/**
 * An operator starting the service from README.md and docs/operations.md: every setting given a
 * bad value stops the process with one line naming it and a non-zero exit code (no stack trace,
 * no start on a value read another way); secrets never show in what it prints or serves; a
 * SIGTERM while it waits for a store stops it at once; the commands the docs give exist.
 * The service runs as its own processes (src/main.ts through tsx), started together.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = join(ROOT, 'src/main.ts');
const dirs: string[] = [];
const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-ops-audit-'));
  dirs.push(dir);
  return dir;
};
const file = (name: string, text: string): string => {
  const path = join(tempDir(), name);
  writeFileSync(path, text);
  return path;
};

interface Run {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** src/main.ts with this environment only (and PATH, HOME): an operator's shell with nothing else set. */
function run(env: Record<string, string>): Run {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', LOCAL_DEVNET: 'off', DATA_DIR: tempDir(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: Run = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal }))),
  };
  child.stdout?.on('data', (chunk: Buffer) => {
    out.stdout += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    out.stderr += chunk.toString();
  });
  return out;
}

/** Ends a process this file started that is still running (a case that wrongly started serving). */
const killAfter = (r: Run, ms: number): void => {
  const timer = setTimeout(() => r.child.kill('SIGKILL'), ms);
  void r.exited.then(() => clearTimeout(timer));
};

const KEY = '3f9a1c0d5e7b42a8b6c1d2e3f4a5b6c7'; // an Infura-like key: 32 hex characters in the path
const lines = (text: string): string[] => text.split('\n').filter((line) => line.trim() !== '');

interface BadStart {
  name: string;
  env: () => Record<string, string>;
  code: number;
  /** The one line on stderr. */
  says: RegExp;
  /** Never printed. */
  secrets?: string[];
}

let portHolder: Server;
let heldPort = 0;

const BAD_STARTS: BadStart[] = [
  // `PORT=` listened on a random port, `HOST=` on every interface: an empty value is no value.
  { name: 'an empty PORT', env: () => ({ PORT: '' }), code: 2, says: /^Configuration error: PORT is set but empty/ },
  { name: 'an empty HOST', env: () => ({ HOST: '' }), code: 2, says: /^Configuration error: HOST is set but empty/ },
  {
    name: 'a plans file with a bad number (zod issues were printed as 12 lines of JSON)',
    env: () => ({ PLANS_CONFIG: file('plans.json', '{"free":{"rps":-1}}') }),
    code: 2,
    says: /^Configuration error: PLANS_CONFIG \(.*plans\.json\): free\.rps: Too small/,
  },
  {
    name: 'a chains file with two issues, one line for both, naming CHAINS_CONFIG',
    env: () => ({
      CHAINS_CONFIG: file(
        'chains.json',
        JSON.stringify({
          chains: [
            { id: 'eth', name: 'Ethereum', protocol: 'grpc', upstreams: [{ url: 'http://127.0.0.1:1' }] },
            { id: 'bsc', name: 'BNB', protocol: 'jsonrpc', upstreams: [] },
          ],
        }),
      ),
    }),
    code: 2,
    says: /^Configuration error: invalid chain config .*chains\.json \(CHAINS_CONFIG\): chains\[0\] \(eth\)\.protocol: [^;]*; chains\[1\] \(bsc\)\.upstreams: at least one upstream is required$/,
  },
  {
    name: 'UPSTREAM_ETH mistyped, its credentials and key masked',
    env: () => ({ UPSTREAM_ETH: `https//user:envpass99@node.example/v3/${KEY}` }),
    code: 2,
    says: /^Configuration error: UPSTREAM_ETH: ".*" is not an absolute http/,
    secrets: ['envpass99', KEY],
  },
  {
    name: 'DATA_DIR naming a file',
    env: () => ({ DATA_DIR: file('not-a-dir', 'x') }),
    code: 1,
    says: /^Could not start: DATA_DIR \(.*not-a-dir\) cannot be used: it is a file, not a directory$/,
  },
  ...(existsSync('/sys/kernel')
    ? [
        {
          name: 'DATA_DIR where nothing may be written',
          env: () => ({ DATA_DIR: '/sys/gw-ops-audit' }),
          code: 1,
          says: /^Could not start: DATA_DIR \(\/sys\/gw-ops-audit\) cannot be used: /,
        },
      ]
    : []),
  {
    name: 'PORT in use',
    env: () => ({ PORT: String(heldPort) }),
    code: 1,
    says: /^Could not start: PORT \d+ on HOST 127\.0\.0\.1 is in use by another process$/,
  },
  {
    name: 'HOST not an address of this machine',
    env: () => ({ HOST: '192.0.2.1' }),
    code: 1,
    says: /^Could not start: cannot listen on HOST 192\.0\.2\.1, PORT 0: listen EADDRNOTAVAIL/,
  },
];

/** Configuration errors checked in process (loadConfig, what main.ts prints after `Configuration error: `): one line each. */
const BAD_SETTINGS: BadStart[] = [
  {
    name: "a chains file's bad node URL, its credentials and key masked",
    env: () => ({
      CHAINS_CONFIG: file(
        'chains.json',
        JSON.stringify({
          chains: [{ id: 'eth', name: 'E', protocol: 'jsonrpc', upstreams: [{ url: `ftp://user:filepass99@node.example/v3/${KEY}?apikey=fileq77` }] }],
        }),
      ),
    }),
    code: 2,
    says: /upstreams\[0\]\.url: must be an absolute http:\/\/ or https:\/\/ URL \(got "ftp:\/\/\*\*\*@node\.example\/v3\/\*\*\*\?apikey=\*\*\*"\)/,
    secrets: ['filepass99', KEY, 'fileq77'],
  },
  {
    name: 'more WebSocket endpoints than nodes (the extra one was dropped unseen)',
    env: () => ({ UPSTREAM_ETH: 'http://127.0.0.1:1', UPSTREAM_ETH_WS: 'ws://127.0.0.1:1,ws://127.0.0.1:2' }),
    code: 2,
    says: /^Configuration error: UPSTREAM_ETH_WS lists 2 WebSocket endpoints for the 1 node of UPSTREAM_ETH/,
  },
  {
    name: 'a role without Redis: the message names what is missing',
    env: () => ({ ROLE: 'gateway', DATABASE_URL: 'postgres://gateway@127.0.0.1:1/gateway' }),
    code: 2,
    says: /^Configuration error: ROLE=gateway .*missing: REDIS_URL\./,
  },
];

/** A PostgreSQL that refuses, its password in the query (`?password=`, which pg reads): the waiting lines mask it. */
const QUERY_PASSWORD = 'querypass77';

const results = new Map<string, Run>();
let unreachable: Run;
let stoppedWhileWaiting: Run;

beforeAll(async () => {
  portHolder = createServer();
  await new Promise<void>((resolve) => portHolder.listen(0, '127.0.0.1', resolve));
  heldPort = (portHolder.address() as { port: number }).port;
  for (const bad of BAD_STARTS) {
    const r = run(bad.env());
    // Sixteen services start at once beside the suite's other worker: on a loaded 2-core run the
    // one that gets as far as binding its port (PORT in use) was still starting at 25 s.
    killAfter(r, 50_000);
    results.set(bad.name, r);
  }
  unreachable = run({ DATABASE_URL: `postgres://gateway@127.0.0.1:1/gateway?password=${QUERY_PASSWORD}&sslmode=disable`, STARTUP_TIMEOUT_SECONDS: '2' });
  stoppedWhileWaiting = run({ DATABASE_URL: 'postgres://gateway:pw@127.0.0.1:1/gateway', STARTUP_TIMEOUT_SECONDS: '60' });
  killAfter(stoppedWhileWaiting, 55_000);
  // SIGTERM once it says it is waiting for PostgreSQL (up to 40 s: with the other starts beside it on a busy 2-core machine, it once took over 20).
  for (let i = 0; i < 800 && !/Waiting for PostgreSQL/.test(stoppedWhileWaiting.stderr); i++) await new Promise((r) => setTimeout(r, 50));
  stoppedWhileWaiting.child.kill('SIGTERM');
  await Promise.all([...results.values(), unreachable, stoppedWhileWaiting].map((r) => r.exited));
}, 90_000);

afterAll(async () => {
  await new Promise((resolve) => portHolder?.close(resolve));
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('a bad setting at start: one line naming it, a non-zero exit, nothing served', () => {
  it.each(BAD_STARTS.map((bad) => [bad.name, bad] as const))('%s', async (_name, bad) => {
    const r = results.get(bad.name) as Run;
    const { code } = await r.exited;
    expect({ code, stderr: r.stderr }).toMatchObject({ code: bad.code });
    expect(lines(r.stderr), r.stderr).toHaveLength(1);
    expect(r.stderr.trim()).toMatch(bad.says);
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(r.stdout).not.toMatch(/ready at/);
    for (const secret of bad.secrets ?? []) expect(r.stdout + r.stderr).not.toContain(secret);
  });
});

describe('a bad setting, as loadConfig reports it to main.ts', () => {
  it.each(BAD_SETTINGS.map((bad) => [bad.name, bad] as const))('%s', (_name, bad) => {
    let message = '';
    try {
      loadConfig({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off', ...bad.env() });
    } catch (error) {
      message = `Configuration error: ${(error as Error).message}`;
    }
    expect(lines(message)).toHaveLength(1);
    expect(message).toMatch(bad.says);
    for (const secret of bad.secrets ?? []) expect(message).not.toContain(secret);
  });
});

describe('settings read as the operator wrote them', () => {
  const load = (env: Record<string, string>) => loadConfig({ DATA_DIR: tempDir(), LOCAL_DEVNET: 'off', ...env });
  it.each([
    // An empty alert interval meant 0: alerts never evaluated by themselves.
    ['ALERT_EVALUATION_INTERVAL_SECONDS', ''],
    // An empty cache size meant 0: the response cache off.
    ['RESPONSE_CACHE_MB', ''],
    // An empty DATA_DIR or NOTIFY_OUTBOX meant the working directory.
    ['DATA_DIR', ''],
    ['NOTIFY_OUTBOX', ' '],
    ['PLANS_CONFIG', ''],
    ['CHAINS_CONFIG', ''],
  ])('%s set but empty is refused, naming it', (name, value) => {
    expect(() => load({ [name]: value })).toThrow(ConfigError);
    expect(() => load({ [name]: value })).toThrow(new RegExp(`^${name} is set but empty`));
  });

  it.each([
    ['PORT', '0x1f90'],
    ['PORT', '80.0'],
    ['PORT', '-1'],
    ['STARTUP_TIMEOUT_SECONDS', '1e2'],
    ['MAX_BATCH_CALLS', 'Infinity'],
    ['RESPONSE_CACHE_MB', '1e3'],
  ])('%s=%s is no number the docs describe: refused', (name, value) => {
    expect(() => load({ [name]: value })).toThrow(new RegExp(`^${name}: must be a (whole )?number from`));
  });

  it('takes decimal numbers, around spaces too, and a role given as the argument over an empty ROLE', () => {
    expect(load({ PORT: ' 8081 ', RESPONSE_CACHE_MB: '0.5', ALERT_EVALUATION_INTERVAL_SECONDS: '0' })).toMatchObject({
      port: 8081,
      responseCacheBytes: 512 * 1024,
      alerts: { evaluateEveryMs: 0 },
    });
    expect(loadConfig({ DATA_DIR: tempDir(), ROLE: '' }, 'all').role).toBe('all');
  });

  it("UPSTREAM_<ID>_WS: a ws:// or wss:// URL, named as the variable (it was reported as chains.json's)", () => {
    expect(() => load({ UPSTREAM_ETH: 'http://127.0.0.1:1', UPSTREAM_ETH_WS: 'http://127.0.0.1:1' })).toThrow(
      /^UPSTREAM_ETH_WS: "http:\/\/127\.0\.0\.1:1" is not an absolute ws:\/\/ or wss:\/\/ URL$/,
    );
    expect(() => load({ UPSTREAM_ETH: ' , ' })).toThrow(/^UPSTREAM_ETH lists no URL/);
  });

  it.each(['api', 'assets', 'healthz', 'readyz', 'metrics'])('a chain with the id %s is refused', (id) => {
    const chains = file('chains.json', JSON.stringify({ chains: [{ id, name: 'X', protocol: 'jsonrpc', upstreams: [{ url: 'http://127.0.0.1:1' }] }] }));
    expect(() => load({ CHAINS_CONFIG: chains })).toThrow(new RegExp(`\\(${id}\\)\\.id: is a path the service serves itself`));
  });
});

describe('secrets in what the service prints', () => {
  it('a store URL shows no password, in its user part or its query', () => {
    expect(redactUrl(`postgres://gw@db:5432/gw?password=${QUERY_PASSWORD}&sslmode=require`)).toBe('postgres://gw@db:5432/gw?password=***&sslmode=require');
    expect(redactUrl('redis+cluster://:pw@r1:6379,r2:6379/0?password=x')).toBe('redis+cluster://:***@r1:6379,r2:6379/0?password=***');
    expect(redactUrl('mongodb://u:p@m1,m2/gw?authSource=admin&authMechanismProperties=AWS_SESSION_TOKEN:t')).toBe(
      'mongodb://u:***@m1,m2/gw?authSource=admin&authMechanismProperties=***',
    );
    expect(redactUrl('esdb://admin:changeit@es:2113?tls=false')).toBe('esdb://admin:***@es:2113?tls=false');
  });

  it('a node URL keeps its scheme, host and port, not its key', () => {
    expect(redactNodeUrl(`https://mainnet.infura.io/v3/${KEY}`)).toBe('https://mainnet.infura.io/v3/***');
    expect(redactNodeUrl('https://KEY@node.example:8545/rpc?apikey=s&x=1')).toBe('https://***@node.example:8545/rpc?apikey=***&x=***');
    expect(redactNodeUrl('localhost:8545')).toBe('localhost:8545');
  });

  it('waiting for a PostgreSQL that refuses: its password, given in the query, is never printed; exit 1 after STARTUP_TIMEOUT_SECONDS', async () => {
    expect((await unreachable.exited).code).toBe(1);
    const out = unreachable.stdout + unreachable.stderr;
    expect(out).toMatch(
      /Could not start: PostgreSQL at postgres:\/\/gateway@127\.0\.0\.1:1\/gateway\?password=\*\*\*&sslmode=disable was not reachable within 2 s/,
    );
    expect(out).not.toContain(QUERY_PASSWORD);
    expect(out).not.toMatch(/^\s+at /m);
  });
});

describe('SIGTERM while it waits for a store', () => {
  it('stops at once with exit code 0 and says so (it was killed by the signal, saying nothing)', async () => {
    expect(stoppedWhileWaiting.stderr).toMatch(/Waiting for PostgreSQL/);
    expect(await stoppedWhileWaiting.exited).toEqual({ code: 0, signal: null });
    expect(stoppedWhileWaiting.stderr).toMatch(/^Stopped by SIGTERM while starting: nothing was served\.$/m);
  });
});

describe('a running service holding secrets in every URL', () => {
  let redis: ChildProcess;
  let database: TestDatabase | null = null;
  let service: Run;
  let base = '';
  const SECRETS = {
    redis: 'redispass41',
    database: 'pgpass41',
    smtp: 'smtppass41',
    node: 'nodepass41',
    nodeQuery: 'nodequery41',
    wsKey: 'b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5',
    admin: 'adminsecret41-adminsecret41',
  };

  beforeAll(async () => {
    const [redisPort, deadPort] = (await freePorts(2)) as [number, number];
    redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--requirepass', SECRETS.redis], {
      stdio: 'ignore',
    });
    await waitForPort(redisPort, true);
    if ((await postgresUnavailable()) === null) database = await createTestDatabase();
    const databaseUrl = database ? new URL(database.url) : null;
    if (databaseUrl) databaseUrl.password = SECRETS.database;
    service = run({
      LOG_LEVEL: 'debug',
      REDIS_URL: `redis://:${SECRETS.redis}@127.0.0.1:${redisPort}`,
      ...(databaseUrl ? { DATABASE_URL: databaseUrl.toString() } : {}),
      SMTP_URL: `smtp://alerts:${SECRETS.smtp}@127.0.0.1:${deadPort}`,
      UPSTREAM_ETH: `http://node:${SECRETS.node}@127.0.0.1:${deadPort}/v3/${KEY}?apikey=${SECRETS.nodeQuery}`,
      UPSTREAM_ETH_WS: `ws://127.0.0.1:${deadPort}/ws/${SECRETS.wsKey}`,
      ADMIN_TOKEN: SECRETS.admin,
    });
    killAfter(service, 50_000);
    for (let i = 0; i < 600 && !/ready at/.test(service.stdout); i++) {
      if (service.child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    base = /ready at (http:\/\/\S+)/.exec(service.stdout)?.[1] ?? '';
  }, 60_000);

  afterAll(async () => {
    if (service && service.child.exitCode === null) {
      service.child.kill('SIGKILL');
      await service.exited;
    }
    redis?.kill('SIGKILL');
    await database?.drop();
  });

  it('shows none of them at start, in /readyz, in /metrics, or in the logs of a call its node refused', async () => {
    expect(base, service.stdout + service.stderr).not.toBe('');
    const json = { 'content-type': 'application/json' };
    const signup = await fetch(`${base}/api/v1/auth/signup`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ email: 'ops@example.com', password: 'a long password' }),
    });
    const cookie = String(signup.headers.get('set-cookie')).split(';')[0] as string;
    const access = (await (await fetch(`${base}/api/v1/access-tokens`, { method: 'POST', headers: { ...json, cookie }, body: '{"name":"ops"}' })).json()) as {
      token: string;
    };
    const created = await fetch(`${base}/api/v1/tokens`, {
      method: 'POST',
      headers: { ...json, authorization: `Bearer ${access.token}` },
      body: '{"name":"ops"}',
    });
    const { token } = (await created.json()) as { token: string };
    const call = await fetch(`${base}/eth/${token}`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] }),
    });
    expect(await call.text()).toMatch(/"error"/);
    const served = [await (await fetch(`${base}/readyz`)).text(), await (await fetch(`${base}/metrics`)).text(), await (await fetch(`${base}/healthz`)).text()];
    service.child.kill('SIGTERM');
    expect((await service.exited).code).toBe(0);
    const printed = service.stdout + service.stderr;
    expect(printed).toMatch(/incoming request/); // debug: the request lines too
    for (const secret of [...Object.values(SECRETS), KEY, token]) {
      expect(printed, 'printed').not.toContain(secret);
      for (const body of served) expect(body).not.toContain(secret);
    }
  }, 60_000);
});

describe('the commands README.md and docs/operations.md give', () => {
  const docs = ['README.md', 'docs/operations.md'].map((name) => readFileSync(join(ROOT, name), 'utf8')).join('\n');
  const scripts = Object.keys((JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts);
  const compose = readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8');

  it('npm run <script>: each script exists in package.json', () => {
    const named = new Set([...docs.matchAll(/npm run (?:-s )?([a-z][a-z0-9:-]*)/g)].map((m) => m[1] as string));
    expect(named.size).toBeGreaterThan(3);
    expect([...named].filter((name) => !scripts.includes(name))).toEqual([]);
  });

  it('docker compose --profile <p> up [service]: each profile and service exists in docker-compose.yml', () => {
    const uses = [...docs.matchAll(/docker compose --profile ([a-z-]+) up(?: -d)?(?: ([a-z][a-z0-9-]*))?/g)];
    expect(uses.length).toBeGreaterThan(0);
    for (const [, profile, service] of uses) {
      expect(compose, `profile ${profile}`).toMatch(new RegExp(`profiles: \\[[^\\]]*\\b${profile}\\b`));
      if (service) expect(compose, `service ${service}`).toMatch(new RegExp(`^  ${service}:$`, 'm'));
    }
  });

  it('files and directories the docs name for the operator exist', () => {
    for (const path of [
      'docs/nginx.compose.conf',
      'deploy/kubernetes/secret.example.yaml',
      'deploy/kubernetes/ingress.example.yaml',
      'deploy/prometheus/prometheus.yml',
      'deploy/grafana/dashboards/gateway.json',
      'config/chains.json',
      '.ci/run',
    ])
      expect(existsSync(join(ROOT, path)), path).toBe(true);
  });
});
