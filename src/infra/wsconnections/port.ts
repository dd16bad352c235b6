/**
 * Live WebSocket connections per token, against the plan's `ws_connections` cap. With Redis
 * (REDIS_URL) every gateway instance counts in one place, so the cap holds across instances;
 * on the embedded default the one process counts its own.
 *
 * A grant is held until its `release`, which is idempotent: the gateway releases when the
 * connection's TCP socket closes, whichever way it ends.
 */
export type ConnectionVerdict = { granted: true; release(): void } | { granted: false; connections: number };

export interface ConnectionCounter {
  /**
   * One more connection of `tokenId`, if fewer than `cap` are open (null: no cap, still counted).
   * Never rejects: a counter that cannot reach its store decides from what it knows (fail open).
   * `connections`, when refused: how many it counted.
   */
  acquire(tokenId: string, cap: number | null): Promise<ConnectionVerdict>;
  close(): Promise<void>;
}
