import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { sha256Hex } from './sha256.js';

/**
 * Token strings: prefix + 32 random base62 characters + a 6-character base62 CRC32 of the
 * random part. The checksum lets scanners recognise a token and lets us refuse a mistyped
 * one without a lookup. Only the SHA-256 of the whole string is ever stored.
 */
export type TokenKind = 'api' | 'access';
const PREFIX: Record<TokenKind, string> = { api: 'gk_', access: 'gka_' };
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const BODY_LENGTH = 32;
const CHECK_LENGTH = 6;

function base62(n: number, width: number): string {
  let s = '';
  let v = n;
  for (let i = 0; i < width; i++) {
    s = ALPHABET[v % 62] + s;
    v = Math.floor(v / 62);
  }
  return s;
}

export function randomBase62(length: number): string {
  // Rejection sampling keeps the distribution uniform (248 = 4 * 62).
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += ALPHABET[byte % 62];
    }
  }
  return out;
}

const checksum = (body: string): string => base62(crc32(body), CHECK_LENGTH);

export function generateToken(kind: TokenKind): string {
  const body = randomBase62(BODY_LENGTH);
  return PREFIX[kind] + body + checksum(body);
}

/** Every token of a kind has this many characters. */
export const TOKEN_LENGTH: Record<TokenKind, number> = {
  api: PREFIX.api.length + BODY_LENGTH + CHECK_LENGTH,
  access: PREFIX.access.length + BODY_LENGTH + CHECK_LENGTH,
};

const PATTERN: Record<TokenKind, RegExp> = {
  api: /^gk_([0-9A-Za-z]{32})([0-9A-Za-z]{6})$/,
  access: /^gka_([0-9A-Za-z]{32})([0-9A-Za-z]{6})$/,
};

/** True when the string has the kind's shape and a matching checksum. */
export function isWellFormedToken(kind: TokenKind, candidate: string): boolean {
  const m = PATTERN[kind].exec(candidate);
  return m !== null && checksum(m[1] as string) === m[2];
}

export const hashToken = (token: string): string => sha256Hex(token);

/** `gk_abcd…wxyz`: enough to recognise a token, never enough to use it. */
export function maskToken(token: string): string {
  const prefix = token.startsWith(PREFIX.access) ? PREFIX.access : PREFIX.api;
  return `${prefix}${token.slice(prefix.length, prefix.length + 4)}…${token.slice(-4)}`;
}

const TOKEN_IN_TEXT = /gka?_[0-9A-Za-z]{38}/g;
/** `text` with every token-shaped string in it masked: for logs, and answers that repeat what a caller sent. */
export const redactTokens = (text: string): string => text.replace(TOKEN_IN_TEXT, (t) => maskToken(t));
