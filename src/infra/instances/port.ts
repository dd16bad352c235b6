/**
 * The gateway processes of a deployment alive now. Each takes an equal share of what the
 * deployment's nodes allow it (an upstream's `maxRps`), so N gateways together stay within a
 * provider's cap without an operator dividing it by hand. With Redis (REDIS_URL) every gateway
 * writes a heartbeat there; on the embedded default the one process is the deployment.
 */
export interface GatewayInstances {
  /** Live gateway processes, this one included (at least 1): the last count known. */
  count(): number;
  /** Told each new count (not the current one). */
  onCount(listener: (count: number) => void): void;
  close(): Promise<void>;
}
