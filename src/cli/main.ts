import type { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { ConfigError } from '../config.js';
import { DomainError } from '../domain/errors.js';
import { CliError, type CommandSpec, EXIT, type ExitCode, type OptionSpec, usageError } from './command.js';
import { accountCommands } from './commands/accounts.js';
import { maintenanceCommands } from './commands/maintenance.js';
import { tokenCommands } from './commands/tokens.js';
import { usageCommands } from './commands/usage.js';
import { alignRows, Output } from './output.js';
import { type OpenStores, storesFromEnv } from './stores.js';

/** Every command, in the order `--help` lists them. */
export const COMMANDS: readonly CommandSpec[] = [...accountCommands, ...tokenCommands, ...usageCommands, ...maintenanceCommands];

const GLOBAL_OPTIONS: Record<string, OptionSpec & { short?: string }> = {
  json: { type: 'boolean', description: 'output for scripts: one JSON document, a list as JSON lines; errors as one JSON line on stderr' },
  help: { type: 'boolean', short: 'h', description: 'this help; `<command> --help` for one command' },
};

const PROGRAM = 'npm run cli --';

const EXIT_CODES = `Exit codes:
  0  done
  1  failed: refused by the rules (e.g. a revoked token cannot change), verify found differences, a store unreachable
  2  usage: unknown command or option, missing or bad argument, bad configuration
  3  not found: no such account or token`;

const STORES_NOTE = `Stores: DATA_DIR (the embedded default: stop the service first, one process at a time opens it),
or EVENTSTORE_URL and MONGODB_URL, or DATABASE_URL, beside a running service: a change shows once the
service's projector has applied it and published it to the gateways (the command waits for that).
Piping or redirecting stdout: npm run -s cli -- ... (without -s npm prints its own lines there first).`;

const optionUse = (name: string, o: OptionSpec) => `--${name}${o.value ? ` ${o.value}` : ''}`;
/** The command, its arguments and required options: what the list of commands shows. */
const invocation = (c: CommandSpec): string[] => [
  c.name,
  ...c.args,
  ...Object.entries(c.options ?? {})
    .filter(([, o]) => o.required)
    .map(([name, o]) => optionUse(name, o)),
];
const synopsis = (c: CommandSpec): string =>
  [
    ...invocation(c),
    ...Object.entries(c.options ?? {})
      .filter(([, o]) => !o.required)
      .map(([name, o]) => `[${optionUse(name, o)}]`),
  ].join(' ');

const optionLines = (options: Record<string, OptionSpec & { short?: string }>): string[][] =>
  Object.entries(options).map(([name, o]) => [`  ${o.short ? `-${o.short}, ` : ''}${optionUse(name, o)}`, o.description]);

export function generalHelp(): string {
  return [
    `Usage: ${PROGRAM} <command> [arguments] [options]`,
    '',
    'Commands:',
    alignRows(COMMANDS.map((c) => [`  ${invocation(c).join(' ')}`, c.summary])).trimEnd(),
    '',
    'Options:',
    alignRows(optionLines(GLOBAL_OPTIONS)).trimEnd(),
    '',
    EXIT_CODES,
    '',
    STORES_NOTE,
    '',
  ].join('\n');
}

export function commandHelp(c: CommandSpec): string {
  return [
    `Usage: ${PROGRAM} ${synopsis(c)} [--json]`,
    '',
    c.summary,
    ...(c.details ? [c.details] : []),
    '',
    'Options:',
    alignRows(optionLines({ ...c.options, ...GLOBAL_OPTIONS })).trimEnd(),
    '',
    EXIT_CODES,
    '',
  ].join('\n');
}

export interface CliIo {
  stdout: Writable;
  stderr: Writable;
  env: Record<string, string | undefined>;
  /** Where the stores come from; the configuration's by default. */
  open?: OpenStores;
}

const isGlobalFlag = (arg: string) => arg === '--json' || arg === '--help' || arg === '-h';

/** The command the arguments name (one or two words after any global flags), and the arguments left. */
export function findCommand(argv: readonly string[]): { command: CommandSpec | null; rest: string[]; group: string | null } {
  const skipped = argv.findIndex((a) => !isGlobalFlag(a));
  if (skipped < 0) return { command: null, rest: [...argv], group: null };
  const [first = '', second] = argv.slice(skipped);
  const before = argv.slice(0, skipped);
  const single = COMMANDS.find((c) => c.name === first);
  if (single) return { command: single, rest: [...before, ...argv.slice(skipped + 1)], group: null };
  const pair = COMMANDS.find((c) => c.name === `${first} ${second}`);
  if (pair) return { command: pair, rest: [...before, ...argv.slice(skipped + 2)], group: null };
  const group = COMMANDS.some((c) => c.name.startsWith(`${first} `)) ? first : null;
  return { command: null, rest: [...argv], group };
}

/** Runs the CLI on `argv` (without the program's name); resolves with its exit code. */
export async function main(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const json = argv.includes('--json');
  const help = argv.includes('--help') || argv.includes('-h');
  const say = (stream: Writable, text: string) => new Promise<void>((resolve) => stream.write(text, () => resolve()));
  const { command, rest, group } = findCommand(argv);
  try {
    if (!command) {
      if (help && (group !== null || argv.every(isGlobalFlag))) {
        await say(io.stdout, group ? groupHelp(group) : generalHelp());
        return EXIT.ok;
      }
      const named = argv.find((a) => !isGlobalFlag(a));
      throw usageError(
        named === undefined
          ? 'No command given.'
          : group
            ? `Unknown ${group} command${argv[argv.indexOf(group) + 1] ? ` "${argv[argv.indexOf(group) + 1]}"` : ''}; one of: ${subcommands(group).join(', ')}.`
            : `Unknown command "${named}".`,
      );
    }
    if (help) {
      await say(io.stdout, commandHelp(command));
      return EXIT.ok;
    }
    const parsed = parseCommandArgs(command, rest);
    const out = new Output(io.stdout, json);
    return await command.run({ args: parsed.args, options: parsed.options, out, open: io.open ?? storesFromEnv(io.env) });
  } catch (error) {
    const failure = asCliError(error);
    await say(
      io.stderr,
      json ? `${JSON.stringify({ error: failure.code, message: failure.message, exit_code: failure.exitCode })}\n` : `error: ${failure.message}\n`,
    );
    if (failure.exitCode === EXIT.usage && !json && !(error instanceof ConfigError)) {
      await say(io.stderr, `\n${command ? commandHelp(command) : group ? groupHelp(group) : generalHelp()}`);
    }
    return failure.exitCode;
  }
}

const subcommands = (group: string): string[] => COMMANDS.filter((c) => c.name.startsWith(`${group} `)).map((c) => c.name.slice(group.length + 1));

function groupHelp(group: string): string {
  const members = COMMANDS.filter((c) => c.name.startsWith(`${group} `));
  return [
    `Usage: ${PROGRAM} ${group} <${subcommands(group).join('|')}> ...`,
    '',
    alignRows(members.map((c) => [`  ${synopsis(c)}`, c.summary])).trimEnd(),
    '',
    `${PROGRAM} ${group} <command> --help for one of them.`,
    '',
  ].join('\n');
}

function parseCommandArgs(command: CommandSpec, rest: string[]): { args: string[]; options: Record<string, string | boolean | undefined> } {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {};
  for (const [name, o] of Object.entries({ ...command.options, ...GLOBAL_OPTIONS }))
    options[name] = { type: o.type, ...('short' in o && o.short ? { short: o.short } : {}) };
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({ args: rest, options, allowPositionals: true, strict: true });
  } catch (error) {
    // parseArgs explains on later lines (an option value starting with a dash: --limit=-1): one line.
    throw usageError(error instanceof Error ? error.message.replace(/\s*\n\s*/g, ' ') : String(error));
  }
  const { positionals } = parsed;
  if (positionals.length < command.args.length) throw usageError(`Missing ${command.args.slice(positionals.length).join(' ')}.`);
  if (positionals.length > command.args.length) throw usageError(`Unexpected argument "${positionals[command.args.length]}".`);
  const missing = Object.entries(command.options ?? {}).find(([name, o]) => o.required && parsed.values[name] === undefined);
  if (missing) throw usageError(`${optionUse(...missing)} is required.`);
  return { args: positionals, options: parsed.values };
}

/** Errors as the CLI reports them: the domain's by their code (not found is 3), anything else a failure (1). */
function asCliError(error: unknown): CliError {
  if (error instanceof CliError) return error;
  if (error instanceof ConfigError) return new CliError(EXIT.usage, 'configuration', `Configuration: ${error.message}`);
  if (error instanceof DomainError) {
    if (error.code === 'not_found') return new CliError(EXIT.notFound, error.code, error.message);
    if (error.code === 'validation_failed') return new CliError(EXIT.usage, error.code, error.message);
    return new CliError(EXIT.failed, error.code, error.message);
  }
  return new CliError(EXIT.failed, 'failed', error instanceof Error ? error.message : String(error));
}
