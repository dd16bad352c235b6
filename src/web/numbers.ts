/**
 * Numbers as owners read and type them: in their own locale (the browser's language). The
 * dashboard shows figures with `numberFormat` and reads typed ones with `parseTypedNumber`, on the
 * same locale, so what the page shows reads back as the same number when typed ("1.000.000" and
 * "1,125" in German). The fields are text, not `type="number"`: a number field reads what is typed
 * in the page's language (English), so a German owner's "2,5" arrived as 25 and "10.000" as 10.
 */

/** Digits of other scripts a keyboard types (Arabic-Indic, Persian, Devanagari, fullwidth): their zeros. */
const ZEROS = [0x0660, 0x06f0, 0x0966, 0xff10];
const OTHER_DIGITS = /[\u0660-\u0669\u06f0-\u06f9\u0966-\u096f\uff10-\uff19]/g;
/** Separators and signs of other scripts as ASCII: Arabic decimal and thousands, fullwidth, the minus sign. */
const MARKS: Record<string, string> = { '\u066b': '.', '\u066c': ',', '\uff0e': '.', '\uff0c': ',', '\u2212': '-', '\uff0d': '-', '\uff0b': '+' };

const asciiDigit = (ch: string): string => {
  const code = ch.charCodeAt(0);
  const zero = ZEROS.find((z) => code >= z && code <= z + 9) ?? code;
  return String(code - zero);
};

/**
 * The owner's locale: the browser's first language. Outside a page (tests importing these on
 * Node, whose `navigator` is the machine's), English, the page's own language.
 */
export const ownLocale = (): string => (typeof window === 'undefined' ? 'en-US' : (navigator.languages?.[0] ?? navigator.language));

/**
 * Figures as the owner's locale writes them (its grouping and decimal separator), in Latin digits
 * like the rest of the page; `parseTypedNumber` reads each of them back as the number shown.
 */
export function numberFormat(options: Intl.NumberFormatOptions = {}, locale: string | undefined = ownLocale()): Intl.NumberFormat {
  try {
    return new Intl.NumberFormat(locale, { numberingSystem: 'latn', ...options });
  } catch {
    return new Intl.NumberFormat('en-US', options);
  }
}

/** The locale's decimal separator as ASCII: ',' or '.' (as `numberFormat` writes it). */
function decimalOf(locale: string | undefined): ',' | '.' {
  const sign = numberFormat({}, locale)
    .formatToParts(1.5)
    .find((p) => p.type === 'decimal')?.value;
  return sign === ',' ? ',' : '.';
}

const digitsOnly = (s: string): boolean => /^\d+$/.test(s);

/** `int` with `group` between groups of three digits ("1,000,000"), or of two then three in India ("12,34,567"); else NaN. */
function grouped(int: string, group: string): number {
  const parts = int.split(group);
  const [first = '', ...rest] = parts;
  const last = rest.at(-1) ?? '';
  const western = /^\d{1,3}$/.test(first) && rest.every((p) => /^\d{3}$/.test(p));
  const indian = /^\d{1,2}$/.test(first) && /^\d{3}$/.test(last) && rest.slice(0, -1).every((p) => /^\d{2}$/.test(p));
  return rest.length > 0 && (western || indian) ? Number(parts.join('')) : Number.NaN;
}

/**
 * The number typed, or NaN when it is not one. Spaces, underscores and apostrophes between
 * digits are ignored. Both ',' and '.': the last is the decimal separator, the other groups
 * thousands. One of them more than once: thousands. Once, with three digits after ("1.500"):
 * the locale decides (1500 in German, 1.5 in English), or in a whole-number field (`integer`)
 * thousands; otherwise the decimal separator ("2,5" is 2.5 everywhere).
 */
export function parseTypedNumber(typed: string, options: { integer?: boolean; locale?: string } = {}): number {
  const text = typed
    .replace(OTHER_DIGITS, asciiDigit)
    .replace(/[\u066b\u066c\uff0e\uff0c\u2212\uff0d\uff0b]/g, (ch) => MARKS[ch] ?? ch)
    .replace(/[\s_'\u2019]/g, '');
  const match = /^([+-]?)([\d.,]+)$/.exec(text);
  if (!match) return Number.NaN;
  const sign = match[1] === '-' ? -1 : 1;
  const body = match[2] ?? '';
  const lastComma = body.lastIndexOf(',');
  const lastDot = body.lastIndexOf('.');
  let value: number;
  if (lastComma < 0 && lastDot < 0) value = Number(body);
  else if (lastComma >= 0 && lastDot >= 0) {
    const decimal = lastComma > lastDot ? ',' : '.';
    const at = body.lastIndexOf(decimal);
    const [int, frac] = [body.slice(0, at), body.slice(at + 1)];
    value = body.indexOf(decimal) === at && digitsOnly(frac) ? grouped(int, decimal === ',' ? '.' : ',') + Number(`0.${frac}`) : Number.NaN;
  } else {
    const separator = lastComma >= 0 ? ',' : '.';
    const at = body.indexOf(separator);
    const [int, frac] = [body.slice(0, at), body.slice(at + 1)];
    const thousands =
      at !== body.lastIndexOf(separator) ||
      (/^[1-9]\d{0,2}$/.test(int) && /^\d{3}$/.test(frac) && (options.integer === true || decimalOf(options.locale ?? ownLocale()) !== separator));
    const plain = /^\d*$/.test(int) && /^\d*$/.test(frac) && `${int}${frac}` !== '';
    if (thousands) value = grouped(body, separator);
    else value = plain ? Number(`${int || '0'}.${frac || '0'}`) : Number.NaN;
  }
  return sign * value;
}

/** A number as the owner's locale would type it back (its decimal separator, no grouping), for a field's initial text. */
export function typedNumber(n: number, locale?: string): string {
  const text = String(n);
  return decimalOf(locale ?? ownLocale()) === ',' ? text.replace('.', ',') : text;
}
