import type { UsageCall } from '../../../domain/usage.js';
import { exportRow } from './rows.js';

/**
 * The JSON export, streamed: `{"period":…,"chain":…,"method":…,"retention":…,"rows":[{…},…]}`. One JSON
 * document (not NDJSON) so that any JSON client reads it; the envelope says what the rows cover.
 */
export async function* jsonChunks(header: Record<string, unknown>, pages: AsyncIterable<UsageCall[]>): AsyncGenerator<string> {
  const head = JSON.stringify({ ...header, rows: [] });
  // Everything before the closing `]}` of the empty rows array.
  yield `${head.slice(0, -2)}\n`;
  let first = true;
  for await (const rows of pages) {
    let chunk = '';
    for (const row of rows) {
      chunk += `${first ? '' : ',\n'}${JSON.stringify(exportRow(row))}`;
      first = false;
    }
    yield chunk;
  }
  yield '\n]}\n';
}
