/**
 * A minimal JSON scanner that finds where values start and end without building them. The
 * gateway uses it to forward ids, params and results byte for byte: `JSON.parse` would round
 * large integers (ids, Solana lamports) and re-serialising a big result costs time for nothing.
 * Two ways to scan: trusting (`skipValue`, for upstream answers: fast, and it never loops forever
 * on garbage) and checked (`checkedValueEnd`, for requests: it accepts exactly what `JSON.parse`
 * accepts, so a request is checked and read in one pass). Malformed input throws
 * `JsonScanError`.
 */
export class JsonScanError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'JsonScanError';
  }
}

export type Span = readonly [start: number, end: number];

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const isWhitespace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

export function skipWhitespace(text: string, from: number): number {
  let i = from;
  while (i < text.length && isWhitespace(text.charCodeAt(i))) i++;
  return i;
}

/** `from` is at an opening quote; returns the index just past the closing quote. */
export function skipString(text: string, from: number): number {
  let searchFrom = from + 1;
  for (;;) {
    const quote = text.indexOf('"', searchFrom);
    if (quote < 0) throw new JsonScanError('unterminated string');
    let backslashes = 0;
    for (let b = quote - 1; text.charCodeAt(b) === BACKSLASH; b--) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    searchFrom = quote + 1;
  }
}

const STRUCTURAL = /["{}[\]]/g;

/** `from` is at the first character of a value; returns the index just past it. */
export function skipValue(text: string, from: number): number {
  const c = text.charCodeAt(from);
  if (c === QUOTE) return skipString(text, from);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    let i = from;
    for (;;) {
      STRUCTURAL.lastIndex = i;
      const m = STRUCTURAL.exec(text);
      if (m === null) throw new JsonScanError('unterminated object or array');
      const ch = m[0];
      if (ch === '"') {
        i = skipString(text, m.index);
        continue;
      }
      if (ch === '{' || ch === '[') depth++;
      else if (--depth === 0) return m.index + 1;
      i = m.index + 1;
    }
  }
  let i = from;
  while (i < text.length) {
    const d = text.charCodeAt(i);
    if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x3a || isWhitespace(d)) break;
    i++;
  }
  if (i === from) throw new JsonScanError(`value expected at ${from}`);
  return i;
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
/** Whether a JSON value starting with this character is a number. */
export const isNumberStart = (c: number): boolean => c === 0x2d || isDigit(c);
const isHexDigit = (c: number): boolean => isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
/** What may follow a backslash, besides `u` and four hex digits: " \ / b f n r t. */
const SINGLE_ESCAPES = new Set([0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74]);

/** `from` is at an opening quote; returns the index just past the string, checked as `JSON.parse` checks it. */
export function checkedStringEnd(text: string, from: number): number {
  for (let i = from + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) return i + 1;
    if (c < 0x20) throw new JsonScanError(`control character in string at ${i}`);
    if (c !== BACKSLASH) continue;
    const escaped = text.charCodeAt(++i);
    if (escaped === 0x75) {
      for (let k = 1; k <= 4; k++) if (!isHexDigit(text.charCodeAt(i + k))) throw new JsonScanError(`\\u escape without four hex digits at ${i}`);
      i += 4;
    } else if (!SINGLE_ESCAPES.has(escaped)) throw new JsonScanError(`invalid escape at ${i}`);
  }
  throw new JsonScanError('unterminated string');
}

function digitsEnd(text: string, from: number): number {
  if (!isDigit(text.charCodeAt(from))) throw new JsonScanError(`digit expected at ${from}`);
  let i = from + 1;
  while (isDigit(text.charCodeAt(i))) i++;
  return i;
}

/** `from` is at a `-` or a digit; returns the index just past the number, checked against JSON's grammar. */
function checkedNumberEnd(text: string, from: number): number {
  let i = text.charCodeAt(from) === 0x2d ? from + 1 : from;
  i = text.charCodeAt(i) === 0x30 ? i + 1 : digitsEnd(text, i);
  if (text.charCodeAt(i) === 0x2e) i = digitsEnd(text, i + 1);
  const e = text.charCodeAt(i);
  if (e === 0x65 || e === 0x45) {
    const sign = text.charCodeAt(i + 1);
    i = digitsEnd(text, sign === 0x2b || sign === 0x2d ? i + 2 : i + 1);
  }
  return i;
}

/** At a member's key in a checked object: the index where the member's value starts. */
function checkedMemberValueStart(text: string, keyStart: number): number {
  if (text.charCodeAt(keyStart) !== QUOTE) throw new JsonScanError(`key expected at ${keyStart}`);
  const colon = skipWhitespace(text, checkedStringEnd(text, keyStart));
  if (text.charCodeAt(colon) !== 0x3a) throw new JsonScanError(`colon expected at ${colon}`);
  return skipWhitespace(text, colon + 1);
}

/**
 * The closing bracket of each container a checked scan is in: a stack instead of recursion, so
 * nesting as deep as a body can hold cannot overflow the call stack. Module-level, so a scan
 * allocates nothing (scans never run inside one another).
 */
const openContainers: number[] = [];
/** A stack grown by a deeply nested body is let go once it passes this, not kept for the process's life. */
const KEPT_DEPTH = 1024;

/**
 * `from` is at the first character of a value; returns the index just past it, having checked
 * it as `JSON.parse` would (strings, escapes, numbers, literals, nesting).
 */
export function checkedValueEnd(text: string, from: number): number {
  if (openContainers.length > KEPT_DEPTH) openContainers.length = 0;
  let depth = 0;
  let i = from;
  for (;;) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = checkedStringEnd(text, i);
    else if (c === 0x7b || c === 0x5b) {
      const close = c + 2; // } and ] follow { and [ by two code points
      i = skipWhitespace(text, i + 1);
      if (text.charCodeAt(i) === close) i++;
      else {
        openContainers[depth++] = close;
        if (close === 0x7d) i = checkedMemberValueStart(text, i);
        continue;
      }
    } else if (isNumberStart(c)) i = checkedNumberEnd(text, i);
    else if (text.startsWith('true', i) || text.startsWith('null', i)) i += 4;
    else if (text.startsWith('false', i)) i += 5;
    else throw new JsonScanError(`value expected at ${i}`);
    // After a value: close the containers that end here, then on to the next element or member.
    for (;;) {
      if (depth === 0) return i;
      i = skipWhitespace(text, i);
      const close = openContainers[depth - 1];
      const sep = text.charCodeAt(i);
      if (sep === close) {
        depth--;
        i++;
        continue;
      }
      if (sep !== 0x2c) throw new JsonScanError(`comma or closing bracket expected at ${i}`);
      i = skipWhitespace(text, i + 1);
      if (close === 0x7d) i = checkedMemberValueStart(text, i);
      break;
    }
  }
}

/** A JSON string token's value (quotes included in `raw`): most hold no escape to undo. */
export const stringTokenValue = (raw: string): string => (raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1));

/** What `scanMembers` calls for each member: module-level functions with a state, so a scan allocates no closure. */
export type MemberVisitor<S> = (state: S, text: string, keyStart: number, keyEnd: number, valueStart: number, valueEnd: number) => void;

/**
 * Calls `visit` with each member of the object at `from`: its key's raw span (quotes included)
 * and its value's span, in order. Returns the index just past the object. `checked`: keys and
 * values are checked as `JSON.parse` would (checkedValueEnd); otherwise trusted (skipValue).
 */
export function scanMembers<S>(text: string, from: number, state: S, visit: MemberVisitor<S>, checked = false): number {
  if (text.charCodeAt(from) !== 0x7b) throw new JsonScanError('object expected');
  let i = skipWhitespace(text, from + 1);
  if (text.charCodeAt(i) === 0x7d) return i + 1;
  for (;;) {
    if (text.charCodeAt(i) !== QUOTE) throw new JsonScanError('key expected');
    const keyEnd = checked ? checkedStringEnd(text, i) : skipString(text, i);
    const keyStart = i;
    i = skipWhitespace(text, keyEnd);
    if (text.charCodeAt(i) !== 0x3a) throw new JsonScanError('colon expected');
    const valueStart = skipWhitespace(text, i + 1);
    const valueEnd = checked ? checkedValueEnd(text, valueStart) : skipValue(text, valueStart);
    visit(state, text, keyStart, keyEnd, valueStart, valueEnd);
    i = skipWhitespace(text, valueEnd);
    const sep = text.charCodeAt(i);
    if (sep === 0x7d) return i + 1;
    if (sep !== 0x2c) throw new JsonScanError('comma or } expected');
    i = skipWhitespace(text, i + 1);
  }
}

const collectMember: MemberVisitor<Map<string, Span>> = (members, text, keyStart, keyEnd, valueStart, valueEnd) => {
  members.set(stringTokenValue(text.slice(keyStart, keyEnd)), [valueStart, valueEnd]);
};

/** Spans of an object's members' values by key (the last of duplicate keys wins, like `JSON.parse`). */
export function objectMembers(text: string, from: number): Map<string, Span> {
  const members = new Map<string, Span>();
  scanMembers(text, from, members, collectMember);
  return members;
}

/**
 * Whether the raw key at `keyStart..keyEnd` (quotes included) is `key` (which holds no
 * backslash), without making a string of it unless it holds escapes: a raw key as long as `key`
 * is `key` only written as it is, and only a longer one can be `key` with escapes.
 */
export function isKey(text: string, keyStart: number, keyEnd: number, key: string): boolean {
  const rawLength = keyEnd - keyStart - 2;
  if (rawLength === key.length) return text.startsWith(key, keyStart + 1);
  if (rawLength < key.length) return false;
  for (let i = keyStart + 1; i < keyEnd - 1; i++) {
    if (text.charCodeAt(i) === BACKSLASH) return stringTokenValue(text.slice(keyStart, keyEnd)) === key;
  }
  return false;
}

/** What `scanElements` calls for each element: it reads the value at `start` and returns the index just past it. */
export type ElementReader<S> = (state: S, text: string, start: number) => number;

/** Reads each element of the array at `from` with `read`, in order; returns the index just past the array. */
export function scanElements<S>(text: string, from: number, state: S, read: ElementReader<S>): number {
  if (text.charCodeAt(from) !== 0x5b) throw new JsonScanError('array expected');
  let i = skipWhitespace(text, from + 1);
  if (text.charCodeAt(i) === 0x5d) return i + 1;
  for (;;) {
    i = skipWhitespace(text, read(state, text, i));
    const sep = text.charCodeAt(i);
    if (sep === 0x5d) return i + 1;
    if (sep !== 0x2c) throw new JsonScanError(`comma or ] expected at ${i}`);
    i = skipWhitespace(text, i + 1);
  }
}

const collectElement: ElementReader<Span[]> = (spans, text, start) => {
  const end = skipValue(text, start);
  spans.push([start, end]);
  return end;
};

/** Spans of an array's elements (trusted: see skipValue). */
export function arrayElements(text: string, from: number): Span[] {
  const spans: Span[] = [];
  scanElements(text, from, spans, collectElement);
  return spans;
}

/** Index of the first value in a document, past whitespace and a byte-order mark. */
export function documentStart(text: string): number {
  return skipWhitespace(text, text.charCodeAt(0) === 0xfeff ? 1 : 0);
}

/** True when the first non-blank byte opens an object or an array. */
export function startsLikeJson(body: Buffer): boolean {
  for (let i = 0; i < body.length; i++) {
    const byte = body[i] as number;
    if (isWhitespace(byte)) continue;
    return byte === 0x7b || byte === 0x5b;
  }
  return false;
}
