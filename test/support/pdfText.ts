import { inflateSync } from 'node:zlib';

/** The text a PDF shows: inflates its content streams and decodes the hex strings of TJ operators. */
export function pdfText(pdf: Buffer): string {
  const text: string[] = [];
  let at = 0;
  for (;;) {
    const start = pdf.indexOf('stream\n', at);
    if (start < 0) break;
    const end = pdf.indexOf('\nendstream', start);
    const body = pdf.subarray(start + 7, end);
    at = end + 10;
    let content: string;
    try {
      content = inflateSync(body).toString('latin1');
    } catch {
      continue;
    }
    for (const line of content.split('\n')) {
      if (!/T[Jj]$/.test(line)) continue;
      text.push([...line.matchAll(/<([0-9a-f]+)>/g)].map((m) => Buffer.from(m[1] as string, 'hex').toString('latin1')).join(''));
    }
  }
  return text.join('\n');
}
