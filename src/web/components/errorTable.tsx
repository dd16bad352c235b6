import { useState } from 'preact/hooks';
import type { ErrorGroup, RecentError } from '../../api/types.js';
import { fmtDateTime, fmtInt } from '../format.js';
import { Empty, TableWrap } from './ui.js';

type SortKey = 'count' | 'lastSeen';

/** Error analysis: codes and messages, how often, when last, on which network and method. */
export function ErrorTable({ rows, loaded }: { rows: ErrorGroup[]; loaded: boolean }) {
  const [sort, setSort] = useState<SortKey>('count');
  if (!loaded) return <Empty>Loading…</Empty>;
  if (rows.length === 0) return <Empty>No errors in this period.</Empty>;
  const sorted = [...rows].sort((a, b) => (sort === 'count' ? b.count - a.count : b.lastSeen.localeCompare(a.lastSeen)));
  const header = (key: SortKey, label: string) => (
    <th scope="col" class="num" aria-sort={sort === key ? 'descending' : 'none'}>
      <button type="button" class="sort-button" onClick={() => setSort(key)}>
        {label}
        <span aria-hidden="true">{sort === key ? ' ▾' : ''}</span>
      </button>
    </th>
  );
  return (
    <TableWrap label="Errors">
      <table data-testid="error-table">
        <thead>
          <tr>
            <th scope="col">Code</th>
            <th scope="col">Message</th>
            <th scope="col">Network</th>
            <th scope="col">Method</th>
            {header('count', 'Count')}
            {header('lastSeen', 'Last seen')}
          </tr>
        </thead>
        <tbody>
          {sorted.map((r) => (
            <tr key={`${r.code}|${r.message}|${r.chain}|${r.method}`}>
              <td class="mono">{r.code ?? '—'}</td>
              <td class="wrap">{r.message ?? '—'}</td>
              <td>{r.chain}</td>
              <td class="mono">{r.method}</td>
              <td class="num">{fmtInt(r.count)}</td>
              <td class="num nowrap">{fmtDateTime(r.lastSeen)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableWrap>
  );
}

/** The latest failed calls, newest first, with their time, status and code. */
export function RecentErrors({ rows, loaded }: { rows: RecentError[]; loaded: boolean }) {
  if (!loaded) return <Empty>Loading…</Empty>;
  if (rows.length === 0) return <Empty>No errors in this period.</Empty>;
  return (
    <TableWrap label="Recent errors">
      <table data-testid="recent-errors">
        <thead>
          <tr>
            <th scope="col">Time</th>
            <th scope="col">Network</th>
            <th scope="col">Method</th>
            <th scope="col" class="num">
              HTTP
            </th>
            <th scope="col">Code</th>
            <th scope="col">Message</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.requestId}>
              <td class="nowrap">{fmtDateTime(r.at)}</td>
              <td>{r.chain}</td>
              <td class="mono">{r.method}</td>
              <td class="num">{r.status}</td>
              <td class="mono">{r.code ?? '—'}</td>
              <td class="wrap">{r.message || '—'}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableWrap>
  );
}
