/**
 * A Bloom filter over strings: `mightHave` is false only for a key never added, true for every
 * key added (and, rarely, for others). The LevelDB read models use it during a rebuild to skip
 * reading documents that cannot exist yet.
 */
export class KeyFilter {
  private readonly bits: Int32Array;
  private readonly mask: number;
  private added = 0;

  /** `log2Bits`: size of the filter (2^26 bits = 8 MB keeps false positives under 1 % up to ~5 million keys). */
  constructor(
    log2Bits: number,
    private readonly hashes = 5,
  ) {
    this.bits = new Int32Array(2 ** (log2Bits - 5));
    this.mask = 2 ** log2Bits - 1;
  }

  /** Keys added so far (with repeats). */
  get size(): number {
    return this.added;
  }

  /** Adds the key; true when it may have been added before, false when it certainly was not. */
  add(key: string): boolean {
    hash(key);
    let h = h1;
    let seen = true;
    for (let i = 0; i < this.hashes; i++) {
      const bit = h & this.mask;
      const word = bit >>> 5;
      const flag = 1 << (bit & 31);
      const bits = this.bits[word] as number;
      if ((bits & flag) === 0) {
        seen = false;
        this.bits[word] = bits | flag;
      }
      h = (h + h2) | 0;
    }
    this.added++;
    return seen;
  }

  mightHave(key: string): boolean {
    hash(key);
    let h = h1;
    for (let i = 0; i < this.hashes; i++) {
      const bit = h & this.mask;
      if (((this.bits[bit >>> 5] as number) & (1 << (bit & 31))) === 0) return false;
      h = (h + h2) | 0;
    }
    return true;
  }
}

/*
 * The two hashes of a key (h1 + i·h2, Kirsch–Mitzenmacher): FNV-1a over the key's UTF-16 code
 * units, then two different final mixes of it. Both derive from one 32-bit value: two keys
 * colliding there (1 in 4 billion) collide everywhere, far below the filter's own false
 * positives. Module state instead of a returned pair: no allocation per key.
 */
let h1 = 0;
let h2 = 0;

function hash(key: string): void {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  let a = h ^ (h >>> 16);
  a = Math.imul(a, 0x85ebca6b);
  a ^= a >>> 13;
  a = Math.imul(a, 0xc2b2ae35);
  h1 = a ^ (a >>> 16);
  let b = Math.imul(h ^ 0x9e3779b9, 0x5bd1e995);
  b ^= b >>> 15;
  b = Math.imul(b, 0x27d4eb2d);
  h2 = (b ^ (b >>> 16)) | 1; // odd: every probe lands on a different bit of a power-of-two table
}
