import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import { LevelReadModelStore } from '../../src/infra/readmodels/level.js';
import type { ReadModelStore } from '../../src/infra/readmodels/port.js';
import { PROJECTIONS } from '../../src/projections/all.js';
import { rebuildProjections } from '../../src/projections/rebuild.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { usageEventId } from '../support/oneCallUsage.js';
import { ADMIN_TOKEN, owner, startTestApp, type TestApp } from '../support/testApp.js';

let t: TestApp;
let history: Awaited<ReturnType<typeof makeHistory>>;
const scratch: string[] = [];

async function dump(rm: ReadModelStore): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const p of PROJECTIONS) for (const c of p.collections) out[c] = await rm.range(c);
  return out;
}

/** A history with every kind of event: accounts, plan change, tokens through their life, access tokens, usage. */
async function makeHistory(app: TestApp['app']) {
  const a = await owner(app);
  const b = await owner(app);
  await app.inject({
    method: 'PUT',
    url: `/api/v1/admin/accounts/${b.accountId}/plan`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    payload: { plan: 'developer' },
  });
  const tokens: string[] = [];
  for (const o of [a, b]) {
    for (const name of ['one', 'two']) {
      const res = await app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name } });
      tokens.push(res.json().id);
    }
  }
  await app.inject({ method: 'PATCH', url: `/api/v1/tokens/${tokens[0]}`, headers: a.auth, payload: { name: 'renamed', status: 'disabled' } });
  await app.inject({ method: 'DELETE', url: `/api/v1/tokens/${tokens[1]}`, headers: a.auth });
  await app.inject({ method: 'PATCH', url: `/api/v1/tokens/${tokens[2]}`, headers: b.auth, payload: { monthly_limit: 500 } });
  const usage: UsageRecord[] = Array.from({ length: 30 }, (_, i) => ({
    requestId: `req-${i}`,
    at: new Date().toISOString(),
    accountId: i % 2 ? a.accountId : b.accountId,
    tokenId: (i % 2 ? tokens[0] : tokens[2]) as string,
    chain: 'eth',
    method: 'eth_blockNumber',
    status: i % 5 ? 200 : 502,
    rpcErrorCode: i % 5 ? null : -32010,
    errorMessage: null,
    totalMs: 3,
    upstreamMs: 2,
    clientIp: '127.0.0.1',
    upstream: 'u1',
  }));
  for (const r of usage) {
    await t.runtime.store.append(usageStream(r.accountId), [{ id: usageEventId(r), type: USAGE_EVENT_TYPE, data: r }], 'any');
  }
  const head = await t.runtime.store.headPosition();
  if (head) await t.runtime.projector?.waitFor(head);
  return { a, b, tokens };
}

beforeAll(async () => {
  t = await startTestApp();
  history = await makeHistory(t.app);
});
afterAll(async () => {
  await t?.close();
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

describe('projections', () => {
  it('counts usage per token and account, shown on the token record and the account', async () => {
    const { a, tokens } = history;
    const token = (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${tokens[0]}`, headers: a.auth })).json();
    expect(token.current_month_usage).toBe(15);
    expect(Date.parse(token.last_used_at)).toBeGreaterThan(Date.now() - 60_000);
    const unused = (await t.app.inject({ method: 'GET', url: `/api/v1/tokens/${tokens[1]}`, headers: a.auth })).json();
    expect(unused).toMatchObject({ current_month_usage: 0, last_used_at: null });
    const account = (await t.app.inject({ method: 'GET', url: '/api/v1/account', headers: a.auth })).json();
    expect(account.usage).toMatchObject({ requests: 15, remaining: 100_000 - 15 });
  });

  it('a rebuild from the log equals the live read models', async () => {
    const live = await dump(t.runtime.readModels);
    expect(Object.values(live).flat().length).toBeGreaterThan(20);
    await t.runtime.projector?.stop();
    await rebuildProjections(t.runtime.store, t.runtime.readModels, PROJECTIONS);
    expect(await dump(t.runtime.readModels)).toEqual(live);
  });

  it('replaying the same events twice changes nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-replay-'));
    scratch.push(dir);
    const rm = await LevelReadModelStore.open(dir);
    const runner = new ProjectionRunner(t.runtime.store, rm, PROJECTIONS);
    await runner.start();
    await runner.caughtUp;
    await runner.stop();
    const once = await dump(rm);
    // Apply every event again at its own position, as a crashed runner restarting from scratch would.
    const sub = t.runtime.store.subscribeToAll();
    for await (const item of sub) {
      if (item.kind === 'caughtUp') break;
      for (const p of PROJECTIONS) await rm.commit(p.name, item.event.position, p.project(item.event));
    }
    await sub.close();
    expect(await dump(rm)).toEqual(once);
    expect(once).toEqual(await dump(t.runtime.readModels));
    await rm.close();
  });
});

describe('restart', () => {
  it('keeps every account and token across a restart of the embedded default', async () => {
    const first = await startTestApp();
    const o = await owner(first.app);
    const created = await first.app.inject({ method: 'POST', url: '/api/v1/tokens', headers: o.auth, payload: { name: 'kept' } });
    await first.close({ keepData: true });
    const second = await startTestApp({ dataDir: first.dataDir });
    try {
      const login = await second.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email: o.email, password: 'correct horse battery' } });
      expect(login.statusCode).toBe(200);
      const list = await second.app.inject({ method: 'GET', url: '/api/v1/tokens', headers: o.auth });
      expect(list.json().tokens).toEqual([expect.objectContaining({ id: created.json().id, name: 'kept', status: 'active' })]);
    } finally {
      await second.close();
    }
  });
});
