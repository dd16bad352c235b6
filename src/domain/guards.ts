/** Type guards for data read back from a store (events written by hand or by another version), checked without zod on hot paths. */

export const isInt = (v: unknown): v is number => Number.isSafeInteger(v);
export const isString = (v: unknown): v is string => typeof v === 'string';
export const isIntOrNull = (v: unknown): v is number | null => v === null || isInt(v);
export const isStringOrNull = (v: unknown): v is string | null => v === null || typeof v === 'string';
export const isNonNegative = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;
