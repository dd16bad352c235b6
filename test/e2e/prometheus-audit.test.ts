import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Telemetry } from '../../src/infra/telemetry.js';
import { until } from '../support/eventually.js';
import { type FakeUpstream, startCosmosFake, startEvmFake } from '../support/fakeUpstreams.js';
import { listen, newToken, startTestApp, type TestApp } from '../support/testApp.js';

/**
 * /metrics as an operator running the service under hostile traffic sees it: 20,000 chain calls,
 * each with a method or path of its own (invented JSON-RPC methods, REST paths with ids, unknown
 * chains, wrong tokens, quotes, backslashes, newlines, U+0000 and lone surrogates), admitted and
 * refused, must leave the exposition's series and the process's memory where they were, put no
 * token, address or method in a label, and still pass promtool; counters and histograms keep
 * Prometheus's rules from one scrape to the next.
 */

const promtool = (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, 'promtool')));
const NO_PROMTOOL = 'promtool is not on the PATH (.ci/run installs Debian prometheus package, which has it)';

/** promtool check metrics on a scrape written to a file, as an operator would pipe it. */
function promtoolCheck(scrape: string): { status: number | null; output: string } {
  const dir = mkdtempSync(join(tmpdir(), 'gw-prom-audit-'));
  const file = join(dir, 'scrape.prom');
  writeFileSync(file, scrape);
  const fd = openSync(file, 'r');
  try {
    const run = spawnSync('promtool', ['check', 'metrics'], { stdio: [fd, 'pipe', 'pipe'], encoding: 'utf8' });
    return { status: run.status, output: `${run.stdout}${run.stderr}`.trim() };
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
}

// Heap figures are read after a full collection, which vitest's workers do not expose.
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;
async function heapUsedAfterGc(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    collectGarbage();
    await new Promise((resolve) => setImmediate(resolve));
  }
  return process.memoryUsage().heapUsed;
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  /** The label pairs as written, the series' identity within its name. */
  labelText: string;
  value: number;
}
interface Scrape {
  samples: Sample[];
  help: Map<string, string>;
  types: Map<string, string>;
}

const unescapeLabel = (v: string): string => v.replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c));

function parse(text: string): Scrape {
  const samples: Sample[] = [];
  const help = new Map<string, string>();
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const comment = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (comment) {
      (comment[1] === 'HELP' ? help : types).set(comment[2] as string, comment[3] as string);
      continue;
    }
    const m = /^([a-zA-Z_:][\w:]*)(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${JSON.stringify(line)}`);
    const labelText = m[2] ?? '';
    const labels: Record<string, string> = {};
    for (const l of labelText.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] as string] = unescapeLabel(l[2] as string);
    samples.push({ name: m[1] as string, labels, labelText, value: Number(m[3] === '+Inf' ? Infinity : m[3]) });
  }
  return { samples, help, types };
}

/** The family a sample belongs to: its name, or its name less a histogram's or summary's suffix. */
function familyOf(s: Sample, types: Map<string, string>): string {
  if (types.has(s.name)) return s.name;
  const base = s.name.replace(/_(bucket|sum|count)$/, '');
  return types.has(base) ? base : s.name;
}

/** A series' identity: its name and its labels, `le` and `quantile` kept. */
const seriesKey = (s: Sample): string =>
  `${s.name}{${Object.entries(s.labels)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)}}`;

const gatewaySeries = (s: Scrape): string[] => s.samples.filter((x) => x.name.startsWith('gateway_')).map(seriesKey);

let evm: FakeUpstream;
let cosmos: FakeUpstream;
let t: TestApp;
let base: string;
let plansDir: string | undefined;
/** On the unlimited plan: every chain. */
let paying: { token: string; tokenId: string; accountId: string; email: string };
/** On the free plan: refused on atom (not in the plan). */
let free: { token: string; tokenId: string; accountId: string; email: string };

/** Text no label may hold: callers wrote it. */
const HOSTILE = `"\\\n\u0000\ud800`;
/** Long enough that a method cut from a path and kept whole would cost the process its whole path. */
const PAD = 'a'.repeat(12_000);
/** Calls per round sent together. */
const CONCURRENCY = 100;

const drain = async (res: Response): Promise<number> => {
  await res.arrayBuffer();
  return res.status;
};
const postRpc = (path: string, method: string): Promise<number> =>
  fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: [] }),
  }).then(drain);

/**
 * One hostile call, the n-th: an invented JSON-RPC method, an allowed REST path with an address
 * of its own (forwarded), a refused REST path of 12 kB, an unknown chain, or a wrong token.
 */
function hostileCall(n: number): Promise<number> {
  switch (n % 5) {
    case 0:
      return postRpc(`/local/${paying.token}`, `eth_invented${n}${HOSTILE}`);
    case 1:
      // Every other one with quotes, a backslash, a newline, U+0000 and a lone surrogate: refused as a malformed path.
      return fetch(`${base}/atom/${paying.token}/cosmos/bank/v1beta1/balances/cosmos1${n}${n % 2 ? '%22%5C%0A%00%ED%A0%80' : ''}`).then(drain);
    case 2:
      return fetch(`${base}/atom/${free.token}/cosmos/bank/v1beta1/balances/cosmos1${n}${PAD}`).then(drain);
    case 3:
      return postRpc(`/chain${n}%22%5C/${paying.token}`, 'eth_blockNumber');
    default:
      return postRpc(`/local/gk_invented${n}`, `eth_invented${n}`);
  }
}

/** Sends calls from..to-1, CONCURRENCY at a time; their statuses, counted. */
async function hostileTraffic(from: number, to: number, statuses: Map<number, number>): Promise<void> {
  for (let i = from; i < to; i += CONCURRENCY) {
    const answered = await Promise.all(Array.from({ length: Math.min(CONCURRENCY, to - i) }, (_, j) => hostileCall(i + j)));
    for (const status of answered) statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
}

const scrapeText = async (): Promise<string> => (await fetch(`${base}/metrics`)).text();

beforeAll(async () => {
  evm = await startEvmFake();
  cosmos = await startCosmosFake();
  // No rate limit in the way: the calls are refused for what they are, not for how fast they come.
  plansDir = mkdtempSync(join(tmpdir(), 'gw-prom-audit-plans-'));
  const plans = join(plansDir, 'plans.json');
  writeFileSync(plans, JSON.stringify({ unlimited: { rps: 1_000_000 }, free: { rps: 1_000_000 } }));
  t = await startTestApp({ env: { UPSTREAM_LOCAL: evm.url, UPSTREAM_ATOM: cosmos.url, PLANS_CONFIG: plans } });
  base = (await listen(t)).url;
  paying = await newToken(t, { plan: 'unlimited' });
  free = await newToken(t, { plan: 'free' });
});

afterAll(async () => {
  await t?.close();
  await evm?.close();
  await cosmos?.close();
  if (plansDir) rmSync(plansDir, { recursive: true, force: true });
});

describe('/metrics under 20,000 calls that each invent a method, path, chain or token', () => {
  const statuses = new Map<number, number>();
  let before: string;
  let after: string;
  let heapGrowth: number;

  beforeAll(async () => {
    // Every kind of call once first, so each label set they make exists before the count.
    await hostileTraffic(0, 500, statuses);
    await until(async () => (await t.runtime.usageQueue.depth()) === 0, 20_000);
    before = await scrapeText();
    const heapBefore = await heapUsedAfterGc();
    await hostileTraffic(500, 20_500, statuses);
    await until(async () => (await t.runtime.usageQueue.depth()) === 0, 20_000);
    heapGrowth = (await heapUsedAfterGc()) - heapBefore;
    after = await scrapeText();
  }, 120_000);

  it('were admitted and refused in every way they were meant to be', () => {
    // 200: JSON-RPC errors for invented methods; 501: the node's answer to a forwarded path; 400: a
    // malformed path; 403: atom is not in the free plan; 404: unknown chains; 401: wrong tokens.
    expect([...statuses.keys()].sort()).toEqual([200, 400, 401, 403, 404, 501]);
    expect([...statuses.values()].reduce((a, b) => a + b, 0)).toBe(20_500);
  });

  it('keeps the same series: none per method, path, chain or token', () => {
    const was = new Set(gatewaySeries(parse(before)));
    const now = new Set(gatewaySeries(parse(after)));
    expect([...now].filter((k) => !was.has(k))).toEqual([]);
    expect(now.size).toBe(was.size);
    // Bounded by the shipped registry (its chains and their nodes: 400 since Solana's nodes have head states), not by the calls.
    expect(now.size).toBeLessThan(450);
  });

  it('puts no token, address, method, path or client address in a label value', () => {
    const values = parse(after).samples.flatMap((s) => Object.values(s.labels));
    const leaks = values.filter((v) => /gk_|invented|cosmos1|chain\d|127\.0\.0\.1|aaaaaaaa|["\\\n\ufffd]/.test(v) || v.includes('\u0000'));
    expect([...new Set(leaks)]).toEqual([]);
    for (const secret of [paying.token, free.token, paying.accountId, free.accountId, paying.email]) expect(after).not.toContain(secret);
  });

  it('does not grow the heap with the methods and paths it has seen', () => {
    // 4,000 refused 12 kB paths: kept whole, as the slice a method is cut from, they hold 48 MB and more.
    expect(heapGrowth).toBeLessThan(20_000_000);
  });

  it('still passes promtool check metrics', (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    expect(promtoolCheck(after)).toEqual({ status: 0, output: '' });
  });

  it('gives every metric HELP and TYPE, counters _total, and time in seconds', () => {
    const { samples, help, types } = parse(after);
    const families = new Set(samples.map((s) => familyOf(s, types)));
    for (const family of families) {
      expect(help.has(family), `${family} HELP`).toBe(true);
      expect(types.has(family), `${family} TYPE`).toBe(true);
      if (types.get(family) === 'counter') expect(family).toMatch(/_total$/);
      else expect(family).not.toMatch(/_total$/);
      if (family.startsWith('gateway_') && /duration|delay|lag_s|latency|time/.test(family)) expect(family).toMatch(/_seconds(_total)?$/);
    }
  });

  it('keeps histograms cumulative, with _count the +Inf bucket and a _sum to match', () => {
    const { samples, types } = parse(after);
    const histograms = [...types].filter(([, type]) => type === 'histogram').map(([name]) => name);
    expect(histograms).toEqual(expect.arrayContaining(['gateway_call_duration_seconds', 'gateway_upstream_duration_seconds']));
    for (const name of histograms) {
      const series = new Map<string, { buckets: Array<[number, number]>; sum?: number; count?: number }>();
      const of = (s: Sample) => {
        const key = seriesKey({ ...s, name, labels: Object.fromEntries(Object.entries(s.labels).filter(([k]) => k !== 'le')) });
        let entry = series.get(key);
        if (!entry) {
          entry = { buckets: [] };
          series.set(key, entry);
        }
        return entry;
      };
      for (const s of samples) {
        if (s.name === `${name}_bucket`) of(s).buckets.push([Number(s.labels.le === '+Inf' ? Infinity : s.labels.le), s.value]);
        else if (s.name === `${name}_sum`) of(s).sum = s.value;
        else if (s.name === `${name}_count`) of(s).count = s.value;
      }
      for (const [key, h] of series) {
        const bounds = h.buckets.map(([le]) => le);
        expect(bounds, key).toEqual([...bounds].sort((a, b) => a - b));
        expect(bounds.at(-1), key).toBe(Infinity);
        const counts = h.buckets.map(([, c]) => c);
        for (let i = 1; i < counts.length; i++) expect(counts[i], `${key} le=${bounds[i]}`).toBeGreaterThanOrEqual(counts[i - 1] as number);
        expect(h.count, key).toBe(counts.at(-1));
        expect(h.sum, key).toBeGreaterThanOrEqual(0);
        // Each observation is at most its bucket's bound; past the last finite bound, at least that bound.
        const finite = h.buckets.filter(([le]) => le !== Infinity);
        let ceiling = 0;
        let previous = 0;
        for (const [le, c] of finite) {
          ceiling += (c - previous) * le;
          previous = c;
        }
        const beyond = (h.count ?? 0) - previous;
        expect(h.sum ?? 0, key).toBeLessThanOrEqual(beyond > 0 ? Infinity : ceiling + 1e-9);
        expect(h.sum ?? 0, key).toBeGreaterThanOrEqual(beyond * (finite.at(-1)?.[0] ?? 0) - 1e-9);
      }
    }
  });

  it('never lowers a counter, a bucket, a _count or a _sum from one scrape to the next', () => {
    const earlier = parse(before);
    const later = parse(after);
    const monotonic = (s: Sample, types: Map<string, string>): boolean => {
      const type = types.get(familyOf(s, types));
      return type === 'counter' || ((type === 'histogram' || type === 'summary') && /_(bucket|sum|count)$/.test(s.name));
    };
    const then = new Map(earlier.samples.filter((s) => monotonic(s, earlier.types)).map((s) => [seriesKey(s), s.value]));
    const lowered = later.samples.filter((s) => monotonic(s, later.types) && s.value < (then.get(seriesKey(s)) ?? 0)).map(seriesKey);
    expect(lowered).toEqual([]);
    const calls = (s: Scrape) => s.samples.filter((x) => x.name === 'gateway_chain_calls_total').reduce((sum, x) => sum + x.value, 0);
    expect(calls(later)).toBeGreaterThan(calls(earlier));
  });
});

describe('label values an operator configures', () => {
  it('are escaped so that promtool reads them back: quotes, backslashes, newlines, U+0000, a lone surrogate', async (ctx) => {
    ctx.skip(!promtool, NO_PROMTOOL);
    const telemetry = new Telemetry();
    try {
      telemetry.observeCall({
        requestId: 'r1',
        at: '2026-01-01T00:00:00.000Z',
        accountId: 'a',
        tokenId: 't',
        chain: `chain${HOSTILE}`,
        method: `m${HOSTILE}`,
        status: 200,
        rpcErrorCode: null,
        errorMessage: null,
        totalMs: 3,
        upstreamMs: 2,
        clientIp: '127.0.0.1',
        upstream: `node${HOSTILE}`,
      });
      const text = await telemetry.metrics();
      expect(promtoolCheck(text)).toEqual({ status: 0, output: '' });
      const labels = parse(text).samples.filter((s) => s.name === 'gateway_upstream_duration_seconds_count')[0]?.labels;
      expect(labels).toEqual({ chain: `chain"\\\n\u0000\ud800`, upstream: `node"\\\n\u0000\ud800` });
    } finally {
      telemetry.close();
    }
  });
});
