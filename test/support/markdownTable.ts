/** A Markdown table row's cells, `|` inside code spans kept. */
export function cells(row: string): string[] {
  const out: string[] = [];
  let cell = '';
  let code = false;
  for (const ch of row.trim().replace(/^\|/, '').replace(/\|$/, '')) {
    if (ch === '`') code = !code;
    if (ch === '|' && !code) {
      out.push(cell.trim());
      cell = '';
    } else cell += ch;
  }
  return [...out, cell.trim()];
}
