import { describe, expect, it } from 'vitest';
import { numberFormat, parseTypedNumber } from '../../src/web/numbers.js';

/**
 * The dashboard shows figures in the owner's locale and reads typed ones in it (docs/decisions.md,
 * Dashboard): whatever a locale shows, typed back, is the number shown, in whole-number fields
 * and in fields that take decimals.
 */
const LOCALES = ['en-US', 'en-GB', 'de-DE', 'de-CH', 'fr-FR', 'es-ES', 'pl-PL', 'pt-BR', 'en-IN', 'hi-IN', 'ar-EG', 'fa-IR', 'ja-JP', 'sv-SE'];
const WHOLE = [0, 7, 999, 1000, 1234, 12_345, 100_000, 1_000_000, 1_234_567, 50_000_000];
const DECIMAL = [0.1, 1.5, 1.125, 2.5, 99.9, 99.95, 600_000, 1234.5, 12_345.675];

describe('figures shown in a locale read back as shown', () => {
  it.each(LOCALES)('%s', (locale) => {
    const whole = numberFormat({}, locale);
    const decimal = numberFormat({ maximumFractionDigits: 6 }, locale);
    const misread = [
      ...WHOLE.map((n) => [n, whole.format(n), parseTypedNumber(whole.format(n), { integer: true, locale })] as const),
      ...WHOLE.map((n) => [n, whole.format(n), parseTypedNumber(whole.format(n), { locale })] as const),
      ...DECIMAL.map((n) => [n, decimal.format(n), parseTypedNumber(decimal.format(n), { locale })] as const),
    ].filter(([n, , read]) => read !== n);
    expect(misread).toEqual([]);
    // In Latin digits, like the page around them.
    expect(whole.format(1_234_567)).toMatch(/^1\D?2\D?3\D?4\D?5\D?6\D?7$/);
  });

  it('outside a page, English', () => {
    expect(numberFormat().format(1_234_567.5)).toBe('1,234,567.5');
  });
});
