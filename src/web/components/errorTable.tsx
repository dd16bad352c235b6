import { useState } from 'preact/hooks';
import type { ErrorGroup, OtherErrors, RecentError } from '../../api/types.js';
import { fmtDateTime, fmtInt } from '../format.js';
import { othersRowProps } from './breakdown.js';
import { type Column, DataTable } from './dataTable.js';

type SortKey = 'count' | 'lastSeen';
/** A group, or (with `others`, how many) the groups the API left out past its cap, summed. */
type Row = ErrorGroup & { others?: number };

/**
 * Error analysis: codes and messages, how often, when last, on which network and method; when
 * the API cut the groups (`other`), a last row "N other error groups" with their count, so the
 * counts add up to the errors.
 */
export function ErrorTable({ rows, other, loaded }: { rows: ErrorGroup[]; other?: OtherErrors | null; loaded: boolean }) {
  const [sort, setSort] = useState<SortKey>('count');
  const sorted: Row[] = [...rows].sort((a, b) => (sort === 'count' ? b.count - a.count : b.lastSeen.localeCompare(a.lastSeen)));
  if (other) sorted.push({ code: 0, message: '', chain: '', method: '', count: other.count, lastSeen: other.lastSeen, others: other.groups });
  const by = (key: SortKey) => ({ active: sort === key, onSort: () => setSort(key) });
  const columns: Column<Row>[] = [
    { header: 'Code', class: 'mono', cell: (r) => (r.others !== undefined ? '' : (r.code ?? '—')) },
    {
      header: 'Message',
      class: 'wrap',
      cell: (r) =>
        r.others !== undefined ? (
          <span class="muted">
            {fmtInt(r.others)} other error {r.others === 1 ? 'group' : 'groups'}
          </span>
        ) : (
          (r.message ?? '—')
        ),
    },
    { header: 'Network', cell: (r) => r.chain },
    { header: 'Method', class: 'mono', cell: (r) => r.method },
    { header: 'Count', num: true, sort: by('count'), cell: (r) => fmtInt(r.count) },
    { header: 'Last seen', num: true, class: 'nowrap', sort: by('lastSeen'), cell: (r) => fmtDateTime(r.lastSeen) },
  ];
  return (
    <DataTable
      label="Errors"
      testId="error-table"
      columns={columns}
      rows={sorted}
      rowKey={(r) => (r.others !== undefined ? 'others' : `${r.code}|${r.message}|${r.chain}|${r.method}`)}
      rowProps={othersRowProps}
      loading={!loaded}
      empty="No errors in this period."
    />
  );
}

const RECENT_COLUMNS: Column<RecentError>[] = [
  { header: 'Time', class: 'nowrap', cell: (r) => fmtDateTime(r.at) },
  { header: 'Network', cell: (r) => r.chain },
  { header: 'Method', class: 'mono', cell: (r) => r.method },
  { header: 'HTTP', num: true, cell: (r) => r.status },
  { header: 'Code', class: 'mono', cell: (r) => r.code ?? '—' },
  { header: 'Message', class: 'wrap', cell: (r) => r.message || '—' },
];

/** The latest failed calls, newest first, with their time, status and code. */
export function RecentErrors({ rows, loaded }: { rows: RecentError[]; loaded: boolean }) {
  return (
    <DataTable
      label="Recent errors"
      testId="recent-errors"
      columns={RECENT_COLUMNS}
      rows={rows}
      rowKey={(r) => r.requestId}
      loading={!loaded}
      empty="No errors in this period."
    />
  );
}
