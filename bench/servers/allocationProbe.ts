/**
 * Loaded into a benchmarked process (`node --import=<this, built>`, see bench/lib/services.ts,
 * GATEWAY_ALLOC_PROBE): what the process allocated per HTTP request it served, and what its
 * garbage collections cost, between two SIGUSR2. Each SIGUSR2 writes the window since the one
 * before to `$GATEWAY_ALLOC_PROBE/<pid>.json` and starts the next.
 *
 * Bytes allocated are not sampled: V8's heap in use now, minus at the window's start, plus what
 * every collection in between freed (v8.GCProfiler gives the heap before and after each). So
 * unlike throughput or a p99 on these shared cores, the figure hardly moves between runs, and a
 * change of a few hundred bytes per call shows in one A/B.
 */
import { subscribe } from 'node:diagnostics_channel';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GCProfiler, getHeapStatistics } from 'node:v8';

export interface AllocationWindow {
  requests: number;
  allocatedBytes: number;
  scavenges: number;
  /** Mark-compacts and any other collection than a scavenge. */
  otherCollections: number;
  gcPauseMs: number;
  /** Count and pause (ms) of each kind of collection V8 names (Scavenge, MarkSweepCompact, IncrementalMarking...). */
  byType: Record<string, { count: number; ms: number }>;
  seconds: number;
}

/** What GCProfiler.stop() gives, as Node writes it (camelCase; @types/node types it with HeapStatistics' snake_case names). */
interface GcStatistics {
  statistics: Array<{
    gcType: string;
    cost: number;
    beforeGC: { heapStatistics: { usedHeapSize: number } };
    afterGC: { heapStatistics: { usedHeapSize: number } };
  }>;
}

const dir = process.env.GATEWAY_ALLOC_PROBE;
if (dir) {
  let requests = 0;
  subscribe('http.server.request.start', () => {
    requests++;
  });
  let profiler = new GCProfiler();
  let start = { requests: 0, used: 0, at: 0 };
  const begin = (): void => {
    profiler = new GCProfiler();
    profiler.start();
    start = { requests, used: getHeapStatistics().used_heap_size, at: performance.now() };
  };
  begin();
  process.on('SIGUSR2', () => {
    const { statistics } = profiler.stop() as unknown as GcStatistics;
    const used = getHeapStatistics().used_heap_size;
    let freed = 0;
    let scavenges = 0;
    let gcPauseUs = 0;
    const byType: AllocationWindow['byType'] = {};
    for (const gc of statistics) {
      const kind = byType[gc.gcType] ?? { count: 0, ms: 0 };
      kind.count++;
      kind.ms += gc.cost / 1000;
      byType[gc.gcType] = kind;
      freed += gc.beforeGC.heapStatistics.usedHeapSize - gc.afterGC.heapStatistics.usedHeapSize;
      if (gc.gcType === 'Scavenge') scavenges++;
      gcPauseUs += gc.cost;
    }
    const window: AllocationWindow = {
      requests: requests - start.requests,
      allocatedBytes: used - start.used + freed,
      scavenges,
      otherCollections: statistics.length - scavenges,
      gcPauseMs: gcPauseUs / 1000,
      byType,
      seconds: (performance.now() - start.at) / 1000,
    };
    writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify(window));
    begin();
  });
}
