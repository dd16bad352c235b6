import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** promtool and Prometheus for the tests of /metrics and deploy/prometheus, from Debian's prometheus package. */

export const onPath = (command: string): boolean => (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, command)));
export const notOnPath = (command: string): string => `${command} is not on the PATH (.ci/run installs Debian's prometheus package, which has it)`;

export const runPromtool = (args: string[], input?: string): { status: number | null; output: string } => {
  const run = spawnSync('promtool', args, { input, encoding: 'utf8' });
  return { status: run.status, output: `${run.stdout}${run.stderr}`.trim() };
};

const PROMQL_KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset']);

/** The metric names a PromQL expression reads: identifiers that are not functions, keywords, labels or Grafana variables. */
export function metricNamesOf(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""') // string literals
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ') // label lists
    .replace(/\$\{?\w+\}?/g, ' ') // Grafana variables
    .replace(/\b\d[\d.e+-]*\b/g, ' '); // numbers
  const names = [...bare.matchAll(/([a-zA-Z_:][\w:]*)(\s*\()?/g)]
    .filter((m) => m[2] === undefined && !PROMQL_KEYWORDS.has(m[1] as string))
    .map((m) => m[1] as string);
  return [...new Set(names)];
}

/** The sample names of a scrape (`a_bucket`, `a_sum`... as written), comments left out. */
export const sampleNamesOf = (scrape: string): Set<string> =>
  new Set(
    scrape
      .split('\n')
      .filter((line) => line !== '' && !line.startsWith('#'))
      .map((line) => /^[a-zA-Z_:][\w:]*/.exec(line)?.[0] ?? line),
  );
