import { SoleGatewayInstance } from './memory.js';
import type { GatewayInstances } from './port.js';
import { RedisGatewayInstances, type RedisGatewayInstancesOptions } from './redis.js';

export { SoleGatewayInstance } from './memory.js';
export type { GatewayInstances } from './port.js';
export { RedisGatewayInstances } from './redis.js';

/** `whenReady` resolves once the first count is known (at startup; rejects after the timeout). */
export type OpenedGatewayInstances = GatewayInstances & { whenReady(timeoutMs?: number): Promise<void> };

/** With Redis, every gateway counted there; without it, this process alone. */
export function openGatewayInstances(redisUrl: string | undefined, options: RedisGatewayInstancesOptions = {}): OpenedGatewayInstances {
  if (redisUrl) return new RedisGatewayInstances(redisUrl, options);
  return Object.assign(new SoleGatewayInstance(), { whenReady: async () => {} });
}
