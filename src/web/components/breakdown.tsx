import type { ChainFigures } from '../../api/types.js';
import { fmtCompact, fmtPct, rate } from '../format.js';
import { type Column, DataTable } from './dataTable.js';

type Row = ChainFigures & { method?: string };

/** Requests by network, or by method (a method is named with its network). */
export function Breakdown(props: { rows: Row[]; by: 'chain' | 'method'; loaded: boolean }) {
  const heading = props.by === 'chain' ? 'Network' : 'Method';
  const total = props.rows.reduce((s, r) => s + r.requests, 0) || 1;
  const max = Math.max(...props.rows.map((r) => r.requests), 1);
  const columns: Column<Row>[] = [
    {
      header: heading,
      rowHeader: true,
      cell: (r) =>
        props.by === 'chain' ? (
          r.chain
        ) : (
          <>
            <span class="mono">{r.method}</span> <span class="sub-inline">{r.chain}</span>
          </>
        ),
    },
    {
      header: 'Requests',
      num: true,
      cell: (r) => (
        <>
          <span class="inline-bar" aria-hidden="true" style={{ width: `${(r.requests / max) * 60}px` }} />
          {fmtCompact(r.requests)}
        </>
      ),
    },
    { header: 'Share', num: true, cell: (r) => fmtPct((r.requests / total) * 100) },
    { header: 'Errors', num: true, cell: (r) => `${fmtCompact(r.errors)} (${fmtPct(rate(r.errors, r.requests))})` },
  ];
  return (
    <DataTable
      label={`Requests by ${heading.toLowerCase()}`}
      columns={columns}
      rows={props.rows}
      rowKey={(r) => `${r.chain}/${r.method}`}
      loading={!props.loaded}
      empty="No requests in this period."
    />
  );
}
