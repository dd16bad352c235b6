import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './redisServer.js';

const run = promisify(execFile);

/**
 * A PostgreSQL cluster of the test's own (initdb in a temporary directory, its own port), which
 * the test may stop and start: restarting the machine's shared cluster would break the other
 * test files running beside it. Needs the PostgreSQL server binaries and root (the server runs
 * as the `postgres` user through runuser).
 */
export interface PrivatePostgres {
  /** The `postgres` database as the `postgres` superuser, trust auth. */
  url: string;
  stop(): Promise<void>;
  /** Stops the server as a crash does: every backend quits at once, open transactions are lost, recovery runs at the next start. */
  crash(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server and removes its directory. */
  destroy(): Promise<void>;
}

function serverBinDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root).sort((a, b) => Number(b) - Number(a));
  for (const version of versions) {
    const bin = join(root, version, 'bin');
    if (existsSync(join(bin, 'initdb')) && existsSync(join(bin, 'pg_ctl'))) return bin;
  }
  return null;
}

/** Why a private cluster cannot be started here, or null when it can. */
export function privatePostgresUnavailable(): string | null {
  if (serverBinDir() === null) return 'no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql';
  if (process.getuid?.() !== 0) return 'starting a private PostgreSQL cluster needs root (it runs as the postgres user through runuser)';
  return null;
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = serverBinDir();
  if (bin === null) throw new Error('no PostgreSQL server binaries');
  const dir = mkdtempSync(join(tmpdir(), 'gw-private-pg-'));
  const info = await run('id', ['-u', 'postgres']);
  const group = await run('id', ['-g', 'postgres']);
  chownSync(dir, Number(info.stdout.trim()), Number(group.stdout.trim()));
  const asPostgres = (tool: string, args: string[]) => run('runuser', ['-u', 'postgres', '--', join(bin, tool), ...args]);
  await asPostgres('initdb', ['-D', dir, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  const port = await freePort();
  const serverOptions = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
  const cluster: PrivatePostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async start() {
      await asPostgres('pg_ctl', ['-D', dir, '-o', serverOptions, '-l', join(dir, 'log'), 'start', '-w']);
    },
    async stop() {
      await asPostgres('pg_ctl', ['-D', dir, 'stop', '-m', 'fast', '-w']);
    },
    async crash() {
      await asPostgres('pg_ctl', ['-D', dir, 'stop', '-m', 'immediate', '-w']);
    },
    async destroy() {
      await asPostgres('pg_ctl', ['-D', dir, 'stop', '-m', 'immediate', '-w']).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await cluster.start();
  return cluster;
}
