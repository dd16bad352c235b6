import { z } from 'zod';
import { MAX_TOKEN_LIMIT } from '../../api/types.js';
import { PlanId } from '../../domain/plans.js';
import { ID_PATTERN } from '../ids.js';

/** Request schemas at the edge: unknown fields, wrong types and over-long strings are 400s. */
const text = (max: number) => z.string().max(max, `at most ${max} characters`);
const name = text(100).trim().min(1, 'required');
const limit = z.number().int().positive().max(MAX_TOKEN_LIMIT).nullable();

/**
 * zod's default email pattern, but a top-level domain may be an IDN's A-label (`xn--p1ai`, .рф):
 * a browser's email field sends an IDN domain so, and zod's letters-only TLD refused those owners.
 */
const EMAIL = /^(?:[A-Za-z0-9_'+-]+\.)*[A-Za-z0-9_'+-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9-]*\.)+(?:[A-Za-z]{2,}|[Xx][Nn]--[A-Za-z0-9-]+)$/;

export const Credentials = z.strictObject({
  email: z.email({ pattern: EMAIL }).max(254),
  password: z.string().min(8, 'at least 8 characters').max(200),
});

export const CreateApiToken = z.strictObject({
  name,
  description: text(500).optional(),
  expires_in_days: z.number().int().min(1).max(3650).optional(),
  monthly_limit: limit.optional(),
  rate_limit: limit.optional(),
});

export const PatchApiToken = z
  .strictObject({
    name: name.optional(),
    description: text(500).optional(),
    status: z.enum(['active', 'disabled']).optional(),
    monthly_limit: limit.optional(),
    rate_limit: limit.optional(),
  })
  .refine((p) => Object.keys(p).length > 0, 'give at least one field to change');

export const CreateAccessToken = z.strictObject({ name });
export const ChangePlan = z.strictObject({ plan: PlanId });

// The prefix as a pattern, not zod's startsWith: that is written as `format: starts_with`, a format no
// validator or generator knows (strict ones refuse the document).
const id = (prefix: string) =>
  z
    .string()
    .regex(ID_PATTERN)
    .regex(new RegExp(`^${prefix}_`), `not a ${prefix}_ id`);
export const TokenParams = z.strictObject({ id: id('tok') });
export const AccessTokenParams = z.strictObject({ id: id('key') });
export const AccountParams = z.strictObject({ id: id('acc') });
