import type { Others } from '../../api/cutList.js';
import type { ChainFigures } from '../../api/types.js';
import { fmtCompact, fmtInt, fmtPct, rate } from '../format.js';
import { type Column, DataTable } from './dataTable.js';

/** The row props of a cut list's last row: `data-testid="others"` marks it. */
export const othersRowProps = <R extends { others?: number }>(r: R): Record<`data-${string}`, string> =>
  r.others !== undefined ? { 'data-testid': 'others' } : {};

type Row = Pick<ChainFigures, 'chain' | 'requests' | 'errors'> & { method?: string; others?: number };

/**
 * Requests by network, or by method (a method is named with its network); `others`, when the
 * list was cut, is its last row ("12 other methods"), so the rows and shares add up.
 */
export function Breakdown(props: { rows: Row[]; by: 'chain' | 'method'; loaded: boolean; others?: Others | null }) {
  const heading = props.by === 'chain' ? 'Network' : 'Method';
  const rows: Row[] = props.others
    ? [...props.rows, { chain: '', requests: props.others.requests, errors: props.others.errors, others: props.others.count }]
    : props.rows;
  const total = rows.reduce((s, r) => s + r.requests, 0) || 1;
  const max = Math.max(...props.rows.map((r) => r.requests), 1);
  const columns: Column<Row>[] = [
    {
      header: heading,
      rowHeader: true,
      cell: (r) =>
        r.others !== undefined ? (
          <span class="muted">
            {fmtInt(r.others)} other {props.by === 'chain' ? (r.others === 1 ? 'network' : 'networks') : r.others === 1 ? 'method' : 'methods'}
          </span>
        ) : props.by === 'chain' ? (
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
          {r.others === undefined && <span class="inline-bar" aria-hidden="true" style={{ width: `${(r.requests / max) * 60}px` }} />}
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
      testId={`breakdown-${props.by}`}
      columns={columns}
      rows={rows}
      rowKey={(r) => (r.others !== undefined ? 'others' : `${r.chain}/${r.method}`)}
      rowProps={othersRowProps}
      loading={!props.loaded}
      empty="No requests in this period."
    />
  );
}
