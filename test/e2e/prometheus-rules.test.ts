import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { until } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { cells } from '../support/markdownTable.js';
import { metricNamesOf, notOnPath, onPath, runPromtool, sampleNamesOf } from '../support/promql.js';
import { startTestRedisServer, type TestRedisServer } from '../support/redisServer.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * deploy/prometheus/alerts.yml as an operator loads it: valid for promtool, loaded by
 * prometheus.yml and mounted beside it in docker-compose.yml, reading only metrics live scrapes
 * of the service show (the embedded default and Redis: some metrics exist in one shape only),
 * each alert with its action in docs/operations.md, and each one's cases in alerts.test.yml
 * passing, and failing once that alert is broken.
 */

const ALERTS = 'deploy/prometheus/alerts.yml';
const ALERT_TESTS = 'deploy/prometheus/alerts.test.yml';
const NO_PROMTOOL = notOnPath('promtool');
const promtool = onPath('promtool');

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleFile {
  groups: Array<{ name: string; rules: Rule[] }>;
}

const rulesOf = (text: string): Rule[] => (parse(text) as RuleFile).groups.flatMap((g) => g.rules);
const alertRules = rulesOf(readFileSync(ALERTS, 'utf8')).filter((r): r is Rule & { alert: string } => r.alert !== undefined);

/** Each rule's metrics that no sample of the scrapes has, as `<rule>: <metric>`. */
const unscrapedMetrics = (rulesText: string, present: Set<string>): string[] =>
  rulesOf(rulesText).flatMap((rule) =>
    metricNamesOf(rule.expr)
      .filter((name) => !present.has(name))
      .map((name) => `${rule.alert ?? rule.record}: ${name}`),
  );

/** The rows of the `| Alert | Severity | Fires when | What to do |` table under operations.md's "Alerts". */
function documentedAlerts(): Array<{ alert: string; severity: string; firesWhen: string; action: string }> {
  const lines = readFileSync('docs/operations.md', 'utf8').split('\n');
  const section = lines.findIndex((l) => /^#+ Alerts\b/.test(l));
  expect(section, 'an "Alerts" heading in docs/operations.md').toBeGreaterThan(0);
  const header = lines.findIndex((l, i) => i > section && /^\|\s*Alert\s*\|\s*Severity\s*\|\s*Fires when\s*\|\s*What to do\s*\|\s*$/.test(l));
  expect(header, 'the alerts table under "Alerts"').toBeGreaterThan(section);
  const rows = [];
  for (let i = header + 2; i < lines.length && (lines[i] as string).startsWith('|'); i++) {
    const [alert = '', severity = '', firesWhen = '', action = ''] = cells(lines[i] as string);
    rows.push({ alert: alert.replace(/`/g, ''), severity, firesWhen, action });
  }
  return rows;
}

let redis: TestRedisServer;
let node: FakeUpstream;
let failing: FakeUpstream;
const apps: TestApp[] = [];
/** The sample names of every scrape: on the embedded default, and on Redis. */
let present: Set<string>;

/** The service on `env`, scraped after a served call and a failed one (every series a rule reads has a sample). */
async function scrapeAfterCalls(env: Record<string, string>): Promise<Set<string>> {
  const t = await startTestApp({ env: { UPSTREAM_LOCAL: node.url, UPSTREAM_ETH: failing.url, ...env } });
  apps.push(t);
  const { url } = await listen(t);
  const { token } = await newToken(t);
  const call = async (chain: string): Promise<number> =>
    (
      await fetch(`${url}/${chain}/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] }),
      })
    ).status;
  expect(await call('local')).toBe(200);
  expect(await call('eth')).toBeGreaterThanOrEqual(500);
  let names = new Set<string>();
  // The event loop monitor's quantiles are there once it has run since the previous scrape.
  await until(async () => {
    names = sampleNamesOf(await (await fetch(`${url}/metrics`)).text());
    return names.has('gateway_event_loop_delay_seconds') && names.has('gateway_upstream_attempt_failures_total');
  }, 10_000);
  return names;
}

beforeAll(async () => {
  redis = await startTestRedisServer();
  node = await startEvmFake();
  failing = await startEvmFake();
  failing.mode = 'fail';
  const embedded = await scrapeAfterCalls({});
  const onRedis = await scrapeAfterCalls({ REDIS_URL: redis.url });
  present = new Set([...embedded, ...onRedis]);
}, 60_000);

afterAll(async () => {
  for (const t of apps) await t.close();
  await node?.close();
  await failing?.close();
  await redis?.stop();
});

describe('deploy/prometheus/alerts.yml', () => {
  it('passes promtool check rules', (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    const checked = runPromtool(['check', 'rules', ALERTS]);
    expect(checked.status, checked.output).toBe(0);
    expect(checked.output).toContain(`SUCCESS: ${alertRules.length} rules found`);
  });

  it('is loaded by prometheus.yml and mounted beside it in docker-compose.yml', () => {
    const config = parse(readFileSync('deploy/prometheus/prometheus.yml', 'utf8')) as { rule_files?: string[] };
    expect(config.rule_files).toEqual(['alerts.yml']);
    const compose = readFileSync('docker-compose.yml', 'utf8');
    expect(compose).toContain('./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro');
    for (const file of config.rule_files ?? []) {
      expect(existsSync(join('deploy/prometheus', file)), file).toBe(true);
      expect(compose, `${file} mounted in the prometheus service`).toContain(`./deploy/prometheus/${file}:/etc/prometheus/${file}:ro`);
    }
  });

  it('reads only metrics a live scrape of the service has', () => {
    // The check itself: a misspelt metric in a rule is caught, a function, label or keyword is not taken for one.
    const misspelt =
      'groups: [{name: bad, rules: [{alert: Misspelt, expr: "increase(gateway_usage_droped_total[5m]) > 0 or on (chain) gateway_redis_up == 0"}]}]';
    expect(unscrapedMetrics(misspelt, present)).toEqual(['Misspelt: gateway_usage_droped_total']);

    expect(alertRules.length).toBeGreaterThanOrEqual(8);
    for (const rule of alertRules) expect(metricNamesOf(rule.expr), rule.alert).not.toEqual([]);
    expect(unscrapedMetrics(readFileSync(ALERTS, 'utf8'), present)).toEqual([]);
  });

  it('gives each alert a severity, a summary and its action in docs/operations.md (and documents no other)', () => {
    for (const rule of alertRules) {
      expect(['critical', 'warning'], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toBeTruthy();
      expect(rule.annotations?.runbook, rule.alert).toBe('docs/operations.md#alerts');
    }
    const documented = documentedAlerts();
    expect(documented.map((d) => `${d.alert} ${d.severity}`).sort()).toEqual(alertRules.map((r) => `${r.alert} ${r.labels?.severity}`).sort());
    for (const d of documented) {
      expect(d.firesWhen, d.alert).not.toBe('');
      expect(d.action, d.alert).not.toBe('');
    }
  });

  it('passes its unit tests (promtool test rules alerts.test.yml)', (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    const tested = runPromtool(['test', 'rules', ALERT_TESTS]);
    expect(tested.status, tested.output).toBe(0);
  });

  it('fails its unit tests once any one alert is broken (a metric misspelt)', (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    const dir = mkdtempSync(join(tmpdir(), 'gw-alert-rules-'));
    try {
      copyFileSync(ALERT_TESTS, join(dir, 'alerts.test.yml'));
      const still: string[] = [];
      for (const broken of alertRules) {
        const file = parse(readFileSync(ALERTS, 'utf8')) as RuleFile;
        for (const rule of file.groups.flatMap((g) => g.rules)) {
          if (rule.alert !== broken.alert) continue;
          for (const name of metricNamesOf(rule.expr)) rule.expr = rule.expr.replace(new RegExp(`\\b${name}\\b`, 'g'), `${name}_misspelt`);
        }
        writeFileSync(join(dir, 'alerts.yml'), stringify(file));
        const tested = runPromtool(['test', 'rules', join(dir, 'alerts.test.yml')]);
        if (tested.status === 0 || !tested.output.includes(`alertname: ${broken.alert},`)) still.push(broken.alert);
      }
      expect(still, 'alerts whose breaking no case of alerts.test.yml notices').toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
