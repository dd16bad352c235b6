import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { COMMANDS, main } from '../../src/cli/main.js';
import { until } from '../support/eventually.js';
import { type EvmNodeFake, FakeEvmChain, startEvmNodeFake } from '../support/fakeUpstreams.js';
import { cells } from '../support/markdownTable.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * What README.md, docs/operations.md and docs/architecture.md tell an operator or a contributor
 * is what the service has: the metrics table against live /metrics scrapes (both ways: every
 * gateway_* metric of a scrape is in the table, with its type and labels), the management API's
 * route list against the routes the server registers (both ways), every CLI invocation shown
 * against the CLI's parser, and every source path the architecture names. Settings are checked
 * by operations-env.test.ts, npm scripts and compose lines by e2e/operations-audit.test.ts.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');

// --- the metrics table -------------------------------------------------------------------------

interface MetricRow {
  names: string[];
  types: string[];
  labels: string[];
  line: number;
}

/** The rows of operations.md's `| Metric | Type | Labels | What |` table. */
function metricsTable(): MetricRow[] {
  const lines = read('docs/operations.md').split('\n');
  const header = lines.findIndex((l) => /^\|\s*Metric\s*\|\s*Type\s*\|\s*Labels\s*\|\s*What\s*\|\s*$/.test(l));
  expect(header, 'the metrics table in docs/operations.md').toBeGreaterThan(0);
  const rows: MetricRow[] = [];
  for (let i = header + 2; i < lines.length && (lines[i] as string).startsWith('|'); i++) {
    const [name = '', type = '', labels = ''] = cells(lines[i] as string);
    const list = (text: string) =>
      text
        .replace(/\([^)]*\)/g, '')
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
    rows.push({ names: [...name.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string), types: list(type), labels: list(labels), line: i + 1 });
  }
  return rows;
}

interface Family {
  type: string;
  /** Label names seen on its samples (`le` left out: a histogram's buckets). */
  labels: Set<string>;
  samples: number;
}

/** A scrape's metric families by name: TYPE lines, and the label names of their samples. */
function families(scrape: string): Map<string, Family> {
  const found = new Map<string, Family>();
  for (const m of scrape.matchAll(/^# TYPE (\S+) (\S+)$/gm)) found.set(m[1] as string, { type: m[2] as string, labels: new Set(), samples: 0 });
  for (const m of scrape.matchAll(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? \S+$/gm)) {
    const sample = m[1] as string;
    const family = found.get(sample) ?? found.get(sample.replace(/_(bucket|sum|count)$/, ''));
    if (!family) continue;
    family.samples++;
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="(?:[^"\\]|\\.)*"/g)) if (l[1] !== 'le') family.labels.add(l[1] as string);
  }
  return found;
}

/**
 * Scrapes of the two shapes a process takes (the embedded default, and Redis with the shared
 * response cache), each after a chain call over HTTP and one over a WebSocket still open, a
 * token cached and an EVM node followed: every metric it can show has a sample to read.
 */
describe('the metrics table of docs/operations.md and live /metrics scrapes', () => {
  let redis: TestRedisServer;
  let node: EvmNodeFake;
  const apps: TestApp[] = [];
  const scrapes: Array<Map<string, Family>> = [];

  async function scrapeAfterCalls(env: Record<string, string>): Promise<Map<string, Family>> {
    const t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, ...env } });
    apps.push(t);
    const { url, wsBase } = await listen(t);
    const { token } = await newToken(t);
    const call = await fetch(`${url}/local/${token}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] }),
    });
    expect(call.status).toBe(200);
    const socket = new WebSocket(`${wsBase}/local/${token}`);
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('open', () => socket.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'eth_chainId', params: [] })));
        socket.once('message', () => resolve());
        socket.once('error', reject);
      });
      let scrape = new Map<string, Family>();
      // Head tracking and the event loop monitor report within their first rounds.
      await until(async () => {
        scrape = families(await (await fetch(`${url}/metrics`)).text());
        return (
          (scrape.get('gateway_upstream_head_block')?.samples ?? 0) > 0 && (scrape.get('gateway_event_loop_delay_seconds')?.labels.has('quantile') ?? false)
        );
      }, 10_000);
      return scrape;
    } finally {
      socket.close();
    }
  }

  beforeAll(async () => {
    redis = await startTestRedisServer();
    node = await startEvmNodeFake(new FakeEvmChain(40));
    scrapes.push(await scrapeAfterCalls({}));
    scrapes.push(await scrapeAfterCalls({ REDIS_URL: redis.url, RESPONSE_CACHE_REDIS: 'on' }));
  }, 60_000);

  afterAll(async () => {
    for (const t of apps) await t.close();
    await node?.close();
    await redis?.stop();
  });

  /** A metric as the scrapes show it: its type, and the labels of all its samples. */
  const live = (name: string): Family | undefined => {
    const seen = scrapes.flatMap((s) => s.get(name) ?? []);
    if (seen.length === 0) return undefined;
    return {
      type: (seen[0] as Family).type,
      labels: new Set(seen.flatMap((f) => [...f.labels])),
      samples: seen.reduce((n, f) => n + f.samples, 0),
    };
  };

  it('finds the table and the metrics (the extraction works)', () => {
    const rows = metricsTable();
    expect(rows.length).toBeGreaterThan(10);
    expect(rows.flatMap((r) => r.names)).toContain('gateway_chain_calls_total');
    expect(live('gateway_chain_calls_total')?.labels).toEqual(new Set(['chain', 'method_class', 'status']));
    expect(live('gateway_redis_state')?.labels).toEqual(new Set(['state']));
  });

  it('lists every gateway_* metric a process shows', () => {
    const tabled = new Set(metricsTable().flatMap((r) => r.names));
    const shown = new Set(scrapes.flatMap((s) => [...s.keys()]).filter((name) => name.startsWith('gateway_')));
    expect(shown.size).toBeGreaterThan(20);
    expect([...shown].filter((name) => !tabled.has(name)).sort(), 'on /metrics, not in the table').toEqual([]);
  });

  it('names only metrics a process shows, each with its type and labels', () => {
    const wrong: string[] = [];
    for (const row of metricsTable()) {
      const where = `docs/operations.md:${row.line}`;
      const shown = row.names.map((name) => ({ name, family: live(name) }));
      for (const [i, { name, family }] of shown.entries()) {
        if (name.endsWith('*')) {
          const prefix = name.slice(0, -1);
          if (!scrapes.some((s) => [...s.keys()].some((n) => n.startsWith(prefix)))) wrong.push(`${where}: no metric ${name}`);
          continue;
        }
        if (!family) {
          wrong.push(`${where}: ${name} is on no scrape`);
          continue;
        }
        const type = row.types.length === 1 ? row.types[0] : row.types[i];
        if (type !== family.type) wrong.push(`${where}: ${name} is a ${family.type}, documented as ${type ?? 'no type'}`);
        if (family.samples === 0) wrong.push(`${where}: ${name} had no sample to read its labels from`);
        const extra = [...family.labels].filter((l) => !row.labels.includes(l));
        if (extra.length > 0) wrong.push(`${where}: ${name} has labels ${extra.join(', ')} the table does not give`);
      }
      // A row's labels are those of its metrics: each one on at least one of them.
      if (row.names.every((n) => !n.endsWith('*'))) {
        const used = new Set(shown.flatMap(({ family }) => [...(family?.labels ?? [])]));
        const unused = row.labels.filter((l) => !used.has(l));
        if (unused.length > 0) wrong.push(`${where}: label ${unused.join(', ')} is on none of ${row.names.join(', ')}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('reads types and labels off a scrape (the parser)', () => {
    const f = families(
      [
        '# TYPE a_seconds histogram',
        'a_seconds_bucket{le="0.1",chain="eth"} 1',
        'a_seconds_sum{chain="eth"} 0.1',
        'a_seconds_count{chain="eth"} 1',
        '# TYPE b summary',
        'b{quantile="0.5"} 0',
        'b_sum 0',
        '# TYPE c gauge',
      ].join('\n'),
    );
    expect(f.get('a_seconds')).toEqual({ type: 'histogram', labels: new Set(['chain']), samples: 3 });
    expect(f.get('b')).toEqual({ type: 'summary', labels: new Set(['quantile']), samples: 2 });
    expect(f.get('c')).toEqual({ type: 'gauge', labels: new Set(), samples: 0 });
  });
});

// --- the routes ---------------------------------------------------------------------------------

/** `METHOD /path` of every route a printRoutes tree holds (full paths, HEAD left out). */
function routesOf(tree: string): Set<string> {
  const found = new Set<string>();
  const stack: string[] = [];
  for (const line of tree.split('\n')) {
    const m = /^([\s│]*)(?:[└├]── )?(\S+)(?: \(([^)]*)\))?$/.exec(line.replace(/\s+$/, ''));
    if (!m || line.trim() === '') continue;
    const depth = line.startsWith('└') || line.startsWith('├') ? 0 : Math.round((m[1] as string).length / 4);
    stack.length = depth;
    const parent = stack[depth - 1] ?? '';
    const path = `${parent}${parent.endsWith('/') || (m[2] as string).startsWith('/') ? '' : '/'}${m[2]}`.replace(/\/\/+/g, '/');
    stack[depth] = path;
    for (const method of (m[3] ?? '').split(',').map((s) => s.trim()))
      if (method !== '' && method !== 'HEAD') found.add(`${method} ${path.replace(/:(\w+)/g, '{$1}')}`);
  }
  return found;
}

/** `METHOD /path` of the README's route list (`GET|PATCH /a/{id}`, `/a | /b`, `usage.csv | usage.json`). */
function documentedRoutes(block: string): Set<string> {
  const found = new Set<string>();
  for (const line of block.split('\n')) {
    const words = line.trim().split(/\s+/);
    let methods: string[] = [];
    let last = '';
    for (let i = 0; i < words.length; i++) {
      const w = words[i] as string;
      if (/^[A-Z]+(\|[A-Z]+)*$/.test(w)) {
        methods = w.split('|');
        continue;
      }
      if (w.startsWith('/api/')) last = w;
      else if (w === '|' && words[i + 1] && last !== '') {
        const alt = words[++i] as string;
        last = alt.startsWith('/') ? `/api/v1${alt}` : `${last.slice(0, last.lastIndexOf('/') + 1)}${alt}`;
      } else break;
      for (const method of methods) found.add(`${method} ${last}`);
    }
  }
  return found;
}

describe("the README's HTTP surface and the routes the server registers", () => {
  let t: TestApp;
  let routes: Set<string>;
  const readme = read('README.md');
  const block = /The routes:\n\n```\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';

  beforeAll(async () => {
    t = await startTestApp();
    routes = routesOf(t.app.printRoutes({ commonPrefix: false }));
  });
  afterAll(async () => {
    await t.close();
  });

  it('finds the routes (the extraction works)', () => {
    expect(routes).toContain('POST /api/v1/auth/signup');
    expect(routes).toContain('DELETE /api/v1/tokens/{id}');
    expect(routes).toContain('GET /api/v1/alerts/{id}/notifications');
    expect(documentedRoutes('POST /api/v1/auth/signup | /auth/login\nGET /api/v1/x.csv | x.json   y\nGET|DELETE /api/v1/t/{id}  POST /api/v1/t')).toEqual(
      new Set([
        'POST /api/v1/auth/signup',
        'POST /api/v1/auth/login',
        'GET /api/v1/x.csv',
        'GET /api/v1/x.json',
        'GET /api/v1/t/{id}',
        'DELETE /api/v1/t/{id}',
        'POST /api/v1/t',
      ]),
    );
  });

  it('lists every management API route, and only those', () => {
    const documented = documentedRoutes(block);
    const api = [...routes].filter((r) => / \/api\/v1\//.test(r) && !r.includes('*'));
    expect(api.length).toBeGreaterThan(15);
    expect(
      api.filter((r) => !documented.has(r)),
      'served, not in the README route list',
    ).toEqual([]);
    expect(
      [...documented].filter((r) => !routes.has(r)),
      'in the README route list, not served',
    ).toEqual([]);
  });

  it('names the other paths the service serves itself', () => {
    for (const path of ['/healthz', '/readyz', '/metrics', '/api/docs']) {
      expect(routes, path).toContain(`GET ${path}`);
      expect(readme, path).toContain(`\`${path}\``);
    }
  });
});

// --- the CLI ------------------------------------------------------------------------------------

/** Every `npm run [-s] cli -- …` invocation the docs show, as argv (placeholders made concrete; `a|b|c` commands expanded; `[…]` options kept). */
function cliInvocations(): Array<{ where: string; argv: string[] }> {
  const found: Array<{ where: string; argv: string[] }> = [];
  for (const file of ['README.md', 'docs/operations.md', 'docs/architecture.md']) {
    read(file)
      .split('\n')
      .forEach((line, i) => {
        for (const m of line.matchAll(/npm run (?:-s )?cli -- ([^`#>)\n]*)/g)) {
          const text = (m[1] as string)
            .replace(/[[\]]/g, ' ')
            .replace(/\s…\s|\s…$/g, ' 2024-06-01 ')
            .replace(/_…/g, '_x');
          if (text.trim() === '…') continue; // `npm run -s cli -- …`: any command
          const words = text.trim().split(/\s+/);
          const at = words.findIndex((w) => w.includes('|') && !w.startsWith('-') && !words[words.indexOf(w) - 1]?.startsWith('--'));
          const alternatives = at < 0 ? [words] : (words[at] as string).split('|').map((w) => words.map((word, j) => (j === at ? w : word)));
          for (const argv of alternatives) found.push({ where: `${file}:${i + 1}`, argv: argv.map((w) => (w === 'csv|json' ? 'csv' : w)) });
        }
      });
  }
  return found;
}

const sink = (): Writable & { text: string } => {
  const stream = new Writable({
    write(chunk, _encoding, done) {
      stream.text += String(chunk);
      done();
    },
  }) as Writable & { text: string };
  stream.text = '';
  return stream;
};

describe('the CLI invocations the docs show', () => {
  const invocations = cliInvocations();

  it('are found (the extraction works)', () => {
    const shown = invocations.map((i) => i.argv.join(' '));
    expect(shown).toEqual(expect.arrayContaining(['tokens disable tok_x', 'tokens revoke tok_x', 'rebuild', 'verify', '--help']));
    expect(shown.find((s) => s.startsWith('usage export'))).toBe('usage export --account acc_x --from 2024-05-01 --to 2024-06-01 --chain eth --format csv');
  });

  it('each names a command with arguments and options it takes: it gets as far as opening the stores', async () => {
    const wrong: string[] = [];
    for (const { where, argv } of invocations) {
      const stderr = sink();
      const stdout = sink();
      let opened = false;
      const code = await main(argv, {
        stdout,
        stderr,
        env: {},
        open: async () => {
          opened = true;
          throw new Error('stores not opened in this test');
        },
      });
      const help = argv.includes('--help');
      if (help ? code !== 0 : !opened) wrong.push(`${where}: npm run cli -- ${argv.join(' ')}: exit ${code} ${stderr.text.split('\n')[0]}`);
    }
    expect(wrong).toEqual([]);
  });

  it('cover every command the CLI has', () => {
    const shown = new Set(invocations.map((i) => i.argv.filter((w) => !w.startsWith('-')).join(' ')));
    const missing = COMMANDS.filter((c) => ![...shown].some((s) => s === c.name || s.startsWith(`${c.name} `)));
    expect(
      missing.map((c) => c.name),
      'commands the docs never show',
    ).toEqual([]);
  });
});

// --- the architecture's paths -------------------------------------------------------------------

function tree(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const path = `${dir}/${e.name}`;
    return e.isDirectory() ? [`${path}/`, ...tree(path)] : [path];
  });
}

describe('the files and folders docs/architecture.md names', () => {
  it('exist: a path from the repository root, or a file of the part of src/ it describes', () => {
    const files = [...tree('src'), ...tree('test')];
    const named = [...read('docs/architecture.md').matchAll(/`([^`\s]+)`/g)]
      .map((m) => m[1] as string)
      .filter((s) => /\.(ts|tsx|json|md|ya?ml)$|\/$|^(src|test|bench|docs|deploy|config|clients)\//.test(s));
    expect(named.length).toBeGreaterThan(40);
    const missing = named.filter((path) => !existsSync(join(ROOT, path)) && !files.some((f) => f.endsWith(`/${path}`)));
    expect(missing, 'named by docs/architecture.md, in no such place').toEqual([]);
  });
});
