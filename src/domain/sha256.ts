import { hash } from 'node:crypto';

/**
 * SHA-256 of a string as hex. `crypto.hash` is one call into C++ where createHash().update()
 * .digest() builds a Hash object per call: the gateway hashes every call's token and every
 * usage record's id, so the difference shows under load (about 1.8 → 0.7 µs here).
 */
export const sha256Hex = (data: string): string => hash('sha256', data, 'hex');
