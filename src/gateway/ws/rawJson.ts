/**
 * A notification's `params.result` as the node wrote it, cut from the frame's text: parsed and
 * serialized again, an integer beyond 2^53 would change (a Solana account's `rentEpoch` is
 * u64::MAX, 18446744073709551615, which would come out as 18446744073709552000, no u64 at all).
 * The text must be valid JSON (the caller parsed it already); null when there is no such member.
 */
export function rawResultOf(text: string): string | null {
  const params = memberSpan(text, 0, 'params');
  if (params === null) return null;
  const result = memberSpan(text, params[0], 'result');
  return result === null ? null : text.slice(result[0], result[1]);
}

const isSpace = (c: number): boolean => c === 32 || c === 9 || c === 10 || c === 13;

function skipSpace(text: string, i: number): number {
  while (i < text.length && isSpace(text.charCodeAt(i))) i++;
  return i;
}

/** The index after a string starting at `i` (its opening quote); -1 if it does not end. Jumps from quote to quote: most of a result is strings (hex, base64). */
function stringEnd(text: string, i: number): number {
  let from = i + 1;
  for (;;) {
    const quote = text.indexOf('"', from);
    if (quote < 0) return -1;
    // Escaped when an odd number of backslashes precede it.
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === 92 /* \ */) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

/** The index after the value starting at `i`; -1 if it does not end. */
function valueEnd(text: string, i: number): number {
  const first = text.charCodeAt(i);
  if (first === 34) return stringEnd(text, i);
  if (first === 123 /* { */ || first === 91 /* [ */) {
    let depth = 0;
    for (let j = i; j < text.length; j++) {
      const c = text.charCodeAt(j);
      if (c === 34) {
        const end = stringEnd(text, j);
        if (end < 0) return -1;
        j = end - 1;
      } else if (c === 123 || c === 91) depth++;
      else if (c === 125 /* } */ || c === 93 /* ] */) {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return -1;
  }
  // A number, true, false or null: up to the next delimiter.
  let j = i;
  while (j < text.length) {
    const c = text.charCodeAt(j);
    if (c === 44 /* , */ || c === 125 || c === 93 || isSpace(c)) break;
    j++;
  }
  return j;
}

/** [start, end) of member `key`'s value in the object starting at or after `from`; null if absent. */
function memberSpan(text: string, from: number, key: string): [number, number] | null {
  let i = skipSpace(text, from);
  if (text.charCodeAt(i) !== 123) return null;
  i = skipSpace(text, i + 1);
  if (text.charCodeAt(i) === 125) return null;
  for (;;) {
    if (text.charCodeAt(i) !== 34) return null;
    const keyEnd = stringEnd(text, i);
    if (keyEnd < 0) return null;
    const name = JSON.parse(text.slice(i, keyEnd)) as string;
    i = skipSpace(text, keyEnd);
    if (text.charCodeAt(i) !== 58 /* : */) return null;
    i = skipSpace(text, i + 1);
    const end = valueEnd(text, i);
    if (end < 0) return null;
    if (name === key) return [i, end];
    i = skipSpace(text, end);
    if (text.charCodeAt(i) !== 44) return null;
    i = skipSpace(text, i + 1);
  }
}
