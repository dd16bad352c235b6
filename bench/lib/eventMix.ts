import { randomUUID } from 'node:crypto';
import { newId } from '../../src/commands/ids.js';
import { encodeEvent } from '../../src/domain/eventCodec.js';
import { type DomainEvent, STREAM } from '../../src/domain/events.js';
import { DEFAULT_PLANS } from '../../src/domain/plans.js';
import { generateToken, hashToken, maskToken } from '../../src/domain/tokenFormat.js';
import { USAGE_EVENT_TYPE, type UsageRecord, usageStream } from '../../src/domain/usage.js';
import type { EventStore, NewEvent } from '../../src/infra/eventstore/port.js';
import { usageEventId } from '../../test/support/oneCallUsage.js';

/**
 * Writes events of the real shapes straight into a store, far faster than through the commands
 * (which re-read each aggregate): accounts on Unlimited with their tokens, and usage records as
 * the ingester appends them (per account, in batches, deterministic ids).
 */

export interface SeededToken {
  token: string;
  tokenId: string;
  accountId: string;
}

const METHODS = ['eth_blockNumber', 'eth_getBalance', 'eth_call', 'eth_getTransactionReceipt', 'eth_chainId', 'eth_getLogs'];
const CHAINS = ['eth', 'bsc', 'matic', 'arb', 'base'];

/** Appends accounts (signed up, moved to Unlimited) with `tokensPerAccount` active tokens each. */
export async function seedAccounts(store: EventStore, accounts: number, tokensPerAccount: number, startIso: string): Promise<SeededToken[]> {
  const tokens: SeededToken[] = [];
  const pending: Array<Promise<unknown>> = [];
  const flushSome = async (): Promise<void> => {
    if (pending.length >= 2000) await Promise.all(pending.splice(0));
  };
  for (let a = 0; a < accounts; a++) {
    const accountId = newId.account();
    const at = startIso;
    const accountEvents: DomainEvent[] = [
      {
        type: 'AccountSignedUp',
        version: 1,
        data: { accountId, email: `bench-${a}@example.com`, passwordHash: 'scrypt$bench$not-a-real-hash', plan: 'free', at },
      },
      { type: 'AccountPlanChanged', version: 1, data: { accountId, from: 'free', to: 'unlimited', at } },
    ];
    for (let t = 0; t < tokensPerAccount; t++) {
      const token = generateToken('api');
      const tokenId = newId.apiToken();
      const slot = {
        tokenId,
        tokenHash: hashToken(token),
        masked: maskToken(token),
        name: `token ${t}`,
        description: '',
        expiresAt: null,
        monthlyLimit: null,
        rateLimit: null,
      };
      accountEvents.push({ type: 'ApiTokenIssued', version: 1, data: { accountId, ...slot, at } });
      pending.push(store.append(STREAM.token(tokenId), [encodeEvent({ type: 'ApiTokenCreated', version: 1, data: { accountId, ...slot, at } })], 'no_stream'));
      tokens.push({ token, tokenId, accountId });
    }
    pending.push(
      store.append(
        STREAM.account(accountId),
        accountEvents.map((e) => encodeEvent(e)),
        'no_stream',
      ),
    );
    await flushSome();
  }
  await Promise.all(pending);
  return tokens;
}

/** A few edits per account's tokens: renames, limit changes, a revocation (with its slot release). */
export async function seedTokenChanges(store: EventStore, tokens: SeededToken[], at: string): Promise<number> {
  let written = 0;
  const pending: Array<Promise<unknown>> = [];
  tokens.forEach((t, i) => {
    const events: DomainEvent[] = [{ type: 'ApiTokenRenamed', version: 1, data: { tokenId: t.tokenId, name: `renamed ${i}`, at } }];
    if (i % 3 === 0) events.push({ type: 'ApiTokenLimitsChanged', version: 1, data: { tokenId: t.tokenId, monthlyLimit: 1_000_000, rateLimit: 50, at } });
    if (i % 5 === 4) {
      events.push({ type: 'ApiTokenRevoked', version: 1, data: { tokenId: t.tokenId, at } });
      pending.push(
        store.append(
          STREAM.account(t.accountId),
          [encodeEvent({ type: 'ApiTokenReleased', version: 1, data: { accountId: t.accountId, tokenId: t.tokenId, reason: 'revoked', at } })],
          'any',
        ),
      );
      written += 1;
    }
    pending.push(
      store.append(
        STREAM.token(t.tokenId),
        events.map((e) => encodeEvent(e)),
        'any',
      ),
    );
    written += events.length;
  });
  await Promise.all(pending);
  return written;
}

/** `count` usage records spread over the tokens and over `spanMs` after `startMs`, appended like the ingester does. */
export async function seedUsage(store: EventStore, tokens: SeededToken[], count: number, startMs: number, spanMs: number, batchSize = 1000): Promise<void> {
  let written = 0;
  let wave: Array<Promise<unknown>> = [];
  while (written < count) {
    const t = tokens[Math.floor(Math.random() * tokens.length)] as SeededToken;
    const n = Math.min(batchSize, count - written);
    const events: NewEvent[] = [];
    for (let i = 0; i < n; i++) {
      const failed = Math.random() < 0.03;
      const totalMs = 20 + Math.random() * 200;
      const record: UsageRecord = {
        requestId: randomUUID(),
        at: new Date(startMs + Math.floor(((written + i) / count) * spanMs)).toISOString(),
        accountId: t.accountId,
        tokenId: t.tokenId,
        chain: CHAINS[(written + i) % CHAINS.length] as string,
        method: METHODS[(written + i) % METHODS.length] as string,
        status: failed ? 502 : 200,
        rpcErrorCode: failed ? -32010 : null,
        errorMessage: failed ? 'upstream unavailable' : null,
        totalMs: Math.round(totalMs * 100) / 100,
        upstreamMs: Math.round((totalMs - 3) * 100) / 100,
        clientIp: `203.0.113.${(written + i) % 250}`,
        upstream: 'publicnode',
        // As the gateway meters it: the plan's retention (the accounts are Unlimited).
        retentionDays: DEFAULT_PLANS.unlimited.retention_days,
      };
      events.push({ id: usageEventId(record), type: USAGE_EVENT_TYPE, data: { ...record } });
    }
    wave.push(store.append(usageStream(t.accountId), events, 'any'));
    written += n;
    // A few appends in flight so the store commits them in groups, without holding 1M events in memory.
    if (wave.length >= 5) {
      await Promise.all(wave);
      wave = [];
    }
  }
  await Promise.all(wave);
}
