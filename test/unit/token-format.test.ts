import { describe, expect, it } from 'vitest';
import { generateToken, hashToken, isWellFormedToken, maskToken } from '../../src/domain/tokenFormat.js';

describe('token format', () => {
  it('generates gk_ and gka_ tokens with a valid checksum', () => {
    const api = generateToken('api');
    const access = generateToken('access');
    expect(api).toMatch(/^gk_[0-9A-Za-z]{38}$/);
    expect(access).toMatch(/^gka_[0-9A-Za-z]{38}$/);
    expect(isWellFormedToken('api', api)).toBe(true);
    expect(isWellFormedToken('access', access)).toBe(true);
    expect(isWellFormedToken('api', access)).toBe(false);
    expect(isWellFormedToken('access', api)).toBe(false);
  });
  it('refuses a mistyped token by its checksum', () => {
    const token = generateToken('api');
    const i = 10;
    const swapped = token.slice(0, i) + (token[i] === 'a' ? 'b' : 'a') + token.slice(i + 1);
    expect(isWellFormedToken('api', swapped)).toBe(false);
    expect(isWellFormedToken('api', `${token}x`)).toBe(false);
    expect(isWellFormedToken('api', '')).toBe(false);
  });
  it('never repeats and hashes to SHA-256 hex', () => {
    const tokens = new Set(Array.from({ length: 1000 }, () => generateToken('api')));
    expect(tokens.size).toBe(1000);
    expect(hashToken('gk_x')).toMatch(/^[0-9a-f]{64}$/);
  });
  it('masks to prefix, four characters, an ellipsis and the last four', () => {
    const token = generateToken('api');
    expect(maskToken(token)).toBe(`gk_${token.slice(3, 7)}…${token.slice(-4)}`);
    expect(maskToken(generateToken('access'))).toMatch(/^gka_.{4}….{4}$/);
  });
});
