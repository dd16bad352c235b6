import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';

/**
 * Tests talk to a real redis-server. When REDIS_URL is not given, start a private one on a
 * free loopback port for the run and stop it at the end.
 */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

let redis: ChildProcess | undefined;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let url = process.env.TEST_REDIS_URL;
  if (!url) {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'gw-redis-'));
    redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
      stdio: 'ignore',
    });
    await waitForPort(port);
    url = `redis://127.0.0.1:${port}`;
  }
  project.provide('redisUrl', url);
  return async () => {
    redis?.kill('SIGTERM');
  };
}

async function waitForPort(port: number): Promise<void> {
  const { connect } = await import('node:net');
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`redis-server did not start on port ${port}`);
}

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}
