import { randomBytes, scrypt as scryptCallback, timingSafeEqual } from 'node:crypto';
import { DomainError } from '../domain/errors.js';

/** scrypt's cost: N (CPU and memory, a power of two), r (block size), p (parallelism). */
export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

/** The scrypt a hasher runs; node's, or a wrapped one in tests. */
export type ScryptFunction = (password: string, salt: Buffer, keyLength: number, params: ScryptParams) => Promise<Buffer>;

/** Node's defaults, which every hash of the older `scrypt$salt$hash` format was made with. */
export const LEGACY_PARAMS: Readonly<ScryptParams> = { N: 16384, r: 8, p: 1 };
/** New hashes: today's cost, written into each hash so that raising it later leaves the older ones verifiable. */
export const DEFAULT_PARAMS: Readonly<ScryptParams> = LEGACY_PARAMS;

/**
 * One hash at a time per process: on the 2-core machine of bench/login-flood.ts, `GET
 * /api/v1/tokens` kept p99 10.3–26.5 ms during a flood with one (three runs), 20.2–116 ms with
 * two (both cores hashing); one still serves 9–13 log-ins a second there.
 */
export const DEFAULT_HASH_CONCURRENCY = 1;

const KEY_LENGTH = 32;
const SALT_LENGTH = 16;
/**
 * Bounds on what a stored hash may ask for, so a crafted one cannot take the process's memory
 * or a pool thread for long: scrypt needs about 128·r·(N + p) bytes and time in N·r·p
 * (today's hashes: 16 MiB and 2^17).
 */
const MAX_MEMORY_BYTES = 64 * 1024 * 1024;
const MAX_WORK = 2 ** 20;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

const nodeScrypt: ScryptFunction = (password, salt, keyLength, params) =>
  new Promise((resolve, reject) => {
    scryptCallback(password, salt, keyLength, { ...params, maxmem: MAX_MEMORY_BYTES }, (error, key) => (error ? reject(error) : resolve(key)));
  });

interface StoredHash {
  params: ScryptParams;
  salt: Buffer;
  hash: Buffer;
}

/** `scrypt$N$r$p$salt$hash`, or the older `scrypt$salt$hash`; null when malformed or outside the bounds. */
function parseStoredHash(stored: string): StoredHash | null {
  const parts = stored.split('$');
  let params: ScryptParams;
  let salt: string | undefined;
  let hash: string | undefined;
  if (parts.length === 3 && parts[0] === 'scrypt') {
    params = LEGACY_PARAMS;
    [, salt, hash] = parts;
  } else if (parts.length === 6 && parts[0] === 'scrypt') {
    const [N, r, p] = parts.slice(1, 4).map((part) => (/^\d{1,9}$/.test(part) ? Number(part) : 0)) as [number, number, number];
    params = { N, r, p };
    [, , , , salt, hash] = parts;
  } else {
    return null;
  }
  const { N, r, p } = params;
  const powerOfTwo = N > 1 && (N & (N - 1)) === 0;
  if (!powerOfTwo || r < 1 || p < 1 || N * r * p > MAX_WORK) return null;
  if (!salt || !hash || !BASE64.test(salt) || !BASE64.test(hash)) return null;
  const saltBytes = Buffer.from(salt, 'base64');
  const hashBytes = Buffer.from(hash, 'base64');
  if (saltBytes.length < 8 || saltBytes.length > 64 || hashBytes.length < 16 || hashBytes.length > 64) return null;
  return { params, salt: saltBytes, hash: hashBytes };
}

/**
 * The forms a password is tried in: NFC first (RFC 8265's OpaqueString), so `é` typed as one code
 * point or as `e` + U+0301 is one password; then as sent, when that differs, for a hash made
 * before passwords were normalized from a password that was not NFC.
 */
function passwordForms(password: string): string[] {
  const nfc = password.normalize('NFC');
  return nfc === password ? [nfc] : [nfc, password];
}

export interface PasswordHasherOptions {
  /** At most this many scrypt computations at once in the process; the others wait their turn, first come first served. */
  concurrency?: number;
  /** Beyond this many waiting, a hash or verify is refused at once (`overloaded`, 503) rather than queued. */
  maxWaiting?: number;
  params?: ScryptParams;
  scrypt?: ScryptFunction;
}

/**
 * scrypt for the account passwords: salted, its parameters written into each hash. It runs on
 * libuv's thread pool, which the event store's LevelDB reads share (4 threads by default): the
 * hashes of a log-in flood would take every thread and stall the rest of the API, so at most
 * `concurrency` run at once and the others queue (bench/login-flood.ts).
 *
 * The queue is a few lines here rather than p-limit: it must be bounded and refuse at the bound.
 */
export class PasswordHasher {
  readonly concurrency: number;
  private readonly maxWaiting: number;
  private readonly params: ScryptParams;
  private readonly scrypt: ScryptFunction;
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  /** A salt for the work done when there is no account: any fixed value does. */
  private readonly noAccountSalt = Buffer.alloc(SALT_LENGTH);

  constructor(options: PasswordHasherOptions = {}) {
    this.concurrency = options.concurrency ?? DEFAULT_HASH_CONCURRENCY;
    this.maxWaiting = options.maxWaiting ?? 64;
    this.params = options.params ?? DEFAULT_PARAMS;
    this.scrypt = options.scrypt ?? nodeScrypt;
  }

  /** `scrypt$N$r$p$<salt b64>$<hash b64>`, of the password's NFC form. */
  async hash(password: string): Promise<string> {
    const salt = randomBytes(SALT_LENGTH);
    const hash = await this.compute(password.normalize('NFC'), salt, KEY_LENGTH, this.params);
    const { N, r, p } = this.params;
    return `scrypt$${N}$${r}$${p}$${salt.toString('base64')}$${hash.toString('base64')}`;
  }

  /**
   * Whether `password` matches `stored`. Without a stored hash (no such account) it does the
   * same scrypt work as a wrong password and answers false, so the time taken does not tell
   * which emails have an account. A malformed stored hash answers false.
   */
  async verify(password: string, stored: string | null): Promise<boolean> {
    const forms = passwordForms(password);
    if (stored === null) {
      for (const form of forms) await this.compute(form, this.noAccountSalt, KEY_LENGTH, this.params);
      return false;
    }
    const parsed = parseStoredHash(stored);
    if (!parsed) return false;
    for (const form of forms) {
      const actual = await this.compute(form, parsed.salt, parsed.hash.length, parsed.params).catch((error: unknown) => {
        // Parameters node refuses (above the memory bound): no password matches them.
        if (error instanceof DomainError) throw error;
        return null;
      });
      if (actual === null) return false;
      if (timingSafeEqual(actual, parsed.hash)) return true;
    }
    return false;
  }

  private async compute(password: string, salt: Buffer, keyLength: number, params: ScryptParams): Promise<Buffer> {
    await this.turn();
    try {
      return await this.scrypt(password, salt, keyLength, params);
    } finally {
      this.done();
    }
  }

  private turn(): Promise<void> {
    if (this.running < this.concurrency) {
      this.running += 1;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.maxWaiting) {
      return Promise.reject(new DomainError('overloaded', 'Too many log-ins and sign-ups at once; try again in a moment.', { retryAfterSeconds: 1 }));
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Hands the finished computation's turn to the next one waiting, if any. */
  private done(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.running -= 1;
  }
}
