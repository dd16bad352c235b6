/**
 * Method and path patterns in the chain registry: `*` matches any run of characters (including
 * `/`), everything else is literal. Matching ignores case because some nodes (Nethermind,
 * Erigon) resolve method names case-insensitively, so a deny list must too.
 */
export type Matcher = (candidate: string) => boolean;

const escapeRegExp = (s: string): string => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&');

export function compileGlobs(globs: readonly string[]): Matcher {
  if (globs.length === 0) return () => false;
  const source = globs.map((g) => escapeRegExp(g).replace(/\*/g, '.*')).join('|');
  const re = new RegExp(`^(?:${source})$`, 'is');
  return (candidate) => re.test(candidate);
}
