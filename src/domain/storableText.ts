/**
 * Text every store can hold. PostgreSQL's jsonb refuses U+0000 and a UTF-16 surrogate without
 * its pair (`\ud800` alone), and one such string in a read-model write stopped the projector for
 * every account; its text columns and LevelDB's UTF-8 turn a lone surrogate into U+FFFD silently.
 * Text callers and nodes write (a JSON-RPC method, a node's error message) is made storable when
 * it is recorded (docs/decisions.md, "Usage text is made storable where it is recorded").
 */

/** Any U+0000 or surrogate: the quick test before the exact one. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is what it looks for
const SUSPECT = /[\u0000\uD800-\uDFFF]/;
/** U+0000, a high surrogate not followed by a low one, a low one not preceded by a high one. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: U+0000 is what it looks for
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, 'g');

/** Whether the text holds U+0000 or an unpaired surrogate. */
export const hasUnstorableText = (text: string): boolean => SUSPECT.test(text) && UNSTORABLE.test(text);

/** The text with each U+0000 and unpaired surrogate replaced by U+FFFD (the same length); the text itself when it has none. */
export const storableText = (text: string): string => (hasUnstorableText(text) ? text.replace(UNSTORABLE_ALL, '\uFFFD') : text);

/** The first `max` code units of the text, one fewer when the last would be the first half of a pair: a cut never makes a lone surrogate. */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}
