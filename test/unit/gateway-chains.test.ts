import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChainConfigError, defaultChainsPath, loadChains, parseChainsConfig } from '../../src/gateway/chains.js';

/** The chain registry: the shipped config, overrides, and clear errors for bad config. */

const jsonrpcChain = (extra: Record<string, unknown> = {}) => ({
  id: 'eth',
  name: 'Ethereum',
  protocol: 'jsonrpc',
  upstreams: [{ url: 'https://node.example/rpc' }],
  ...extra,
});

function writeConfig(content: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'gw-chains-'));
  const path = join(dir, 'chains.json');
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

const errorOf = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ChainConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ChainConfigError');
};

describe('the shipped config', () => {
  it('names every chain of the design, each with public endpoints, and local on 127.0.0.1:8545', () => {
    const registry = loadChains({ env: {} });
    const ids = registry.list().map((c) => c.id);
    expect(ids.sort()).toEqual(['arb', 'atom', 'avax', 'base', 'bsc', 'eth', 'kas', 'local', 'matic', 'op', 'scr', 'sei', 'sol', 'sui', 'trx'].sort());
    for (const chain of registry.list()) {
      expect(chain.upstreams.length).toBeGreaterThan(0);
      if (chain.id !== 'local') for (const u of chain.upstreams) expect(u.url.protocol).toBe('https:');
    }
    expect(registry.get('local')?.upstreams[0]?.url.href).toBe('http://127.0.0.1:8545/');
    expect(registry.get('sol')).toMatchObject({ protocol: 'rest', restFlavour: 'solana', acceptsJsonRpc: true });
    expect(registry.get('sui')).toMatchObject({ protocol: 'rest', restFlavour: 'sui', acceptsJsonRpc: true });
    const sui = registry.get('sui')!;
    for (const m of ['sui_getObject', 'suix_getBalance', 'unsafe_moveCall', 'rpc.discover']) expect(sui.isMethodAllowed(m), m).toBe(true);
    for (const m of ['eth_blockNumber', 'getSlot', 'debug_traceTransaction']) expect(sui.isMethodAllowed(m), m).toBe(false);
    expect(sui.isWriteMethod('sui_executeTransactionBlock')).toBe(true);
    expect(registry.get('trx')).toMatchObject({ restFlavour: 'passthrough', acceptsJsonRpc: false });
    expect(defaultChainsPath()).toMatch(/config[/\\]chains\.json$/);
  });

  it('denies admin, personal, debug and miner methods by default, whatever the case', () => {
    const eth = loadChains({ env: {} }).get('eth')!;
    for (const m of ['admin_peers', 'personal_sign', 'debug_traceCall', 'miner_start', 'Admin_Peers']) expect(eth.isMethodAllowed(m), m).toBe(false);
    for (const m of ['eth_blockNumber', 'eth_call', 'net_version', 'web3_clientVersion']) expect(eth.isMethodAllowed(m), m).toBe(true);
    expect(eth.isWriteMethod('eth_sendRawTransaction')).toBe(true);
    expect(eth.isWriteMethod('eth_getBalance')).toBe(false);
  });

  it('knows which REST calls are reads', () => {
    const registry = loadChains({ env: {} });
    const trx = registry.get('trx')!;
    expect(trx.isReadOnlyPost('wallet/getnowblock')).toBe(true);
    expect(trx.isReadOnlyPost('wallet/broadcasttransaction')).toBe(false);
    expect(trx.isPathAllowed('wallet/easytransferbyprivate')).toBe(false);
    const sol = registry.get('sol')!;
    expect(sol.isRestMethodAllowed('getBlockHeight')).toBe(true);
    expect(sol.isRestMethodAllowed('sendTransaction')).toBe(true);
    expect(sol.isWriteMethod('sendTransaction')).toBe(true);
    expect(sol.isRestMethodAllowed('admin_peers')).toBe(false);
  });

  it('gives TRON its JSON-RPC path with the node’s read methods only, and java-tron’s way of reporting errors in a 200', () => {
    const trx = loadChains({ env: {} }).get('trx')!;
    expect(trx).toMatchObject({ jsonRpcPath: 'jsonrpc', errorBody: 'tron', acceptsJsonRpc: false });
    for (const m of ['eth_blockNumber', 'eth_call', 'eth_getBalance', 'eth_getLogs', 'net_version', 'web3_clientVersion'])
      expect(trx.isMethodAllowed(m), m).toBe(true);
    for (const m of ['eth_sendRawTransaction', 'eth_newFilter', 'eth_subscribe', 'debug_traceTransaction', 'buildTransaction'])
      expect(trx.isMethodAllowed(m), m).toBe(false);
    expect(loadChains({ env: {} }).get('atom')).toMatchObject({ jsonRpcPath: null, errorBody: null });
  });
});

describe('overrides', () => {
  it('replaces a chain upstreams with UPSTREAM_<ID>', () => {
    const registry = loadChains({ env: { UPSTREAM_ETH: 'http://127.0.0.1:8545, http://127.0.0.1:8546' } });
    expect(registry.get('eth')?.upstreams.map((u) => [u.url.origin, u.label])).toEqual([
      ['http://127.0.0.1:8545', 'eth-env-1'],
      ['http://127.0.0.1:8546', 'eth-env-2'],
    ]);
  });

  it('reads another file from CHAINS_CONFIG and fills in labels, weights and timeouts', () => {
    const path = writeConfig({
      chains: [jsonrpcChain({ upstreams: [{ url: 'https://user:secret@node.example:8443/rpc' }, { url: 'https://node.example:8443/other' }] })],
    });
    const eth = loadChains({ env: { CHAINS_CONFIG: path } }).get('eth')!;
    expect(eth.timeoutMs).toBe(10_000);
    expect(eth.upstreams.map((u) => [u.label, u.weight])).toEqual([
      ['node.example:8443', 1],
      ['node.example:8443#2', 1],
    ]);
    // Credentials in the URL become a header and leave the URL.
    expect(eth.upstreams[0]?.url.href).toBe('https://node.example:8443/rpc');
    expect(eth.upstreams[0]?.headers.authorization).toBe(`Basic ${Buffer.from('user:secret').toString('base64')}`);
  });

  it('lets an override stand in for missing upstreams in the file', () => {
    const path = writeConfig({ chains: [jsonrpcChain({ upstreams: [] })] });
    expect(errorOf(() => loadChains({ configPath: path, env: {} }))).toContain('chains[0] (eth).upstreams: at least one upstream is required');
    expect(loadChains({ configPath: path, env: { UPSTREAM_ETH: 'http://127.0.0.1:1' } }).get('eth')?.upstreams).toHaveLength(1);
  });
});

describe('errors name the bad field', () => {
  it.each([
    [
      { chains: [jsonrpcChain({ upstreams: [{ url: 'ftp://node.example' }] })] },
      'chains[0] (eth).upstreams[0].url: must be an absolute http:// or https:// URL (got "ftp://node.example")',
    ],
    [{ chains: [jsonrpcChain({ upstreams: [{ url: 'not a url' }] })] }, 'chains[0] (eth).upstreams[0].url'],
    [{ chains: [jsonrpcChain({ protocol: 'grpc' })] }, 'chains[0] (eth).protocol: Invalid option'],
    [{ chains: [jsonrpcChain({ protocol: 'rest' })] }, 'chains[0] (eth).rest: a rest chain needs'],
    [{ chains: [jsonrpcChain({ upstreams: undefined })] }, 'chains[0] (eth).upstreams'],
    [{ chains: [jsonrpcChain(), jsonrpcChain()] }, 'chains[1] (eth).id: duplicate chain id "eth"'],
    [{ chains: [jsonrpcChain({ id: 'ETH!' })] }, 'chains[0] (ETH!).id: must be lowercase'],
    [{ chains: [jsonrpcChain({ timeout: 5 })] }, 'Unrecognized key: "timeout"'],
    [{ chains: [] }, 'chains: at least one chain is required'],
    [{ chains: [jsonrpcChain({ jsonRpcPath: 'jsonrpc', allowedMethods: ['eth_*'] })] }, 'chains[0] (eth).jsonRpcPath: only "rest": "passthrough" chains take'],
    [{ chains: [jsonrpcChain({ errorBody: 'tron' })] }, 'chains[0] (eth).errorBody: only "rest": "passthrough" chains take'],
    [
      { chains: [jsonrpcChain({ protocol: 'rest', rest: 'passthrough', errorBody: 'geth' })] },
      'chains[0] (eth).errorBody: Invalid input: expected "tron" (got "geth")',
    ],
    [
      { chains: [jsonrpcChain({ protocol: 'rest', rest: 'passthrough', jsonRpcPath: 'jsonrpc' })] },
      'chains[0] (eth).allowedMethods: a chain with "jsonRpcPath" needs',
    ],
    [
      { chains: [jsonrpcChain({ protocol: 'rest', rest: 'passthrough', jsonRpcPath: 'a/b', allowedMethods: ['eth_*'] })] },
      'chains[0] (eth).jsonRpcPath: must be one path segment',
    ],
    [{ chains: [jsonrpcChain({ chainId: 0 })] }, 'chains[0] (eth).chainId: Too small'],
    [{ chains: [jsonrpcChain({ chainId: '0x1' })] }, 'chains[0] (eth).chainId: Invalid input: expected number'],
    [{ chains: [jsonrpcChain({ genesisHash: 'abc' })] }, 'chains[0] (eth).genesisHash: must be a base58 hash'],
    [
      { chains: [jsonrpcChain({ genesisHash: '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d' })] },
      'chains[0] (eth).genesisHash: only "rest": "solana" chains take',
    ],
    [{ chains: [jsonrpcChain({ protocol: 'rest', rest: 'sui', chainId: 1 })] }, 'chains[0] (eth).chainId: only jsonrpc (EVM) chains take "chainId"'],
    [{ chains: [jsonrpcChain({ chainId: 1, finality: 'none' })] }, "chains[0] (eth).chainId: head tracking asks the nodes' network"],
  ])('%#', (config, message) => {
    expect(errorOf(() => parseChainsConfig(config, 'test.json'))).toContain(message);
  });

  it('names an unreadable file, bad JSON, a bad override URL and an override for no chain', () => {
    expect(errorOf(() => loadChains({ configPath: '/nonexistent/chains.json', env: {} }))).toContain('cannot read chain config /nonexistent/chains.json');
    expect(errorOf(() => loadChains({ configPath: writeConfig('{ nope'), env: {} }))).toContain('is not valid JSON');
    expect(errorOf(() => loadChains({ env: { UPSTREAM_ETH: 'localhost:8545' } }))).toContain(
      'UPSTREAM_ETH: "localhost:8545" is not an absolute http:// or https:// URL',
    );
    expect(errorOf(() => loadChains({ env: { UPSTREAM_ETHH: 'http://127.0.0.1:8545' } }))).toContain('UPSTREAM_ETHH names no chain');
  });
});

describe('head tracking', () => {
  const headsOf = (chain: Record<string, unknown>) => parseChainsConfig({ chains: [chain] }, 'test.json').list()[0]?.heads;
  const solana = (extra: Record<string, unknown> = {}) =>
    jsonrpcChain({ id: 'sol', name: 'Solana', protocol: 'rest', rest: 'solana', jsonRpcPost: true, ...extra });

  it('follows EVM chains by block and Solana by slot, each with its own lag bound unless set', () => {
    expect(headsOf(jsonrpcChain())).toMatchObject({ family: 'evm', finality: 'finalized', maxLagBlocks: 10 });
    expect(headsOf(solana())).toMatchObject({ family: 'solana', finality: 'finalized', maxLagBlocks: 50 });
    expect(headsOf(solana({ maxLagBlocks: 150, finality: 32 }))).toMatchObject({ family: 'solana', finality: 32, maxLagBlocks: 150 });
  });

  it('names the network the nodes must be on where the config says it: an EVM chain id in decimal, a Solana genesis hash', () => {
    expect(headsOf(jsonrpcChain())?.network).toBeUndefined();
    expect(headsOf(jsonrpcChain({ chainId: 56 }))?.network).toBe('56');
    const hash = '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d';
    expect(headsOf(solana({ genesisHash: hash }))?.network).toBe(hash);
  });

  it('follows nothing with `finality: "none"`, nor on the other REST chains', () => {
    expect(headsOf(solana({ finality: 'none' }))).toBeNull();
    expect(headsOf(jsonrpcChain({ finality: 'none' }))).toBeNull();
    expect(headsOf(jsonrpcChain({ id: 'atom', protocol: 'rest', rest: 'passthrough' }))).toBeNull();
    expect(headsOf(jsonrpcChain({ id: 'sui', protocol: 'rest', rest: 'sui', jsonRpcPost: true }))).toBeNull();
  });
});
