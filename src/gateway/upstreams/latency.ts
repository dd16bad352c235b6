/**
 * A chain's recent upstream latencies (the last 256 answers) and one quantile of them, recomputed
 * every 32 answers rather than per call: the hedge delay needs a recent figure, not an exact one.
 */
export class LatencyWindow {
  private readonly samples = new Float64Array(256);
  private count = 0;
  private next = 0;
  private sinceComputed = 0;
  private value: number | null = null;

  constructor(private readonly quantile: number) {}

  add(ms: number): void {
    this.samples[this.next] = ms;
    this.next = (this.next + 1) % this.samples.length;
    if (this.count < this.samples.length) this.count++;
    if (++this.sinceComputed >= 32) this.compute();
  }

  /** The quantile of the window; null until 32 answers were seen. */
  current(): number | null {
    return this.value;
  }

  private compute(): void {
    this.sinceComputed = 0;
    const sorted = this.samples.slice(0, this.count).sort();
    this.value = sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * this.quantile))] ?? null;
  }
}
