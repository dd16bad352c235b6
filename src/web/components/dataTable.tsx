import { type ComponentChildren, Fragment } from 'preact';
import { Empty, Loading, TableWrap } from './ui.js';

export interface Column<R> {
  header: string;
  cell(row: R): ComponentChildren;
  /** Figures: right-aligned, header and cells. */
  num?: boolean;
  /** More classes for the cells (mono, nowrap, wrap). */
  class?: string;
  /** The cell that names the row, read out before the others: a row header. */
  rowHeader?: boolean;
  testId?: string;
  /** A header that sorts the rows, largest or latest first, when pressed. */
  sort?: { active: boolean; onSort(): void };
}

/**
 * The dashboard's tables. Without `empty`, a table with no rows still shows its header (a list
 * whose first answer is awaited); `stack` turns each row into a card on a phone, its cells named
 * by their header; `label` makes the table a region that scrolls sideways instead.
 */
export function DataTable<R>(props: {
  columns: Column<R>[];
  rows: readonly R[];
  rowKey(row: R): string;
  loading?: boolean;
  empty?: ComponentChildren;
  label?: string;
  stack?: boolean;
  testId?: string;
  rowProps?(row: R): { class?: string } & Record<`data-${string}`, string>;
  /** A full-width row under a row, or nothing. */
  detail?(row: R): ComponentChildren;
}) {
  if (props.loading) return <Loading />;
  if (props.empty !== undefined && props.rows.length === 0) return <Empty>{props.empty}</Empty>;
  const { columns, stack } = props;
  const table = (
    <table class={stack ? 'stack' : undefined} data-testid={props.testId}>
      <thead>
        <tr>{columns.map(headerCell)}</tr>
      </thead>
      <tbody>
        {props.rows.map((row) => {
          const detail = props.detail?.(row);
          return (
            <Fragment key={props.rowKey(row)}>
              <tr {...props.rowProps?.(row)}>
                {columns.map((c) => {
                  const attrs = { class: cellClass(c), 'data-label': stack ? c.header : undefined, 'data-testid': c.testId };
                  return c.rowHeader ? (
                    <th key={c.header} scope="row" {...attrs}>
                      {c.cell(row)}
                    </th>
                  ) : (
                    <td key={c.header} {...attrs}>
                      {c.cell(row)}
                    </td>
                  );
                })}
              </tr>
              {detail && (
                <tr class="detail-row">
                  <td colSpan={columns.length}>{detail}</td>
                </tr>
              )}
            </Fragment>
          );
        })}
      </tbody>
    </table>
  );
  return props.label ? <TableWrap label={props.label}>{table}</TableWrap> : table;
}

function headerCell<R>(c: Column<R>) {
  const sortedBy = c.sort?.active === true;
  return (
    <th key={c.header} scope="col" class={c.num ? 'num' : undefined} aria-sort={c.sort ? (sortedBy ? 'descending' : 'none') : undefined}>
      {c.sort ? (
        <button type="button" class="sort-button" onClick={c.sort.onSort}>
          {c.header}
          <span aria-hidden="true">{sortedBy ? ' ▾' : ''}</span>
        </button>
      ) : (
        c.header
      )}
    </th>
  );
}

const cellClass = <R,>(c: Column<R>): string | undefined => [c.num ? 'num' : '', c.class ?? ''].filter(Boolean).join(' ') || undefined;
