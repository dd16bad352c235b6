import { defineChain } from 'viem';
import { type Devnet, startDevnet } from '../../src/infra/devnet.js';

/** A real local EVM node (ganache, as `npm start` runs for the `local` chain) on a loopback port: start one per test file. */
export type GanacheNode = Devnet;
export const startGanache = (): Promise<GanacheNode> => startDevnet();

/** The first deterministic ganache account (funded with 1000 ETH). */
export const GANACHE_ACCOUNT_0 = '0x90f8bf6a479f320ead074411a4b0e7944ea8c9c1';
export const GANACHE_ACCOUNT_1 = '0xffcf8fdee72ac11b5c542428b35eef5769c409f0';

/** The ganache chain for viem clients (chain id 1337; each client names its own transport URL). */
export const GANACHE_CHAIN = defineChain({
  id: 1337,
  name: 'ganache',
  nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
  rpcUrls: { default: { http: ['http://127.0.0.1'] } },
});
