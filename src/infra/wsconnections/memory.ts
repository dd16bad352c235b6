import type { ConnectionCounter, ConnectionVerdict } from './port.js';

/** A count per token in this process: the embedded default's, and the Redis counter's own while Redis is away. */
export class LocalConnectionCounts {
  private readonly counts = new Map<string, number>();

  held(tokenId: string): number {
    return this.counts.get(tokenId) ?? 0;
  }

  /** Counts one more if under the cap: whether it did. */
  takeIfUnder(tokenId: string, cap: number | null): boolean {
    const held = this.held(tokenId);
    if (cap !== null && held >= cap) return false;
    this.counts.set(tokenId, held + 1);
    return true;
  }

  add(tokenId: string): void {
    this.counts.set(tokenId, this.held(tokenId) + 1);
  }

  /** One fewer; the count left. A token with none is forgotten. */
  remove(tokenId: string): number {
    const left = Math.max(this.held(tokenId) - 1, 0);
    if (left === 0) this.counts.delete(tokenId);
    else this.counts.set(tokenId, left);
    return left;
  }

  tokens(): IterableIterator<[string, number]> {
    return this.counts.entries();
  }

  clear(): void {
    this.counts.clear();
  }
}

/** Release once, whatever the number of calls. */
export function once(release: () => void): () => void {
  let released = false;
  return () => {
    if (released) return;
    released = true;
    release();
  };
}

/** Connections counted in this process: the cap holds per process (the embedded default has one). */
export class MemoryConnectionCounter implements ConnectionCounter {
  private readonly counts = new LocalConnectionCounts();

  async acquire(tokenId: string, cap: number | null): Promise<ConnectionVerdict> {
    if (!this.counts.takeIfUnder(tokenId, cap)) return { granted: false, connections: this.counts.held(tokenId) };
    return { granted: true, release: once(() => this.counts.remove(tokenId)) };
  }

  async close(): Promise<void> {
    this.counts.clear();
  }
}
