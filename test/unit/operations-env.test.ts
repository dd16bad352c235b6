import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type Config, loadConfig } from '../../src/config.js';
import { loadChains } from '../../src/gateway/chains.js';
import { cells } from '../support/markdownTable.js';

/**
 * An operator has README.md and docs/operations.md in hand. Every environment variable the code
 * reads is in them, a setting of src/config.ts in one of their settings tables (`| variable |
 * default | what |`) with the default it really has; and every variable they name is one the code
 * reads, or one another program reads (listed below with the file that uses it).
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');
const DOCS = ['README.md', 'docs/operations.md'] as const;

/** Read by the code, and no operator setting: the docs need not name them. */
const INTERNAL: Readonly<Record<string, string>> = {
  // A test hook: vitest sets NODE_ENV=test, and the management API then checks every answer against its schema.
  NODE_ENV: 'src/commands/api/plugin.ts',
  // Node's own flags, read only to give the storage thread the young generation the process was started with.
  NODE_OPTIONS: 'src/infra/storagethread/index.ts',
};

/** Named by the docs for other programs than the service, each with a file that uses it. */
const OTHER_PROGRAMS: Readonly<Record<string, string>> = {
  // glibc's malloc tuning, set by `npm start` (and the image): docs/operations.md "Memory".
  MALLOC_ARENA_MAX: 'package.json',
  MALLOC_TRIM_THRESHOLD_: 'package.json',
  // Grafana's admin password in the compose file's monitoring profile.
  GRAFANA_ADMIN_PASSWORD: 'docker-compose.yml',
  // The browser tests rewrite the README's screenshots with it.
  UPDATE_SCREENSHOTS: 'test/browser/dashboard.test.ts',
};

/** Settings whose default the code derives from another one, so the schema has none; the docs give both cases. */
const DERIVED_DEFAULTS: Readonly<Record<string, { file: string; shows: string }>> = {
  // One Redis stream on one Redis, 16 on a cluster: the usage queue decides by REDIS_URL's kind.
  USAGE_STREAMS: { file: 'src/infra/usage/redis.ts', shows: 'DEFAULT_STREAMS = { single: 1, cluster: 16 }' },
};

const CHAIN_IDS: string[] = (JSON.parse(read('config/chains.json')) as { chains: Array<{ id: string }> }).chains.map((c) => c.id);

/** `UPSTREAM_ETH`, `UPSTREAM_LOCAL_WS`, …: one chain's instance of the chain registry's `UPSTREAM_<ID>[_WS]`. */
function family(name: string): string {
  const chain = CHAIN_IDS.find((id) => name === `UPSTREAM_${id.toUpperCase()}` || name === `UPSTREAM_${id.toUpperCase()}_WS`);
  return chain === undefined ? name : name.replace(`_${chain.toUpperCase()}`, '_<ID>');
}

/** Each setting of the configuration's zod schema (`const Env = z.object({…})`) with its definition, comments left out. */
function schemaSettings(): Map<string, string> {
  const source = read('src/config.ts');
  const start = source.indexOf('const Env = z.object({');
  const end = source.indexOf('\n});', start);
  expect(start, 'the Env schema in src/config.ts').toBeGreaterThanOrEqual(0);
  const settings = new Map<string, string>();
  let current: string | null = null;
  for (const line of source.slice(start, end).split('\n').slice(1)) {
    if (/^\s*(\/\*\*|\*|\/\/)/.test(line)) continue;
    const key = /^ {2}([A-Z][A-Z0-9_]*):/.exec(line);
    if (key) current = key[1] as string;
    if (current !== null) settings.set(current, `${settings.get(current) ?? ''}${line}\n`);
  }
  return settings;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return entry.name === 'node_modules' || entry.name === 'dist' ? [] : sourceFiles(path);
    return /\.tsx?$/.test(entry.name) ? [path] : [];
  });
}

/** Names read as `process.env.X`, `process.env['X']` or from an environment record (`env.X`, `config.env.X`) anywhere under src/. */
function namesReadUnderSrc(): Map<string, string> {
  const found = new Map<string, string>();
  const reads = /process\.env\.([A-Z][A-Z0-9_]*)|process\.env\[['"]([A-Z][A-Z0-9_]*)['"]\]|\benv\.([A-Z][A-Z0-9_]*)/g;
  for (const file of sourceFiles('src')) {
    for (const match of read(file).matchAll(reads)) {
      const name = family((match[1] ?? match[2] ?? match[3]) as string);
      if (!found.has(name)) found.set(name, file);
    }
  }
  return found;
}

/** Every name the code reads: the schema's, those read elsewhere under src/, and the chain registry's `UPSTREAM_<ID>[_WS]` (built from the chain id, so no literal). */
function codeNames(): Set<string> {
  return new Set([...schemaSettings().keys(), ...namesReadUnderSrc().keys(), 'UPSTREAM_<ID>', 'UPSTREAM_<ID>_WS']);
}

/** The markdown with its fenced code blocks blanked: examples such as a secret's `CHANGE_ME` name no variable. */
function withoutFences(markdown: string): string {
  let fenced = false;
  return markdown
    .split('\n')
    .map((line) => {
      const fence = /^\s*(```|~~~)/.test(line);
      if (fence) fenced = !fenced;
      return fence || fenced ? '' : line;
    })
    .join('\n');
}

const NAME = '[A-Z][A-Z0-9]*(?:_(?:[A-Z0-9]+|<ID>))*_?';
const codeSpans = (text: string): string[] => [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);

interface Setting {
  name: string;
  /** The documented default, literally; null: unset by default (`–`). */
  default: string | null;
  what: string;
  where: string;
}

/** The rows of every `| variable | default | what |` table. */
function settingsTables(file: string): Setting[] {
  const lines = withoutFences(read(file)).split('\n');
  const settings: Setting[] = [];
  lines.forEach((line, index) => {
    if (!/^\|\s*variable\s*\|\s*default\s*\|\s*what\s*\|\s*$/.test(line)) return;
    for (let i = index + 2; i < lines.length && (lines[i] as string).startsWith('|'); i++) {
      const where = `${file}:${i + 1}`;
      const [nameCell = '', defaultCell = '', what = ''] = cells(lines[i] as string);
      const names = codeSpans(nameCell).filter((s) => new RegExp(`^${NAME}$`).test(s));
      const unset = /^[–-]/.test(defaultCell);
      const values = unset ? [] : codeSpans(defaultCell);
      expect(names.length, `${where}: no variable in ${JSON.stringify(nameCell)}`).toBeGreaterThan(0);
      expect(unset || values.length === names.length || names.length === 1, `${where}: cannot pair ${names.join(', ')} with ${defaultCell}`).toBe(true);
      names.forEach((name, n) => {
        settings.push({ name, default: unset ? null : ((names.length === 1 ? values[0] : values[n]) ?? null), what, where });
      });
    }
  });
  return settings;
}

/** Every variable a document names outside its code blocks: a name with an underscore anywhere, `NAME=value` in code, a settings table's names. */
function documentedNames(file: string): Set<string> {
  const text = withoutFences(read(file));
  const names = [
    ...[...text.matchAll(/(?<![A-Za-z0-9_$.-])[A-Z][A-Z0-9]*(?:_(?:[A-Z0-9]+|<ID>))+_?(?![A-Za-z0-9])/g)].map((m) => m[0]),
    ...codeSpans(text).flatMap((span) => {
      const assignment = new RegExp(`^(${NAME})=`).exec(span);
      return assignment ? [assignment[1] as string] : [];
    }),
    ...settingsTables(file).map((s) => s.name),
  ];
  return new Set(names.map(family));
}

/** A configuration as two environments give it, comparable: the raw environment aside. */
const comparable = (config: Config): Omit<Config, 'env'> & { env: null } => ({ ...config, env: null });

describe('the environment variables the operations docs describe', () => {
  const settings = DOCS.flatMap(settingsTables);
  const documented = new Set(DOCS.flatMap((file) => [...documentedNames(file)]));

  it('are found in the code and in the docs (the extraction works)', () => {
    const schema = schemaSettings();
    for (const name of ['ROLE', 'PORT', 'REDIS_URL', 'LOG_LEVEL', 'SMS_FROM']) expect(schema.has(name), name).toBe(true);
    expect(namesReadUnderSrc().get('CHAINS_CONFIG')).toBe('src/gateway/chains.ts');
    expect(namesReadUnderSrc().get('UPSTREAM_<ID>')).toBeDefined();
    expect(settings.map((s) => s.name)).toEqual(expect.arrayContaining(['PORT', 'HOST', 'ROLE', 'WS_IDLE_TIMEOUT_MS']));
    expect(documented).toContain('UPSTREAM_<ID>_WS');
    // The chain registry reads its family of variables: one chain's nodes, and their WebSocket endpoints.
    const eth = loadChains({ env: { UPSTREAM_ETH: 'http://127.0.0.1:1', UPSTREAM_ETH_WS: 'ws://127.0.0.1:1' } }).get('eth');
    expect(eth?.upstreams.map((u) => [u.url.href, u.ws?.href])).toEqual([['http://127.0.0.1:1/', 'ws://127.0.0.1:1/']]);
  });

  it('include every variable the code reads, each setting of src/config.ts with its default and meaning', () => {
    const schema = schemaSettings();
    const tabled = new Set(settings.map((s) => s.name));
    const undocumented = [...codeNames()].filter((name) => !(name in INTERNAL) && !documented.has(name));
    expect(undocumented, 'read by the code, named nowhere in README.md or docs/operations.md').toEqual([]);
    const untabled = [...schema.keys()].filter((name) => !tabled.has(name));
    expect(untabled, 'settings of src/config.ts in no `| variable | default | what |` table').toEqual([]);
    for (const s of settings) expect(s.what, `${s.where}: ${s.name} says what it does`).not.toBe('');
    const twice = settings.filter((s, i) => settings.findIndex((o) => o.name === s.name) !== i).map((s) => `${s.name} (${s.where})`);
    expect(twice, 'settings in two rows').toEqual([]);
  });

  it('name only variables the code reads, or ones other programs do', () => {
    const code = codeNames();
    const unknown = [...documented].filter((name) => !code.has(name) && !(name in OTHER_PROGRAMS));
    expect(unknown, 'named by the docs, read by no code under src/').toEqual([]);
    for (const [name, file] of Object.entries({ ...INTERNAL, ...OTHER_PROGRAMS })) expect(read(file), `${name} in ${file}`).toContain(name);
  });

  it('give each setting the default it has', () => {
    const schema = schemaSettings();
    const defaults = loadConfig({});
    for (const s of settings) {
      const definition = schema.get(s.name);
      if (definition === undefined) continue;
      const derived = DERIVED_DEFAULTS[s.name];
      if (derived) {
        expect(definition, `${s.name}: no default in the schema`).not.toContain('.default(');
        expect(read(derived.file), `${s.name}'s default in ${derived.file}`).toContain(derived.shows);
        continue;
      }
      expect(definition.includes('.default('), `${s.where}: ${s.name} documented ${s.default === null ? 'without' : 'with'} a default`).toBe(
        s.default !== null,
      );
      // Set to its documented default, the variable changes nothing.
      if (s.default !== null) expect(comparable(loadConfig({ [s.name]: s.default })), `${s.where}: ${s.name}=${s.default}`).toEqual(comparable(defaults));
    }
  });
});
