import type { Writable } from 'node:stream';

/** A text column: its header and how a row shows in it. */
export type Column<T> = [header: string, cell: (row: T) => string | number | null];

/**
 * What a command prints: aligned text for people, or with `--json` one JSON document per
 * object (a list as JSON lines, one object a line, so that a script can read it as it comes).
 */
export class Output {
  constructor(
    private readonly stdout: Writable,
    readonly json: boolean,
  ) {}

  /** Writes and waits while the stream is full, so that a long export does not pile up in memory. */
  async write(chunk: string): Promise<void> {
    if (this.stdout.write(chunk)) return;
    await new Promise<void>((resolve, reject) => {
      const done = (error?: Error) => {
        this.stdout.off('drain', done);
        this.stdout.off('error', done);
        if (error) reject(error);
        else resolve();
      };
      this.stdout.on('drain', done);
      this.stdout.on('error', done);
    });
  }

  line(text: string): Promise<void> {
    return this.write(`${text}\n`);
  }

  /** A list: JSON lines, or a table with a header row (columns as wide as their widest cell). */
  async list<T extends object>(rows: readonly T[], columns: ReadonlyArray<Column<T>>): Promise<void> {
    if (this.json) {
      for (const row of rows) await this.line(JSON.stringify(row));
      return;
    }
    const cells = [columns.map(([header]) => header), ...rows.map((row) => columns.map(([, cell]) => text(cell(row))))];
    await this.write(alignRows(cells));
  }

  /** One object: a JSON document, or `label  value` lines. */
  async item(value: object, lines: ReadonlyArray<[label: string, value: string | number | null]>): Promise<void> {
    if (this.json) return this.line(JSON.stringify(value));
    await this.write(alignRows(lines.map(([label, v]) => [label, text(v)])));
  }
}

const text = (value: string | number | null): string => (value === null ? '-' : String(value));

/** Rows of cells as lines, each column padded to its widest cell (the last one is not padded). */
export function alignRows(rows: ReadonlyArray<readonly string[]>): string {
  const widths: number[] = [];
  for (const row of rows) {
    for (const [i, cell] of row.entries()) widths[i] = Math.max(widths[i] ?? 0, cell.length);
  }
  const line = (row: readonly string[]) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return rows.map((row) => `${line(row)}\n`).join('');
}
