import { z } from 'zod';
import { PlanId } from './plans.js';

/**
 * Every change of state is one of these events. Each has a type name and a schema version;
 * a new shape of an event gets a new version, and the readers upcast the old ones.
 */
const Iso = z.string().datetime();
const Id = z.string().min(1).max(64);
const Limits = { monthlyLimit: z.number().int().positive().nullable(), rateLimit: z.number().int().positive().nullable() };
/** What a new token is, as the account's slot and the token's own stream both record it. */
const TokenDetails = { tokenHash: z.string(), masked: z.string(), name: z.string(), description: z.string(), expiresAt: Iso.nullable(), ...Limits };

const event = <T extends string, S extends z.ZodRawShape>(type: T, shape: S) =>
  z.object({ type: z.literal(type), version: z.literal(1), data: z.object({ ...shape, at: Iso }) });

// Account stream `account-<id>`.
export const AccountSignedUp = event('AccountSignedUp', { accountId: Id, email: z.string(), passwordHash: z.string(), plan: PlanId });
export const AccountPlanChanged = event('AccountPlanChanged', { accountId: Id, from: PlanId, to: PlanId });
/** The account takes one of its plan's token slots: appended on the account stream with its revision, so concurrent creations cannot exceed the plan's maximum. */
export const ApiTokenIssued = event('ApiTokenIssued', { accountId: Id, tokenId: Id, ...TokenDetails });
/** The slot is free again (the token was revoked or expired). */
export const ApiTokenReleased = event('ApiTokenReleased', { accountId: Id, tokenId: Id, reason: z.enum(['revoked', 'expired']) });
/**
 * The account takes one of its plan's alert slots before the alert's own stream is written, like
 * a token slot, so concurrent creations cannot exceed the plan's maximum of alert rules.
 */
export const AlertSlotTaken = event('AlertSlotTaken', { accountId: Id, alertId: Id });
/** The slot is free again: the alert was deleted, or its creation never completed (`abandoned`). */
export const AlertSlotReleased = event('AlertSlotReleased', { accountId: Id, alertId: Id, reason: z.enum(['deleted', 'abandoned']) });
/**
 * The account's live alerts when its first slot was taken: alerts created before alert slots
 * existed hold a slot from then on, so an account over the maximum keeps them and creates no more.
 */
export const AlertSlotsAdopted = event('AlertSlotsAdopted', { accountId: Id, alertIds: z.array(Id) });

// API token stream `token-<id>`.
export const ApiTokenCreated = event('ApiTokenCreated', { tokenId: Id, accountId: Id, ...TokenDetails });
export const ApiTokenRenamed = event('ApiTokenRenamed', { tokenId: Id, name: z.string() });
export const ApiTokenDescriptionChanged = event('ApiTokenDescriptionChanged', { tokenId: Id, description: z.string() });
export const ApiTokenDisabled = event('ApiTokenDisabled', { tokenId: Id });
export const ApiTokenEnabled = event('ApiTokenEnabled', { tokenId: Id });
export const ApiTokenLimitsChanged = event('ApiTokenLimitsChanged', { tokenId: Id, ...Limits });
export const ApiTokenRevoked = event('ApiTokenRevoked', { tokenId: Id });
export const ApiTokenExpired = event('ApiTokenExpired', { tokenId: Id });

// Access token stream `accesstoken-<id>`.
export const AccessTokenCreated = event('AccessTokenCreated', {
  accessTokenId: Id,
  accountId: Id,
  tokenHash: z.string(),
  masked: z.string(),
  name: z.string(),
});
export const AccessTokenRevoked = event('AccessTokenRevoked', { accessTokenId: Id });

// Email claim stream `accountemail-<sha256(email)>`: makes an email unique and finds its account without a projection.
export const EmailClaimed = event('EmailClaimed', { accountId: Id, email: z.string() });

export const AccountEvent = z.discriminatedUnion('type', [
  AccountSignedUp,
  AccountPlanChanged,
  ApiTokenIssued,
  ApiTokenReleased,
  AlertSlotTaken,
  AlertSlotReleased,
  AlertSlotsAdopted,
]);
export type AccountEvent = z.infer<typeof AccountEvent>;
export const ApiTokenEvent = z.discriminatedUnion('type', [
  ApiTokenCreated,
  ApiTokenRenamed,
  ApiTokenDescriptionChanged,
  ApiTokenDisabled,
  ApiTokenEnabled,
  ApiTokenLimitsChanged,
  ApiTokenRevoked,
  ApiTokenExpired,
]);
export type ApiTokenEvent = z.infer<typeof ApiTokenEvent>;
export const AccessTokenEvent = z.discriminatedUnion('type', [AccessTokenCreated, AccessTokenRevoked]);
export type AccessTokenEvent = z.infer<typeof AccessTokenEvent>;
export const EmailEvent = z.discriminatedUnion('type', [EmailClaimed]);
export type EmailEvent = z.infer<typeof EmailEvent>;

export const DomainEvent = z.discriminatedUnion('type', [
  ...AccountEvent.options,
  ...ApiTokenEvent.options,
  ...AccessTokenEvent.options,
  ...EmailEvent.options,
]);
export type DomainEvent = z.infer<typeof DomainEvent>;

export const STREAM = {
  account: (id: string) => `account-${id}`,
  token: (id: string) => `token-${id}`,
  accessToken: (id: string) => `accesstoken-${id}`,
  email: (emailHash: string) => `accountemail-${emailHash}`,
} as const;
