import type { GatewayInstances } from './port.js';

/** The embedded default: this process is the only gateway. */
export class SoleGatewayInstance implements GatewayInstances {
  count(): number {
    return 1;
  }

  onCount(): void {}

  async close(): Promise<void> {}
}
