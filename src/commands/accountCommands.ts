import { createHash } from 'node:crypto';
import { type AccessTokenState, accessTokenDecider } from '../domain/accessToken.js';
import { type AccountState, accountDecider, checkTokenOptions, type TokenSlot } from '../domain/account.js';
import { type ApiTokenCommand, apiTokenDecider } from '../domain/apiToken.js';
import type { Decider } from '../domain/decider.js';
import { fail } from '../domain/errors.js';
import { type EmailEvent, STREAM } from '../domain/events.js';
import type { PlanCatalog, PlanId } from '../domain/plans.js';
import { generateToken, hashToken, maskToken } from '../domain/tokenFormat.js';
import type { EventStore, Position } from '../infra/eventstore/port.js';
import { AggregateStore, decideAll } from './aggregateStore.js';
import { newId } from './ids.js';
import { PasswordHasher } from './passwords.js';
import { takePlanSlot } from './planSlots.js';
import { type LiveToken, planChangeOf, type TokenHistoryEntry, withPlanChanges } from './tokenHistory.js';

export interface CreateTokenInput {
  name: string;
  description?: string | undefined;
  expiresInDays?: number | undefined;
  monthlyLimit?: number | null | undefined;
  rateLimit?: number | null | undefined;
}

export interface TokenPatch {
  name?: string | undefined;
  description?: string | undefined;
  status?: 'active' | 'disabled' | undefined;
  monthlyLimit?: number | null | undefined;
  rateLimit?: number | null | undefined;
}

type LiveAccount = Extract<AccountState, { exists: true }>;

const emailHash = (email: string) => createHash('sha256').update(email.trim().toLowerCase()).digest('hex');

/**
 * The write side's use cases. Each command is decided on its aggregate and appended with
 * optimistic concurrency; every result carries the position of its last event so callers can
 * wait for the read models to catch up (read-your-writes).
 */
export class AccountCommands {
  private readonly aggregates: AggregateStore;
  private readonly accounts: ReturnType<typeof accountDecider>;

  constructor(
    store: EventStore,
    private readonly plans: PlanCatalog,
    private readonly now: () => Date = () => new Date(),
    private readonly passwords: PasswordHasher = new PasswordHasher(),
  ) {
    this.aggregates = new AggregateStore(store);
    this.accounts = accountDecider(plans);
  }

  private at(): string {
    return this.now().toISOString();
  }

  // ── Accounts ───────────────────────────────────────────────────────────────

  /**
   * Claims the email first (its own stream, `no_stream`), then writes the account. A sign-up
   * that died between the two is completed by the next attempt with the same email.
   */
  async signUp(email: string, password: string): Promise<{ accountId: string; position: Position }> {
    const normalized = email.trim().toLowerCase();
    const passwordHash = await this.passwords.hash(password);
    const claim = await this.aggregates.execute(STREAM.email(emailHash(normalized)), emailClaimDecider, (state) =>
      state ? [] : [{ type: 'EmailClaimed', version: 1, data: { accountId: newId.account(), email: normalized, at: this.at() } }],
    );
    const accountId = claim.state?.accountId;
    if (!accountId) return fail('conflict', 'Could not claim the email.');
    const account = await this.aggregates.execute(STREAM.account(accountId), this.accounts, (state) => {
      if (state.exists) fail('email_taken', 'An account with this email exists already.');
      return this.accounts.decide({ type: 'SignUp', accountId, email: normalized, passwordHash, at: this.at() }, state);
    });
    return { accountId, position: account.position as Position };
  }

  /**
   * Strongly consistent: reads the streams, not a projection. An unknown email costs the same
   * password work as a wrong password, so the answer's time does not tell which emails exist.
   */
  async authenticate(email: string, password: string): Promise<string | null> {
    const claim = await this.aggregates.load(STREAM.email(emailHash(email)), emailClaimDecider);
    const account = claim.state ? (await this.aggregates.load(STREAM.account(claim.state.accountId), this.accounts)).state : null;
    const live = account?.exists ? account : null;
    const matches = await this.passwords.verify(password, live ? live.passwordHash : null);
    return matches && live ? live.accountId : null;
  }

  async account(accountId: string): Promise<LiveAccount> {
    const { state } = await this.aggregates.load(STREAM.account(accountId), this.accounts);
    if (!state.exists) return fail('not_found', 'No such account.');
    return state;
  }

  async changePlan(accountId: string, plan: PlanId): Promise<Position | null> {
    const r = await this.aggregates.run(STREAM.account(accountId), this.accounts, { type: 'ChangePlan', plan, at: this.at() });
    return r.position;
  }

  // ── API tokens ─────────────────────────────────────────────────────────────

  /**
   * Takes a slot on the account stream (race-free against the plan's maximum), then writes the
   * token's own stream. At the maximum, slots left behind by a half-done create or revoke are
   * repaired first, so a crash can never lock an account out of its slots.
   */
  async createApiToken(accountId: string, input: CreateTokenInput): Promise<{ token: string; tokenId: string; position: Position }> {
    const token = generateToken('api');
    const at = this.at();
    const slot: TokenSlot = {
      tokenId: newId.apiToken(),
      tokenHash: hashToken(token),
      masked: maskToken(token),
      name: input.name,
      description: input.description ?? '',
      expiresAt: input.expiresInDays ? new Date(Date.parse(at) + input.expiresInDays * 86_400_000).toISOString() : null,
      monthlyLimit: input.monthlyLimit ?? null,
      rateLimit: input.rateLimit ?? null,
    };
    const issue = () => this.aggregates.run(STREAM.account(accountId), this.accounts, { type: 'IssueApiToken', at, ...slot });
    await takePlanSlot(issue, 'token_limit_reached', () => this.repairSlots(accountId));
    const position = await this.writeTokenStream(accountId, slot, at);
    return { token, tokenId: slot.tokenId, position };
  }

  private async writeTokenStream(accountId: string, slot: TokenSlot, at: string): Promise<Position> {
    const r = await this.aggregates.execute(STREAM.token(slot.tokenId), apiTokenDecider, (state) =>
      state.status === 'none' ? apiTokenDecider.decide({ type: 'CreateApiToken', accountId, at, ...slot }, state) : [],
    );
    return r.position ?? (await this.headOf(STREAM.token(slot.tokenId)));
  }

  /** Completes half-written tokens and frees slots of revoked or expired ones. True if anything changed. */
  private async repairSlots(accountId: string): Promise<boolean> {
    const account = await this.account(accountId);
    let changed = false;
    for (const slot of account.liveTokens.values()) {
      const { state } = await this.aggregates.load(STREAM.token(slot.tokenId), apiTokenDecider);
      if (state.status === 'none') {
        await this.writeTokenStream(accountId, slot, this.at());
      } else if (state.status === 'revoked' || state.status === 'expired') {
        await this.releaseSlot(accountId, slot.tokenId, state.status);
        changed = true;
      }
    }
    return changed;
  }

  private async releaseSlot(accountId: string, tokenId: string, reason: 'revoked' | 'expired'): Promise<void> {
    await this.aggregates.run(STREAM.account(accountId), this.accounts, { type: 'ReleaseApiToken', tokenId, reason, at: this.at() });
  }

  /** The token as its stream says, if it belongs to the account; otherwise not_found (never reveal another's). */
  async apiToken(accountId: string, tokenId: string): Promise<LiveToken> {
    const { state } = await this.aggregates.load(STREAM.token(tokenId), apiTokenDecider);
    if (state.status === 'none' || state.accountId !== accountId) return fail('not_found', 'No such token.');
    return state;
  }

  /**
   * The position of the token's last event, also when the patch changed nothing: a concurrent
   * request may have made the same change, and the answer must wait for the read models to show it.
   */
  async updateApiToken(accountId: string, tokenId: string, patch: TokenPatch): Promise<Position> {
    await this.apiToken(accountId, tokenId);
    const at = this.at();
    const changesLimits = patch.monthlyLimit !== undefined || patch.rateLimit !== undefined;
    const plan = changesLimits ? (await this.account(accountId)).plan : null;
    const r = await this.aggregates.execute(STREAM.token(tokenId), apiTokenDecider, (state) => {
      const commands: ApiTokenCommand[] = [];
      if (patch.name !== undefined) commands.push({ type: 'RenameApiToken', name: patch.name, at });
      if (patch.description !== undefined) commands.push({ type: 'ChangeApiTokenDescription', description: patch.description, at });
      if (plan !== null && state.status !== 'none') {
        // The limit not given is the token's as decided on (on each retry), not as first read: a
        // concurrent change of the other limit is kept, not overwritten with its old value.
        const monthlyLimit = patch.monthlyLimit === undefined ? state.monthlyLimit : patch.monthlyLimit;
        const rateLimit = patch.rateLimit === undefined ? state.rateLimit : patch.rateLimit;
        checkTokenOptions(this.plans, plan, { monthlyLimit, rateLimit }, at);
        commands.push({ type: 'ChangeApiTokenLimits', monthlyLimit, rateLimit, at });
      }
      if (patch.status === 'disabled') commands.push({ type: 'DisableApiToken', at });
      if (patch.status === 'active') commands.push({ type: 'EnableApiToken', at });
      return decideAll(apiTokenDecider, commands, state);
    });
    return r.position ?? (await this.headOf(STREAM.token(tokenId)));
  }

  async revokeApiToken(accountId: string, tokenId: string): Promise<Position> {
    await this.apiToken(accountId, tokenId);
    const r = await this.aggregates.run(STREAM.token(tokenId), apiTokenDecider, { type: 'RevokeApiToken', at: this.at() });
    await this.releaseSlot(accountId, tokenId, 'revoked');
    return r.position ?? (await this.headOf(STREAM.token(tokenId)));
  }

  /** For the expiry scheduler: expires the token if its date has passed. */
  async expireApiToken(tokenId: string): Promise<boolean> {
    const r = await this.aggregates.run(STREAM.token(tokenId), apiTokenDecider, { type: 'ExpireApiToken', at: this.at() });
    if (r.events.length === 0 || r.state.status === 'none') return false;
    await this.releaseSlot(r.state.accountId, tokenId, 'expired');
    return true;
  }

  /**
   * Each event of a token's stream with its time and the token's state after it, and between them
   * the account's plan changes of the token's life (they change its limits), for audit. Read from
   * both streams: nothing is written to the token's for a plan change.
   */
  async apiTokenHistory(accountId: string, tokenId: string): Promise<TokenHistoryEntry[]> {
    await this.apiToken(accountId, tokenId);
    const [tokenEvents, accountEvents] = await Promise.all([
      this.aggregates.history(STREAM.token(tokenId), apiTokenDecider),
      this.aggregates.history(STREAM.account(accountId), planChangeOf),
    ]);
    return withPlanChanges(
      tokenEvents.flatMap(({ state, ...e }) => (state.status === 'none' ? [] : [{ kind: 'token' as const, ...e, state }])),
      accountEvents.map(({ state, ...e }) => ({ ...e, change: state })),
    );
  }

  // ── Access tokens ──────────────────────────────────────────────────────────

  async createAccessToken(accountId: string, name: string): Promise<{ token: string; accessTokenId: string; position: Position }> {
    await this.account(accountId);
    const token = generateToken('access');
    const accessTokenId = newId.accessToken();
    const r = await this.aggregates.run(STREAM.accessToken(accessTokenId), accessTokenDecider, {
      type: 'CreateAccessToken',
      accessTokenId,
      accountId,
      tokenHash: hashToken(token),
      masked: maskToken(token),
      name,
      at: this.at(),
    });
    return { token, accessTokenId, position: r.position as Position };
  }

  async revokeAccessToken(accountId: string, accessTokenId: string): Promise<Position> {
    const { state } = await this.aggregates.load(STREAM.accessToken(accessTokenId), accessTokenDecider);
    if (!isOwnedAccessToken(state, accountId)) return fail('not_found', 'No such access token.');
    const r = await this.aggregates.run(STREAM.accessToken(accessTokenId), accessTokenDecider, { type: 'RevokeAccessToken', at: this.at() });
    // Revoked already (perhaps by a concurrent request): the answer waits for the read models to show it.
    return r.position ?? (await this.headOf(STREAM.accessToken(accessTokenId)));
  }

  private async headOf(streamId: string): Promise<Position> {
    return this.aggregates.lastPosition(streamId);
  }
}

const isOwnedAccessToken = (state: AccessTokenState, accountId: string): boolean => state.status !== 'none' && state.accountId === accountId;

/** The email claim: the first claim wins; its state is the account the email belongs to. */
const emailClaimDecider: Decider<{ accountId: string } | null, never, EmailEvent> = {
  initialState: () => null,
  decide: () => [],
  evolve: (state, event) => state ?? { accountId: event.data.accountId },
};
