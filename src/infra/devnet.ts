/**
 * The `local` chain's node on the embedded default: an in-process ganache EVM devnet on
 * loopback, so the README's first call works with no internet. Loaded only when used.
 */
export interface Devnet {
  url: string;
  close(): Promise<void>;
}

interface GanacheServer {
  listen(port: number, host: string): Promise<void>;
  close(): Promise<void>;
  address(): { port: number };
}

export async function startDevnet(options: { port?: number; chainId?: number } = {}): Promise<Devnet> {
  const ganache = (await import('ganache')).default as unknown as { server(options: unknown): GanacheServer };
  const server = ganache.server({
    logging: { quiet: true },
    wallet: { deterministic: true },
    chain: { chainId: options.chainId ?? 1337 },
  });
  await server.listen(options.port ?? 0, '127.0.0.1');
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}
