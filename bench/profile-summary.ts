/**
 * The hottest functions of a V8 CPU profile (`node --cpu-prof`), by self time and by total time
 * (self + callees), with file:line. A built file with a `.map` beside it (tsc's sourceMap) is
 * shown at its TypeScript source line; code run through tsx is whitespace-minified, so profile
 * a build (see bench/README.md) to get lines.
 *
 *   npx tsx bench/profile-summary.ts <file.cpuprofile>… [top=25] [filter=src/]
 */
import { existsSync, readFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { dirname, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ROOT } from './lib/processes.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface Hotspot {
  where: string;
  selfMs: number;
  totalMs: number;
  selfShare: number;
}

const sourceMaps = new Map<string, SourceMap | null>();

function sourceMapOf(path: string): SourceMap | null {
  if (!sourceMaps.has(path)) {
    const mapFile = `${path}.map`;
    sourceMaps.set(path, existsSync(mapFile) ? new SourceMap(JSON.parse(readFileSync(mapFile, 'utf8'))) : null);
  }
  return sourceMaps.get(path) ?? null;
}

const describe = (node: ProfileNode): string => {
  const { functionName, url, lineNumber, columnNumber } = node.callFrame;
  const name = functionName || '(anonymous)';
  if (!url.startsWith('file://')) return `${name} ${url || '(native)'}${url ? `:${lineNumber + 1}` : ''}`;
  const path = fileURLToPath(url);
  const entry = sourceMapOf(path)?.findEntry(lineNumber, columnNumber);
  if (entry && 'originalSource' in entry && entry.originalSource) {
    const source = entry.originalSource.startsWith('file://') ? fileURLToPath(entry.originalSource) : resolve(dirname(path), entry.originalSource);
    return `${name} ${relative(ROOT, source)}:${entry.originalLine + 1}`;
  }
  return `${name} ${relative(ROOT, path)}:${lineNumber + 1}`;
};

export function summarize(profile: CpuProfile): { hotspots: Hotspot[]; totalMs: number } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });

  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let totalUs = 0;
  for (const [id, us] of selfUs) {
    totalUs += us;
    const node = byId.get(id);
    if (!node) continue;
    self.set(describe(node), (self.get(describe(node)) ?? 0) + us);
    // Total time: once per distinct function on the stack (recursion counted once).
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const key = describe(byId.get(at) as ProfileNode);
      if (seen.has(key)) continue;
      seen.add(key);
      total.set(key, (total.get(key) ?? 0) + us);
    }
  }
  const hotspots = [...total.keys()].map((where) => ({
    where,
    selfMs: (self.get(where) ?? 0) / 1000,
    totalMs: (total.get(where) ?? 0) / 1000,
    selfShare: (self.get(where) ?? 0) / Math.max(1, totalUs),
  }));
  return { hotspots, totalMs: totalUs / 1000 };
}

function main(): void {
  const args = process.argv.slice(2);
  const files = args.filter((a) => a.endsWith('.cpuprofile'));
  const [topArg, filter = 'src/'] = args.filter((a) => !a.endsWith('.cpuprofile'));
  if (files.length === 0) {
    console.error('usage: npx tsx bench/profile-summary.ts <file.cpuprofile>… [top=25] [filter=src/]');
    process.exit(2);
  }
  const top = Number(topArg ?? 25);
  for (const file of files) {
    const { hotspots, totalMs } = summarize(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile);
    // Shares of the busy time: a benchmarked process idles between runs, which says nothing.
    const idleMs = hotspots.find((h) => h.where.startsWith('(idle)'))?.selfMs ?? 0;
    const busyMs = Math.max(1e-9, totalMs - idleMs);
    const pct = (ms: number): string => `${((100 * ms) / busyMs).toFixed(1)}%`.padStart(6);
    console.log(`${file}: ${(totalMs / 1000).toFixed(1)} s sampled, ${(busyMs / 1000).toFixed(1)} s busy (shares below are of the busy time)\n\nby self time:`);
    for (const h of [...hotspots]
      .filter((x) => !x.where.startsWith('(idle)'))
      .sort((a, b) => b.selfMs - a.selfMs)
      .slice(0, top))
      console.log(`${pct(h.selfMs)}  ${h.where}`);
    console.log(`\nby total time, functions under ${filter}:`);
    for (const h of hotspots
      .filter((x) => x.where.includes(` ${filter}`))
      .sort((a, b) => b.totalMs - a.totalMs)
      .slice(0, top)) {
      console.log(`${pct(h.totalMs)}  ${h.where}`);
    }
    console.log('');
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
