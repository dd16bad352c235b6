import type { HeadTracking } from '../chains.js';
import { blockNumberOf, blockTimeOf } from './evmCalls.js';
import type { PushedHeadsHandlers } from './pushedHeads.js';

/**
 * Head and finality tracking of one chain's upstreams (EVM; Solana by slot, its `processed` slot
 * as the head and its `finalized` one as the finalized block, no hash): each node's latest block
 * (number and hash) and finalized block are polled, the best head among them is the chain's, and a node
 * more than `maxLagBlocks` behind it is lagging (no call that depends on the head goes to it).
 * A node that claims a head far ahead of every other node, or a finalized block above its own
 * head twice in a row (once is a race: a block between its two probes), is lying: it gets no
 * call at all until its answers are plausible again. The nodes it leads are asked whether they
 * are syncing (EVM `eth_syncing`): one catching up from scratch is lagging, measured by the
 * network head it reports; with one node against one, neither is judged until it answers.
 * Each node is asked its network too (EVM `eth_chainId`, Solana `getGenesisHash`): one on
 * another than the chain's (configured, else what most of its nodes say) gets no call at all.
 *
 * Where a node offers it (a WebSocket URL), its head is pushed (EVM `newHeads`, Solana
 * `slotSubscribe`: pushedHeads.ts): a new head counts at once, not at the next poll, and the poll asks that node only for its
 * finalized block; while the push is down, or silent for two poll intervals (a stuck node, a
 * half-open connection), the node is polled as the others.
 *
 * Polling and pushes run only while the chain has traffic: a gateway serving nobody does not
 * call nodes.
 */

export type HeadStatus = 'unknown' | 'ok' | 'lagging' | 'liar' | 'wrong_network';

/** Statuses that take no call at all: a node lying about its head, or on another network than its chain's. */
export const takesNoCall = (status: HeadStatus | undefined): boolean => status === 'liar' || status === 'wrong_network';

export interface UpstreamHead {
  label: string;
  head: number | null;
  hash: string | null;
  /** Its head block's time (ms), where its answers say it (EVM's `timestamp`); null: not known. */
  headTime: number | null;
  finalized: number | null;
  /** Its finalized block's hash, where the chain has the tag (null: not known). */
  finalizedHash: string | null;
  /** Its confirmed slot (Solana's `confirmed` commitment: voted on by a supermajority); null: not known, or not a level of the chain. */
  confirmed: number | null;
  /** When its last poll succeeded (ms), 0: never. */
  okAt: number;
  /** The last head it reported that was believed: a jump far past it is a lie, even with no other node to compare. */
  believedHead: number | null;
  status: HeadStatus;
}

/** One poll's answer from a node: its latest block and, where the chain has the tag, its finalized block. */
export interface HeadSample {
  head: number;
  hash: string | null;
  /** The head block's time (ms), where the answer says it; absent or null: not known. */
  time?: number | null;
  finalized: number | null;
  /** The finalized block's hash, where it was asked (the `finalized` tag). */
  finalizedHash?: string | null;
  /** Its confirmed slot, where it was asked (Solana's `confirmed` commitment; a push leaves it as it was). */
  confirmed?: number | null;
}

/**
 * A head this far ahead of every other node's is not believed (a node cannot be that far ahead of
 * its peers), nor one this far past the node's own last believed head. EVM: 10,000 blocks (~33 h
 * on Ethereum). Solana: 1,000,000 slots (~4.6 days): a node restarted from a snapshot is often
 * thousands of slots (hours) behind, and with two nodes the one at the chain's slot would lead it
 * past a smaller bound and be called the liar.
 */
const MAX_PLAUSIBLE_LEAD = { evm: 10_000, solana: 1_000_000 } as const;

/** Sends a JSON-RPC body to upstream `index`; resolves to the answer's bytes, or null when it failed. */
export type Probe = (index: number, body: string) => Promise<Buffer | null>;

/** A node's head pushed to us: whether it is now, and how to stop it. */
export interface HeadPush {
  readonly live: boolean;
  stop(): void;
}

/** Starts pushing upstream `index`'s heads to `handlers`; null where the node offers no push. */
export type Follow = (index: number, handlers: PushedHeadsHandlers) => HeadPush | null;

/** A block (or slot) a poll found: its number, and its hash where the answer has one. */
interface BlockRef {
  number: number;
  hash: string | null;
  /** Its time (ms), where the answer says it (EVM's `timestamp`). */
  time?: number | null;
}

/** What a poll asks a node of a chain family, and how an answer's `result` is read. */
interface HeadProbes {
  latest: string;
  finalized: string;
  /** The confirmed level's probe, where the family has one (Solana's `confirmed` commitment). */
  confirmed?: string;
  /** All of them in one batch (ids 1, 2 and 3), where the family's nodes take one: answered by one backend behind a load balancer, never two. */
  all?: string;
  read(result: unknown): BlockRef | null;
}

/** What a poll found of a node: its head, its finalized block and (Solana) its confirmed slot; null where not found or not asked. */
interface PolledHeads {
  head: BlockRef | null;
  finalized: BlockRef | null;
  confirmed: BlockRef | null;
}

const EVM_PROBES: HeadProbes = {
  latest: '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["latest",false]}',
  finalized: '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["finalized",false]}',
  read: blockOfResult,
};

const SOLANA_PROBES: HeadProbes = {
  latest: '{"jsonrpc":"2.0","id":1,"method":"getSlot","params":[{"commitment":"processed"}]}',
  finalized: '{"jsonrpc":"2.0","id":1,"method":"getSlot","params":[{"commitment":"finalized"}]}',
  confirmed: '{"jsonrpc":"2.0","id":1,"method":"getSlot","params":[{"commitment":"confirmed"}]}',
  // Its finalized slot is ~32 under its processed one (13 s): two requests, two backends of a public endpoint ~13 s apart, and it read as a liar.
  all: '[{"jsonrpc":"2.0","id":1,"method":"getSlot","params":[{"commitment":"processed"}]},{"jsonrpc":"2.0","id":2,"method":"getSlot","params":[{"commitment":"finalized"}]},{"jsonrpc":"2.0","id":3,"method":"getSlot","params":[{"commitment":"confirmed"}]}]',
  read: slotOfResult,
};

/** What a node is asked of the network it is on: EVM's chain id, Solana's genesis hash (a cluster's). */
const NETWORK_PROBES = {
  evm: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}',
  solana: '{"jsonrpc":"2.0","id":1,"method":"getGenesisHash","params":[]}',
} as const;

/** JSON-RPC's "method not found". */
const METHOD_NOT_FOUND = -32601;

/** A node's network is asked again this long after it last was (the backends behind a URL may change), besides after a failed poll. */
const NETWORK_RECHECK_MS = 10 * 60_000;

/** A genesis hash: 32 bytes in base58. */
const BASE58_HASH = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;

/**
 * The network an answer to the network probe names, as the config writes it: an EVM chain id in
 * decimal (`0x01` and `0x1` are the same), a Solana genesis hash as given; null when it names none.
 */
export function networkOf(family: HeadTracking['family'], result: unknown): string | null {
  if (typeof result !== 'string') return null;
  if (family === 'solana') return BASE58_HASH.test(result) ? result : null;
  return /^0x[0-9a-fA-F]{1,64}$/.test(result) ? BigInt(result).toString() : null;
}

/**
 * A head block at most this old (its `timestamp`) is current: the node follows its chain. One
 * 10,000 blocks behind another is hours old (Ethereum: 33 h; Arbitrum at 4 blocks a second, 40
 * minutes): a node that far behind one whose head is current, with its own not current and
 * saying it is not syncing, is stalled (no peers, a stuck database), and the other is no liar.
 */
const CURRENT_HEAD_MS = 10 * 60_000;
/** A block time this far past the gateway's clock is still current (clocks differ). */
const CLOCK_SKEW_MS = 2 * 60_000;

/** Polling stops this long after the chain's last call. */
const IDLE_MS = 60_000;

/** The results of a JSON-RPC answer (a batch's by id, a single one's under 1); empty when it is none. */
function resultsOf(body: Buffer | null): Map<unknown, unknown> {
  return resultsIn(parsedAnswer(body));
}

/** An answer's JSON; undefined when there is none or it is not JSON. */
function parsedAnswer(body: Buffer | null): unknown {
  if (body === null) return undefined;
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}

/** resultsOf of an answer already parsed. */
function resultsIn(parsed: unknown): Map<unknown, unknown> {
  const results = new Map<unknown, unknown>();
  for (const a of Array.isArray(parsed) ? parsed : [parsed]) {
    if (typeof a === 'object' && a !== null && 'result' in a)
      results.set(Array.isArray(parsed) ? (a as { id?: unknown }).id : 1, (a as { result: unknown }).result);
  }
  return results;
}

/** The error of an answer (parsed) to a batch that is one JSON-RPC error object (-32600, -32700, "batch not supported", a rate limit…), not the batch's answers; null otherwise. */
function oneErrorOf(parsed: unknown): { code?: unknown; message?: unknown } | null {
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || !('error' in parsed)) return null;
  const error = (parsed as { error: unknown }).error;
  return typeof error === 'object' && error !== null ? (error as { code?: unknown; message?: unknown }) : {};
}

/** Whether an error to a batch says the node takes none: an invalid request or one it could not parse (an array), or a message naming batches; not a rate limit's. */
const refusesBatches = (error: { code?: unknown; message?: unknown }): boolean =>
  error.code === -32600 || error.code === -32700 || (typeof error.message === 'string' && /batch/i.test(error.message));

const SYNCING_PROBE = '{"jsonrpc":"2.0","id":1,"method":"eth_syncing","params":[]}';

/** What a node said of syncing: whether it is, and the network's head as it knows it from its peers (null: it knows none above its own); when (ms). */
interface SyncState {
  syncing: boolean;
  networkHead: number | null;
  /** It answered `false`: an error or no answer is no word of its own (counted as not syncing for the lead rule, asked again a poll later). */
  saidNot: boolean;
  /** It answered -32601 (no `eth_syncing`): not asked again for want of a word. */
  lacksMethod: boolean;
  at: number;
}

/**
 * An `eth_syncing` result: an object while syncing (its `highestBlock` the network's head, when
 * above its `currentBlock`), `false` when not; an error or no answer counts as not syncing, but
 * is not the node saying so.
 */
function syncStateOf(result: unknown): Omit<SyncState, 'at' | 'lacksMethod'> {
  if (typeof result !== 'object' || result === null) return { syncing: false, networkHead: null, saidNot: result === false };
  const progress = result as { currentBlock?: unknown; highestBlock?: unknown };
  const highest = blockNumberOf(progress.highestBlock);
  const current = blockNumberOf(progress.currentBlock);
  return { syncing: true, networkHead: highest !== null && (current === null || highest > current) ? highest : null, saidNot: false };
}

/** A syncing node's network head is asked again, when a verdict rests on it, past this age: chains move 10,000 blocks in 40 minutes (Arbitrum) to hours. */
const SYNC_ANSWER_MAX_AGE_MS = 60_000;

/** Polls in a row whose batch was refused as such while the single probes answered: past this, the node is polled with singles only. */
const BATCH_REFUSALS_TO_STOP = 3;

/** The number and hash of the block an `eth_getBlockByNumber` result is, or null. */
function blockOfResult(result: unknown): BlockRef | null {
  if (typeof result !== 'object' || result === null) return null;
  const r = result as Record<string, unknown>;
  const number = blockNumberOf(r.number);
  return number === null ? null : { number, hash: typeof r.hash === 'string' ? r.hash : null, time: blockTimeOf(r.timestamp) };
}

/** The slot a Solana `getSlot` result is (a bare integer), or null. */
function slotOfResult(result: unknown): BlockRef | null {
  return typeof result === 'number' && Number.isSafeInteger(result) && result >= 0 ? { number: result, hash: null } : null;
}

export class ChainHeads {
  readonly upstreams: UpstreamHead[];
  /** The best head among nodes that answered lately and are believed; null until one has. */
  best: number | null = null;
  bestHash: string | null = null;
  /**
   * The head `eth_blockNumber` is never answered under: the best head, but null until one is
   * known and from a rewind the gateway made (a devnet's evm_revert through it) until the next
   * poll or push says where the head is now.
   */
  headFloor: number | null = null;
  /** The highest finalized block a believed node reports (never above the best head). */
  finalized: number | null = null;
  /** The highest confirmed slot a believed node reports (Solana; never above the best head); null: none known. */
  confirmed: number | null = null;
  /**
   * The highest `safe` block a believed node's answers named (EVM; never above the best head):
   * not polled, learnt from the calls that ask it. Null: none known.
   */
  safe: number | null = null;
  /** The highest `safe` block each node's answers named; null: none, or dropped by a rewind. */
  private readonly safeBlocks: Array<number | null>;
  /** Moves whenever the best head's number or hash does: answers that depend on the head are kept per epoch. */
  epoch = 0;
  /**
   * Moves whenever a node rewinds blocks it called final (a devnet's evm_revert: ganache calls
   * its head final) or a devnet control call (evm_*, hardhat_*, anvil_*) goes through: answers
   * kept as final before are other keys from then on.
   */
  generation = 0;
  /** When `generation` last moved (ms, by `now`); null: never. */
  private rewoundAt: number | null = null;
  /** Each node's index by its label (labels are unique within a chain). */
  private readonly byLabel: Map<string, number>;
  private timer: NodeJS.Timeout | null = null;
  private lastUsed = 0;
  private polling: Promise<void> | null = null;
  /** Each node's head push while the chain has traffic (null: none, or not started). */
  private readonly pushes: Array<HeadPush | null>;
  /** When each node's last head was pushed (ms), 0: none yet. */
  private readonly pushedAt: number[];
  /** When an answer to a head call last raised each node's head (ms), 0: never. */
  private readonly raisedAt: number[];
  /** When each node's finalized block was last raised by an answer (ms; 0: never): a poll sent before says older. */
  private readonly finalizedRaisedAt: number[];
  /** The same for each node's confirmed slot (Solana). */
  private readonly confirmedRaisedAt: number[];
  /** How many polls in a row showed each node's finalized block above its head: one is a race (its two probes), two a liar. */
  private readonly finalizedAboveHead: number[];
  /** Each pushed node whose next poll must ask its head too: a push it sent was not taken. */
  private readonly headPollDue: boolean[];
  /** What each node said when asked whether it is syncing (null: not asked since it was last within the lie bound of every other node). */
  private readonly syncing: Array<SyncState | null>;
  /** The nodes to ask whether they are syncing, and the asking under way. */
  private readonly syncCheckDue = new Set<number>();
  private syncCheck: Promise<void> | null = null;
  /** Whether the chain's nodes say when they are syncing (EVM's `eth_syncing`). */
  private readonly asksSyncing: boolean;
  /** Polls in a row in which each node answered the probes' batch with one error and the single probes (BATCH_REFUSALS_TO_STOP). */
  private readonly batchRefusals: number[];
  private readonly probes: HeadProbes;
  private readonly maxLead: number;
  /**
   * The network the chain's nodes must be on (decimal chain id, genesis hash): the configured
   * one, else the first one more than half of all its nodes said; null until known.
   */
  network: string | null;
  /** What each node last said of its network (null: nothing yet), and when it was last asked (ms). */
  private readonly networks: Array<string | null>;
  private readonly networkAskedAt: number[];
  /** Each node whose network is asked at its next poll whatever the time: it failed a poll, or gave no answer. */
  private readonly networkDue: boolean[];
  /** Each node found on another network, as last said in a warning. */
  private readonly offNetwork: boolean[];
  /** Whether the nodes' disagreement on the network (none configured, no majority) was said. */
  private disagreementSaid = false;

  constructor(
    readonly tracking: HeadTracking,
    labels: string[],
    private readonly probe: Probe,
    private readonly now: () => number = Date.now,
    private readonly follow: Follow | null = null,
    /** Says what an operator should know: a node on another network, or nodes that disagree on it. */
    private readonly warn: (message: string) => void = () => {},
  ) {
    this.upstreams = labels.map((label) => ({
      label,
      head: null,
      hash: null,
      headTime: null,
      finalized: null,
      finalizedHash: null,
      confirmed: null,
      okAt: 0,
      believedHead: null,
      status: 'unknown',
    }));
    this.pushes = labels.map(() => null);
    this.pushedAt = labels.map(() => 0);
    this.raisedAt = labels.map(() => 0);
    this.finalizedRaisedAt = labels.map(() => 0);
    this.confirmedRaisedAt = labels.map(() => 0);
    this.safeBlocks = labels.map(() => null);
    this.finalizedAboveHead = labels.map(() => 0);
    this.headPollDue = labels.map(() => false);
    this.batchRefusals = labels.map(() => 0);
    this.syncing = labels.map(() => null);
    this.asksSyncing = tracking.family === 'evm';
    this.byLabel = new Map(labels.map((label, i) => [label, i]));
    this.probes = tracking.family === 'solana' ? SOLANA_PROBES : EVM_PROBES;
    this.maxLead = MAX_PLAUSIBLE_LEAD[tracking.family];
    this.network = tracking.network ?? null;
    this.networks = labels.map(() => null);
    this.networkAskedAt = labels.map(() => Number.NEGATIVE_INFINITY);
    this.networkDue = labels.map(() => true);
    this.offNetwork = labels.map(() => false);
  }

  /** A call arrived: keeps polling going (and starts it, and the pushes, after a quiet spell). */
  touch(): void {
    const now = this.now();
    const idle = now - this.lastUsed > IDLE_MS;
    this.lastUsed = now;
    if (this.timer === null) {
      this.timer = setInterval(() => void this.poll(), this.tracking.pollMs);
      this.timer.unref();
      this.startPushes();
    }
    if (idle) void this.poll();
  }

  private startPushes(): void {
    if (this.follow === null) return;
    for (let i = 0; i < this.pushes.length; i++) {
      this.pushes[i] ??= this.follow(i, { head: (h) => this.pushed(i, h.number, h.hash, h.time) });
    }
  }

  /** A node pushed a new head: counted at once; its finalized block follows from the depth, or stays until the next poll asks. */
  private pushed(index: number, head: number, hash: string | null, time: number | null = null): void {
    const u = this.upstreams[index];
    if (!u) return;
    this.pushedAt[index] = this.now();
    const depth = this.tracking.finality;
    const finalized = typeof depth === 'number' ? Math.max(0, head - depth) : u.finalized;
    this.observe(index, { head, hash, time, finalized, finalizedHash: typeof depth === 'number' ? null : u.finalizedHash });
  }

  /** Whether node `index`'s heads arrive by push now: subscribed, and a head pushed within two poll intervals. */
  private pushIsLive(index: number): boolean {
    return this.pushes[index]?.live === true && this.now() - (this.pushedAt[index] as number) <= this.tracking.pollMs * 2;
  }

  /**
   * A write went through: the head may move sooner than the next poll sees (a devnet mines at
   * once). Answers kept for the current head are dropped and the heads polled now; `rewrites`
   * (a devnet control call: evm_revert, hardhat_setBalance…) drops those kept as final too.
   */
  invalidate(rewrites = false): void {
    // Solana's slots move on their own every 400 ms, and nothing is kept by them: a submission changes nothing here.
    if (this.tracking.family === 'solana') return;
    if (rewrites) this.rewound();
    else this.epoch++;
    void this.poll();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    for (let i = 0; i < this.pushes.length; i++) {
      this.pushes[i]?.stop();
      this.pushes[i] = null;
    }
  }

  /** One round of polls (one at a time: a slow round is not overlapped by the next). */
  poll(): Promise<void> {
    if (this.now() - this.lastUsed > IDLE_MS) {
      this.stop();
      return Promise.resolve();
    }
    this.polling ??= Promise.all(this.upstreams.map((_, i) => this.pollOne(i)))
      .then(() => this.syncCheck ?? undefined)
      .then(() => {
        this.polling = null;
      });
    return this.polling;
  }

  /**
   * Whether the node ahead of node `index` waits for it to say whether it syncs: never asked, or a
   * syncing answer older than SYNC_ANSWER_MAX_AGE_MS (the network moved on).
   */
  private verdictWaitsOnSyncing(index: number): boolean {
    const said = this.syncing[index];
    return said == null || (said.syncing && this.now() - said.at >= SYNC_ANSWER_MAX_AGE_MS);
  }

  /**
   * Whether node `index`, which gave no word of its own (an error, no answer), is asked again: a
   * poll interval on, while the lead rule stands (nobody waits for it). A node without the method
   * (-32601) is not.
   */
  private syncingWordDue(index: number): boolean {
    const said = this.syncing[index];
    return said != null && !said.syncing && !said.saidNot && !said.lacksMethod && this.now() - said.at >= this.tracking.pollMs;
  }

  /**
   * Asks each node in `syncCheckDue` whether it is syncing (`eth_syncing`: an object while it is,
   * `false` when not); an error or no answer counts as not (the lead rule then stands). Heads are
   * judged again once all have answered.
   */
  private checkSyncing(): Promise<void> {
    if (this.syncCheck !== null) return this.syncCheck;
    // One asked while an earlier asking was out has answered since.
    const due = [...this.syncCheckDue].filter((index) => this.verdictWaitsOnSyncing(index) || this.syncingWordDue(index));
    this.syncCheckDue.clear();
    this.syncCheck = Promise.all(
      due.map(async (index) => {
        const parsed = parsedAnswer(await this.probe(index, SYNCING_PROBE));
        const lacksMethod = oneErrorOf(parsed)?.code === METHOD_NOT_FOUND;
        this.syncing[index] = { ...syncStateOf(resultsIn(parsed).get(1)), lacksMethod, at: this.now() };
      }),
    ).then(() => {
      this.syncCheck = null;
      this.recompute();
    });
    return this.syncCheck;
  }

  /** A node's heads, and its network when that is due. */
  private async pollOne(index: number): Promise<void> {
    await Promise.all([this.pollHeadsOf(index), this.networkToAsk(index) ? this.askNetwork(index) : null]);
  }

  /** Whether node `index`'s network is to be asked now: never said, a failed poll since, 10 minutes passed, or found on another (asked each poll, to serve again at once). */
  private networkToAsk(index: number): boolean {
    return this.networkDue[index] === true || this.offNetwork[index] === true || this.now() - (this.networkAskedAt[index] as number) >= NETWORK_RECHECK_MS;
  }

  /** Asks node `index` its network; no answer leaves it due, an answer naming none leaves what it said before. */
  private async askNetwork(index: number): Promise<void> {
    this.networkDue[index] = false;
    this.networkAskedAt[index] = this.now();
    const family = this.tracking.family;
    const body = await this.probe(index, NETWORK_PROBES[family]);
    if (body === null) {
      this.networkDue[index] = true;
      return;
    }
    const parsed = parsedAnswer(body);
    const said = networkOf(family, resultsIn(parsed).get(1));
    if (said === null) {
      // A rate limit or a node busy: asked again at the next poll. A node without the method is asked every 10 minutes.
      if (oneErrorOf(parsed)?.code !== METHOD_NOT_FOUND) this.networkDue[index] = true;
      return;
    }
    if (said === this.networks[index]) return;
    // It served while saying another network (none known yet, or not judged): what it answered then may be kept.
    if (this.networks[index] !== null && !this.offNetwork[index]) this.rewound();
    this.networks[index] = said;
    this.learnNetwork();
    this.recompute();
  }

  /**
   * With none configured, the chain's network is the first one more than half of all its nodes
   * say (of two, both): never one node's word against another's. Nodes that have all said and do
   * not make such a majority are named once, for an operator to set the network.
   */
  private learnNetwork(): void {
    if (this.network !== null) return;
    const counts = new Map<string, number>();
    for (const said of this.networks) if (said !== null) counts.set(said, (counts.get(said) ?? 0) + 1);
    for (const [network, count] of counts) {
      if (count * 2 > this.networks.length) {
        this.network = network;
        return;
      }
    }
    // Said once no network can make a majority any more, whatever the nodes yet to say will.
    const unsaid = this.networks.filter((said) => said === null).length;
    const most = Math.max(...counts.values());
    if (counts.size > 1 && (most + unsaid) * 2 <= this.networks.length && !this.disagreementSaid) {
      this.disagreementSaid = true;
      const said = this.upstreams.flatMap((u, i) => (this.networks[i] === null ? [] : [`${u.label} says ${this.networks[i]}`]));
      this.warn(`nodes disagree on the network: ${said.join(', ')}; set the chain's network in its config (chainId, genesisHash) to tell which is right`);
    }
  }

  /** Whether node `index` said a network other than the chain's. */
  private isOffNetwork(index: number): boolean {
    const said = this.networks[index] ?? null;
    return this.network !== null && said !== null && said !== this.network;
  }

  /** Warns when a node goes off the chain's network or comes back to it. */
  private sayNetworkChanges(): void {
    for (let i = 0; i < this.upstreams.length; i++) {
      const off = this.isOffNetwork(i);
      if (off === this.offNetwork[i]) continue;
      this.offNetwork[i] = off;
      // What it answered may be kept (eth_chainId, blocks by number: kept by generation, for ever): dropped with the rest.
      if (off) this.rewound();
      const label = this.upstreams[i]?.label;
      const source =
        this.tracking.network === undefined ? 'what most of its nodes say' : `${this.tracking.family === 'solana' ? 'genesisHash' : 'chainId'} in its config`;
      this.warn(
        off
          ? `node ${label} is on network ${this.networks[i]}, not the chain's ${this.network} (${source}): it gets no call until it says ${this.network}`
          : `node ${label} is on the chain's network (${this.network}) again`,
      );
    }
  }

  private async pollHeadsOf(index: number): Promise<void> {
    const byTag = this.tracking.finality === 'finalized';
    if (this.pushIsLive(index) && this.upstreams[index]?.head != null && !this.headPollDue[index]) {
      await this.refreshPushed(index, byTag);
      return;
    }
    // Asked now; a poll that fails leaves it due (a push skipped meanwhile sets it again too).
    const due = this.headPollDue[index] as boolean;
    this.headPollDue[index] = false;
    const sentAt = this.now();
    const { head, finalized: tagged, confirmed } = await this.pollHeads(index, byTag);
    if (head === null) {
      this.headPollDue[index] ||= due;
      this.failed(index);
      return;
    }
    const depth = this.tracking.finality;
    const final = typeof depth === 'number' ? Math.max(0, head.number - depth) : (tagged?.number ?? null);
    this.observe(
      index,
      {
        head: head.number,
        hash: head.hash,
        time: head.time ?? null,
        finalized: final,
        finalizedHash: tagged?.hash ?? null,
        confirmed: confirmed?.number ?? null,
      },
      sentAt,
    );
  }

  /** A node's latest, (`byTag`) finalized and (Solana) confirmed blocks, asked in one batch where the family's probes have one. */
  private async pollHeads(index: number, byTag: boolean): Promise<PolledHeads> {
    const { probes } = this;
    const all = byTag && (this.batchRefusals[index] as number) < BATCH_REFUSALS_TO_STOP ? probes.all : undefined;
    let refused = false;
    if (all !== undefined) {
      const answer = parsedAnswer(await this.probe(index, all));
      const error = oneErrorOf(answer);
      if (error === null) {
        this.batchRefusals[index] = 0;
        const results = resultsIn(answer);
        return { head: probes.read(results.get(1)), finalized: probes.read(results.get(2)), confirmed: probes.read(results.get(3)) };
      }
      refused = refusesBatches(error);
    }
    // One error back for the batch (a node or proxy that takes none, or a refusal of any call): asked one probe at a time.
    const [latest, finalized, confirmed] = await Promise.all([
      this.probe(index, probes.latest),
      byTag ? this.probe(index, probes.finalized) : null,
      probes.confirmed === undefined ? null : this.probe(index, probes.confirmed),
    ]);
    const read = (answer: Buffer | null): BlockRef | null => (answer === null ? null : probes.read(resultsOf(answer).get(1)));
    const heads = { head: read(latest), finalized: read(finalized), confirmed: read(confirmed) };
    // Batches refused as such while singles answered: after a few such polls in a row, the batch is not sent any more.
    if (refused && heads.head !== null) this.batchRefusals[index] = (this.batchRefusals[index] as number) + 1;
    return heads;
  }

  /**
   * A node whose heads are pushed: the poll asks only its finalized block (where the chain has
   * the tag), and keeps the node counted while no new block comes.
   */
  private async refreshPushed(index: number, byTag: boolean): Promise<void> {
    const sentAt = this.now();
    const tagged = byTag ? this.probes.read(resultsOf(await this.probe(index, this.probes.finalized)).get(1)) : null;
    const finalized = tagged?.number ?? null;
    if (byTag && finalized === null) {
      this.failed(index);
      return;
    }
    // Read after the wait: a head may have been pushed meanwhile.
    const u = this.upstreams[index] as UpstreamHead;
    if (u.head === null) return;
    if (finalized !== null && finalized > u.head) {
      // Past the head its socket pushed: the socket a block behind (a chain whose finalized block is its head), or a liar. The next poll asks both.
      this.headPollDue[index] = true;
      return;
    }
    const depth = this.tracking.finality;
    this.observe(
      index,
      {
        head: u.head,
        hash: u.hash,
        time: u.headTime,
        finalized: typeof depth === 'number' ? Math.max(0, u.head - depth) : (finalized ?? u.finalized),
        finalizedHash: tagged?.hash ?? null,
      },
      sentAt,
    );
  }

  /**
   * A node's poll (sent at `sentAt`) answered, or its head was pushed. A poll's head under the one
   * an answer to a head call showed since it was sent is older news: the node's head stays. So is
   * its finalized block under one an answer showed since, unless that one would pass the head the
   * node keeps (a backend behind the node's URL answered the poll): the poll's is taken then.
   * Neither is a rewind.
   */
  observe(index: number, sample: HeadSample, sentAt?: number): void {
    const u = this.upstreams[index];
    if (!u) return;
    const polled = sentAt !== undefined;
    if (!polled && u.finalized !== null && sample.head < u.finalized && this.now() - (this.finalizedRaisedAt[index] as number) <= this.tracking.pollMs * 2) {
      // Under a finalized block an answer raised lately: the socket's backend may be behind the one that answered, or the node rewound.
      // Not taken; the next poll asks the node's head and judges it.
      this.headPollDue[index] = true;
      return;
    }
    const headRaisedSince = polled && (this.raisedAt[index] as number) >= sentAt;
    const finalizedRaisedSince = polled && (this.finalizedRaisedAt[index] as number) >= sentAt;
    const older = headRaisedSince && u.head !== null && sample.head < u.head;
    const keptHead = older ? (u.head as number) : sample.head;
    const olderFinalized =
      finalizedRaisedSince && u.finalized !== null && sample.finalized !== null && sample.finalized < u.finalized && u.finalized <= keptHead;
    if (!older && !finalizedRaisedSince && this.rewinds(u, sample)) this.rewound();
    const previous = { finalized: u.finalized, hash: u.finalizedHash };
    if (!older) {
      u.head = sample.head;
      u.hash = sample.hash;
      u.headTime = sample.time ?? null;
      // A safe block is never past the head: one the node went back under is learnt again.
      if ((this.safeBlocks[index] ?? -1) > sample.head) this.safeBlocks[index] = null;
    }
    if (!olderFinalized) {
      u.finalized = sample.finalized;
      u.finalizedHash = sample.finalizedHash ?? null;
    }
    // Never above its head (a slot confirmed between the batch's reads), nor under one an answer showed since the poll was sent.
    if (sample.confirmed != null && !(polled && (this.confirmedRaisedAt[index] as number) >= sentAt && u.confirmed !== null && sample.confirmed < u.confirmed))
      u.confirmed = Math.min(sample.confirmed, u.head as number);
    if (u.finalized !== null && u.head !== null && u.finalized > u.head) {
      // Two polls in a row showing it make a liar (recompute says so). One may be its two probes racing a new block, and a push
      // never asks the node's finalized block: until the next poll, the node keeps the one it had under this head, or none.
      const streak = polled ? ++(this.finalizedAboveHead[index] as number) : (this.finalizedAboveHead[index] as number);
      if (streak < 2) {
        const keep = previous.finalized !== null && previous.finalized <= u.head;
        u.finalized = keep ? previous.finalized : null;
        u.finalizedHash = keep ? previous.hash : null;
      }
    } else if (polled) this.finalizedAboveHead[index] = 0;
    u.okAt = this.now();
    this.recompute();
  }

  /**
   * Node `index` answered a head call (`eth_blockNumber`, a `latest` block) with block `head`: a
   * head newer than its last poll or push showed counts at once, so the chain's best head moves
   * now and head calls go to the nodes at it, not in a poll interval. Only upward, only for a
   * node whose polls are believed and current, and not past what a poll would believe.
   */
  sawHead(index: number, head: number, hash: string | null): void {
    const u = this.upstreams[index];
    if (u === undefined || u.head === null || head <= u.head || (u.status !== 'ok' && u.status !== 'lagging')) return;
    if (this.best !== null && head - this.best > this.maxLead) return;
    u.head = head;
    u.hash = hash;
    this.raisedAt[index] = this.now();
    this.recompute();
  }

  /**
   * Node `index` answered `eth_getBlockByNumber("finalized")` with block `finalized`: raised as
   * sawHead raises a head (upward only, for a believed node), and never past the node's own head.
   * Only where the chain's finalized block is the nodes' tag, not a depth under the head.
   */
  sawFinalized(index: number, finalized: number, hash: string | null): void {
    const u = this.upstreams[index];
    if (!this.followsFinalizedTag || u === undefined || u.head === null || u.finalized === null) return;
    if (finalized <= u.finalized || finalized > u.head || (u.status !== 'ok' && u.status !== 'lagging')) return;
    u.finalized = finalized;
    u.finalizedHash = hash;
    this.finalizedRaisedAt[index] = this.now();
    this.recompute();
  }

  /**
   * Node `index` answered `eth_getBlockByNumber("safe")` with block `safe`: the node's safe block,
   * upward only, for a believed node, never past its own head.
   */
  sawSafe(index: number, safe: number): void {
    const u = this.upstreams[index];
    const known = this.safeBlocks[index] ?? null;
    if (u === undefined || u.head === null || (known !== null && safe <= known) || safe > u.head) return;
    if (u.status !== 'ok' && u.status !== 'lagging') return;
    this.safeBlocks[index] = safe;
    this.recompute();
  }

  /**
   * The block a `safe` answer may not be under: the chain's safe block, or its finalized one where
   * that is the nodes' tag (a safe block is never under the finalized one). Null: none known.
   */
  get safeFloor(): number | null {
    const finalized = this.followsFinalizedTag ? this.finalized : null;
    if (finalized === null) return this.safe;
    return this.safe === null ? finalized : Math.max(this.safe, finalized);
  }

  /** Whether upstream `index` is known to have the chain's safe block (its safe or finalized block at or past safeFloor). */
  reachesSafe(index: number): boolean {
    const floor = this.safeFloor;
    const u = this.upstreams[index];
    if (floor === null || u === undefined) return false;
    const own = Math.max(this.safeBlocks[index] ?? -1, this.followsFinalizedTag ? (u.finalized ?? -1) : -1);
    return own >= floor;
  }

  /**
   * Node `index` answered `getSlot` at `confirmed` with slot `confirmed` (Solana): raised as
   * sawHead raises a head, upward only, for a believed node, and never past its own head.
   */
  sawConfirmed(index: number, confirmed: number): void {
    const u = this.upstreams[index];
    if (u === undefined || u.head === null || (u.confirmed !== null && confirmed <= u.confirmed) || confirmed > u.head) return;
    if (u.status !== 'ok' && u.status !== 'lagging') return;
    u.confirmed = confirmed;
    this.confirmedRaisedAt[index] = this.now();
    this.recompute();
  }

  /** Whether the chain's finalized block is what its nodes' `finalized` tag says (answers to the tag can be judged by it). */
  get followsFinalizedTag(): boolean {
    return this.tracking.finality === 'finalized';
  }

  /** Every answer kept, final (by generation) or for the head (by epoch), is dropped. */
  private rewound(): void {
    this.epoch++;
    this.headFloor = null;
    this.generation++;
    this.rewoundAt = this.now();
    // The safe blocks answers named may be gone with the rest (a devnet's evm_revert): learnt again.
    this.safeBlocks.fill(null);
    this.safe = null;
  }

  /**
   * Whether final answers may be shared with other gateways (RESPONSE_CACHE_REDIS), whose entries
   * are keyed without the generation and live `ttlMs`: not until that long after the last rewind
   * seen here, when every entry written before it (maybe of the dropped chain) has expired.
   */
  sharesFinal(ttlMs: number): boolean {
    return this.rewoundAt === null || this.now() - this.rewoundAt >= ttlMs;
  }

  /**
   * Whether node `label`'s answers may be kept: it said the chain's network, or, none known yet
   * (none configured, and no majority: a node down, or one without the method), a network no node
   * contradicts. Until it said one (a node asked nothing yet, at start), its answers are served
   * but not kept: kept, one from a node on another network (`eth_chainId`, a block) would be
   * served from the cache, and from the shared one by every gateway, after the node itself takes
   * no call any more.
   */
  saidChainNetwork(label: string): boolean {
    const index = this.byLabel.get(label);
    const said = index === undefined ? null : (this.networks[index] ?? null);
    if (said === null) return false;
    if (this.network !== null) return said === this.network;
    return this.networks.every((other) => other === null || other === said);
  }

  /**
   * The finalized block to judge node `label`'s answer by: its own (a node behind, still on a
   * fork the others dropped, answers a height they finalized with its fork's block), never above
   * the chain's. Null: not known.
   */
  finalizedBy(label: string): number | null {
    const index = this.byLabel.get(label);
    const own = index === undefined ? null : (this.upstreams[index]?.finalized ?? null);
    return own === null || this.finalized === null ? null : Math.min(own, this.finalized);
  }

  /**
   * Whether node `label`'s tracked head is the chain's best (or past it): its answer to a call on
   * the head is the head's, and may be kept for it. A node a few blocks behind (within
   * maxLagBlocks) still takes head calls, but its `latest` is an older block.
   */
  isAtBest(label: string): boolean {
    const index = this.byLabel.get(label);
    return index !== undefined && this.reachesBest(index);
  }

  /** Whether upstream `index`'s finalized block is the chain's (or past it). */
  reachesFinalized(index: number): boolean {
    const finalized = this.upstreams[index]?.finalized ?? null;
    return finalized !== null && this.finalized !== null && finalized >= this.finalized;
  }

  /** Whether upstream `index`'s tracked head is the chain's best (or past it). */
  reachesBest(index: number): boolean {
    const head = this.upstreams[index]?.head ?? null;
    return head !== null && this.best !== null && head >= this.best;
  }

  /**
   * Whether a believed node dropped a block it had called final: its head is now under its last
   * finalized block, or that block has another hash (a devnet rewound by evm_revert; a real
   * chain's finality does not do this).
   */
  private rewinds(u: UpstreamHead, sample: HeadSample): boolean {
    if (takesNoCall(u.status) || u.finalized === null) return false;
    if (sample.head < u.finalized) return true;
    const hash = sample.finalizedHash ?? null;
    return sample.finalized === u.finalized && hash !== null && u.finalizedHash !== null && hash !== u.finalizedHash;
  }

  /** A node's poll failed: it is no longer counted for the best head once its last answer is stale. */
  failed(index: number): void {
    const u = this.upstreams[index];
    if (!u) return;
    // Back, it may be another machine behind the URL.
    this.networkDue[index] = true;
    u.okAt = Math.min(u.okAt, this.now() - this.staleAfterMs());
    // Back after an outage its head may rightly be far ahead of the last one it gave.
    u.believedHead = null;
    this.recompute();
  }

  private staleAfterMs(): number {
    return this.tracking.pollMs * 3;
  }

  private recompute(): void {
    const now = this.now();
    const indexOf = (u: UpstreamHead): number => this.upstreams.indexOf(u);
    this.sayNetworkChanges();
    // A node on another network counts for nothing: not for the head, not against the others.
    const fresh = this.upstreams.filter((u, i) => !this.offNetwork[i] && u.head !== null && now - u.okAt < this.staleAfterMs());
    for (const [i, u] of this.upstreams.entries()) {
      if (this.offNetwork[i]) u.status = 'wrong_network';
      else if (!fresh.includes(u)) u.status = 'unknown';
    }
    // What a node's head is measured against: another node's head; for one that says it is syncing, the network head it reports (none: no measure).
    const measureOf = (o: UpstreamHead): number => {
      const said = this.syncing[indexOf(o)];
      return said?.syncing === true ? (said.networkHead ?? (o.head as number)) : (o.head as number);
    };
    const waitsOn = (o: UpstreamHead): boolean => this.verdictWaitsOnSyncing(indexOf(o));
    const isCurrent = (o: UpstreamHead): boolean => o.headTime !== null && now - o.headTime <= CURRENT_HEAD_MS && o.headTime - now <= CLOCK_SKEW_MS;
    // Behind for hours by their own head's time, and not syncing (they said so): stalled.
    const stalled = (o: UpstreamHead): boolean => o.headTime !== null && !isCurrent(o) && this.syncing[indexOf(o)]?.saidNot === true;
    const undecided = new Set<UpstreamHead>();
    const statuses = new Map<UpstreamHead, HeadStatus>();
    // Nodes that said different networks (none known for the chain: they disagree) are not measured against each other.
    const sameNetwork = (a: UpstreamHead, b: UpstreamHead): boolean => {
      const [x, y] = [this.networks[indexOf(a)] ?? null, this.networks[indexOf(b)] ?? null];
      return x === null || y === null || x === y;
    };
    for (const u of fresh) {
      const head = u.head as number;
      const others = fresh.filter((o) => o !== u && sameNetwork(u, o));
      const othersBest = others.reduce((best, o) => Math.max(best, measureOf(o)), -1);
      const leadsImplausibly = othersBest >= 0 && head - othersBest > this.maxLead;
      // The nodes it leads may be syncing (a new node, a resync): they are asked, and it is not judged until they answer.
      const unasked = leadsImplausibly && this.asksSyncing ? others.filter(waitsOn) : [];
      // Those that gave no word are asked again, nobody waiting: the rule stands meanwhile.
      if (leadsImplausibly && this.asksSyncing) for (const o of others) if (this.syncingWordDue(indexOf(o))) this.syncCheckDue.add(indexOf(o));
      if (unasked.length > 0) {
        for (const o of unasked) this.syncCheckDue.add(indexOf(o));
        undecided.add(u);
        continue;
      }
      // A jump that lands where the others are is a node catching up (after a resync), not a lie.
      const jumped = u.believedHead !== null && head - u.believedHead > this.maxLead && !(othersBest >= 0 && head - othersBest <= this.maxLead);
      // Far ahead of stalled nodes only, with a head block minutes old: the one that follows the chain.
      const aheadOfStalled = leadsImplausibly && isCurrent(u) && others.every(stalled);
      statuses.set(u, (leadsImplausibly && !aheadOfStalled) || jumped || (u.finalized !== null && u.finalized > head) ? 'liar' : 'ok');
    }
    if (this.syncCheckDue.size > 0) void this.checkSyncing();
    // Until they say: every status and the best head stay as they were (a round trip; a probe's 5 s at most).
    if (undecided.size > 0) return;
    for (const [u, status] of statuses) {
      u.status = status;
      if (status === 'ok') u.believedHead = u.head;
    }
    // Back within the lie bound of every other node: what it said of syncing is asked again at the next conflict.
    for (const u of fresh) {
      const othersMax = fresh.reduce((max, o) => (o === u ? max : Math.max(max, o.head as number)), -1);
      if ((u.head as number) >= othersMax - this.maxLead) this.syncing[indexOf(u)] = null;
    }
    const believed = fresh.filter((u) => u.status !== 'liar');
    let best: UpstreamHead | null = null;
    for (const u of believed) if (best === null || (u.head as number) > (best.head as number)) best = u;
    if (best === null) return;
    const bestHead = best.head as number;
    for (const u of believed) if ((u.head as number) < bestHead - this.tracking.maxLagBlocks) u.status = 'lagging';
    const finalized = believed.reduce((f, u) => (u.finalized === null ? f : Math.max(f, u.finalized)), -1);
    const confirmed = believed.reduce((c, u) => (u.confirmed === null ? c : Math.max(c, u.confirmed)), -1);
    this.confirmed = confirmed < 0 ? null : Math.min(confirmed, bestHead);
    const safe = believed.reduce((s, u) => Math.max(s, this.safeBlocks[indexOf(u)] ?? -1), -1);
    this.safe = safe < 0 ? null : Math.min(safe, bestHead);
    if (bestHead !== this.best || best.hash !== this.bestHash) this.epoch++;
    this.headFloor = bestHead;
    this.best = bestHead;
    this.bestHash = best.hash;
    this.finalized = finalized < 0 ? null : Math.min(finalized, bestHead);
  }

  /** Whether upstream `index` may take a call that depends on the head. */
  servesHead(index: number): boolean {
    const status = this.upstreams[index]?.status;
    return status !== 'lagging' && !takesNoCall(status);
  }

  /** Whether upstream `index` may take no call at all: a liar, or on another network. */
  takesNoCall(index: number): boolean {
    return takesNoCall(this.upstreams[index]?.status);
  }

  /** Whether upstream `index` is known not to have block `n` yet. */
  lacksBlock(index: number, n: number): boolean {
    const head = this.upstreams[index]?.head ?? null;
    return head !== null && head < n;
  }

  /** Whether state at block `n` is older than a full node keeps. */
  needsArchive(n: number): boolean {
    return this.best !== null && n >= 0 && n < this.best - this.tracking.fullNodeHistoryBlocks;
  }
}
