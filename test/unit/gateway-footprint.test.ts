import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'gw-footprint-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A module resolution hook that prints every package an import resolves to. */
const HOOK = `
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  const m = /\\/node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(resolved.url);
  if (m) process.stderr.write('package ' + m[1] + '\\n');
  return resolved;
}`;

/**
 * The embedded default never loads the clients of the production stores, PDF or mail: each
 * costs tens of MB of resident memory in every gateway process. They load on first use.
 */
describe('start-up footprint', () => {
  it('loading the runtime and the server imports neither mongodb, the EventStoreDB client, pdfkit nor nodemailer', () => {
    const hook = join(dir, 'hook.mjs');
    writeFileSync(hook, HOOK);
    const script = `
      import { register } from 'node:module';
      register(${JSON.stringify(pathToFileURL(hook).href)});
      await import('./src/runtime.ts');
      await import('./src/server.ts');`;
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
    expect(run.status, run.stderr).toBe(0);
    const packages = new Set([...run.stderr.matchAll(/^package (\S+)$/gm)].map((m) => m[1]));
    expect(packages.has('fastify')).toBe(true); // the hook sees what is imported
    for (const heavy of ['mongodb', '@eventstore/db-client', 'pdfkit', 'nodemailer']) expect(packages.has(heavy), heavy).toBe(false);
  });
});

/**
 * Once any object has String.prototype as its prototype (`class X extends String`, as ioredis 6
 * does for RESP3's verbatim strings), V8 gives String.prototype slow properties and stops
 * inlining string methods in the whole process: the gateway's JSON-RPC parse ran 3× slower
 * with ioredis 6 loaded (docs/decisions.md). Checked with V8's own test hook.
 */
describe('V8 fast paths', () => {
  it('loading the service and its lazily loaded clients leaves String.prototype with fast properties', () => {
    const script = `
      const before = %HasFastProperties(String.prototype);
      await import('./src/runtime.ts');
      await import('./src/server.ts');
      for (const lazy of ['mongodb', '@eventstore/db-client', 'pdfkit', 'nodemailer']) await import(lazy);
      console.log(JSON.stringify({ before, after: %HasFastProperties(String.prototype) }));`;
    const run = spawnSync(process.execPath, ['--allow-natives-syntax', '--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '')).toEqual({ before: true, after: true });
  });
});
