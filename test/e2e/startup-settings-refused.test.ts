import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { freePorts } from '../support/redisServer.js';
import { type ServiceProcess, startService } from '../support/serviceProcess.js';

/**
 * Settings refused at start (docs/decisions.md, "`UPSTREAM_<ID>` set but empty is refused" and
 * "A secret in the filter ids' key"): `UPSTREAM_ETH=` (a compose file's `${ETH_URL}` with ETH_URL
 * unset) was read as unset, and the chain's calls went to the config file's public providers; a
 * FILTER_ID_SECRET short enough to guess offline. Each stops the process with one line naming
 * the variable, exit code 2, nothing listening. The service as its own process (src/main.ts).
 */

const SHORT_SECRET = 'only-24-characters-long!';

interface Case {
  name: string;
  env: Record<string, string>;
  says: RegExp;
  secret?: string;
}

const CASES: Case[] = [
  {
    name: 'UPSTREAM_ETH set but empty',
    env: { UPSTREAM_ETH: '' },
    says: /^Configuration error: UPSTREAM_ETH is set but empty: give it the chain's node URLs \(url\[,url…\]\), or unset it for the nodes of the chain config/,
  },
  {
    name: 'UPSTREAM_LOCAL_WS blank beside its UPSTREAM_LOCAL',
    env: { UPSTREAM_LOCAL: 'http://127.0.0.1:1', UPSTREAM_LOCAL_WS: '  ' },
    says: /^Configuration error: UPSTREAM_LOCAL_WS is set but empty/,
  },
  {
    name: 'FILTER_ID_SECRET under 32 characters, not printed',
    env: { FILTER_ID_SECRET: SHORT_SECRET },
    says: /^Configuration error: FILTER_ID_SECRET: must be at least 32 characters/,
    secret: SHORT_SECRET,
  },
];

interface Outcome {
  code: number | null;
  output: string;
  /** Whether something answered on its PORT while it ran. */
  listened: boolean;
}

const dirs: string[] = [];
const outcomes = new Map<string, Outcome>();

const accepts = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

async function outcomeOf(service: ServiceProcess, port: number): Promise<Outcome> {
  const first = await Promise.race([service.exited.then(() => 'exited' as const), service.ready.then(() => 'ready' as const).catch(() => 'exited' as const)]);
  // A case that wrongly started: it serves, and is stopped here.
  const listened = await accepts(port);
  if (first === 'ready') service.child.kill('SIGTERM');
  return { code: await service.exited, output: service.output(), listened };
}

beforeAll(async () => {
  const ports = await freePorts(CASES.length);
  await Promise.all(
    CASES.map(async (c, i) => {
      const dataDir = mkdtempSync(join(tmpdir(), 'gw-refused-'));
      dirs.push(dataDir);
      const port = ports[i] as number;
      const service = startService({ PORT: String(port), LOCAL_DEVNET: 'off', DATA_DIR: dataDir, ...c.env });
      outcomes.set(c.name, await outcomeOf(service, port));
    }),
  );
}, 60_000);

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('a setting refused at start: one line naming it, exit 2, nothing listening', () => {
  it.each(CASES.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const outcome = outcomes.get(c.name) as Outcome;
    expect({ code: outcome.code, listened: outcome.listened, output: outcome.output }).toMatchObject({ code: 2, listened: false });
    const lines = outcome.output.split('\n').filter((line) => line.trim() !== '');
    expect(lines, outcome.output).toHaveLength(1);
    expect(outcome.output.trim()).toMatch(c.says);
    if (c.secret !== undefined) expect(outcome.output).not.toContain(c.secret);
  });
});

describe('as loadConfig reads them', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-refused-load-'));
  dirs.push(dataDir);
  const load = (env: Record<string, string>, role?: string) => loadConfig({ DATA_DIR: dataDir, LOCAL_DEVNET: 'off', ...env }, role);

  it('an empty UPSTREAM_<ID> or _WS is refused in every role, all of them named; one with URLs is taken', () => {
    for (const role of ['all', 'gateway', 'api', 'projector']) {
      const stores: Record<string, string> = role === 'all' ? {} : { DATABASE_URL: 'postgres://gw@127.0.0.1:1/gw', REDIS_URL: 'redis://127.0.0.1:1' };
      expect(() => load({ ...stores, UPSTREAM_ETH: '', UPSTREAM_BSC_WS: ' ' }, role)).toThrow(ConfigError);
      expect(() => load({ ...stores, UPSTREAM_ETH: '', UPSTREAM_BSC_WS: ' ' }, role)).toThrow(/^UPSTREAM_ETH, UPSTREAM_BSC_WS are set but empty: give each/);
    }
    expect(load({ UPSTREAM_ETH: 'http://127.0.0.1:1' }).env.UPSTREAM_ETH).toBe('http://127.0.0.1:1');
  });

  it('FILTER_ID_SECRET: none by default, taken as given from 32 characters, refused below', () => {
    expect(load({}).filterIdSecret).toBeNull();
    expect(load({ FILTER_ID_SECRET: 'x'.repeat(32) }).filterIdSecret).toBe('x'.repeat(32));
    expect(() => load({ FILTER_ID_SECRET: 'x'.repeat(31) })).toThrow(/^FILTER_ID_SECRET: must be at least 32 characters/);
    expect(() => load({ FILTER_ID_SECRET: '' })).toThrow(/^FILTER_ID_SECRET is set but empty/);
  });
});
