import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AccountCommands } from '../../src/commands/accountCommands.js';
import { PasswordHasher } from '../../src/commands/passwords.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { LevelEventStore } from '../../src/infra/eventstore/level.js';

/**
 * A token's history, read from its stream and its account's: given what the account and the
 * token went through (commands on the real embedded store, on a clock the test moves), then the
 * history the API and the CLI give. The plan changes made while the token lived are in it, in
 * time order with the token's own events; those before its creation or after its end are not.
 */

let dir: string;
let store: LevelEventStore;
let clock = Date.parse('2026-11-01T10:00:00.000Z');
const minutesLater = (minutes = 1): void => {
  clock += minutes * 60_000;
};
let commands: AccountCommands;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-history-'));
  store = await LevelEventStore.open(dir);
  commands = new AccountCommands(store, DEFAULT_PLANS, () => new Date(clock), new PasswordHasher());
});
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const at = (): string => new Date(clock).toISOString();
const summary = (history: Awaited<ReturnType<AccountCommands['apiTokenHistory']>>) =>
  history.map((h) => (h.kind === 'token' ? [h.type, h.state.status] : [h.type, `${h.plan.from} -> ${h.plan.to}`]));

describe("a token's history shows its account's plan changes", () => {
  it('given a downgrade and an upgrade while the token lives, then both are between its own events, with their time and the token unchanged by them', async () => {
    const { accountId } = await commands.signUp('history-plan@example.com', 'correct horse battery');
    minutesLater();
    await commands.changePlan(accountId, 'professional');
    minutesLater();
    const { tokenId } = await commands.createApiToken(accountId, { name: 'indexer', rateLimit: 40 });
    minutesLater();
    await commands.updateApiToken(accountId, tokenId, { name: 'indexer-2' });
    minutesLater();
    const downgradedAt = at();
    await commands.changePlan(accountId, 'free');
    // Another token created after the downgrade never lived under the old plan.
    minutesLater();
    const { tokenId: later } = await commands.createApiToken(accountId, { name: 'later' });
    minutesLater();
    const upgradedAt = at();
    await commands.changePlan(accountId, 'developer');
    minutesLater();
    await commands.revokeApiToken(accountId, tokenId);
    minutesLater();
    // After its revocation a plan change no longer concerns the token.
    await commands.changePlan(accountId, 'unlimited');

    const history = await commands.apiTokenHistory(accountId, tokenId);
    expect(summary(history)).toEqual([
      ['ApiTokenCreated', 'active'],
      ['ApiTokenRenamed', 'active'],
      ['AccountPlanChanged', 'professional -> free'],
      ['AccountPlanChanged', 'free -> developer'],
      ['ApiTokenRevoked', 'revoked'],
    ]);
    const [, renamed, downgrade, upgrade] = history;
    expect(downgrade).toMatchObject({ kind: 'account', at: downgradedAt, plan: { from: 'professional', to: 'free' } });
    expect(upgrade).toMatchObject({ kind: 'account', at: upgradedAt, plan: { from: 'free', to: 'developer' } });
    // A plan change leaves the token's own fields as they were: its state is the one before.
    expect(downgrade?.state).toEqual(renamed?.state);
    expect(upgrade?.state).toEqual(renamed?.state);
    expect(history.map((h) => h.at)).toEqual([...history.map((h) => h.at)].sort());
    expect(history.map((h) => h.position)).toEqual([...history.map((h) => h.position)].sort());
    // The token's own revisions stay 0, 1, 2: a plan change is no event of its stream.
    expect(history.flatMap((h) => (h.kind === 'token' ? [h.revision] : []))).toEqual([0, 1, 2]);

    expect(summary(await commands.apiTokenHistory(accountId, later))).toEqual([
      ['ApiTokenCreated', 'active'],
      ['AccountPlanChanged', 'free -> developer'],
      ['AccountPlanChanged', 'developer -> unlimited'],
    ]);
  });

  it('given a token past its date, then a plan change after that date is not in its history, before the expiry is recorded and after', async () => {
    const { accountId } = await commands.signUp('history-expiry@example.com', 'correct horse battery');
    await commands.changePlan(accountId, 'developer');
    minutesLater();
    const { tokenId } = await commands.createApiToken(accountId, { name: 'short', expiresInDays: 1 });
    minutesLater(60);
    await commands.changePlan(accountId, 'professional');
    minutesLater(2 * 24 * 60);
    // Past its date the token is expired already, recorded or not.
    await commands.changePlan(accountId, 'developer');
    const before = summary(await commands.apiTokenHistory(accountId, tokenId));
    expect(before).toEqual([
      ['ApiTokenCreated', 'active'],
      ['AccountPlanChanged', 'developer -> professional'],
    ]);
    expect(await commands.expireApiToken(tokenId)).toBe(true);
    expect(summary(await commands.apiTokenHistory(accountId, tokenId))).toEqual([...before, ['ApiTokenExpired', 'expired']]);
  });

  it("given another account's token, then its history is not found", async () => {
    const { accountId } = await commands.signUp('history-owner@example.com', 'correct horse battery');
    const { accountId: other } = await commands.signUp('history-other@example.com', 'correct horse battery');
    const { tokenId } = await commands.createApiToken(accountId, { name: 'mine' });
    await expect(commands.apiTokenHistory(other, tokenId)).rejects.toMatchObject({ code: 'not_found' });
  });
});
