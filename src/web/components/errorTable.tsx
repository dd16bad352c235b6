import { useState } from 'preact/hooks';
import type { ErrorGroup, RecentError } from '../../api/types.js';
import { fmtDateTime, fmtInt } from '../format.js';
import { type Column, DataTable } from './dataTable.js';

type SortKey = 'count' | 'lastSeen';

/** Error analysis: codes and messages, how often, when last, on which network and method. */
export function ErrorTable({ rows, loaded }: { rows: ErrorGroup[]; loaded: boolean }) {
  const [sort, setSort] = useState<SortKey>('count');
  const sorted = [...rows].sort((a, b) => (sort === 'count' ? b.count - a.count : b.lastSeen.localeCompare(a.lastSeen)));
  const by = (key: SortKey) => ({ active: sort === key, onSort: () => setSort(key) });
  const columns: Column<ErrorGroup>[] = [
    { header: 'Code', class: 'mono', cell: (r) => r.code ?? '—' },
    { header: 'Message', class: 'wrap', cell: (r) => r.message ?? '—' },
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
      rowKey={(r) => `${r.code}|${r.message}|${r.chain}|${r.method}`}
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
