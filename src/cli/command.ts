import type { Output } from './output.js';
import type { Stores, StoresOptions } from './stores.js';

/** 0 done, 1 failed (refused, differences found, a store unreachable), 2 usage, 3 not found: listed in `--help`. */
export type ExitCode = 0 | 1 | 2 | 3;

export const EXIT = { ok: 0, failed: 1, usage: 2, notFound: 3 } as const;

/** A failure the CLI reports as one line on stderr with its exit code (`code` names it in `--json` mode). */
export class CliError extends Error {
  constructor(
    readonly exitCode: Exclude<ExitCode, 0>,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

export const usageError = (message: string): CliError => new CliError(EXIT.usage, 'usage', message);
export const notFound = (message: string): CliError => new CliError(EXIT.notFound, 'not_found', message);

export interface OptionSpec {
  type: 'string' | 'boolean';
  /** What a string option's value is, for the help: `--account <id>`. */
  value?: string;
  /** A string option the command cannot do without (checked with the arguments: a usage error). */
  required?: boolean;
  description: string;
}

export interface RunContext {
  /** The command's arguments, as many as its `args`. */
  args: string[];
  options: Record<string, string | boolean | undefined>;
  out: Output;
  /** Opens the stores the configuration names; the command closes them. */
  open(options?: StoresOptions): Promise<Stores>;
}

/** One row of the command table: `--help`, `<command> --help` and the parsing all come from it. */
export interface CommandSpec {
  /** One or two words: `verify`, `tokens revoke`. */
  name: string;
  /** Required positional arguments, as the help shows them: `<account>`. */
  args: readonly string[];
  summary: string;
  /** More lines for `<command> --help`. */
  details?: string;
  options?: Record<string, OptionSpec>;
  /** Replays the log: runs in a process with the rebuild's Node flags (src/projections/rebuild.ts). */
  replays?: boolean;
  run(ctx: RunContext): Promise<ExitCode>;
}
