import { ConfigError, loadConfig } from './config.js';
import { rebuildProjections } from './projections/rebuild.js';
import { openRuntime, PROJECTIONS } from './runtime.js';

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
  const runtime = await openRuntime({ ...loadConfig(process.env), role: 'api' });
  try {
    if (command === 'rebuild') {
      const { ms } = await rebuildProjections(runtime.store, runtime.readModels, PROJECTIONS);
      console.log(`rebuilt ${PROJECTIONS.map((p) => p.name).join(', ')} in ${Math.round(ms)} ms`);
      return 0;
    }
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

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    console.error(e instanceof ConfigError ? `Configuration: ${e.message}` : e);
    process.exit(1);
  },
);
