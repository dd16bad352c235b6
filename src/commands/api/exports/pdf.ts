import PDFDocument from 'pdfkit';
import { cutList, cutMethods, type Others } from '../../../api/cutList.js';
import type { OtherErrors } from '../../../api/types.js';
import type { ErrorGroup, SeriesPoint, UsageFigures, UsageReport } from '../../../projections/metricsQueries.js';

export interface PdfReportInput {
  email: string;
  planName: string;
  period: { start: string; end: string };
  chain: string | null;
  /** The method filter, if any: the figures are that method's alone. */
  method: string | null;
  granularity: string;
  generatedAt: string;
  report: UsageReport;
  errors: ErrorGroup[];
  /** The error groups past those in `errors`, summed; null when `errors` holds every group. */
  errorsOther: OtherErrors | null;
  limits: { monthlyLimit: number | null; used: number; remaining: number | null; resetsAt: string };
}

const MARGIN = 50;
const INK = '#1f2933';
const MUTED = '#6b7280';
const OK_COLOUR = '#2563eb';
const ERROR_COLOUR = '#dc2626';

/** Beyond Latin-1, the characters Helvetica's WinAnsi encoding draws (as pdfkit maps them). */
const WIN_ANSI_EXTRA = new Set('ƒ–—‘’‚“”„†‡•…€‰‹›ˆ™ŒœŠšŸŽž˜');

/**
 * Text as the PDF's standard fonts can draw it. pdfkit writes any other character as its UTF-16
 * units' bytes, i.e. wrong Latin glyphs (`调` drew `Œ` and a control): a caller's CJK, Arabic or
 * emoji method read as garbage. Each such character is written `[U+XXXX]` instead (exact, and
 * the CSV and JSON exports hold the text itself); line breaks and tabs become spaces.
 */
function drawable(text: string): string {
  let out = '';
  for (const char of text) {
    const code = char.codePointAt(0) ?? 0;
    if ((code >= 0x20 && code <= 0x7e) || (code >= 0xa0 && code <= 0xff) || WIN_ANSI_EXTRA.has(char)) out += char;
    else if (char === '\t' || char === '\r' || char === '\n') out += ' ';
    else out += `[U+${code.toString(16).toUpperCase().padStart(4, '0')}]`;
  }
  return out;
}

const count = (n: number): string => n.toLocaleString('en-US');
const pct = (v: number | null): string => (v === null ? '–' : `${v.toFixed(2)} %`);
const msText = (v: number | null): string => (v === null ? '–' : `${v.toFixed(1)} ms`);

function figureRows(f: UsageFigures): Array<[string, string]> {
  return [
    ['Requests', count(f.requests)],
    ['Successful', count(f.success)],
    ['Errors', count(f.errors)],
    ['Success rate', pct(f.successRate)],
    ['Error rate', pct(f.errorRate)],
    ['Average response time', msText(f.avgResponseMs)],
    ['95th percentile response time', msText(f.p95ResponseMs)],
    ['Average node latency', msText(f.avgNodeLatencyMs)],
  ];
}

/** Requests per bucket as bars (errors stacked in red), with a y scale and the first and last bucket times. */
function drawChart(doc: PDFKit.PDFDocument, series: SeriesPoint[], x: number, y: number, width: number, height: number): void {
  const max = Math.max(1, ...series.map((p) => p.requests));
  doc.save();
  doc.lineWidth(0.5).strokeColor(MUTED);
  for (const fraction of [0, 0.5, 1]) {
    const gy = y + height - fraction * height;
    doc.moveTo(x, gy).lineTo(x + width, gy);
    if (fraction === 0) doc.stroke();
    else doc.dash(2, { space: 2 }).stroke().undash();
    doc
      .fillColor(MUTED)
      .fontSize(7)
      .text(count(Math.round(fraction * max)), x - 45, gy - 3, { width: 40, align: 'right' });
  }
  const slot = series.length === 0 ? width : width / series.length;
  const bar = Math.max(0.5, slot * 0.8);
  series.forEach((p, i) => {
    const bx = x + i * slot + (slot - bar) / 2;
    const okHeight = ((p.requests - p.errors) / max) * height;
    const errHeight = (p.errors / max) * height;
    if (okHeight > 0) doc.rect(bx, y + height - okHeight, bar, okHeight).fill(OK_COLOUR);
    if (errHeight > 0) doc.rect(bx, y + height - okHeight - errHeight, bar, errHeight).fill(ERROR_COLOUR);
  });
  const first = series[0];
  const last = series[series.length - 1];
  doc.fillColor(MUTED).fontSize(7);
  if (first) doc.text(first.t.replace('T', ' ').slice(0, 16), x, y + height + 4, { width: 120 });
  if (last) doc.text(last.t.replace('T', ' ').slice(0, 16), x + width - 120, y + height + 4, { width: 120, align: 'right' });
  doc.rect(x + width - 150, y - 14, 8, 8).fill(OK_COLOUR);
  doc.fillColor(INK).text('successful', x + width - 139, y - 14);
  doc.rect(x + width - 85, y - 14, 8, 8).fill(ERROR_COLOUR);
  doc.fillColor(INK).text('errors', x + width - 74, y - 14);
  doc.restore();
}

/** A small table: a bold header row, then rows; columns share the width by the given fractions. */
function drawTable(doc: PDFKit.PDFDocument, title: string, header: string[], rows: string[][], fractions: number[]): void {
  const width = doc.page.width - 2 * MARGIN;
  if (doc.y > doc.page.height - 140) doc.addPage();
  doc.moveDown(1).fillColor(INK).font('Helvetica-Bold').fontSize(12).text(title, MARGIN);
  doc.moveDown(0.3);
  const line = (cells: string[], bold: boolean) => {
    const y = doc.y;
    let x = MARGIN;
    doc
      .font(bold ? 'Helvetica-Bold' : 'Helvetica')
      .fontSize(8)
      .fillColor(bold ? MUTED : INK);
    cells.forEach((cell, i) => {
      const w = width * (fractions[i] ?? 0);
      doc.text(drawable(cell), x, y, { width: w - 6, lineBreak: false, ellipsis: true });
      x += w;
    });
    doc.y = y + 13;
  };
  line(header, true);
  if (rows.length === 0) line(['none'], false);
  for (const r of rows) {
    if (doc.y > doc.page.height - MARGIN - 20) doc.addPage();
    line(r, false);
  }
}

/** The rows a table shows at most; past them, one line says how many more and their figures. */
const TOP = 15;

/**
 * Under a table cut to its first rows: how many more there were and what they add up to, so a
 * reader can tell the snapshot was cut and its rows still add up to the totals above.
 */
function drawMore(doc: PDFKit.PDFDocument, text: string): void {
  if (doc.y > doc.page.height - MARGIN - 20) doc.addPage();
  const y = doc.y;
  doc
    .font('Helvetica')
    .fontSize(8)
    .fillColor(MUTED)
    .text(text, MARGIN, y, { width: doc.page.width - 2 * MARGIN, lineBreak: false, ellipsis: true });
  doc.y = y + 13;
}

const plural = (n: number, one: string, many: string): string => `${count(n)} ${n === 1 ? one : many}`;

/** The requests, errors and error rate of what a table cut to TOP rows left out (see cutList). */
function moreFigures(others: Others) {
  return { ...others, errorRate: others.requests === 0 ? null : (others.errors / others.requests) * 100 };
}

const moreText = (what: [string, string], m: ReturnType<typeof moreFigures>): string =>
  `and ${plural(m.count, `more ${what[0]}`, `more ${what[1]}`)}: ${plural(m.requests, 'request', 'requests')}, ${plural(m.errors, 'error', 'errors')} (error rate ${pct(m.errorRate)})`;

/** The PDF snapshot of the dashboard: the summary figures, the usage chart and the top breakdowns. A readable stream. */
export function usagePdf(input: PdfReportInput): PDFKit.PDFDocument {
  const doc = new PDFDocument({
    size: 'A4',
    margin: MARGIN,
    info: { Title: 'Usage report', Author: 'chain-gateway', Subject: `${input.period.start} – ${input.period.end}` },
  });
  const width = doc.page.width - 2 * MARGIN;
  doc.fillColor(INK).font('Helvetica-Bold').fontSize(20).text('Usage report');
  doc.font('Helvetica').fontSize(9).fillColor(MUTED);
  doc.text(
    drawable(
      `${input.email} · ${input.planName} plan · ${input.chain ? `chain ${input.chain}` : 'all chains'}${input.method ? ` · method ${input.method}` : ''}`,
    ),
  );
  doc.text(`Period ${input.period.start} to ${input.period.end} (per ${input.granularity}) · generated ${input.generatedAt}`);
  doc.moveDown(1);

  const top = doc.y;
  figureRows(input.report.totals).forEach(([label, value], i) => {
    const col = i % 2;
    const row = Math.floor(i / 2);
    const x = MARGIN + col * (width / 2);
    const y = top + row * 30;
    doc.font('Helvetica').fontSize(8).fillColor(MUTED).text(label, x, y);
    doc
      .font('Helvetica-Bold')
      .fontSize(13)
      .fillColor(INK)
      .text(value, x, y + 10);
  });
  const { monthlyLimit, used, remaining, resetsAt } = input.limits;
  doc.y = top + 4 * 30 + 6;
  doc
    .font('Helvetica')
    .fontSize(9)
    .fillColor(MUTED)
    .text(
      // The account's quota used, not every request: tokens with their own limit count apart (as on the account page).
      `This month's quota: ${count(used)}${monthlyLimit === null ? ' requests used (no monthly limit)' : ` of ${count(monthlyLimit)} requests used, ${count(remaining ?? 0)} remaining`}; resets ${resetsAt}.`,
      MARGIN,
    );

  doc.moveDown(1).font('Helvetica-Bold').fontSize(12).fillColor(INK).text('Requests over time', MARGIN);
  const chartTop = doc.y + 20;
  drawChart(doc, input.report.series, MARGIN + 45, chartTop, width - 45, 150);
  doc.y = chartTop + 170;

  const figureCells = (f: UsageFigures) => [count(f.requests), count(f.errors), pct(f.errorRate), msText(f.avgResponseMs), msText(f.p95ResponseMs)];
  const { byChain, byMethod, byMethodOther } = input.report;
  drawTable(
    doc,
    'By chain',
    ['Chain', 'Requests', 'Errors', 'Error rate', 'Avg', 'p95'],
    byChain.slice(0, TOP).map((c) => [c.chain, ...figureCells(c)]),
    [0.25, 0.15, 0.15, 0.15, 0.15, 0.15],
  );
  const chainsLeft = cutList(byChain, null, TOP).others;
  if (chainsLeft) drawMore(doc, moreText(['chain', 'chains'], moreFigures(chainsLeft)));
  drawTable(
    doc,
    'Most used methods',
    ['Chain', 'Method', 'Requests', 'Errors', 'Error rate', 'Avg', 'p95'],
    byMethod.slice(0, TOP).map((m) => [m.chain, m.method, ...figureCells(m)]),
    [0.1, 0.35, 0.11, 0.11, 0.11, 0.11, 0.11],
  );
  // Past the first TOP: the rest of byMethod and the entries the report itself left out past its cap.
  const methodsLeft = cutMethods(byMethod, byMethodOther, TOP).others;
  if (methodsLeft) drawMore(doc, moreText(['method', 'methods'], moreFigures(methodsLeft)));
  drawTable(
    doc,
    'Errors',
    ['Code', 'Message', 'Chain', 'Method', 'Count', 'Last seen'],
    input.errors.slice(0, TOP).map((e) => [String(e.code), e.message, e.chain, e.method, count(e.count), e.lastSeen.replace('T', ' ').slice(0, 19)]),
    [0.09, 0.33, 0.08, 0.2, 0.1, 0.2],
  );
  if (input.errors.length > TOP || input.errorsOther) {
    const rest = input.errors.slice(TOP);
    const groups = rest.length + (input.errorsOther?.groups ?? 0);
    const errors = rest.reduce((s, e) => s + e.count, input.errorsOther?.count ?? 0);
    drawMore(doc, `and ${plural(groups, 'more error group', 'more error groups')}: ${plural(errors, 'error', 'errors')}`);
  }
  doc.end();
  return doc;
}
