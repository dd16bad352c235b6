import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Difference, verifyReadModels } from '../../src/cli/verify.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';
import { openReadModels, type ReadModelStore } from '../../src/infra/readmodels/index.js';
import { PROJECTIONS } from '../../src/projections/all.js';
import { rebuildProjections } from '../../src/projections/rebuild.js';
import { USAGE_METRICS } from '../../src/projections/usageMetrics.js';
import { quotaUsed, USAGE_TOTALS } from '../../src/projections/usageTotals.js';
import { eventually } from '../support/eventually.js';
import { type FakeUpstream, startEvmFake } from '../support/fakeUpstreams.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/**
 * Operators upgrade in place: a data directory written by an older version is read by this one,
 * and nothing it had accepted is lost or counted twice. Each fixture under
 * test/fixtures/upgrade/ is the embedded data directory of an older commit, made by
 * test/fixtures/upgrade/generate.ts (its manifest.json names the commit and holds what that
 * version showed):
 *
 * - 19c470f-term (19c470f, stopped with SIGTERM): the event log and its indexes in one LevelDB,
 *   one `UsageRecorded` event per call, raw rows in the main read-model store in blocks of 16
 *   calls, month totals from before quota used left out refused calls, no usage journal.
 * - 82c1600-kill (82c1600, SIGKILL under load): log and index apart, compact `UsageBatchRecorded`
 *   events, raw rows in their own store in blocks of 16 calls without the charged and cache
 *   columns, and the usage journal holding calls answered just before the kill.
 *
 * The service runs on a clock a minute after the fixture stopped, so its month is the fixture's.
 */

interface Manifest {
  commit: string;
  stoppedAt: string;
  email: string;
  password: string;
  accountId: string;
  tokens: Record<'main' | 'capped' | 'revoked' | 'edited', { id: string; token: string }>;
  usage: Record<'main' | 'capped' | 'revoked' | 'edited', number>;
  totals: { requests: number; success: number; errors: number };
  exported: string[];
  killed: { sent: number; answered: string[] } | null;
}

const FIXTURES = fileURLToPath(new URL('../fixtures/upgrade/', import.meta.url));
const scratch: string[] = [];
let evm: FakeUpstream;
beforeAll(async () => {
  evm = await startEvmFake();
});
afterAll(async () => {
  await evm?.close();
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

/** A copy of the fixture's data directory (the service writes to it) and its manifest. */
function fixture(name: string): { dataDir: string; manifest: Manifest; clock: () => Date } {
  const dataDir = mkdtempSync(join(tmpdir(), `gw-upgrade-${name}-`));
  scratch.push(dataDir);
  cpSync(join(FIXTURES, name, 'store'), dataDir, { recursive: true });
  const manifest = JSON.parse(readFileSync(join(FIXTURES, name, 'manifest.json'), 'utf8')) as Manifest;
  const startedMs = Date.now();
  const clock = () => new Date(Date.parse(manifest.stoppedAt) + 60_000 + (Date.now() - startedMs));
  return { dataDir, manifest, clock };
}

async function signIn(t: TestApp, m: Manifest): Promise<{ cookie: string }> {
  const wrong = await t.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email: m.email, password: `${m.password}!` } });
  expect(wrong.statusCode).toBe(401);
  const res = await t.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email: m.email, password: m.password } });
  expect(res.statusCode, res.body).toBe(200);
  expect(res.json().id).toBe(m.accountId);
  return { cookie: String(res.headers['set-cookie']).split(';')[0] as string };
}

const call = async (t: TestApp, token: string) =>
  (
    await t.app.inject({
      method: 'POST',
      url: `/local/${token}`,
      headers: { 'content-type': 'application/json' },
      payload: { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] },
    })
  ).statusCode;

async function usageByToken(t: TestApp, auth: { cookie: string }, m: Manifest): Promise<Record<string, number>> {
  const tokens = (await t.app.inject({ method: 'GET', url: '/api/v1/tokens', headers: auth })).json().tokens as Array<{
    id: string;
    current_month_usage: number;
  }>;
  return Object.fromEntries(Object.entries(m.tokens).map(([name, { id }]) => [name, tokens.find((x) => x.id === id)?.current_month_usage ?? -1]));
}

async function verify(dataDir: string, now: Date): Promise<Difference[]> {
  const store = await LevelEventStore.open(join(dataDir, 'eventstore'));
  const live = await openReadModels({ dataDir });
  try {
    const found: Difference[] = [];
    await verifyReadModels({ store, live, projections: PROJECTIONS, plans: DEFAULT_PLANS, now, report: async (d) => void found.push(d) });
    return found;
  } finally {
    await live.close();
    await store.close();
  }
}

async function withReadModels<T>(dataDir: string, use: (live: ReadModelStore) => Promise<T>): Promise<T> {
  const live = await openReadModels({ dataDir });
  try {
    return await use(live);
  } finally {
    await live.close();
  }
}

async function rebuild(dataDir: string): Promise<void> {
  const store = await LevelEventStore.open(join(dataDir, 'eventstore'));
  const live = await openReadModels({ dataDir });
  try {
    await rebuildProjections(store, live, PROJECTIONS);
  } finally {
    await live.close();
    await store.close();
  }
}

/** Reads everything an owner sees of the old data, checks it against what the old version showed, and makes one more call per token. */
async function checkOwnerView(t: TestApp, m: Manifest): Promise<{ cookie: string }> {
  const auth = await signIn(t, m);
  const answered = m.killed?.answered ?? [];
  const inFlight = m.killed ? m.killed.sent - answered.length : 0;

  // Every call the old version answered, once: the export lists each request id one time (the
  // journal's records go through the ingester and the projector after the start).
  const rows = await eventually(
    () => exportedRows(t, auth),
    (r) => r.length >= m.exported.length + answered.length,
    10_000,
  );
  const ids = rows.map((r) => r.request_id);
  expect(new Set(ids).size).toBe(ids.length);
  expect(ids).toEqual(expect.arrayContaining([...m.exported, ...answered]));
  expect(ids.length - m.exported.length - answered.length).toBeLessThanOrEqual(inFlight);
  const csv = (await t.app.inject({ method: 'GET', url: '/api/v1/exports/usage.csv', headers: auth })).body.trim().split('\n');
  expect(csv.length - 1).toBe(rows.length);

  const totals = (await t.app.inject({ method: 'GET', url: '/api/v1/metrics/user', headers: auth })).json().totals;
  expect(totals.requests).toBe(rows.length);
  const usage = await usageByToken(t, auth, m);
  const late = rows.length - m.exported.length;
  if (m.killed) {
    expect(totals.success - m.totals.success).toBe(late);
    expect(usage).toEqual({ ...m.usage, main: m.usage.main + late });
  } else {
    expect({ requests: totals.requests, success: totals.success, errors: totals.errors }).toEqual(m.totals);
    expect(usage).toEqual(m.usage);
  }

  const history = (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${m.tokens.edited.id}/history`, headers: auth })).json();
  expect(history.events.map((e: { type: string }) => e.type)).toEqual(
    expect.arrayContaining(['ApiTokenCreated', 'ApiTokenRenamed', 'ApiTokenDescriptionChanged', 'ApiTokenDisabled', 'ApiTokenEnabled']),
  );
  expect(history.events.at(-1).state).toMatchObject({ name: 'edited-renamed', description: 'renamed once', status: 'active' });
  const revoked = (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${m.tokens.revoked.id}/history`, headers: auth })).json();
  expect(revoked.events.at(-1)).toMatchObject({ type: 'ApiTokenRevoked', state: { status: 'revoked' } });

  expect(await call(t, m.tokens.main.token)).toBe(200);
  expect(await call(t, m.tokens.edited.token)).toBe(200);
  expect(await call(t, m.tokens.capped.token)).toBe(429);
  expect(await call(t, m.tokens.revoked.token)).toBe(401);
  // The new calls count once, on top of the old ones (the capped one's refusal uses no quota).
  await eventually(
    () => usageByToken(t, auth, m),
    (now) => now['main'] === usage['main']! + 1 && now['edited'] === usage['edited']! + 1,
    10_000,
  );
  expect(await usageByToken(t, auth, m)).toEqual({ ...usage, main: usage['main']! + 1, edited: usage['edited']! + 1 });
  return auth;
}

const exportedRows = async (t: TestApp, auth: { cookie: string }) =>
  (await t.app.inject({ method: 'GET', url: '/api/v1/exports/usage.json', headers: auth })).json().rows as Array<{ request_id: string }>;

describe('a data directory written by an older version', () => {
  it('82c1600, killed under load: the journal it left is replayed once, and verify finds the read models as the log says', async () => {
    const { dataDir, manifest, clock } = fixture('82c1600-kill');
    let t = await startTestApp({ dataDir, env: { UPSTREAM_LOCAL: evm.url }, now: clock });
    let calls: number;
    try {
      const auth = await checkOwnerView(t, manifest);
      calls = (await exportedRows(t, auth)).length;
    } finally {
      await t.close({ keepData: true });
    }
    expect(await verify(dataDir, clock())).toEqual([]);

    // Raw rows are compared call by call across layouts: a changed or lost call is still found.
    const hour = `${manifest.accountId}/${manifest.stoppedAt.slice(0, 13)}`;
    const [first, second] = await withReadModels(dataDir, (live) =>
      live.range<Record<string, unknown[]>>(USAGE_METRICS.requestBlocks, { prefix: `${hour}/`, limit: 2 }),
    );
    if (!first || !second) throw new Error('the fixture has fewer than two raw-row documents in its hour');
    const changed = [...(first.doc['3'] as unknown[])];
    changed[5] = 500;
    await withReadModels(dataDir, (live) =>
      live.write([{ op: 'put', collection: USAGE_METRICS.requestBlocks, key: first.key, doc: { ...first.doc, 3: changed } }]),
    );
    expect(await verify(dataDir, clock())).toEqual([{ collection: USAGE_METRICS.requestBlocks, key: hour, kind: 'differs', fields: [changed[0]] }]);
    await withReadModels(dataDir, (live) =>
      live.write([
        { op: 'put', collection: USAGE_METRICS.requestBlocks, key: first.key, doc: first.doc },
        { op: 'delete', collection: USAGE_METRICS.requestBlocks, key: second.key },
      ]),
    );
    expect(await verify(dataDir, clock())).toEqual([
      { collection: USAGE_METRICS.requestBlocks, key: hour, kind: 'differs', fields: [Object.values(second.doc)[0]?.[0]] },
    ]);
    await withReadModels(dataDir, (live) => live.write([{ op: 'put', collection: USAGE_METRICS.requestBlocks, key: second.key, doc: second.doc }]));
    expect(await verify(dataDir, clock())).toEqual([]);

    // A second start replays nothing again.
    t = await startTestApp({ dataDir, env: { UPSTREAM_LOCAL: evm.url }, now: clock });
    try {
      const auth = await signIn(t, manifest);
      const totals = (await t.app.inject({ method: 'GET', url: '/api/v1/metrics/user', headers: auth })).json().totals;
      expect(totals.requests).toBe(calls);
      expect((await exportedRows(t, auth)).length).toBe(calls);
    } finally {
      await t.close({ keepData: true });
    }
  });

  it('19c470f, stopped: read as it was; verify names only the month totals that counted refused calls as quota, which a rebuild recounts', async () => {
    const { dataDir, manifest, clock } = fixture('19c470f-term');
    const t = await startTestApp({ dataDir, env: { UPSTREAM_LOCAL: evm.url }, now: clock });
    try {
      await checkOwnerView(t, manifest);
    } finally {
      await t.close({ keepData: true });
    }
    const differences = await verify(dataDir, clock());
    const totalsCollections: string[] = Object.values(USAGE_TOTALS);
    expect(differences.length).toBeGreaterThan(0);
    for (const d of differences)
      expect(d).toMatchObject({ kind: 'differs', fields: ['uncharged'], collection: expect.toSatisfy((c: string) => totalsCollections.includes(c)) });
    expect(differences.map((d) => d.key)).toContain(`${manifest.tokens.capped.id}/${manifest.stoppedAt.slice(0, 7)}`);

    await rebuild(dataDir);
    expect(await verify(dataDir, clock())).toEqual([]);
    // Recounted under today's rule, the capped token's month holds what its limiter charged.
    const month = await withReadModels(dataDir, (live) => live.get(USAGE_TOTALS.byToken, `${manifest.tokens.capped.id}/${manifest.stoppedAt.slice(0, 7)}`));
    expect(quotaUsed(month)).toBe(5);
  });
});
