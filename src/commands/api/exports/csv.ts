import type { UsageCall } from '../../../domain/usage.js';
import { EXPORT_COLUMNS, exportRow } from './rows.js';

/** Quoted too: `;` and tab, which a spreadsheet may split cells on (Excel in a `;` locale), so no cell can start inside the text. */
const NEEDS_QUOTES = /[",;\t\r\n]/;
/**
 * Cells a spreadsheet would run as a formula (CSV injection): methods and messages come from callers. Blanks first too,
 * for imports that trim cells. And cells that already start with `'`: prefixed as well, so that a reader gets every cell
 * back by dropping one leading `'` (else a caller's `'=1` and `=1` would read alike), and a spreadsheet shows it as sent.
 */
const PREFIXED = /^[\t\r']|^[ \t\r\n]*[=+\-@]/;

/** One CSV field per RFC 4180: quoted when it holds a quote, comma, semicolon, tab or line break, quotes doubled; text that would start a formula (or starts with `'`) gets a leading '. */
export function csvField(value: string | number | boolean | null): string {
  if (value === null) return '';
  if (typeof value !== 'string') return String(value);
  const text = PREFIXED.test(value) ? `'${value}` : value;
  return NEEDS_QUOTES.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

const CRLF = '\r\n';

/** The CSV text of an export, a header line then one chunk per page of rows (lines end in CRLF). */
export async function* csvChunks(pages: AsyncIterable<UsageCall[]>): AsyncGenerator<string> {
  yield EXPORT_COLUMNS.join(',') + CRLF;
  for await (const rows of pages) {
    let chunk = '';
    for (const row of rows) {
      const r = exportRow(row);
      chunk += EXPORT_COLUMNS.map((c) => csvField(r[c])).join(',') + CRLF;
    }
    yield chunk;
  }
}
