import type { TokenStatus } from '../domain/apiToken.js';
import { decodeEvent } from '../domain/eventCodec.js';
import { DomainEvent } from '../domain/events.js';
import type { PlanId } from '../domain/plans.js';
import type { StoredEvent } from '../infra/eventstore/port.js';
import type { ReadModelWrite } from '../infra/readmodels/port.js';
import type { Projection } from './projection.js';

export const COLLECTIONS = {
  accounts: 'accounts',
  tokens: 'tokens',
  tokensByHash: 'tokens_by_hash',
  tokensByAccount: 'tokens_by_account',
  /** `<expiresAt>/<tokenId>`: the expiry scheduler scans the past part of it. */
  tokensByExpiry: 'tokens_by_expiry',
  accessTokens: 'access_tokens',
  accessTokensByHash: 'access_tokens_by_hash',
  accessTokensByAccount: 'access_tokens_by_account',
} as const;

export interface AccountDoc {
  [k: string]: unknown;
  id: string;
  email: string;
  plan: PlanId;
  createdAt: string;
}

export interface TokenDoc {
  [k: string]: unknown;
  id: string;
  accountId: string;
  tokenHash: string;
  masked: string;
  name: string;
  description: string;
  status: TokenStatus;
  createdAt: string;
  expiresAt: string | null;
  monthlyLimit: number | null;
  rateLimit: number | null;
}

export interface AccessTokenDoc {
  [k: string]: unknown;
  id: string;
  accountId: string;
  masked: string;
  name: string;
  status: 'active' | 'revoked';
  createdAt: string;
}

/** `<owner>/<id>`: listing an owner's items is a prefix scan. */
export const ownedKey = (ownerId: string, id: string): string => `${ownerId}/${id}`;

const C = COLLECTIONS;
const merge = (collection: string, key: string, fields: Record<string, unknown>): ReadModelWrite => ({ op: 'merge', collection, key, fields });

/** Accounts, API tokens and access tokens, with the lookups the gateway and the API need. */
export const coreProjection: Projection = {
  name: 'core',
  collections: Object.values(C),
  eventTypes: new Set(DomainEvent.options.map((o) => o.shape.type.value)),

  project(stored: StoredEvent): ReadModelWrite[] {
    const event = decodeEvent(stored);
    if (!event) return [];
    switch (event.type) {
      case 'AccountSignedUp': {
        const { accountId, email, plan, at } = event.data;
        const doc: AccountDoc = { id: accountId, email, plan, createdAt: at };
        return [{ op: 'put', collection: C.accounts, key: accountId, doc }];
      }
      case 'AccountPlanChanged':
        return [merge(C.accounts, event.data.accountId, { plan: event.data.to })];
      case 'ApiTokenCreated': {
        const { tokenId, accountId, tokenHash, masked, name, description, expiresAt, monthlyLimit, rateLimit, at } = event.data;
        const doc: TokenDoc = {
          id: tokenId,
          accountId,
          tokenHash,
          masked,
          name,
          description,
          status: 'active',
          createdAt: at,
          expiresAt,
          monthlyLimit,
          rateLimit,
        };
        return [
          { op: 'put', collection: C.tokens, key: tokenId, doc },
          { op: 'put', collection: C.tokensByHash, key: tokenHash, doc: { tokenId } },
          { op: 'put', collection: C.tokensByAccount, key: ownedKey(accountId, tokenId), doc: { tokenId } },
          ...(expiresAt ? [{ op: 'put' as const, collection: C.tokensByExpiry, key: `${expiresAt}/${tokenId}`, doc: { tokenId } }] : []),
        ];
      }
      case 'ApiTokenRenamed':
        return [merge(C.tokens, event.data.tokenId, { name: event.data.name })];
      case 'ApiTokenDescriptionChanged':
        return [merge(C.tokens, event.data.tokenId, { description: event.data.description })];
      case 'ApiTokenLimitsChanged':
        return [merge(C.tokens, event.data.tokenId, { monthlyLimit: event.data.monthlyLimit, rateLimit: event.data.rateLimit })];
      case 'ApiTokenDisabled':
        return [merge(C.tokens, event.data.tokenId, { status: 'disabled' })];
      case 'ApiTokenEnabled':
        return [merge(C.tokens, event.data.tokenId, { status: 'active' })];
      case 'ApiTokenRevoked':
        return [merge(C.tokens, event.data.tokenId, { status: 'revoked', revokedAt: event.data.at })];
      case 'ApiTokenExpired':
        return [merge(C.tokens, event.data.tokenId, { status: 'expired' })];
      case 'AccessTokenCreated': {
        const { accessTokenId, accountId, tokenHash, masked, name, at } = event.data;
        const doc: AccessTokenDoc = { id: accessTokenId, accountId, masked, name, status: 'active', createdAt: at };
        return [
          { op: 'put', collection: C.accessTokens, key: accessTokenId, doc },
          { op: 'put', collection: C.accessTokensByHash, key: tokenHash, doc: { accessTokenId } },
          { op: 'put', collection: C.accessTokensByAccount, key: ownedKey(accountId, accessTokenId), doc: { accessTokenId } },
        ];
      }
      case 'AccessTokenRevoked':
        return [merge(C.accessTokens, event.data.accessTokenId, { status: 'revoked' })];
      case 'ApiTokenIssued':
      case 'ApiTokenReleased':
      case 'AlertSlotTaken':
      case 'AlertSlotReleased':
      case 'AlertSlotsAdopted':
      case 'EmailClaimed':
        return [];
    }
  },

  notifications(stored: StoredEvent): string[] {
    if (stored.streamId.startsWith('token-')) return [`token:${stored.streamId.slice('token-'.length)}`];
    if (stored.type === 'AccountPlanChanged') return [`account:${String(stored.data['accountId'])}`];
    return [];
  },
};
