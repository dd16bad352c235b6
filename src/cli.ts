import { spawnSync } from 'node:child_process';
import { ConfigError, loadConfig } from './config.js';
import { openEventStore } from './infra/eventstore/index.js';
import { openReadModels } from './infra/readmodels/index.js';
import { hasRebuildFlags, REBUILD_NODE_FLAGS, rebuildProjections } from './projections/rebuild.js';
import { PROJECTIONS } from './projections/all.js';
import { openRuntime } from './runtime.js';

const USAGE = `Usage: npm run cli -- <command>
  history <tokenId>   print each event of a token with its time and the token's state after it
  rebuild             drop the read models and replay the event log into them
(On the embedded default, stop the service first: one process at a time opens ./data.)`;

async function main(argv: string[]): Promise<number> {
  const [command, arg] = argv;
  if (command !== 'history' && command !== 'rebuild') {
    console.error(USAGE);
    return 2;
  }
  if (command === 'rebuild') return rebuild();
  const runtime = await openRuntime({ ...loadConfig(process.env), role: 'api' });
  try {
    if (!arg) {
      console.error(USAGE);
      return 2;
    }
    const token = await runtime.queries.tokenDoc(arg);
    if (!token) {
      console.error(`No token ${arg}.`);
      return 1;
    }
    for (const h of await runtime.commands.apiTokenHistory(token.accountId, arg)) {
      const s = h.state;
      console.log(
        `${h.at}  #${h.revision} ${h.type.padEnd(28)} status=${s.status} name=${JSON.stringify(s.name)} ` +
          `expires=${s.expiresAt ?? '-'} monthly_limit=${s.monthlyLimit ?? '-'} rate_limit=${s.rateLimit ?? '-'}`,
      );
    }
    return 0;
  } finally {
    await runtime.close();
  }
}

/**
 * In a process with the rebuild's Node flags (started again with them when missing: they size
 * V8's heap, which is set before any code runs), with only the stores a rebuild needs, and the
 * read models opened for a bulk load.
 */
async function rebuild(): Promise<number> {
  if (!hasRebuildFlags()) {
    const flags = REBUILD_NODE_FLAGS.filter((f) => !process.execArgv.includes(f));
    const child = spawnSync(process.execPath, [...process.execArgv, ...flags, ...process.argv.slice(1)], { stdio: 'inherit' });
    if (child.error) throw child.error;
    return child.status ?? 1;
  }
  const config = loadConfig(process.env);
  const store = await openEventStore({ eventstoreUrl: config.eventstoreUrl, dataDir: config.dataDir });
  try {
    const readModels = await openReadModels({ mongodbUrl: config.mongodbUrl, dataDir: config.dataDir, bulkLoad: true });
    try {
      const { ms } = await rebuildProjections(store, readModels, PROJECTIONS);
      console.log(`rebuilt ${PROJECTIONS.map((p) => p.name).join(', ')} in ${Math.round(ms)} ms`);
      return 0;
    } finally {
      await readModels.close();
    }
  } finally {
    await store.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    console.error(e instanceof ConfigError ? `Configuration: ${e.message}` : e);
    process.exit(1);
  },
);
