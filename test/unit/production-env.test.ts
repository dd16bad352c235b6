import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PRODUCTION_NODE_ENV, PRODUCTION_NODE_FLAGS } from '../../bench/lib/productionEnv.js';

const read = (file: string): string => readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');

describe('the environment the service runs with', () => {
  const settings = Object.entries(PRODUCTION_NODE_ENV);

  it('is set by npm start, as the benchmarks measure it', () => {
    const start = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts.start ?? '';
    expect(settings.length).toBeGreaterThan(0);
    for (const [name, value] of settings) expect(start).toMatch(new RegExp(`(^|\\s)${name}=${value}\\s+(\\S+=\\S*\\s+)*node\\s`));
    expect(start).toContain(`node ${PRODUCTION_NODE_FLAGS.join(' ')} dist/src/main.js`);
  });

  it('is set by the Docker image', () => {
    const env = read('Dockerfile')
      .split('\n')
      .filter((line) => line.startsWith('ENV '))
      .join(' ');
    for (const [name, value] of settings) expect(env).toMatch(new RegExp(`\\s${name}=${value}(\\s|$)`));
    const cmd =
      read('Dockerfile')
        .split('\n')
        .find((line) => line.startsWith('CMD ')) ?? '';
    expect(JSON.parse(cmd.slice(4))).toEqual(['node', ...PRODUCTION_NODE_FLAGS, 'dist/src/main.js']);
  });
});
