import type { TokenStatus } from '../domain/apiToken.js';
import { PLAN_IDS, type PlanId } from '../domain/plans.js';

/** What the gateway needs of a token to admit a call. */
export interface CachedToken {
  tokenId: string;
  accountId: string;
  plan: PlanId;
  status: TokenStatus;
  expiresAt: string | null;
  monthlyLimit: number | null;
  rateLimit: number | null;
}

/** A token as the table hands it out: a fresh object per lookup, with the time it stays fresh. */
export class TableEntry implements CachedToken {
  constructor(
    readonly tokenId: string,
    readonly accountId: string,
    readonly plan: PlanId,
    readonly status: TokenStatus,
    readonly expiresAt: string | null,
    readonly monthlyLimit: number | null,
    readonly rateLimit: number | null,
    /** Whole seconds on the owner's clock after which the entry is stale. */
    readonly until: number,
  ) {}
}

const STATUSES: readonly TokenStatus[] = ['active', 'disabled', 'revoked', 'expired'];
const HASH_BYTES = 32;
const HASH_HEX_LENGTH = HASH_BYTES * 2;
/** A record's bytes in a page: its hash, then its expiry (int32), plan and status (a byte each), two bytes unused, then its monthly and rate limits (float64, NaN for none). */
const RECORD_BYTES = 56;
const UNTIL_AT = 32;
const PLAN_AT = 36;
const STATUS_AT = 37;
const MONTHLY_AT = 40;
const RATE_AT = 48;
const PAGE_SHIFT = 12;
const PAGE_RECORDS = 1 << PAGE_SHIFT;
const MIN_SLOTS = 2048;
/**
 * Hex digit values by char code, 256 for anything else: a byte with such a digit reads as 256 or
 * more, which no stored byte is, so a malformed key matches nothing (with -1, '1g' read as 0x0f).
 */
const HEX = new Int16Array(128).fill(256);
for (let i = 0; i < 16; i++) HEX[i.toString(16).charCodeAt(0)] = i;
/** The value of the `i`th byte written in hex; NaN past the table, so again no match. */
const hexByte = (hex: string, i: number): number => (HEX[hex.charCodeAt(2 * i)] as number) * 16 + (HEX[hex.charCodeAt(2 * i + 1)] as number);

/** Where a record starts in its page's bytes. */
const offsetOf = (record: number): number => (record & (PAGE_RECORDS - 1)) * RECORD_BYTES;

/** A string's FNV-1a hash, for the token id index. */
function stringHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The fixed-size part of PAGE_RECORDS records: one buffer, seen as bytes, int32s and float64s. */
class Page {
  readonly bytes: Uint8Array;
  readonly ints: Int32Array;
  readonly floats: Float64Array;

  constructor() {
    const buffer = new ArrayBuffer(PAGE_RECORDS * RECORD_BYTES);
    this.bytes = new Uint8Array(buffer);
    this.ints = new Int32Array(buffer);
    this.floats = new Float64Array(buffer);
  }
}

/**
 * Cached tokens by SHA-256 hash, with an index by token id, in typed arrays instead of one
 * object (and two map entries, and a 64-character key) per token: 100,000 tokens take ~10 MB of
 * V8 heap and ~9 MB of array buffers instead of ~30 MB of heap, and V8, which lets its heap grow
 * to a multiple of what is live between full collections, keeps correspondingly less
 * (bench/gateway-rss.ts; docs/decisions.md).
 *
 * A record's numbers and hash sit in a page of 4,096 records, its strings in three arrays;
 * pages are added, never copied, so growing leaves no large buffer behind for V8 to free at
 * its next full collection (with one buffer doubled instead, the copies left behind measured
 * ~13 MB more RSS at 100,000 tokens). Two open-addressing indexes (linear probing, deletion by
 * backward shift, so no tombstones) hold record + 1 per slot, 0 for empty, at most half full.
 * The hash index places a record by the first four bytes of its (uniformly random) hash.
 */
export class TokenTable {
  private records = 0;
  private readonly free: number[] = [];
  private readonly pages: Page[] = [];
  private readonly tokenIds: string[] = [];
  private readonly accountIds: string[] = [];
  private readonly expiries: Array<string | null> = [];
  private byHash = new Int32Array(MIN_SLOTS);
  private byId = new Int32Array(MIN_SLOTS);

  get size(): number {
    return this.records - this.free.length;
  }

  /** The token whose hash (lowercase hex, as hashToken gives it) this is, or undefined. */
  get(hashHex: string): TableEntry | undefined {
    const record = this.findHash(hashHex);
    return record < 0 ? undefined : this.entry(record);
  }

  /** Adds the token, or replaces what the table held for its hash. */
  set(hashHex: string, token: CachedToken, until: number): void {
    if (hashHex.length !== HASH_HEX_LENGTH || !/^[0-9a-f]+$/.test(hashHex)) throw new Error(`not a SHA-256 hash in lowercase hex: ${hashHex}`);
    // An empty id marks a free record.
    if (token.tokenId === '') throw new Error('a token without an id');
    let record = this.findHash(hashHex);
    if (record >= 0 && this.tokenIds[record] !== token.tokenId) {
      this.remove(record);
      record = -1;
    }
    if (record < 0) {
      this.deleteById(token.tokenId);
      record = this.allocate();
      this.pageOf(record).bytes.set(Buffer.from(hashHex, 'hex'), offsetOf(record));
      this.tokenIds[record] = token.tokenId;
      this.insert(this.byHash, record, this.hashHomeOf);
      this.insert(this.byId, record, this.idHomeOf);
    }
    this.accountIds[record] = token.accountId;
    this.expiries[record] = token.expiresAt;
    const page = this.pageOf(record);
    const base = offsetOf(record);
    page.bytes[base + PLAN_AT] = PLAN_IDS.indexOf(token.plan);
    page.bytes[base + STATUS_AT] = STATUSES.indexOf(token.status);
    page.ints[(base + UNTIL_AT) >> 2] = until;
    page.floats[(base + MONTHLY_AT) >> 3] = token.monthlyLimit ?? Number.NaN;
    page.floats[(base + RATE_AT) >> 3] = token.rateLimit ?? Number.NaN;
  }

  /** Drops the token with this id; false when the table did not hold it. */
  deleteById(tokenId: string): boolean {
    const mask = this.byId.length - 1;
    for (let slot = stringHash(tokenId) & mask; ; slot = (slot + 1) & mask) {
      const held = this.byId[slot] as number;
      if (held === 0) return false;
      if (this.tokenIds[held - 1] === tokenId) {
        this.remove(held - 1);
        return true;
      }
    }
  }

  /** Drops every token of the account (a scan: plan changes are rare). */
  deleteAccount(accountId: string): void {
    for (let record = 0; record < this.records; record++) {
      if (this.accountIds[record] === accountId) this.remove(record);
    }
  }

  /** Drops the tokens whose expiry is before `until`, at most `max` of them (a scan); how many it dropped. */
  deleteExpired(until: number, max = Number.POSITIVE_INFINITY): number {
    let dropped = 0;
    for (let record = 0; record < this.records && dropped < max; record++) {
      if (this.tokenIds[record] === '') continue; // free
      const page = this.pageOf(record);
      if ((page.ints[(offsetOf(record) + UNTIL_AT) >> 2] as number) < until) {
        this.remove(record);
        dropped++;
      }
    }
    return dropped;
  }

  private entry(record: number): TableEntry {
    const page = this.pageOf(record);
    const base = offsetOf(record);
    const monthly = page.floats[(base + MONTHLY_AT) >> 3] as number;
    const rate = page.floats[(base + RATE_AT) >> 3] as number;
    return new TableEntry(
      this.tokenIds[record] as string,
      this.accountIds[record] as string,
      PLAN_IDS[page.bytes[base + PLAN_AT] as number] as PlanId,
      STATUSES[page.bytes[base + STATUS_AT] as number] as TokenStatus,
      this.expiries[record] ?? null,
      Number.isNaN(monthly) ? null : monthly,
      Number.isNaN(rate) ? null : rate,
      page.ints[(base + UNTIL_AT) >> 2] as number,
    );
  }

  private pageOf(record: number): Page {
    return this.pages[record >>> PAGE_SHIFT] as Page;
  }

  private findHash(hashHex: string): number {
    if (hashHex.length !== HASH_HEX_LENGTH) return -1;
    let home = 0;
    for (let i = 0; i < 4; i++) home = home * 256 + hexByte(hashHex, i);
    const mask = this.byHash.length - 1;
    for (let slot = home & mask; ; slot = (slot + 1) & mask) {
      const held = this.byHash[slot] as number;
      if (held === 0) return -1;
      if (this.hashEquals(held - 1, hashHex)) return held - 1;
    }
  }

  private hashEquals(record: number, hashHex: string): boolean {
    const { bytes } = this.pageOf(record);
    const base = offsetOf(record);
    for (let i = 0; i < HASH_BYTES; i++) {
      if (hexByte(hashHex, i) !== bytes[base + i]) return false;
    }
    return true;
  }

  /** A record's home slot in the hash index: its hash's first four bytes, as findHash reads them from the hex. */
  private readonly hashHomeOf = (record: number): number => {
    const h = this.pageOf(record).bytes;
    const base = offsetOf(record);
    return ((h[base] as number) * 0x1000000 + (h[base + 1] as number) * 0x10000 + (h[base + 2] as number) * 0x100 + (h[base + 3] as number)) >>> 0;
  };
  /** A record's home slot in the id index. */
  private readonly idHomeOf = (record: number): number => stringHash(this.tokenIds[record] as string);

  private insert(index: Int32Array, record: number, homeOf: (record: number) => number): void {
    const mask = index.length - 1;
    let slot = homeOf(record) & mask;
    while (index[slot] !== 0) slot = (slot + 1) & mask;
    index[slot] = record + 1;
  }

  private remove(record: number): void {
    this.unindex(this.byHash, record, this.hashHomeOf);
    this.unindex(this.byId, record, this.idHomeOf);
    // Release the strings; the record's slot is reused by the next token added.
    this.tokenIds[record] = '';
    this.accountIds[record] = '';
    this.expiries[record] = null;
    this.free.push(record);
  }

  /** Empties the record's slot, then moves back each later slot of the run that may sit there. */
  private unindex(index: Int32Array, record: number, homeOf: (record: number) => number): void {
    const mask = index.length - 1;
    let hole = homeOf(record) & mask;
    while (index[hole] !== record + 1) hole = (hole + 1) & mask;
    for (let slot = (hole + 1) & mask; index[slot] !== 0; slot = (slot + 1) & mask) {
      const held = index[slot] as number;
      const ideal = homeOf(held - 1) & mask;
      // The held record may move to the hole unless its ideal slot lies cyclically in (hole, slot].
      const staysPut = hole <= slot ? ideal > hole && ideal <= slot : ideal > hole || ideal <= slot;
      if (!staysPut) {
        index[hole] = held;
        hole = slot;
      }
    }
    index[hole] = 0;
  }

  private allocate(): number {
    const reused = this.free.pop();
    if (reused !== undefined) return reused;
    if (this.records === this.pages.length * PAGE_RECORDS) this.pages.push(new Page());
    if ((this.records + 1) * 2 > this.byHash.length) this.reindex(this.byHash.length * 2);
    return this.records++;
  }

  /** Both indexes built anew with this many slots (only while no record is free, so every record below `records` is held). */
  private reindex(slots: number): void {
    this.byHash = new Int32Array(slots);
    this.byId = new Int32Array(slots);
    for (let record = 0; record < this.records; record++) {
      this.insert(this.byHash, record, this.hashHomeOf);
      this.insert(this.byId, record, this.idHomeOf);
    }
  }
}
