import { useEffect, useRef, useState } from 'preact/hooks';
import type uPlotType from 'uplot';
import { fmtChartTime, fmtCompact, fmtTick } from '../format.js';
import { utcTicks } from '../series.js';

export interface ChartSeries {
  label: string;
  values: (number | null)[];
  color: string;
  /** Axis and tooltip formatting. */
  format?: (v: number) => string;
  /** Dots on the values: for series with gaps (an average has none where there were no calls). */
  points?: boolean;
}

/**
 * A time series chart (uPlot, loaded on first use), as wide as its box. `times` are Unix
 * seconds; times show in UTC like the rest of the dashboard. `summary` is what a screen
 * reader hears instead of the canvas.
 */
export function TimeChart(props: { times: number[]; series: ChartSeries[]; summary: string; height?: number; testId?: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlotType | null>(null);
  const [failed, setFailed] = useState(false);
  const height = props.height ?? 260;

  useEffect(() => {
    let cancelled = false;
    const el = box.current;
    if (!el) return;
    import('./plot.js').then(
      ({ uPlot }) => {
        if (cancelled) return;
        const format = props.series[0]?.format ?? fmtCompact;
        const options: uPlotType.Options = {
          width: Math.max(200, el.clientWidth),
          height,
          tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
          scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
          axes: [
            {
              stroke: '#5b6573',
              grid: { stroke: '#eceef1' },
              ticks: { stroke: '#d5d9df' },
              // Ticks on whole UTC steps, whatever the browser's zone and its daylight saving.
              splits: (_u, _axis, min, max, step) => utcTicks(min, max, step),
              values: (_u, splits, _axis, _space, step) => splits.map((s) => fmtTick(s, step)),
            },
            { stroke: '#5b6573', grid: { stroke: '#eceef1' }, ticks: { stroke: '#d5d9df' }, size: 56, values: (_u, splits) => splits.map((v) => format(v)) },
          ],
          series: [
            { label: 'Time (UTC)', value: (_u: uPlotType, v: number | null) => (v === null ? '—' : fmtChartTime(v)) },
            ...props.series.map((s) => ({
              label: s.label,
              stroke: s.color,
              fill: `${s.color}1f`,
              width: 2,
              points: { show: s.points === true, size: 6 },
              value: (_u: uPlotType, v: number | null) => (v === null ? '—' : (s.format ?? fmtCompact)(v)),
            })),
          ],
          legend: { live: true },
          // No click on the legend: it would hide a chart's only series, and only a mouse could bring it back.
          cursor: { drag: { x: true, y: false }, bind: { click: () => null } },
        };
        plot.current?.destroy();
        plot.current = new uPlot(options, [props.times, ...props.series.map((s) => s.values)] as uPlotType.AlignedData, el);
      },
      () => setFailed(true),
    );
    return () => {
      cancelled = true;
      plot.current?.destroy();
      plot.current = null;
    };
  }, [props.times, props.series, height]);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const observer = new ResizeObserver(() => {
      plot.current?.setSize({ width: Math.max(200, el.clientWidth), height });
    });
    observer.observe(el);
    return () => observer.disconnect();
  }, [height]);

  return (
    <figure class="chart">
      <div ref={box} class="chart-box" role="img" aria-label={props.summary} data-testid={props.testId} style={{ minHeight: `${height + 40}px` }} />
      {failed && <p class="problem">The chart could not be loaded; reload the page.</p>}
      <figcaption class="visually-hidden">{props.summary}</figcaption>
    </figure>
  );
}
