import { documentStart, objectMembers, type Span } from '../jsonScan.js';
import { blockNumberOf, type CallShape } from './evmCalls.js';

/**
 * What a node's answer to a head call says of its head (docs/decisions.md, "The head never goes
 * back within a poll interval"): `eth_blockNumber`'s quantity, or the number and hash of the block
 * `eth_getBlockByNumber("latest")` gave. Read with the scanner, not `JSON.parse`.
 */

/**
 * Which head call an answer is to: `eth_blockNumber` (a quantity), a `latest` block, or the
 * `finalized` or `safe` block (objects); Solana's `getSlot` at `processed` (`slot`), `confirmed`
 * (`confirmedSlot`) or `finalized` (`finalizedSlot`), a bare integer.
 */
export type HeadAnswerKind = 'number' | 'block' | 'finalized' | 'safe' | 'slot' | 'confirmedSlot' | 'finalizedSlot';

/** Which head call `method` (of `shape`) is, if one: `eth_blockNumber`, or `eth_getBlockByNumber` of `latest` (or no block), `finalized` or `safe`. */
export function headAnswerOf(method: string, shape: CallShape): HeadAnswerKind | undefined {
  if (shape.headAnswer !== undefined) return shape.headAnswer;
  if (method === 'eth_blockNumber') return 'number';
  if (method !== 'eth_getBlockByNumber') return undefined;
  return shape.kind === 'head' ? 'block' : shape.blockTag;
}

export interface AnswerHead {
  /** The head call answered. */
  kind: HeadAnswerKind;
  number: number;
  /** The block's hash (a `latest` block); null for a bare number. */
  hash: string | null;
  /** The answer's text, and the span of its result (an `eth_blockNumber` answer is given the head there). */
  text: string;
  result: Span;
}

/** The head an answer to a head call names; null when it names none (an error, a null result, anything malformed). */
export function headOfAnswer(body: Buffer, kind: HeadAnswerKind): AnswerHead | null {
  return headOfAnswerText(body.toString('utf8'), kind);
}

/** headOfAnswer of an answer's text (a batch member's answer). */
export function headOfAnswerText(text: string, kind: HeadAnswerKind): AnswerHead | null {
  try {
    const result = objectMembers(text, documentStart(text)).get('result');
    if (result === undefined) return null;
    if (kind === 'number') {
      const number = blockNumberOf(unquoted(text, result));
      return number === null ? null : { kind, number, hash: null, text, result };
    }
    if (kind === 'slot' || kind === 'confirmedSlot' || kind === 'finalizedSlot') {
      const number = Number(text.slice(result[0], result[1]));
      return /^[0-9]{1,16}$/.test(text.slice(result[0], result[1])) && Number.isSafeInteger(number) ? { kind, number, hash: null, text, result } : null;
    }
    if (text.charCodeAt(result[0]) !== 0x7b) return null;
    const members = objectMembers(text, result[0]);
    const numberSpan = members.get('number');
    const number = numberSpan === undefined ? null : blockNumberOf(unquoted(text, numberSpan));
    if (number === null) return null;
    const hashSpan = members.get('hash');
    const hash = hashSpan === undefined ? null : unquoted(text, hashSpan);
    return { kind, number, hash, text, result };
  } catch {
    return null;
  }
}

/** A string value's text without its quotes (block quantities and hashes hold no escapes); null for any other value. */
function unquoted(text: string, [start, end]: Span): string | null {
  return end - start >= 2 && text.charCodeAt(start) === 0x22 && text.charCodeAt(end - 1) === 0x22 ? text.slice(start + 1, end - 1) : null;
}

/** A bare number's answer (`eth_blockNumber`, Solana's `getSlot`) with `head` as its result, in the node's notation, all else as the node wrote it. */
export function withHeadNumberText(answer: AnswerHead, head: number): string {
  const { text, result } = answer;
  const written = answer.kind === 'number' ? `"0x${head.toString(16)}"` : String(head);
  return `${text.slice(0, result[0])}${written}${text.slice(result[1])}`;
}
