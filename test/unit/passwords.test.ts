import { scrypt } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AccountCommands } from '../../src/commands/accountCommands.js';
import { PasswordHasher, type ScryptFunction, type ScryptParams } from '../../src/commands/passwords.js';
import { planCatalog } from '../../src/domain/plans.js';
import { MemoryEventStore } from '../support/memoryEventStore.js';

/** Node's scrypt, counted: how many ran, how many at once at most, with which parameters. */
function countedScrypt() {
  const stats = { calls: 0, inFlight: 0, maxInFlight: 0, params: [] as ScryptParams[] };
  const run: ScryptFunction = (password, salt, keyLength, params) => {
    stats.calls += 1;
    stats.inFlight += 1;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    stats.params.push(params);
    return new Promise((resolve, reject) => {
      scrypt(password, salt, keyLength, params, (error, key) => {
        stats.inFlight -= 1;
        if (error) reject(error);
        else resolve(key);
      });
    });
  };
  return { stats, run };
}

/** A hash in the format every account signed up before this change has: node's defaults, no parameters written. */
function legacyHash(password: string): Promise<string> {
  const salt = Buffer.from('0123456789abcdef');
  return new Promise((resolve, reject) => {
    scrypt(password, salt, 32, (error, key) => (error ? reject(error) : resolve(`scrypt$${salt.toString('base64')}$${key.toString('base64')}`)));
  });
}

describe('password hashes', () => {
  const hasher = new PasswordHasher();

  it('write their scrypt parameters: scrypt$N$r$p$salt$hash', async () => {
    const stored = await hasher.hash('correct horse battery');
    const [scheme, N, r, p, salt, hash] = stored.split('$');
    expect([scheme, N, r, p]).toEqual(['scrypt', '16384', '8', '1']);
    expect(Buffer.from(salt as string, 'base64')).toHaveLength(16);
    expect(Buffer.from(hash as string, 'base64')).toHaveLength(32);
    expect(await hasher.verify('correct horse battery', stored)).toBe(true);
    expect(await hasher.verify('correct horse batterY', stored)).toBe(false);
  });

  it('verify with the parameters written in them, not the current ones', async () => {
    const cheap = new PasswordHasher({ params: { N: 1024, r: 4, p: 2 } });
    const stored = await cheap.hash('long enough pw');
    expect(stored.startsWith('scrypt$1024$4$2$')).toBe(true);
    const { stats, run } = countedScrypt();
    const current = new PasswordHasher({ scrypt: run });
    expect(await current.verify('long enough pw', stored)).toBe(true);
    expect(stats.params).toEqual([{ N: 1024, r: 4, p: 2 }]);
  });

  it('of the older format (scrypt$salt$hash, node defaults) still verify', async () => {
    const stored = await legacyHash('correct horse battery');
    expect(stored.split('$')).toHaveLength(3);
    expect(await hasher.verify('correct horse battery', stored)).toBe(true);
    expect(await hasher.verify('wrong horse battery', stored)).toBe(false);
  });

  it('malformed, or asking for too much work or memory: no match, no throw, no scrypt run', async () => {
    const { stats, run } = countedScrypt();
    const guarded = new PasswordHasher({ scrypt: run });
    const salt = Buffer.alloc(16, 1).toString('base64');
    const hash = Buffer.alloc(32, 2).toString('base64');
    const malformed = [
      '',
      'scrypt',
      'bcrypt$x$y',
      `argon2$${salt}$${hash}`,
      `scrypt$${salt}`,
      `scrypt$$${hash}`,
      `scrypt$${salt}$`,
      `scrypt$${salt}$not base64!`,
      `scrypt$c2FsdA==$${hash}`,
      `scrypt$${salt}$AAAA`,
      `scrypt$16384$8$${salt}$${hash}`,
      `scrypt$16384$8$1$${salt}$${hash}$extra`,
      `scrypt$16383$8$1$${salt}$${hash}`,
      `scrypt$0$8$1$${salt}$${hash}`,
      `scrypt$16384$0$1$${salt}$${hash}`,
      `scrypt$16384$8$-1$${salt}$${hash}`,
      `scrypt$1e4$8$1$${salt}$${hash}`,
      `scrypt$16384$8$1.5$${salt}$${hash}`,
      // Work above 2^20 (N·r·p) or a gigabyte of memory: refused before scrypt runs.
      `scrypt$1048576$8$1$${salt}$${hash}`,
      `scrypt$16384$8$64$${salt}$${hash}`,
      `scrypt$2147483648$1$1$${salt}$${hash}`,
    ];
    for (const stored of malformed) expect(await guarded.verify('correct horse battery', stored), stored).toBe(false);
    expect(stats.calls).toBe(0);
    // Within the work bound but above the memory bound (128 MiB): node refuses it, still just no match.
    expect(await guarded.verify('correct horse battery', `scrypt$1048576$1$1$${salt}$${hash}`)).toBe(false);
  });
});

describe('password work', () => {
  it('is the same for an unknown email as for a wrong password (one scrypt with the current parameters)', async () => {
    const { stats, run } = countedScrypt();
    const commands = new AccountCommands(new MemoryEventStore(), planCatalog({}), () => new Date(), new PasswordHasher({ scrypt: run }));
    await commands.signUp('ada@example.com', 'correct horse battery');
    stats.params.length = 0;

    const before = stats.calls;
    expect(await commands.authenticate('ada@example.com', 'wrong password')).toBeNull();
    const wrongPassword = stats.calls - before;
    expect(await commands.authenticate('nobody@example.com', 'wrong password')).toBeNull();
    const unknownEmail = stats.calls - before - wrongPassword;

    expect(wrongPassword).toBe(1);
    expect(unknownEmail).toBe(1);
    expect(stats.params).toEqual([
      { N: 16384, r: 8, p: 1 },
      { N: 16384, r: 8, p: 1 },
    ]);
    expect(await commands.authenticate('ADA@example.com ', 'correct horse battery')).not.toBeNull();
  });

  it('runs at most `concurrency` scrypt computations at once; the others wait their turn, first come first served', async () => {
    const { stats, run } = countedScrypt();
    const hasher = new PasswordHasher({ concurrency: 2, scrypt: run });
    const stored = await hasher.hash('correct horse battery');
    const finished: number[] = [];
    const verifies = Array.from({ length: 10 }, (_, i) =>
      hasher.verify(i % 2 === 0 ? 'correct horse battery' : 'wrong', i === 9 ? null : stored).then((ok) => {
        finished.push(i);
        return ok;
      }),
    );
    expect(await Promise.all(verifies)).toEqual([true, false, true, false, true, false, true, false, true, false]);
    expect(stats.maxInFlight).toBe(2);
    expect(stats.calls).toBe(11);
    // Started in order, two at a time: none finishes before one started two turns earlier.
    for (const [position, i] of finished.entries()) expect(i).toBeLessThanOrEqual(position + 1);
  });

  it('refuses with `overloaded` (retry in a second) beyond the queue bound, and serves those it queued', async () => {
    const releases: Array<() => void> = [];
    // Each computation waits until the test lets it finish.
    const held: ScryptFunction = () => new Promise((resolve) => releases.push(() => resolve(Buffer.alloc(32))));
    const hasher = new PasswordHasher({ concurrency: 1, maxWaiting: 2, scrypt: held });
    const results = Array.from({ length: 5 }, () =>
      hasher.verify('whatever pw', null).then(
        () => 'done',
        (e: unknown) => e,
      ),
    );
    const refused = await Promise.all(results.slice(3));
    expect(refused).toMatchObject([
      { code: 'overloaded', details: { retryAfterSeconds: 1 } },
      { code: 'overloaded', details: { retryAfterSeconds: 1 } },
    ]);
    for (let i = 0; i < 3; i++) {
      await new Promise((resolve) => setImmediate(resolve));
      expect(releases).toHaveLength(i + 1);
      releases[i]?.();
    }
    expect(await Promise.all(results.slice(0, 3))).toEqual(['done', 'done', 'done']);
  });
});
