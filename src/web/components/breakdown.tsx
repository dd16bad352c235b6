import type { ChainFigures } from '../../api/types.js';
import { fmtCompact, fmtPct, rate } from '../format.js';
import { Empty, TableWrap } from './ui.js';

/** Requests by network, or by method (a method is named with its network). */
export function Breakdown(props: { rows: Array<ChainFigures & { method?: string }>; by: 'chain' | 'method'; loaded: boolean }) {
  const heading = props.by === 'chain' ? 'Network' : 'Method';
  if (!props.loaded) return <Empty>Loading…</Empty>;
  if (props.rows.length === 0) return <Empty>No requests in this period.</Empty>;
  const total = props.rows.reduce((s, r) => s + r.requests, 0) || 1;
  const max = Math.max(...props.rows.map((r) => r.requests), 1);
  return (
    <TableWrap label={`Requests by ${heading.toLowerCase()}`}>
      <table>
        <thead>
          <tr>
            <th scope="col">{heading}</th>
            <th scope="col" class="num">
              Requests
            </th>
            <th scope="col" class="num">
              Share
            </th>
            <th scope="col" class="num">
              Errors
            </th>
          </tr>
        </thead>
        <tbody>
          {props.rows.map((r) => (
            <tr key={`${r.chain}/${r.method}`}>
              {props.by === 'chain' ? (
                <th scope="row">{r.chain}</th>
              ) : (
                <th scope="row">
                  <span class="mono">{r.method}</span> <span class="sub-inline">{r.chain}</span>
                </th>
              )}
              <td class="num">
                <span class="inline-bar" aria-hidden="true" style={{ width: `${(r.requests / max) * 60}px` }} />
                {fmtCompact(r.requests)}
              </td>
              <td class="num">{fmtPct((r.requests / total) * 100)}</td>
              <td class="num">{`${fmtCompact(r.errors)} (${fmtPct(rate(r.errors, r.requests))})`}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableWrap>
  );
}
