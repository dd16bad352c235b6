import { readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** Bytes a LevelDB store in `dir` wrote as compaction output so far, from its LOG ("... => N bytes"). */
export const compactionBytes = (dir: string): number =>
  readFileSync(join(dir, 'LOG'), 'utf8')
    .split('\n')
    .reduce((sum, line) => sum + Number(/=> (\d+) bytes/.exec(line)?.[1] ?? 0), 0);

/** What each LevelDB store under `dataDir` (a directory with a LOG) wrote in compactions so far, e.g. "eventstore/index 30.5 MB, …". */
export function compactionOutput(dataDir: string): string {
  const stores = readdirSync(dataDir, { recursive: true, encoding: 'utf8' })
    .filter((path) => basename(path) === 'LOG')
    .map(dirname);
  return stores.map((store) => `${store} ${(compactionBytes(join(dataDir, store)) / 1e6).toFixed(1)} MB`).join(', ');
}
