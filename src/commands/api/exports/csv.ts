import type { UsageCall } from '../../../domain/usage.js';
import { EXPORT_COLUMNS, exportRow } from './rows.js';

const NEEDS_QUOTES = /[",\r\n]/;
/** Cells a spreadsheet would run as a formula (CSV injection): methods and messages come from callers. */
const FORMULA_START = /^[=+\-@\t\r]/;

/** One CSV field per RFC 4180: quoted when it holds a quote, comma or line break, quotes doubled; text that would start a formula gets a leading '. */
export function csvField(value: string | number | boolean | null): string {
  if (value === null) return '';
  if (typeof value !== 'string') return String(value);
  const text = FORMULA_START.test(value) ? `'${value}` : value;
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
