import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TokenHistory } from '../../src/api/types.js';
import { main as cli } from '../../src/cli/main.js';
import { ADMIN_TOKEN, startTestApp, type TestApp } from '../support/testApp.js';
import { textSink } from '../support/textSink.js';

/**
 * An auditor replays a token's history after its account was downgraded: over real HTTP, the
 * account signs up, moves to Professional, creates a token, renames it, is downgraded to Free,
 * disables the token; the token's history shows the downgrade between the rename and the
 * disabling, with its time and both plans. The operator CLI's `history` and `history --json`
 * say the same from the data directory.
 */

let t: TestApp;
let base = '';
/** Set once the service is closed for the CLI: the data directory is left to remove. */
let closedDataDir: string | null = null;

beforeAll(async () => {
  t = await startTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});
afterAll(async () => {
  if (closedDataDir) rmSync(closedDataDir, { recursive: true, force: true });
  else await t?.close();
});

async function http(method: string, path: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text), setCookie: res.headers.get('set-cookie') ?? '' };
}

async function runCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = textSink();
  const stderr = textSink();
  const code = await cli(args, { stdout: stdout.stream, stderr: stderr.stream, env: { DATA_DIR: t.dataDir, LOCAL_DEVNET: 'off' } });
  return { code, stdout: stdout.text(), stderr: stderr.text() };
}

describe("a token's history over HTTP shows the account's plan changes in its life", () => {
  it('a downgrade from Professional to Free sits between the token’s rename and its disabling, in the API and the CLI alike', async () => {
    const signedUp = await http('POST', '/api/v1/auth/signup', {}, { email: 'auditor-case@example.com', password: 'correct horse battery' });
    expect(signedUp.status, signedUp.text).toBe(201);
    const accountId = signedUp.json().id as string;
    const session = { cookie: signedUp.setCookie.split(';')[0] as string };
    const key = await http('POST', '/api/v1/access-tokens', session, { name: 'audit' });
    expect(key.status, key.text).toBe(201);
    const owner = { authorization: `Bearer ${key.json().token}` };
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const setPlan = async (plan: string) => {
      const res = await http('PUT', `/api/v1/admin/accounts/${accountId}/plan`, admin, { plan });
      expect(res.status, res.text).toBe(200);
    };

    // Before the token exists: not in its history.
    await setPlan('professional');
    const created = await http('POST', '/api/v1/tokens', owner, { name: 'indexer', rate_limit: 40 });
    expect(created.status, created.text).toBe(201);
    const tokenId = created.json().id as string;
    expect((await http('PATCH', `/api/v1/tokens/${tokenId}`, owner, { name: 'indexer-2' })).status).toBe(200);
    const beforeDowngrade = Date.now();
    await setPlan('free');
    const afterDowngrade = Date.now();
    expect((await http('PATCH', `/api/v1/tokens/${tokenId}`, owner, { status: 'disabled' })).status).toBe(200);

    const res = await http('GET', `/api/v1/tokens/${tokenId}/history`, owner);
    expect(res.status, res.text).toBe(200);
    const history = res.json() as TokenHistory;
    expect(history.token_id).toBe(tokenId);
    expect(history.events.map((e) => [e.kind, e.type])).toEqual([
      ['token', 'ApiTokenCreated'],
      ['token', 'ApiTokenRenamed'],
      ['account', 'AccountPlanChanged'],
      ['token', 'ApiTokenDisabled'],
    ]);
    const [, renamed, downgrade, disabled] = history.events;
    if (downgrade?.kind !== 'account' || renamed?.kind !== 'token' || disabled?.kind !== 'token') throw new Error('unexpected history');
    expect(downgrade.plan).toEqual({ from: 'professional', to: 'free' });
    expect(Date.parse(downgrade.at)).toBeGreaterThanOrEqual(beforeDowngrade);
    expect(Date.parse(downgrade.at)).toBeLessThanOrEqual(afterDowngrade);
    expect(Date.parse(downgrade.recorded_at)).toBeGreaterThanOrEqual(Date.parse(downgrade.at));
    // The token's own fields are as the rename left them; the plan entry is no revision of the token's.
    expect(downgrade.state).toEqual(renamed.state);
    expect(downgrade).not.toHaveProperty('revision');
    expect([renamed.revision, disabled.revision]).toEqual([1, 2]);
    expect(history.events.map((e) => e.at)).toEqual([...history.events.map((e) => e.at)].sort());

    // After the token's revocation a plan change no longer concerns it.
    expect((await http('DELETE', `/api/v1/tokens/${tokenId}`, owner)).status).toBe(200);
    await setPlan('developer');
    const final = (await http('GET', `/api/v1/tokens/${tokenId}/history`, owner)).json() as TokenHistory;
    expect(final.events.map((e) => e.type)).toEqual(['ApiTokenCreated', 'ApiTokenRenamed', 'AccountPlanChanged', 'ApiTokenDisabled', 'ApiTokenRevoked']);

    // The operator CLI, on the data directory the service wrote: the same entries.
    await t.close({ keepData: true });
    closedDataDir = t.dataDir;
    const json = await runCli(['history', tokenId, '--json']);
    expect(json.code, json.stderr).toBe(0);
    const lines = json.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines.map(({ position: _position, ...entry }) => entry)).toEqual(final.events);
    const text = await runCli(['history', tokenId]);
    expect(text.code, text.stderr).toBe(0);
    const textLines = text.stdout.trim().split('\n');
    expect(textLines.map((line) => line.split(/\s+/).slice(0, 3))).toEqual(
      final.events.map((e) => [e.at, e.kind === 'token' ? `#${e.revision}` : 'account', e.type]),
    );
    expect(textLines[2]).toMatch(/^\S+Z {2}account AccountPlanChanged\s+plan=professional->free$/);
  });
});
