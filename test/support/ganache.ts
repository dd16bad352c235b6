import ganache from 'ganache';

/**
 * A real local EVM node (ganache) on a loopback port, deterministic accounts unlocked, blocks
 * mined per transaction. Start one per test file; close it in afterAll.
 */
export interface GanacheNode {
  url: string;
  close(): Promise<void>;
}

export async function startGanache(): Promise<GanacheNode> {
  const server = ganache.server({
    logging: { quiet: true },
    wallet: { deterministic: true },
    chain: { chainId: 1337 },
  });
  await server.listen(0, '127.0.0.1');
  const { port } = server.address();
  return { url: `http://127.0.0.1:${port}`, close: () => server.close() };
}

/** The first deterministic ganache account (funded with 1000 ETH). */
export const GANACHE_ACCOUNT_0 = '0x90f8bf6a479f320ead074411a4b0e7944ea8c9c1';
export const GANACHE_ACCOUNT_1 = '0xffcf8fdee72ac11b5c542428b35eef5769c409f0';
