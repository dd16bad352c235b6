import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { metricNamesOf, notOnPath, onPath, runPromtool, sampleNamesOf } from '../support/promql.js';
import { freePort, startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { owner, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * /metrics as Prometheus and Grafana see it: a live scrape of the whole service (on Redis, so the
 * Redis figures are there) after calls that make every series appear, checked by promtool, and
 * the dashboard in deploy/grafana checked against it.
 */

const DASHBOARD = 'deploy/grafana/dashboards/gateway.json';
const PROMETHEUS_CONFIG = 'deploy/prometheus/prometheus.yml';
const NO_PROMTOOL = notOnPath('promtool');
const promtool = onPath('promtool');

interface Target {
  expr: string;
}
interface Panel {
  type: string;
  title: string;
  targets?: Target[];
  panels?: Panel[];
}
interface Dashboard {
  panels: Panel[];
  templating: { list: Array<{ name: string; definition?: string }> };
}

const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Dashboard;
const panelsOf = (panels: Panel[]): Panel[] => panels.flatMap((p) => [p, ...panelsOf(p.panels ?? [])]);
const queryPanels = panelsOf(dashboard.panels).filter((p) => p.type !== 'row' && p.type !== 'text');
/** Every PromQL expression of the dashboard, by where it is. */
const expressions: Array<{ where: string; expr: string }> = [
  ...queryPanels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: p.title, expr: t.expr }))),
  ...dashboard.templating.list.flatMap((v) => {
    // label_values(<metric>, <label>): only its first argument is a metric.
    const metric = /^label_values\(\s*([a-zA-Z_:][\w:]*)\s*,/.exec(v.definition ?? '')?.[1];
    return metric ? [{ where: `variable ${v.name}`, expr: metric }] : [];
  }),
];

let redis: TestRedisServer;
let failing: FakeUpstream;
let node: FakeUpstream;
let t: TestApp;
let base: string;
/** A chain call with the test's token; its HTTP status. */
let call: (chain: string) => Promise<number>;
/** One scrape of /metrics over HTTP, after calls admitted, answered and failed upstream. */
let scrape: string;

beforeAll(async () => {
  redis = await startTestRedisServer();
  node = await startEvmFake();
  failing = await startEvmFake();
  failing.mode = 'fail';
  t = await startTestApp({ env: { REDIS_URL: redis.url, UPSTREAM_LOCAL: node.url, UPSTREAM_ETH: failing.url } });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const o = await owner(t.app);
  const created = await t.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'metrics' } });
  const token = created.json().token as string;
  call = async (chain: string) =>
    (
      await fetch(`${base}/${chain}/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] }),
      })
    ).status;
  for (let i = 0; i < 3; i++) expect(await call('local')).toBe(200);
  expect(await call('eth')).toBeGreaterThanOrEqual(500);
  const res = await fetch(`${base}/metrics`);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  scrape = await res.text();
});

afterAll(async () => {
  await t?.close();
  await node?.close();
  await failing?.close();
  await redis?.stop();
});

describe('/metrics', () => {
  it('passes promtool check metrics', (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    expect(runPromtool(['check', 'metrics'], scrape)).toEqual({ status: 0, output: '' });
  });
});

describe('the Grafana dashboard', () => {
  it('reads the metric names out of PromQL', () => {
    expect(metricNamesOf('histogram_quantile(0.99, sum by (chain, le) (rate(a_bucket{chain=~"$chain",x="b c"}[$__rate_interval])))')).toEqual(['a_bucket']);
    expect(metricNamesOf('sum(rate(a_total{o=~"r.*"}[5m])) / on (i) group_left sum without (x) (b) == bool 1')).toEqual(['a_total', 'b']);
  });

  it('queries only metrics a live scrape has, in every panel', () => {
    expect(queryPanels.length).toBeGreaterThan(10);
    for (const { where, expr } of expressions) expect(metricNamesOf(expr), `${where}: ${expr}`).not.toEqual([]);
    const present = sampleNamesOf(scrape);
    const missing = expressions.flatMap(({ where, expr }) =>
      metricNamesOf(expr)
        .filter((name) => !present.has(name))
        .map((name) => `${where}: ${name}`),
    );
    expect(missing).toEqual([]);
  });

  it('writes valid PromQL (promtool check rules, with Grafana variables filled in)', (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    const grafanaVariables = (expr: string): string => expr.replace(/\$__rate_interval|\$__range|\$__interval/g, '1m').replace(/\$\{?\w+\}?/g, '.*');
    // JSON is YAML: promtool reads the rules file as is.
    const rules = {
      groups: [{ name: 'dashboard', rules: expressions.map(({ expr }, i) => ({ record: `dashboard:expr_${i}`, expr: grafanaVariables(expr) })) }],
    };
    const dir = mkdtempSync(join(tmpdir(), 'gw-dashboard-rules-'));
    try {
      writeFileSync(join(dir, 'rules.yml'), JSON.stringify(rules));
      const checked = runPromtool(['check', 'rules', join(dir, 'rules.yml')]);
      expect(checked.status, checked.output).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('has data for every query from a real Prometheus scraping the service', async (ctx) => {
    ctx.skip(!onPath('prometheus'), notOnPath('prometheus'));
    const dir = mkdtempSync(join(tmpdir(), 'gw-prometheus-'));
    const port = await freePort();
    // Scraped every second, so rates over 5 s have the two samples they need within seconds.
    const config = { global: { scrape_interval: '1s' }, scrape_configs: [{ job_name: 'gateway', static_configs: [{ targets: [new URL(base).host] }] }] };
    writeFileSync(join(dir, 'prometheus.yml'), JSON.stringify(config));
    const prometheus = spawn(
      'prometheus',
      [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
      { stdio: 'ignore' },
    );
    const exited = new Promise((resolve) => prometheus.once('exit', resolve));
    let calling = true;
    const traffic = (async () => {
      while (calling) {
        await call('local');
        await call('eth');
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const filled = (expr: string): string =>
      expr
        .replace(/\$__rate_interval/g, '5s')
        .replace(/\$__range/g, '1m')
        .replace(/\$\{?chain\}?/g, '.*');
    const hasData = async (expr: string): Promise<boolean> => {
      const res = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(filled(expr))}`).catch(() => null);
      if (!res?.ok) return false;
      const body = (await res.json()) as { data: { result: unknown[] } };
      return body.data.result.length > 0;
    };
    try {
      let empty = expressions;
      const deadline = Date.now() + 60_000;
      while (empty.length > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 500));
        const answers = await Promise.all(empty.map(({ expr }) => hasData(expr)));
        empty = empty.filter((_, i) => !answers[i]);
      }
      expect(empty.map(({ where, expr }) => `${where}: ${expr}`)).toEqual([]);
    } finally {
      calling = false;
      await traffic;
      prometheus.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});

describe('deploy/: Prometheus and Grafana wiring', () => {
  it('has a Prometheus config promtool accepts', (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    const checked = runPromtool(['check', 'config', PROMETHEUS_CONFIG]);
    expect(checked.status, checked.output).toBe(0);
  });

  it('mounts into the monitoring services only files that exist', () => {
    const compose = readFileSync('docker-compose.yml', 'utf8');
    const mounted = [...compose.matchAll(/\.\/(deploy\/[^:\s\]]+):/g)].map((m) => m[1] as string);
    expect(mounted).toEqual(
      expect.arrayContaining([
        'deploy/prometheus/prometheus.yml',
        'deploy/grafana/provisioning/datasources',
        'deploy/grafana/provisioning/dashboards',
        'deploy/grafana/dashboards',
      ]),
    );
    for (const path of mounted) expect(existsSync(path), path).toBe(true);
  });
});
