/**
 * What every benchmark prints: one JSON line per figure on stdout (run-all.ts collects them);
 * everything else goes to stderr. Absolute numbers on a shared 2-core machine are noise, so a
 * figure carries, where it has one, its ratio to a baseline measured in the same run.
 */
export interface Figure {
  /** snake_case, unique across the benchmarks. */
  name: string;
  /** `>= 0.9`, `<= 200`: compared with `result`; null when the figure has no target. */
  target: string | null;
  result: number;
  unit: string;
  /** result ÷ baseline, when the figure has a baseline. */
  ratio?: number;
  /** What the ratio divides by, e.g. "bare Node proxy 9,812 req/s". */
  baseline?: string;
  /** The exact command that reproduces the figure. */
  command: string;
  /** How it was measured, briefly. */
  method?: string;
}

export function emit(figure: Figure): void {
  process.stdout.write(`${JSON.stringify(figure)}\n`);
}

export function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

/** `>= 0.9` → true when `value` meets it; null when the target is null or unreadable. */
export function meetsTarget(target: string | null, value: number): boolean | null {
  if (target === null) return null;
  const m = /^\s*(>=|<=|>|<)\s*(-?[\d.]+)\s*$/.exec(target);
  if (!m) return null;
  const bound = Number(m[2]);
  switch (m[1]) {
    case '>=':
      return value >= bound;
    case '<=':
      return value <= bound;
    case '>':
      return value > bound;
    default:
      return value < bound;
  }
}

/** Rounds for display and JSON: 3 significant digits below 100, integers above. */
export function round(value: number): number {
  if (!Number.isFinite(value)) return value;
  if (Math.abs(value) >= 100) return Math.round(value);
  return Number(value.toPrecision(3));
}

/** The middle value (the upper of the two middle ones for an even count), as the comparison scripts print it. */
export const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
