/**
 * A minimal JSON scanner that finds where values start and end without building them. The
 * gateway uses it to forward ids, params and results byte for byte: `JSON.parse` would round
 * large integers (ids, Solana lamports) and re-serialising a big result costs time for nothing.
 * It trusts its input to be JSON (requests are `JSON.parse`d first) but never loops forever on
 * garbage (upstream answers): malformed input throws `JsonScanError`.
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

const decodeKey = (raw: string): string => (raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1));

/** What `scanMembers` calls for each member: module-level functions with a state, so a scan allocates no closure. */
type MemberVisitor<S> = (state: S, text: string, keyStart: number, keyEnd: number, valueStart: number, valueEnd: number) => void;

/**
 * Calls `visit` with each member of the object at `from`: its key's raw span (quotes included)
 * and its value's span, in order.
 */
function scanMembers<S>(text: string, from: number, state: S, visit: MemberVisitor<S>): void {
  if (text.charCodeAt(from) !== 0x7b) throw new JsonScanError('object expected');
  let i = skipWhitespace(text, from + 1);
  if (text.charCodeAt(i) === 0x7d) return;
  for (;;) {
    if (text.charCodeAt(i) !== QUOTE) throw new JsonScanError('key expected');
    const keyEnd = skipString(text, i);
    const keyStart = i;
    i = skipWhitespace(text, keyEnd);
    if (text.charCodeAt(i) !== 0x3a) throw new JsonScanError('colon expected');
    const valueStart = skipWhitespace(text, i + 1);
    const valueEnd = skipValue(text, valueStart);
    visit(state, text, keyStart, keyEnd, valueStart, valueEnd);
    i = skipWhitespace(text, valueEnd);
    const sep = text.charCodeAt(i);
    if (sep === 0x7d) return;
    if (sep !== 0x2c) throw new JsonScanError('comma or } expected');
    i = skipWhitespace(text, i + 1);
  }
}

const collectMember: MemberVisitor<Map<string, Span>> = (members, text, keyStart, keyEnd, valueStart, valueEnd) => {
  members.set(decodeKey(text.slice(keyStart, keyEnd)), [valueStart, valueEnd]);
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
function isKey(text: string, keyStart: number, keyEnd: number, key: string): boolean {
  const rawLength = keyEnd - keyStart - 2;
  if (rawLength === key.length) return text.startsWith(key, keyStart + 1);
  if (rawLength < key.length) return false;
  for (let i = keyStart + 1; i < keyEnd - 1; i++) {
    if (text.charCodeAt(i) === BACKSLASH) return decodeKey(text.slice(keyStart, keyEnd)) === key;
  }
  return false;
}

/** A `twoMembers` scan's keys and what it found of them so far. */
class TwoMembers {
  firstSpan: Span | undefined = undefined;
  secondSpan: Span | undefined = undefined;

  constructor(
    readonly first: string,
    readonly second: string,
  ) {}
}

const findTwoMembers: MemberVisitor<TwoMembers> = (found, text, keyStart, keyEnd, valueStart, valueEnd) => {
  if (isKey(text, keyStart, keyEnd, found.first)) found.firstSpan = [valueStart, valueEnd];
  else if (isKey(text, keyStart, keyEnd, found.second)) found.secondSpan = [valueStart, valueEnd];
};

/**
 * The value spans of two members (undefined where absent; the last of duplicates wins, like
 * `JSON.parse`): what a JSON-RPC call needs of its object, found without a map or key strings.
 */
export function twoMembers(text: string, from: number, first: string, second: string): [Span | undefined, Span | undefined] {
  const found = new TwoMembers(first, second);
  scanMembers(text, from, found, findTwoMembers);
  return [found.firstSpan, found.secondSpan];
}

/** Spans of an array's elements. */
export function arrayElements(text: string, from: number): Span[] {
  const elements: Span[] = [];
  if (text.charCodeAt(from) !== 0x5b) throw new JsonScanError('array expected');
  let i = skipWhitespace(text, from + 1);
  if (text.charCodeAt(i) === 0x5d) return elements;
  for (;;) {
    const end = skipValue(text, i);
    elements.push([i, end]);
    i = skipWhitespace(text, end);
    const sep = text.charCodeAt(i);
    if (sep === 0x5d) return elements;
    if (sep !== 0x2c) throw new JsonScanError('comma or ] expected');
    i = skipWhitespace(text, i + 1);
  }
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
