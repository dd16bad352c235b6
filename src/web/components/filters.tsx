import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import type { Account } from '../../api/types.js';
import { customRangeProblem, type Filters, type RangeKey, useFilters, useSession } from '../hooks.js';
import { Field, Segmented } from './ui.js';

const RANGES: { value: RangeKey; label: string }[] = [
  { value: '24h', label: '24 h' },
  { value: '7d', label: '7 d' },
  { value: '30d', label: '30 d' },
  { value: 'custom', label: 'Custom' },
];

/** Chain path ids of DESIGN §3, for plans that allow every chain (the API has no chain list). */
const ALL_CHAINS = ['eth', 'bsc', 'matic', 'avax', 'arb', 'op', 'base', 'scr', 'sol', 'trx', 'atom', 'sei', 'kas', 'sui', 'local'];

/** The networks the owner can pick: the plan's, plus any that show up in the data. */
export function chainOptions(account: Account, seen: string[] = []): string[] {
  return [...new Set([...(account.plan.chains ?? ALL_CHAINS), ...seen])].sort();
}

/** Time range (24 h, 7 d, 30 d, custom in UTC) and network, shared by the analytics pages. */
export function FiltersBar(props: { seenChains?: string[]; children?: ComponentChildren }) {
  const { account } = useSession();
  const [filters, setFilters] = useFilters();
  const [draft, setDraft] = useState<Filters>(filters);
  const [showProblem, setShowProblem] = useState(false);
  const problem = customRangeProblem(draft);

  const applyCustom = (e: Event) => {
    e.preventDefault();
    setShowProblem(true);
    if (!problem) setFilters({ ...filters, range: 'custom', customStart: draft.customStart, customEnd: draft.customEnd });
  };

  return (
    <div class="filters">
      <Segmented
        legend="Time range"
        name="range"
        options={RANGES}
        value={filters.range}
        onChange={(range) => {
          setDraft({ ...draft, range });
          setFilters({ ...filters, range });
        }}
      />
      <Field label="Network" class="inline">
        {(c) => (
          <select {...c} value={filters.chain} onChange={(e) => setFilters({ ...filters, chain: e.currentTarget.value })}>
            <option value="">All networks</option>
            {chainOptions(account, props.seenChains).map((id) => (
              <option key={id} value={id}>
                {id}
              </option>
            ))}
          </select>
        )}
      </Field>
      {props.children}
      {filters.range === 'custom' && (
        <form class="custom-range" onSubmit={applyCustom} noValidate>
          <Field label="From (UTC)" class="inline">
            {(c) => (
              <input {...c} type="datetime-local" value={draft.customStart} onInput={(e) => setDraft({ ...draft, customStart: e.currentTarget.value })} />
            )}
          </Field>
          <Field label="To (UTC)" class="inline">
            {(c) => <input {...c} type="datetime-local" value={draft.customEnd} onInput={(e) => setDraft({ ...draft, customEnd: e.currentTarget.value })} />}
          </Field>
          <button type="submit" class="button">
            Apply
          </button>
          {showProblem && problem && (
            <p class="field-error" role="alert">
              {problem}
            </p>
          )}
        </form>
      )}
    </div>
  );
}
