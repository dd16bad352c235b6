import { PROJECTIONS } from '../../projections/all.js';
import { rebuildProjections } from '../../projections/rebuild.js';
import { type CommandSpec, EXIT, usageError } from '../command.js';
import { type Difference, verifyReadModels } from '../verify.js';

const DIFFERENCE_TEXT: Record<Difference['kind'], string> = {
  missing: 'missing (the replay has it, the read models do not)',
  extra: 'extra (the read models have it, the replay does not)',
  differs: 'differs in',
};

export const maintenanceCommands: CommandSpec[] = [
  {
    name: 'rebuild',
    args: [],
    summary: 'drop the read models and replay the event log into them',
    replays: true,
    async run({ out, open }) {
      const stores = await open({ bulkLoad: true });
      try {
        const { ms } = await rebuildProjections(stores.store, stores.readModels, PROJECTIONS);
        const rebuilt = PROJECTIONS.map((p) => p.name);
        if (out.json) await out.line(JSON.stringify({ rebuilt, ms: Math.round(ms) }));
        else await out.line(`rebuilt ${rebuilt.join(', ')} in ${Math.round(ms)} ms`);
        return EXIT.ok;
      } finally {
        await stores.close();
      }
    },
  },
  {
    name: 'verify',
    args: [],
    summary: 'replay the log into fresh read models and compare them with the live ones, document by document',
    details: [
      'Prints each difference as <collection>/<key>; exits 1 when there is one, 0 when the read models are what the log says.',
      'Each projection is compared up to its own checkpoint. With EVENTSTORE_URL or DATABASE_URL, stop the projector (ROLE=projector) first:',
      'read models that move during the comparison make it fail.',
    ].join('\n'),
    replays: true,
    options: { limit: { type: 'string', value: '<n>', description: 'print at most n differences (100 by default; all are counted)' } },
    async run({ options, out, open }) {
      const given = options['limit'] ?? '100';
      // Digits only: Number('') is 0 (nothing printed) and Number('1e3') 1000.
      const limit = typeof given === 'string' && /^\d+$/.test(given) ? Number(given) : Number.NaN;
      if (!Number.isSafeInteger(limit)) throw usageError(`--limit: "${String(given)}" is not a whole number.`);
      const stores = await open();
      try {
        let printed = 0;
        const result = await verifyReadModels({
          store: stores.store,
          live: stores.readModels,
          projections: PROJECTIONS,
          plans: stores.plans,
          async report(d) {
            if (printed++ >= limit) return;
            if (out.json) await out.line(JSON.stringify(d));
            else await out.line(`${d.collection}/${d.key}  ${DIFFERENCE_TEXT[d.kind]}${d.fields ? ` ${d.fields.join(', ')}` : ''}`);
          },
        });
        const positions = result.projections.map((p) => `${p.name}@${p.position ?? 'none'}`).join(', ');
        // Events past a projection's checkpoint are not compared: say so, or read models lost whole read "consistent" and nothing else.
        const head = await stores.store.headPosition();
        const behind = head === null ? [] : result.projections.filter((p) => p.position === null || p.position < head).map((p) => p.name);
        if (out.json) await out.line(JSON.stringify({ summary: { ...result, head, behind } }));
        else {
          const more = result.differences > limit ? ` (${result.differences - limit} not printed)` : '';
          const notYet = behind.length
            ? `; behind the log (at ${head}), compared up to their checkpoint only: ${behind.join(', ')} (a projector applies the rest when it runs; \`rebuild\` replays it all)`
            : '';
          await out.line(
            `${result.differences === 0 ? 'consistent' : 'INCONSISTENT'}: ${result.documents} documents equal, ${result.differences} differences${more}; replayed ${positions}${notYet}`,
          );
        }
        return result.differences === 0 ? EXIT.ok : EXIT.failed;
      } finally {
        await stores.close();
      }
    },
  },
];
