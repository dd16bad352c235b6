/**
 * Token commands per second on the embedded store (issue 2): createApiToken + revokeApiToken in
 * a loop on one Unlimited account, in one process running every role but HTTP (the projector and
 * the ingester run beside the commands, as in `npm start`). Baseline, same run, same store: bare
 * single-event appends with an expected revision, the least one command can cost (each of
 * these commands appends twice).
 *
 *   npx tsx bench/token-commands.ts
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import { openRuntime, type Runtime } from '../src/runtime.js';
import { runMain, timeLimit } from './lib/processes.js';
import { embeddedEnv } from './lib/services.js';
import { emit, log, round } from './lib/report.js';

const COMMAND = 'npx tsx bench/token-commands.ts';
const BASELINE_SECONDS = 3;
const COMMAND_SECONDS = 8;

/** Runs `step` back to back for `seconds`; returns how many steps finished in each second. */
async function forSeconds(seconds: number, step: () => Promise<void>): Promise<number[]> {
  const perSecond: number[] = new Array(seconds).fill(0);
  const started = performance.now();
  for (;;) {
    const elapsed = (performance.now() - started) / 1000;
    if (elapsed >= seconds) return perSecond;
    await step();
    const slot = Math.min(seconds - 1, Math.floor((performance.now() - started) / 1000));
    perSecond[slot] = (perSecond[slot] ?? 0) + 1;
  }
}

const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);

async function bareAppends(runtime: Runtime): Promise<number> {
  const stream = `benchbaseline-${randomUUID().replaceAll('-', '')}`;
  let revision: number | 'no_stream' = 'no_stream';
  const perSecond = await forSeconds(BASELINE_SECONDS, async () => {
    const r = await runtime.store.append(stream, [{ id: randomUUID(), type: 'BenchBaseline', data: { at: new Date().toISOString() } }], revision);
    revision = r.nextExpectedRevision;
  });
  return sum(perSecond) / BASELINE_SECONDS;
}

async function main(): Promise<void> {
  timeLimit(60);
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-commands-'));
  const config = loadConfig(embeddedEnv(dataDir));
  const runtime = await openRuntime(config);
  try {
    await runtime.projector?.start();
    runtime.ingester?.start();
    await runtime.projector?.caughtUp;

    const { accountId } = await runtime.commands.signUp(`bench-${randomUUID()}@example.com`, 'correct horse battery');
    await runtime.commands.changePlan(accountId, 'unlimited');

    log(`baseline: bare appends for ${BASELINE_SECONDS} s`);
    const appendsPerSecond = await bareAppends(runtime);

    log(`create + revoke for ${COMMAND_SECONDS} s on one Unlimited account`);
    let n = 0;
    const perSecond = await forSeconds(COMMAND_SECONDS, async () => {
      const { tokenId } = await runtime.commands.createApiToken(accountId, { name: `bench ${n++}` });
      await runtime.commands.revokeApiToken(accountId, tokenId);
    });
    const commandsPerSecond = (2 * sum(perSecond)) / COMMAND_SECONDS;
    const first = 2 * (perSecond[0] ?? 0);
    const last = 2 * (perSecond[perSecond.length - 1] ?? 0);
    const accountEvents = (await runtime.store.readStream(`account-${accountId}`)).length;
    log(
      `${round(commandsPerSecond)} commands/s (first second ${first}, last ${last}; account stream ${accountEvents} events); bare appends ${round(appendsPerSecond)}/s`,
    );

    const method = `sequential createApiToken then revokeApiToken for ${COMMAND_SECONDS} s, every role but HTTP in the process, fsync'd LevelDB store; baseline: sequential single-event appends with expected revision, ${BASELINE_SECONDS} s`;
    emit({
      name: 'token_commands_per_s',
      target: null,
      result: round(commandsPerSecond),
      unit: 'commands/s',
      ratio: round(commandsPerSecond / appendsPerSecond),
      baseline: `bare appends ${round(appendsPerSecond)}/s`,
      command: COMMAND,
      method,
    });
    // Each command re-reads the account stream, which grows by two events per create + revoke.
    emit({
      name: 'token_commands_last_vs_first_second',
      target: null,
      result: round(last / Math.max(1, first)),
      unit: '×',
      baseline: `first second ${first} commands, last second ${last}, account stream ${accountEvents} events at the end`,
      command: COMMAND,
      method: 'commands in the last second ÷ commands in the first: below 1 when commands slow down as the account stream grows',
    });
  } finally {
    await runtime.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runMain(main);
