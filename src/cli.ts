import { spawnSync } from 'node:child_process';
import { findCommand, main } from './cli/main.js';
import { hasRebuildFlags, REBUILD_NODE_FLAGS } from './projections/rebuild.js';

/**
 * The operator CLI (`npm run cli -- --help`); its commands are in src/cli/. A command that
 * replays the log runs in a process with the rebuild's Node flags (they size V8's heap, which
 * is set before any code runs): this one starts again with them when they are missing.
 */
async function run(argv: string[]): Promise<number> {
  if (findCommand(argv).command?.replays && !hasRebuildFlags()) {
    const flags = REBUILD_NODE_FLAGS.filter((f) => !process.execArgv.includes(f));
    const child = spawnSync(process.execPath, [...process.execArgv, ...flags, ...process.argv.slice(1)], { stdio: 'inherit' });
    if (child.error) throw child.error;
    return child.status ?? 1;
  }
  return main(argv, { stdout: process.stdout, stderr: process.stderr, env: process.env });
}

// The reader of stdout has gone (`| head`, `| true`): nobody is left to read the rest or an error, as for any Unix filter.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0);
});

run(process.argv.slice(2)).then(
  // Exits once stdout has taken everything (an export piped to a slow reader).
  (code) => process.stdout.write('', () => process.exit(code)),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
