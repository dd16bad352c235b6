import { randomBytes } from 'node:crypto';
import { sha256Hex } from '../../domain/sha256.js';
import type { ReadModelStore } from '../../infra/readmodels/port.js';

const COLLECTION = 'sessions';
export const SESSION_COOKIE = 'gw_session';
/** How many same-named session cookies one request may have tried (each is one read). */
export const MAX_SESSION_COOKIES = 4;
const TTL_MS = 7 * 86_400_000;

/**
 * Sessions looked at for expiry on each one opened (log-in, sign-up): a read of this many
 * documents, in key order from where the last look stopped. Each opening adds one session and
 * looks at 50, so the expired ones go within a pass over the collection, and it holds about the
 * sessions opened in the last 7 days, not every one ever opened.
 */
export const SESSION_SWEEP_BATCH = 50;

const keyOf = (sessionId: string) => sha256Hex(sessionId);

/** Dashboard sessions: a random id in an httpOnly cookie, stored only as its hash, 7 days. */
export class Sessions {
  /** The last key the sweep looked at ('' : from the start); this process's own, so each API instance sweeps on its own. */
  private sweptTo = '';

  constructor(
    private readonly rm: ReadModelStore,
    private readonly now: () => Date,
  ) {}

  async open(accountId: string): Promise<{ id: string; expiresAt: Date }> {
    const id = randomBytes(32).toString('base64url');
    const expiresAt = new Date(this.now().getTime() + TTL_MS);
    await this.rm.write([{ op: 'put', collection: COLLECTION, key: keyOf(id), doc: { accountId, expiresAt: expiresAt.toISOString() } }]);
    await this.sweep().catch(() => undefined);
    return { id, expiresAt };
  }

  /**
   * Deletes the expired sessions among the next SESSION_SWEEP_BATCH. Only a log-out deleted one
   * before: every session a browser simply stopped using stayed in the read models for good
   * (bench/soak.ts). A failure here is not the log-in's: the next one looks again.
   */
  private async sweep(): Promise<void> {
    const from = this.sweptTo;
    const page = await this.rm.range<{ expiresAt?: unknown }>(COLLECTION, { gte: from, limit: SESSION_SWEEP_BATCH + 1 });
    const docs = page.filter(({ key }) => key !== from).slice(0, SESSION_SWEEP_BATCH);
    const nowIso = this.now().toISOString();
    const expired = docs.filter(({ doc }) => typeof doc.expiresAt === 'string' && doc.expiresAt <= nowIso);
    if (expired.length > 0) await this.rm.write(expired.map(({ key }) => ({ op: 'delete' as const, collection: COLLECTION, key })));
    // Past the last one: from the start again.
    this.sweptTo = docs.length < SESSION_SWEEP_BATCH ? '' : (docs.at(-1)?.key ?? '');
  }

  async accountOf(sessionId: string): Promise<string | null> {
    const doc = await this.rm.get<{ accountId: string; expiresAt: string }>(COLLECTION, keyOf(sessionId));
    if (!doc || doc.expiresAt <= this.now().toISOString()) return null;
    return doc.accountId;
  }

  async close(sessionId: string): Promise<void> {
    await this.rm.write([{ op: 'delete', collection: COLLECTION, key: keyOf(sessionId) }]);
  }
}

/**
 * Every value of the cookie `name`, in header order. A browser sends two of one name when a sibling
 * subdomain (or a path) set its own: the first is not necessarily ours, so callers try each.
 */
export function readCookies(header: string | undefined, name: string): string[] {
  if (!header) return [];
  const values: string[] = [];
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      try {
        values.push(decodeURIComponent(part.slice(eq + 1).trim()));
      } catch {
        // Not percent-encoding (a cookie of this name set elsewhere, or mangled): not a session, not a 500.
      }
    }
  }
  return values.filter((value) => value !== '');
}

export function sessionCookie(value: string, expiresAt: Date | null, secure: boolean): string {
  const parts = [`${SESSION_COOKIE}=${encodeURIComponent(value)}`, 'Path=/', 'HttpOnly', 'SameSite=Strict'];
  parts.push(expiresAt ? `Expires=${expiresAt.toUTCString()}` : 'Max-Age=0');
  if (secure) parts.push('Secure');
  return parts.join('; ');
}
