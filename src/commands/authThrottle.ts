import { createHash } from 'node:crypto';
import { isIPv6 } from 'node:net';
import { DomainError } from '../domain/errors.js';
import type { AttemptCounter, AttemptRule } from '../infra/attempts/port.js';

export interface AuthLimits {
  /** Failed log-ins, counted per email and, apart, per client address. */
  loginFailures: AttemptRule;
  /** Sign-ups per client address, whatever their outcome (an `email_taken` answer tells that an account exists). */
  signUps: AttemptRule;
}

export const DEFAULT_AUTH_LIMITS: Readonly<AuthLimits> = {
  loginFailures: { limit: 10, windowMs: 15 * 60_000 },
  signUps: { limit: 20, windowMs: 60 * 60_000 },
};

/**
 * Where attempts are counted from: the address, or for IPv6 its /64, which one host is
 * commonly given whole (one attacker would otherwise have 2^64 addresses to spread over).
 */
export function clientKey(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1] as string;
  if (!isIPv6(ip)) return ip;
  const [head = '', tail] = ip.split('%')[0]!.split('::');
  const first = head === '' ? [] : head.split(':');
  const last = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? first : [...first, ...Array<string>(Math.max(8 - first.length - last.length, 0)).fill('0'), ...last];
  return `${groups
    .slice(0, 4)
    .map((group) => Number.parseInt(group, 16).toString(16))
    .join(':')}::/64`;
}

const emailKey = (email: string): string => createHash('sha256').update(email.trim().toLowerCase()).digest('hex');

/**
 * Log-in and sign-up limits, checked before any password work, so a locked-out key costs
 * nothing. An attempt is counted when it starts (attempts made together cannot slip past the
 * limit) and given back once it turns out not to be a failure.
 */
export class AuthThrottle {
  constructor(
    private readonly attempts: AttemptCounter,
    private readonly limits: AuthLimits,
    private readonly now: () => Date,
  ) {}

  /**
   * Runs `authenticate` unless the email or the client's address is locked out (then
   * `too_many_attempts`, even for the right password). A failure counts against both; a
   * success clears the email's failures and is not counted against the address.
   */
  async logIn(email: string, clientIp: string, authenticate: () => Promise<string | null>): Promise<string | null> {
    const nowMs = this.now().getTime();
    const byAddress = `login:ip:${clientKey(clientIp)}`;
    const byEmail = `login:email:${emailKey(email)}`;
    await this.take(byAddress, this.limits.loginFailures, nowMs);
    try {
      await this.take(byEmail, this.limits.loginFailures, nowMs);
    } catch (error) {
      await this.attempts.giveBack(byAddress, nowMs);
      throw error;
    }
    let accountId: string | null;
    try {
      accountId = await authenticate();
    } catch (error) {
      // Not a wrong password (the store failed, the hashing queue was full): not a failure either.
      await Promise.all([this.attempts.giveBack(byAddress, nowMs), this.attempts.giveBack(byEmail, nowMs)]);
      throw error;
    }
    if (accountId !== null) await Promise.all([this.attempts.giveBack(byAddress, nowMs), this.attempts.reset(byEmail)]);
    return accountId;
  }

  /** Runs `signUp` unless the client's address has signed up too often within the window. */
  async signUp<T>(clientIp: string, signUp: () => Promise<T>): Promise<T> {
    await this.take(`signup:ip:${clientKey(clientIp)}`, this.limits.signUps, this.now().getTime());
    return signUp();
  }

  private async take(key: string, rule: AttemptRule, nowMs: number): Promise<void> {
    const verdict = await this.attempts.take(key, rule, nowMs);
    if (verdict.allowed) return;
    const retryAfterSeconds = Math.max(Math.ceil(verdict.retryAfterMs / 1000), 1);
    throw new DomainError('too_many_attempts', `Too many attempts; try again in ${retryAfterSeconds} s.`, { retryAfterSeconds });
  }
}
