import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { ERROR_BODY_KINDS, type ErrorBodyKind } from './errorBody.js';
import { compileGlobs, type Matcher } from './glob.js';

/**
 * The chain registry: which chains the gateway serves, in which protocol, and where their
 * nodes are. Read from `config/chains.json` (or `CHAINS_CONFIG`), validated with zod, with one
 * chain's upstreams overridable by `UPSTREAM_<ID>=url[,url…]`.
 */

/** Methods no public caller may reach, whatever the node exposes. */
export const DEFAULT_DENIED_METHODS = ['admin_*', 'personal_*', 'debug_*', 'miner_*', 'engine_*'];

/**
 * Calls that change state or submit something: never retried on another upstream (a retry could
 * submit twice) and, over REST, only accepted with POST.
 */
export const DEFAULT_WRITE_METHODS = [
  'eth_sendRawTransaction',
  'eth_sendTransaction',
  'eth_sendRawTransactionConditional',
  // EIP-7966 (a submission that waits for its receipt) and ERC-4337 bundlers' user operations.
  'eth_sendRawTransactionSync',
  'eth_sendUserOperation',
  'eth_sendBundle',
  'eth_sendPrivateTransaction',
  'eth_sendPrivateRawTransaction',
  'eth_cancelPrivateTransaction',
  'eth_submitWork',
  'eth_submitHashrate',
  'evm_*',
  'hardhat_*',
  'anvil_*',
  'sendTransaction',
  'requestAirdrop',
  'sui_executeTransactionBlock',
];

/** JSON-RPC methods reachable as `GET|POST /<chain>/<token>/<method>` per REST flavour. */
const DEFAULT_REST_METHODS: Record<'solana' | 'sui', string[]> = {
  solana: ['get*', 'isBlockhashValid', 'minimumLedgerSlot', 'simulateTransaction', 'sendTransaction', 'requestAirdrop'],
  sui: ['sui_*', 'suix_*', 'unsafe_*'],
};

const isHttpUrl = (value: string): boolean => {
  try {
    const u = new URL(value);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
  } catch {
    return false;
  }
};

const isWsUrl = (value: string): boolean => {
  try {
    const u = new URL(value);
    return (u.protocol === 'ws:' || u.protocol === 'wss:') && u.hostname !== '';
  } catch {
    return false;
  }
};

const Glob = z.string().min(1).max(200);

/**
 * First path segments the service answers itself. A known chain's GET and POST calls are taken
 * before any other route (src/gateway/front.ts), so a chain of one of these ids would take the
 * management API (`/api/v1/...`), the dashboard's files or the health and metrics endpoints.
 */
export const RESERVED_CHAIN_IDS: readonly string[] = ['api', 'assets', 'healthz', 'readyz', 'metrics'];

/**
 * A node URL as an error message may show it: node URLs carry API keys (`https://user:key@…`,
 * Infura's `/v3/<key>`, `?apikey=…`), and start-up errors end in logs. The user part and every
 * query value are masked, and so is each path segment long enough to be a key (16 characters
 * or more of letters, digits, `_` or `-`); the scheme, host and port stay, to find the entry.
 * Text, not a parsed URL: the URLs shown are the ones that do not parse.
 */
export function redactNodeUrl(text: string): string {
  const masked = text.replace(/[^/@\s]+@/, '***@');
  // The path begins at the first `/`, `?` or `#` after the host (after `//` when there is one).
  const authority = masked.indexOf('//');
  const from = authority < 0 ? 0 : authority + 2;
  const offset = masked.slice(from).search(/[/?#]/);
  if (offset < 0) return masked;
  const pathAt = from + offset;
  const tail = masked
    .slice(pathAt)
    .replace(/\/[A-Za-z0-9_-]{16,}(?=[/?#]|$)/g, '/***')
    .replace(/([?&][^=&#]*)=[^&#]*/g, '$1=***');
  return masked.slice(0, pathAt) + tail;
}

const UpstreamConfig = z
  .object({
    url: z.string().refine(isHttpUrl, { message: 'must be an absolute http:// or https:// URL' }),
    weight: z.number().int().min(1).max(1000).default(1),
    label: z.string().min(1).max(100).optional(),
    /** Extra headers for this node, e.g. a provider's API key header. */
    headers: z.record(z.string(), z.string()).optional(),
    /** The node's WebSocket endpoint (eth_subscribe), when it has one. */
    ws: z.string().refine(isWsUrl, { message: 'must be an absolute ws:// or wss:// URL' }).optional(),
    /** The node keeps all historical state: calls for state older than a full node keeps go to it. */
    archive: z.boolean().optional(),
    /**
     * Calls a second this gateway process sends the node while another node can take them (a
     * provider plan's cap; with N gateways, the cap ÷ N). Unset: no budget.
     */
    maxRps: z.number().int().min(1).max(1_000_000).optional(),
  })
  .strict();

const ChainConfig = z
  .object({
    id: z
      .string()
      .regex(/^[a-z][a-z0-9]{0,31}$/, { message: 'must be lowercase letters and digits, starting with a letter' })
      .refine((id) => !RESERVED_CHAIN_IDS.includes(id), {
        message: `is a path the service serves itself (${RESERVED_CHAIN_IDS.join(', ')}): the chain would take its calls`,
      }),
    name: z.string().min(1),
    protocol: z.enum(['jsonrpc', 'rest']),
    rest: z.enum(['solana', 'sui', 'passthrough']).optional(),
    /** A REST chain that also takes JSON-RPC POSTs on `/<chain>/<token>` (Solana). */
    jsonRpcPost: z.boolean().optional(),
    /**
     * A passthrough chain whose nodes also serve JSON-RPC on this path of their URL (TRON's
     * `jsonrpc`): `POST /<chain>/<token>/<path>` is handled as JSON-RPC, each batch member
     * admitted and metered, `allowedMethods` naming what may reach the node.
     */
    jsonRpcPath: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,64}$/, { message: 'must be one path segment of letters, digits, _ or -' })
      .optional(),
    /** How a passthrough chain's nodes report an error in a 2xx answer ("tron": java-tron's `Error` and result codes). */
    errorBody: z.enum(ERROR_BODY_KINDS).optional(),
    upstreams: z.array(UpstreamConfig).min(1, { message: 'at least one upstream is required' }),
    /** How long one node may take to answer one call (each attempt: a retry or hedge on another node gets its own, within `callTimeoutMs`). */
    timeoutMs: z.number().int().min(1).max(300_000).default(10_000),
    /**
     * How long a caller waits for a call's answer, whatever the retries and hedges on other nodes
     * (each attempt gets the smaller of `timeoutMs` and what is left); unset: `timeoutMs`.
     */
    callTimeoutMs: z.number().int().min(1).max(300_000).optional(),
    allowedMethods: z.array(Glob).optional(),
    deniedMethods: z.array(Glob).optional(),
    writeMethods: z.array(Glob).optional(),
    restMethods: z.array(Glob).optional(),
    allowedPaths: z.array(Glob).optional(),
    deniedPaths: z.array(Glob).optional(),
    readOnlyPosts: z.array(Glob).optional(),
    /**
     * Head tracking (EVM, and Solana's slots): "finalized" follows the nodes' `finalized` block tag
     * (Solana: the `finalized` commitment); a number says how many blocks under the head are final
     * (chains without the tag); "none" tracks nothing.
     */
    finality: z.union([z.literal('finalized'), z.literal('none'), z.number().int().min(1).max(100_000)]).default('finalized'),
    /** An upstream this many blocks (Solana: slots) behind the best gets no call that depends on the head; unset: 10 (Solana: 50). */
    maxLagBlocks: z.number().int().min(0).max(100_000).optional(),
    /** Recent blocks whose state a full node keeps; older state goes to `archive` upstreams. */
    fullNodeHistoryBlocks: z.number().int().min(1).max(10_000_000).default(128),
    /** How often each upstream's head is polled. */
    headPollMs: z.number().int().min(100).max(600_000).default(2_000),
    /**
     * An eth_getLogs over more blocks than this is sent as sub-ranges of at most this many blocks
     * and their logs merged into one answer (the nodes' own range limit); unset: sent whole.
     */
    getLogsMaxBlockRange: z.number().int().min(1).max(10_000_000).optional(),
    /** The most sub-ranges one eth_getLogs is split into; one needing more goes to the node whole. */
    getLogsMaxSplits: z.number().int().min(2).max(1_000).optional(),
    /**
     * The EVM network the chain's nodes must be on, as `eth_chainId` says it (1: Ethereum): a
     * node on another gets no call. Unset: the one more than half of the nodes say.
     */
    chainId: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
    /** The Solana cluster the chain's nodes must be on, by its genesis hash (`getGenesisHash`); unset: the one most nodes say. */
    genesisHash: z
      .string()
      .regex(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/, { message: 'must be a base58 hash, as getGenesisHash answers' })
      .optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.protocol === 'rest' && c.rest === undefined) {
      ctx.addIssue({ code: 'custom', path: ['rest'], message: 'a rest chain needs "rest": "solana" | "sui" | "passthrough"' });
    }
    if (c.protocol === 'jsonrpc' && c.rest !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['rest'], message: 'only rest chains take a "rest" flavour' });
    }
    if (c.callTimeoutMs !== undefined && c.callTimeoutMs < c.timeoutMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['callTimeoutMs'],
        message: `a call's wait (${c.callTimeoutMs} ms) shorter than one node's "timeoutMs" (${c.timeoutMs} ms): lower "timeoutMs" instead`,
      });
    }
    if (c.getLogsMaxBlockRange !== undefined && c.protocol !== 'jsonrpc') {
      ctx.addIssue({ code: 'custom', path: ['getLogsMaxBlockRange'], message: 'only jsonrpc (EVM) chains take "getLogsMaxBlockRange"' });
    }
    if (c.getLogsMaxSplits !== undefined && c.getLogsMaxBlockRange === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['getLogsMaxSplits'],
        message: '"getLogsMaxSplits" bounds the splitting "getLogsMaxBlockRange" turns on: give both',
      });
    }
    // Nodes say their network to head tracking: not asked where nothing is followed.
    const family = c.protocol === 'jsonrpc' ? 'evm' : c.rest === 'solana' ? 'solana' : null;
    if (c.chainId !== undefined && family !== 'evm') {
      ctx.addIssue({ code: 'custom', path: ['chainId'], message: 'only jsonrpc (EVM) chains take "chainId"; a Solana chain takes "genesisHash"' });
    }
    if (c.genesisHash !== undefined && family !== 'solana') {
      ctx.addIssue({ code: 'custom', path: ['genesisHash'], message: 'only "rest": "solana" chains take "genesisHash"; an EVM chain takes "chainId"' });
    }
    for (const key of ['chainId', 'genesisHash'] as const) {
      if (c[key] !== undefined && c.finality === 'none') {
        ctx.addIssue({ code: 'custom', path: [key], message: `head tracking asks the nodes' network: "${key}" needs a "finality" other than "none"` });
      }
    }
    for (const key of ['jsonRpcPath', 'errorBody'] as const) {
      if (c[key] !== undefined && c.rest !== 'passthrough') {
        ctx.addIssue({ code: 'custom', path: [key], message: `only "rest": "passthrough" chains take "${key}"` });
      }
    }
    if (c.jsonRpcPath !== undefined && c.allowedMethods === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['allowedMethods'],
        message: 'a chain with "jsonRpcPath" needs "allowedMethods": the node methods callers may reach there',
      });
    }
    const labels = new Set<string>();
    c.upstreams.forEach((u, i) => {
      if (u.label === undefined) return;
      if (labels.has(u.label)) ctx.addIssue({ code: 'custom', path: ['upstreams', i, 'label'], message: `duplicate label "${u.label}"` });
      labels.add(u.label);
    });
  });

export const ChainsFile = z
  .object({ chains: z.array(ChainConfig).min(1, { message: 'at least one chain is required' }) })
  .strict()
  .superRefine((file, ctx) => {
    const seen = new Set<string>();
    file.chains.forEach((c, i) => {
      if (seen.has(c.id)) ctx.addIssue({ code: 'custom', path: ['chains', i, 'id'], message: `duplicate chain id "${c.id}"` });
      seen.add(c.id);
    });
  });
export type ChainsFile = z.infer<typeof ChainsFile>;
type ChainConfig = z.infer<typeof ChainConfig>;

export interface Upstream {
  url: URL;
  weight: number;
  /** Names the node in usage records and health reports. */
  label: string;
  headers: Record<string, string>;
  /** Its WebSocket endpoint (subscriptions go there); null when it has none. */
  ws: URL | null;
  /** Keeps all historical state (config `archive`). */
  archive: boolean;
  /** Calls a second this process sends it while another node is within its own (config `maxRps`); absent: no budget. */
  maxRps?: number;
}

/** How a chain's heads are followed; null where nothing is tracked. */
export interface HeadTracking {
  /** What is polled: an EVM node's latest and finalized blocks, or a Solana node's slots (`getSlot` at `processed` and `finalized`). */
  family: 'evm' | 'solana';
  finality: 'finalized' | number;
  maxLagBlocks: number;
  fullNodeHistoryBlocks: number;
  pollMs: number;
  /** The network its nodes must be on (an EVM chain id in decimal, a Solana genesis hash); absent: the one most of them say. */
  network?: string;
}

export type RestFlavour = 'solana' | 'sui' | 'passthrough';

/** How an EVM chain's wide eth_getLogs calls are split (src/gateway/upstreams/logsSplit.ts). */
export interface LogsSplitting {
  /** Blocks one sub-call covers at most. */
  maxBlockRange: number;
  /** Sub-calls one call is split into at most. */
  maxSplits: number;
}

/** Sub-calls of one eth_getLogs when the chain's config does not say. */
export const DEFAULT_GET_LOGS_MAX_SPLITS = 20;

export interface Chain {
  id: string;
  name: string;
  protocol: 'jsonrpc' | 'rest';
  restFlavour: RestFlavour | null;
  /** JSON-RPC bodies are accepted on `POST /<chain>[/<token>]`. */
  acceptsJsonRpc: boolean;
  /** A passthrough chain's JSON-RPC endpoint: `POST /<chain>/<token>/<path>`, forwarded to the node's `<path>`; null: none. */
  jsonRpcPath: string | null;
  /** How its nodes report an error inside a 2xx answer (metered as an error); null: they do not. */
  errorBody: ErrorBodyKind | null;
  upstreams: Upstream[];
  /** One node's time for one call (an attempt). */
  timeoutMs: number;
  /** The caller's wait for a call, retries and hedges included (config `callTimeoutMs`, else `timeoutMs`). */
  callTimeoutMs: number;
  heads: HeadTracking | null;
  /**
   * Whether its nodes take a JSON-RPC batch. A Sui full node does not (it answers any batch with
   * one -32005 "Batched requests are not supported by this server"): a caller's batch is then
   * sent member by member.
   */
  upstreamBatches: boolean;
  /** Wide eth_getLogs calls split into sub-ranges (config `getLogsMaxBlockRange`); null: sent whole. */
  getLogsSplit: LogsSplitting | null;
  isMethodAllowed: Matcher;
  isWriteMethod: Matcher;
  isRestMethodAllowed: Matcher;
  isPathAllowed: Matcher;
  isReadOnlyPost: Matcher;
}

export class ChainConfigError extends Error {
  readonly code = 'invalid_chain_config';
  constructor(message: string) {
    super(message);
    this.name = 'ChainConfigError';
  }
}

export class ChainRegistry {
  private readonly byId: Map<string, Chain>;
  constructor(chains: Chain[]) {
    this.byId = new Map(chains.map((c) => [c.id, c]));
  }
  get(id: string): Chain | undefined {
    return this.byId.get(id);
  }
  list(): Chain[] {
    return [...this.byId.values()];
  }
}

function defaultLabels(upstreams: ChainConfig['upstreams']): string[] {
  const used = new Set(upstreams.flatMap((u) => (u.label ? [u.label] : [])));
  return upstreams.map((u) => {
    if (u.label) return u.label;
    const host = new URL(u.url).host;
    let label = host;
    for (let n = 2; used.has(label); n++) label = `${host}#${n}`;
    used.add(label);
    return label;
  });
}

function basicAuthHeader(url: URL): Record<string, string> {
  if (url.username === '' && url.password === '') return {};
  const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
  return { authorization: `Basic ${Buffer.from(credentials).toString('base64')}` };
}

function toChain(c: ChainConfig): Chain {
  const labels = defaultLabels(c.upstreams);
  const upstreams = c.upstreams.map((u, i): Upstream => {
    const url = new URL(u.url);
    const headers = { ...basicAuthHeader(url), ...(u.headers ?? {}) };
    url.username = '';
    url.password = '';
    const ws = u.ws === undefined ? null : new URL(u.ws);
    return {
      url,
      weight: u.weight,
      label: labels[i] as string,
      headers,
      ws,
      archive: u.archive === true,
      ...(u.maxRps === undefined ? {} : { maxRps: u.maxRps }),
    };
  });
  const denied = compileGlobs(c.deniedMethods ?? DEFAULT_DENIED_METHODS);
  const allowed = c.allowedMethods ? compileGlobs(c.allowedMethods) : () => true;
  const isMethodAllowed: Matcher = (m) => allowed(m) && !denied(m);
  const flavour = c.rest ?? null;
  const restDefaults = flavour === 'solana' || flavour === 'sui' ? DEFAULT_REST_METHODS[flavour] : [];
  const restAllowed = compileGlobs(c.restMethods ?? restDefaults);
  const pathAllowed = c.allowedPaths ? compileGlobs(c.allowedPaths) : () => true;
  const pathDenied = compileGlobs(c.deniedPaths ?? []);
  return {
    id: c.id,
    name: c.name,
    protocol: c.protocol,
    restFlavour: flavour,
    acceptsJsonRpc: c.protocol === 'jsonrpc' || c.jsonRpcPost === true,
    jsonRpcPath: c.jsonRpcPath ?? null,
    errorBody: c.errorBody ?? null,
    upstreams,
    timeoutMs: c.timeoutMs,
    callTimeoutMs: c.callTimeoutMs ?? c.timeoutMs,
    heads: headTrackingOf(c, flavour),
    upstreamBatches: flavour !== 'sui',
    getLogsSplit:
      c.getLogsMaxBlockRange === undefined ? null : { maxBlockRange: c.getLogsMaxBlockRange, maxSplits: c.getLogsMaxSplits ?? DEFAULT_GET_LOGS_MAX_SPLITS },
    isMethodAllowed,
    isWriteMethod: compileGlobs(c.writeMethods ?? DEFAULT_WRITE_METHODS),
    isRestMethodAllowed: (m) => restAllowed(m) && isMethodAllowed(m),
    isPathAllowed: (p) => pathAllowed(p) && !pathDenied(p),
    isReadOnlyPost: compileGlobs(c.readOnlyPosts ?? []),
  };
}

/** Slots a Solana node may be behind the best (~20 s at 400 ms a slot): well over what polls 2 s apart show between healthy nodes. */
const SOLANA_MAX_LAG_SLOTS = 50;

/** EVM (JSON-RPC) chains' blocks and Solana's slots are followed, unless `finality` is "none". */
function headTrackingOf(c: ChainConfig, flavour: RestFlavour | null): HeadTracking | null {
  const family = c.protocol === 'jsonrpc' ? 'evm' : flavour === 'solana' ? 'solana' : null;
  if (family === null || c.finality === 'none') return null;
  return {
    family,
    finality: c.finality,
    maxLagBlocks: c.maxLagBlocks ?? (family === 'solana' ? SOLANA_MAX_LAG_SLOTS : 10),
    fullNodeHistoryBlocks: c.fullNodeHistoryBlocks,
    pollMs: c.headPollMs,
    ...(c.chainId !== undefined ? { network: String(c.chainId) } : c.genesisHash !== undefined ? { network: c.genesisHash } : {}),
  };
}

/** `chains[2] (eth).upstreams[0].url` — names the chain so an operator finds the line. */
function describePath(path: readonly PropertyKey[], raw: unknown): string {
  const parts = path.map((key) => (typeof key === 'number' ? `[${key}]` : `.${String(key)}`));
  if (path[0] === 'chains' && typeof path[1] === 'number') {
    const chains = raw && typeof raw === 'object' ? (raw as { chains?: unknown }).chains : undefined;
    const chain: unknown = Array.isArray(chains) ? chains[path[1]] : undefined;
    const id = chain && typeof chain === 'object' ? (chain as { id?: unknown }).id : undefined;
    if (typeof id === 'string') parts[1] = `${parts[1]} (${id})`;
  }
  const out = parts.join('').replace(/^\./, '');
  return out === '' ? '(root)' : out;
}

/** Validates a parsed chains file; `source` names it in error messages. */
export function parseChainsConfig(raw: unknown, source: string): ChainRegistry {
  const result = ChainsFile.safeParse(raw, { reportInput: true });
  if (!result.success) {
    const issues = result.error.issues.map((issue) => {
      // What was there helps find it, except a secret: header values never, node URLs masked.
      const shown = 'input' in issue && issue.input !== undefined && typeof issue.input !== 'object' && !issue.path.includes('headers');
      const last = issue.path[issue.path.length - 1];
      const value = shown && typeof issue.input === 'string' && (last === 'url' || last === 'ws') ? redactNodeUrl(issue.input) : issue.input;
      return `${describePath(issue.path, raw)}: ${issue.message}${shown ? ` (got ${JSON.stringify(value)})` : ''}`;
    });
    // One line (a log line each, as every other start-up error), each issue by its place in the file.
    throw new ChainConfigError(`invalid chain config ${source}: ${issues.join('; ')}`);
  }
  return new ChainRegistry(result.data.chains.map(toChain));
}

export const envKeyFor = (chainId: string): string => `UPSTREAM_${chainId.toUpperCase()}`;

/** `UPSTREAM_<ID>_WS=url[,url…]`: the WebSocket endpoints of the nodes `UPSTREAM_<ID>` lists, in the same order. */
const WS_SUFFIX = '_WS';

/** Applies `UPSTREAM_<ID>=url[,url…]` (and `UPSTREAM_<ID>_WS`) to the raw file before validation. */
function applyUpstreamOverrides(raw: unknown, env: Record<string, string | undefined>): unknown {
  const set = (k: string, v: string | undefined): v is string => k.startsWith('UPSTREAM_') && v !== undefined && v.trim() !== '';
  const overrides = Object.entries(env).filter(([k, v]) => set(k, v) && !k.endsWith(WS_SUFFIX));
  const wsOverrides = Object.entries(env).filter(([k, v]) => set(k, v) && k.endsWith(WS_SUFFIX));
  if (overrides.length === 0) return raw;
  if (!raw || typeof raw !== 'object' || !Array.isArray((raw as { chains?: unknown }).chains)) return raw;
  const chains = (raw as { chains: unknown[] }).chains.map((c) => (c && typeof c === 'object' ? { ...(c as object) } : c)) as Array<Record<string, unknown>>;
  for (const [key, value] of overrides) {
    const target = chains.find((c) => c && typeof c.id === 'string' && envKeyFor(c.id) === key);
    if (!target) {
      const known = chains.flatMap((c) => (c && typeof c.id === 'string' ? [envKeyFor(c.id)] : []));
      throw new ChainConfigError(`${key} names no chain in the registry (known: ${known.join(', ')})`);
    }
    const urls = (value as string)
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '');
    if (urls.length === 0) throw new ChainConfigError(`${key} lists no URL (give url[,url…], or unset it for the chain config's nodes)`);
    const bad = urls.find((u) => !isHttpUrl(u));
    if (bad !== undefined) throw new ChainConfigError(`${key}: ${JSON.stringify(redactNodeUrl(bad))} is not an absolute http:// or https:// URL`);
    const wsUrls = (env[`${key}${WS_SUFFIX}`] ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '');
    const badWs = wsUrls.find((u) => !isWsUrl(u));
    if (badWs !== undefined) throw new ChainConfigError(`${key}${WS_SUFFIX}: ${JSON.stringify(redactNodeUrl(badWs))} is not an absolute ws:// or wss:// URL`);
    // The n-th WebSocket endpoint is the n-th node's: one more than there are nodes would be dropped unseen.
    if (wsUrls.length > urls.length) {
      throw new ChainConfigError(
        `${key}${WS_SUFFIX} lists ${wsUrls.length} WebSocket endpoints for the ${urls.length} node${urls.length === 1 ? '' : 's'} of ${key} (the n-th is the n-th node's)`,
      );
    }
    // A URL list has no room for per-node options: these nodes have weight 1, no `archive`, no `maxRps` (use the file for those).
    target.upstreams = urls.map((url, i) => ({ url, weight: 1, label: `${target.id}-env-${i + 1}`, ...(wsUrls[i] ? { ws: wsUrls[i] } : {}) }));
  }
  const orphan = wsOverrides.find(([key]) => !overrides.some(([k]) => `${k}${WS_SUFFIX}` === key));
  if (orphan)
    throw new ChainConfigError(`${orphan[0]} needs ${orphan[0].slice(0, -WS_SUFFIX.length)} beside it (the nodes whose WebSocket endpoints it lists)`);
  return { ...(raw as object), chains };
}

/** The shipped `config/chains.json`, found from the source tree or from `dist/`. */
export function defaultChainsPath(): string {
  const candidates = ['../../config/chains.json', '../../../config/chains.json'].map((rel) => fileURLToPath(new URL(rel, import.meta.url)));
  return candidates.find((p) => existsSync(p)) ?? (candidates[0] as string);
}

export function loadChains(options: { configPath?: string; env?: Record<string, string | undefined> } = {}): ChainRegistry {
  const env = options.env ?? process.env;
  const path = options.configPath ?? env.CHAINS_CONFIG ?? defaultChainsPath();
  // Named as the operator gave it: the variable, when it came from one.
  const source = options.configPath === undefined && env.CHAINS_CONFIG !== undefined ? `${path} (CHAINS_CONFIG)` : path;
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ChainConfigError(`cannot read chain config ${source}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ChainConfigError(`chain config ${source} is not valid JSON: ${(err as Error).message}`);
  }
  return parseChainsConfig(applyUpstreamOverrides(raw, env), source);
}
