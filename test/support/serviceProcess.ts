import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TEST_TIMERS } from './testTimers.js';

const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

/** The service as an operator runs it: its own process (`src/main.ts` through tsx), output captured. */
export interface ServiceProcess {
  child: ChildProcess;
  /** Everything it printed on stdout and stderr so far. */
  output(): string;
  /** Resolves with the base URL once it says it is ready. */
  ready: Promise<string>;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
}

/** `preload`: modules of test/support the process imports first (see stopWorkersOnSignal.mjs). */
export function startService(env: Record<string, string>, options: { preload?: string[] } = {}): ServiceProcess {
  const preloads = (options.preload ?? []).flatMap((name) => ['--import', new URL(`./${name}`, import.meta.url).href]);
  const child = spawn(process.execPath, ['--import', 'tsx', ...preloads, MAIN], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', LOG_LEVEL: 'info', ...TEST_TIMERS, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ready = new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      text += chunk.toString();
      const m = /ready at (http:\/\/\S+)/.exec(text);
      if (m) resolve(m[1] as string);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    void exited.then((code) => reject(new Error(`service exited with ${code} before it was ready:\n${text}`)));
  });
  ready.catch(() => undefined);
  return { child, output: () => text, ready, exited };
}
