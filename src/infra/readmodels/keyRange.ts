import type { RangeOptions } from './port.js';

/**
 * Keys are ordered as their UTF-8 bytes (which is code point order): that is how LevelDB and
 * MongoDB both compare strings, so both adapters resolve a range the same way.
 */
export function compareKeys(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** The smallest string greater than every string that starts with `prefix`; none for ''. */
export function prefixUpperBound(prefix: string): string | undefined {
  const codePoints = Array.from(prefix, (char) => char.codePointAt(0) ?? 0);
  while (codePoints.length > 0) {
    const last = codePoints.pop()!;
    if (last < 0x10ffff) {
      // Surrogate code points cannot stand in a well-formed string: skip over them.
      const next = last + 1 === 0xd800 ? 0xe000 : last + 1;
      return String.fromCodePoint(...codePoints, next);
    }
  }
  return undefined;
}

export interface ResolvedRange {
  /** Inclusive lower bound; '' is below every key. */
  gte: string;
  /** Exclusive upper bound, if any. */
  lt?: string;
  limit?: number;
  reverse: boolean;
  /** True when no key can match (empty interval or a limit of 0). */
  empty: boolean;
}

/** Folds prefix, gte and lt into one [gte, lt) interval. */
export function resolveRange(options: RangeOptions = {}): ResolvedRange {
  const { prefix, gte, lt, limit, reverse = false } = options;
  const lowers = [gte ?? '', prefix ?? ''];
  const gteBound = lowers.reduce((a, b) => (compareKeys(a, b) >= 0 ? a : b));
  const uppers = [lt, prefix ? prefixUpperBound(prefix) : undefined].filter((bound): bound is string => bound !== undefined);
  const ltBound = uppers.length > 0 ? uppers.reduce((a, b) => (compareKeys(a, b) <= 0 ? a : b)) : undefined;
  const emptyInterval = ltBound !== undefined && compareKeys(gteBound, ltBound) >= 0;
  const emptyLimit = limit !== undefined && limit <= 0;
  return {
    gte: gteBound,
    ...(ltBound !== undefined ? { lt: ltBound } : {}),
    ...(limit !== undefined ? { limit } : {}),
    reverse,
    empty: emptyInterval || emptyLimit,
  };
}
