import { scrypt } from 'node:crypto';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { AccountCommands } from '../../src/commands/accountCommands.js';
import { PasswordHasher, type ScryptFunction } from '../../src/commands/passwords.js';
import { planCatalog } from '../../src/domain/plans.js';
import { MemoryEventStore } from '../support/memoryEventStore.js';
import { startTestApp, type TestApp } from '../support/testApp.js';

/**
 * Sign-up, log-in and sessions as an attacker and a careful owner try them: which forms of an
 * email are one account, what the answers and the password work tell about which emails exist,
 * Unicode and oversized passwords, the attempt limits under races and spoofed headers, and
 * session ids a client brings.
 */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const PASSWORD = 'correct horse battery';
let made = 0;
const next = () => {
  made += 1;
  return made;
};
const unique = (prefix: string) => `${prefix}-${next()}@example.com`;
/** An address of its own per use, so the per-address counts of different tests never mix. */
const address = () => {
  const n = next();
  return `10.9.${Math.floor(n / 256)}.${n % 256}`;
};

const inject = (options: InjectOptions) => t.app.inject(options);
const signUp = (email: string, password = PASSWORD, extra: Partial<InjectOptions> = {}) =>
  inject({ method: 'POST', url: '/api/v1/auth/signup', payload: { email, password }, remoteAddress: address(), ...extra });
const logIn = (email: string, password = PASSWORD, extra: Partial<InjectOptions> = {}) =>
  inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email, password }, remoteAddress: address(), ...extra });
const sessionOf = (res: LightMyRequestResponse) => String(res.headers['set-cookie']).split(';')[0] as string;
const accountWith = (cookie: string) => inject({ method: 'GET', url: '/api/v1/account', headers: { cookie } });

describe('one account per email address', () => {
  it('is case-insensitive: every case form of a signed-up email is taken, and logs in to the one account', async () => {
    const res = await signUp('Mixed.Case@Example.COM');
    expect(res.statusCode).toBe(201);
    const id = res.json().id as string;
    expect(res.json().email).toBe('mixed.case@example.com');
    for (const form of ['mixed.case@example.com', 'MIXED.CASE@EXAMPLE.COM', 'mixed.CASE@example.Com']) {
      expect((await signUp(form, 'another password')).json(), form).toMatchObject({ status: 409, code: 'email_taken' });
      const login = await logIn(form);
      expect(login.statusCode, form).toBe(200);
      expect(login.json().id).toBe(id);
      expect((await accountWith(sessionOf(login))).json().email).toBe('mixed.case@example.com');
    }
  });

  it('refuses blanks around it, Unicode (NFC or NFD), full-width letters, a Unicode domain and a trailing dot: 400 on body.email at sign-up and log-in alike', async () => {
    const refused = [
      ' spaced@example.com',
      'spaced@example.com ',
      'caf\u00e9@example.com',
      'cafe\u0301@example.com',
      '\uff41\uff44\uff41@example.com',
      'owner@b\u00fccher.example',
      'owner@example.com.',
    ];
    for (const email of refused) {
      for (const res of [await signUp(email), await logIn(email)]) {
        expect(res.statusCode, JSON.stringify(email)).toBe(400);
        expect(res.json().errors, JSON.stringify(email)).toEqual([expect.objectContaining({ in: 'body', path: 'email' })]);
      }
    }
    // None of them took an address: the plain form is still free.
    expect((await signUp('spaced@example.com')).statusCode).toBe(201);
  });

  it('takes an IDN domain in its ASCII form (what a browser email field sends), a punycode top-level domain included, in any case', async () => {
    for (const email of ['owner@xn--e1afmkfd.xn--p1ai', 'owner@xn--bcher-kva.example']) {
      const res = await signUp(email);
      expect(res.statusCode, email).toBe(201);
      expect((await logIn(email.toUpperCase())).json().id).toBe(res.json().id);
      expect((await signUp(email.toUpperCase())).statusCode).toBe(409);
    }
  });

  it('gives one account to sign-ups of one email raced in different cases and passwords; only the winner’s password logs in', async () => {
    const forms = ['racer@example.com', 'RACER@example.com', 'Racer@Example.com', 'racer@EXAMPLE.COM', 'rAcEr@example.com', 'RACER@EXAMPLE.COM'];
    const answers = await Promise.all(forms.map((form, i) => signUp(form, `password number ${i}`)));
    const won = answers.flatMap((res, i) => (res.statusCode === 201 ? [i] : []));
    expect(won).toHaveLength(1);
    expect(answers.filter((res) => res.statusCode === 409)).toHaveLength(forms.length - 1);
    const winner = won[0] as number;
    for (const [i] of forms.entries()) expect((await logIn('racer@example.com', `password number ${i}`)).statusCode).toBe(i === winner ? 200 : 401);
  });
});

describe('which emails exist', () => {
  it('a wrong password and an unknown email get the same answer', async () => {
    const email = unique('known');
    expect((await signUp(email)).statusCode).toBe(201);
    const wrong = await logIn(email, 'not the password');
    const unknown = await logIn(unique('unknown'), 'not the password');
    expect(wrong.statusCode).toBe(401);
    expect(unknown.statusCode).toBe(401);
    expect(unknown.json()).toEqual(wrong.json());
    expect(wrong.headers['set-cookie']).toBeUndefined();
    expect(unknown.headers['set-cookie']).toBeUndefined();
  });

  it('costs the same password work for a taken email as a free one at sign-up, and for an unknown email as a wrong password at log-in, Unicode passwords included', async () => {
    let calls = 0;
    const counted: ScryptFunction = (password, salt, keyLength, params) => {
      calls += 1;
      return new Promise((resolve, reject) => scrypt(password, salt, keyLength, params, (error, key) => (error ? reject(error) : resolve(key))));
    };
    const commands = new AccountCommands(new MemoryEventStore(), planCatalog({}), () => new Date(), new PasswordHasher({ scrypt: counted }));
    const work = async (step: () => Promise<unknown>) => {
      const before = calls;
      await step().catch(() => undefined);
      return calls - before;
    };
    expect(await work(() => commands.signUp('ada@example.com', PASSWORD))).toBe(1);
    expect(await work(() => commands.signUp('ADA@example.com', PASSWORD))).toBe(1);
    for (const password of ['not the password', 'cafe\u0301 not the password']) {
      const wrongPassword = await work(() => commands.authenticate('ada@example.com', password));
      expect(await work(() => commands.authenticate('nobody@example.com', password))).toBe(wrongPassword);
    }
  });
});

describe('passwords', () => {
  it('are one password whether é is typed as one code point (NFC) or as e + U+0301 (NFD), at sign-up and log-in', async () => {
    const nfc = 'caf\u00e9 cr\u00e8me br\u00fbl\u00e9e';
    const nfd = nfc.normalize('NFD');
    expect(nfd).not.toBe(nfc);
    for (const [atSignUp, atLogIn] of [
      [nfc, nfd],
      [nfd, nfc],
    ] as const) {
      const email = unique('unicode');
      expect((await signUp(email, atSignUp)).statusCode).toBe(201);
      expect((await logIn(email, atLogIn)).statusCode).toBe(200);
      expect((await logIn(email, atSignUp)).statusCode).toBe(200);
    }
  });

  it('made before passwords were normalized, from a password that was not NFC, still log in with it', async () => {
    const nfd = 'cafe\u0301 cre\u0300me';
    const salt = Buffer.alloc(16, 7);
    const key = await new Promise<Buffer>((resolve, reject) => scrypt(nfd, salt, 32, (error, k) => (error ? reject(error) : resolve(k))));
    const stored = `scrypt$16384$8$1$${salt.toString('base64')}$${key.toString('base64')}`;
    const hasher = new PasswordHasher();
    expect(await hasher.verify(nfd, stored)).toBe(true);
    expect(await hasher.verify('cafe\u0301 cre\u0300mE', stored)).toBe(false);
  });

  it('of a megabyte are a 400 on body.password at sign-up and log-in, before any password work or attempt count', async () => {
    const email = unique('huge');
    expect((await signUp(email)).statusCode).toBe(201);
    const authenticate = vi.spyOn(t.runtime.commands, 'authenticate');
    const createAccount = vi.spyOn(t.runtime.commands, 'signUp');
    try {
      const huge = 'x'.repeat(1_000_000);
      for (const res of [await signUp(unique('huge'), huge), await logIn(email, huge)]) {
        expect(res.statusCode).toBe(400);
        expect(res.json().errors).toEqual([expect.objectContaining({ in: 'body', path: 'password' })]);
      }
      // Past the log-in limit's 10: never counted, so the right password still logs in.
      for (let i = 0; i < 10; i++) expect((await logIn(email, huge)).statusCode).toBe(400);
      expect(authenticate).not.toHaveBeenCalled();
      expect(createAccount).not.toHaveBeenCalled();
    } finally {
      authenticate.mockRestore();
      createAccount.mockRestore();
    }
    expect((await logIn(email)).statusCode).toBe(200);
  });

  it('empty is a 400 at sign-up and log-in; blanks only, Unicode blanks included, are a 400 at sign-up', async () => {
    for (const res of [await signUp(unique('empty'), ''), await logIn(unique('empty'), '')]) expect(res.json().errors[0]).toMatchObject({ path: 'password' });
    for (const blank of [' '.repeat(12), '\u3000'.repeat(10), '\u00a0\t\u2003 \u00a0\u2003\t\u00a0']) {
      const res = await signUp(unique('blank'), blank);
      expect(res.statusCode).toBe(400);
      expect(res.json().errors[0]).toMatchObject({ path: 'password', message: 'must not be blank' });
    }
  });
});

describe('attempt limits', () => {
  it('count case forms of one email as one, even when the attempts race', async () => {
    const email = unique('victim');
    expect((await signUp(email)).statusCode).toBe(201);
    const forms = [email, email.toUpperCase(), email.replace(/^v/, 'V')];
    const answers = await Promise.all(Array.from({ length: 15 }, (_, i) => logIn(forms[i % 3] as string, 'not the password')));
    expect(answers.filter((res) => res.statusCode === 401)).toHaveLength(10);
    expect(answers.filter((res) => res.statusCode === 429)).toHaveLength(5);
    expect((await logIn(email.toUpperCase())).statusCode).toBe(429);
  });

  it('lock an address after 10 failures raced over different emails', async () => {
    const attacker = address();
    const answers = await Promise.all(Array.from({ length: 15 }, () => logIn(unique('guess'), 'not the password', { remoteAddress: attacker })));
    expect(answers.filter((res) => res.statusCode === 401)).toHaveLength(10);
    expect(answers.filter((res) => res.statusCode === 429)).toHaveLength(5);
  });

  it('without TRUST_PROXY, ignore X-Forwarded-For: a new one on each attempt does not get past the address’s limit', async () => {
    const attacker = address();
    const spoofing = (i: number) => ({ remoteAddress: attacker, headers: { 'x-forwarded-for': `203.0.113.${i}` } });
    for (let i = 0; i < 10; i++) expect((await logIn(unique('guess'), 'not the password', spoofing(i))).statusCode).toBe(401);
    expect((await logIn(unique('guess'), 'not the password', spoofing(99))).statusCode).toBe(429);
  });
});

describe('session ids the client brings', () => {
  it('are never adopted: sign-up and log-in issue a new random one, and the one brought stays no session', async () => {
    const chosen = 'gw_session=attacker-chosen-session-id-0123456789abcdef';
    const email = unique('fixation');
    const signedUp = await signUp(email, PASSWORD, { headers: { cookie: chosen } });
    const loggedIn = await logIn(email, PASSWORD, { headers: { cookie: chosen } });
    for (const res of [signedUp, loggedIn]) {
      expect(sessionOf(res)).toMatch(/^gw_session=[A-Za-z0-9_-]{43}$/);
      expect(sessionOf(res)).not.toBe(chosen);
      expect((await accountWith(sessionOf(res))).statusCode).toBe(200);
    }
    expect(sessionOf(loggedIn)).not.toBe(sessionOf(signedUp));
    expect((await accountWith(chosen)).statusCode).toBe(401);

    // Another account's live session brought to a log-in: the answer's session is the new account's own.
    const other = await signUp(unique('other'));
    const overOther = await logIn(email, PASSWORD, { headers: { cookie: sessionOf(other) } });
    expect(sessionOf(overOther)).not.toBe(sessionOf(other));
    expect((await accountWith(sessionOf(overOther))).json().id).toBe(signedUp.json().id);
  });
});

describe('two session cookies of one name', () => {
  it('a stale or foreign gw_session sent first (a sibling subdomain or another path set it) does not hide the live one; log-out ends every one sent', async () => {
    const email = unique('two-cookies');
    const live = sessionOf(await signUp(email));
    const stale = sessionOf(await logIn(email));
    await inject({ method: 'POST', url: '/api/v1/auth/logout', headers: { cookie: stale } });
    const foreign = 'gw_session=%E0%A4%A'; // not percent-encoding: someone else's value

    for (const cookie of [`${stale}; ${live}`, `${foreign}; ${live}`, `other=1; ${stale}; ${foreign}; ${live}`]) {
      const res = await accountWith(cookie);
      expect(res.statusCode, cookie).toBe(200);
      expect(res.json().email).toBe(email);
    }
    expect((await accountWith(`${stale}; ${foreign}`)).statusCode).toBe(401);

    const second = sessionOf(await logIn(email));
    const out = await inject({ method: 'POST', url: '/api/v1/auth/logout', headers: { cookie: `${live}; ${second}` } });
    expect(out.statusCode).toBe(204);
    expect((await accountWith(live)).statusCode).toBe(401);
    expect((await accountWith(second)).statusCode).toBe(401);
  });
});
