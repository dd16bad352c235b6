import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Bytes a LevelDB store in `dir` wrote as compaction output so far, from its LOG ("... => N bytes"). */
export const compactionBytes = (dir: string): number =>
  readFileSync(join(dir, 'LOG'), 'utf8').split('\n').reduce((sum, line) => sum + Number(/=> (\d+) bytes/.exec(line)?.[1] ?? 0), 0);
