/**
 * One alert evaluation round at scale: 1,000 rules over 200 tokens (5 Unlimited accounts × 40
 * tokens, 200 rules each, the plan's cap), 20,000 calls over the last hour, on the embedded
 * stores. Per round: the read-model reads the evaluator makes (gets and range scans, and the
 * documents they return, through a counting wrapper around the read-model port) and the
 * process's CPU time (every thread: the stores run on a storage thread of their own). No rule is
 * breached, so a round appends nothing and every round does the same work; one warm-up round,
 * then ROUNDS measured, median.
 *
 * Rules per account: per token error_rate (5 min), response_time p95 (5 min),
 * rate_limiting/hitting (5 min), token_usage/unusual_traffic (5 min, 1 h baseline); account-wide
 * 10 error_rate (5 min), 10 response_time (15 min), 10 hitting (5 min), 5 approaching (5 min),
 * 5 approaching (15 min).
 *
 *   npx tsx bench/alerts-round.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AlertEvaluator } from '../src/alerts/evaluator.js';
import { RollupAlertMetrics } from '../src/alerts/rollupMetrics.js';
import type { AlertInput } from '../src/commands/alertCommands.js';
import { loadConfig } from '../src/config.js';
import type { ReadModelStore } from '../src/infra/readmodels/port.js';
import { AlertQueries } from '../src/projections/alertsQueries.js';
import { UsageQueries } from '../src/projections/metricsQueries.js';
import { Queries } from '../src/projections/queries.js';
import { openRuntime } from '../src/runtime.js';
import { type SeededToken, seedAccounts, seedUsage } from './lib/eventMix.js';
import { runMain, timeLimit } from './lib/processes.js';
import { emit, log, median, round } from './lib/report.js';
import { embeddedEnv } from './lib/services.js';

const COMMAND = 'npx tsx bench/alerts-round.ts';
const ACCOUNTS = 5;
const TOKENS_PER_ACCOUNT = 40;
const CALLS = 20_000;
const ROUNDS = Number(process.env.ROUNDS ?? 7);
const HOUR = 3_600_000;

/** The read-model port, counting read calls (get, range) and the documents they return. */
function counting(rm: ReadModelStore): { store: ReadModelStore; counter: { calls: number; docs: number } } {
  const counter = { calls: 0, docs: 0 };
  const store = new Proxy(rm, {
    get(target, prop, receiver) {
      if (prop === 'get')
        return async (...args: Parameters<ReadModelStore['get']>) => {
          counter.calls++;
          const doc = await target.get(...args);
          if (doc) counter.docs++;
          return doc;
        };
      if (prop === 'range')
        return async (...args: Parameters<ReadModelStore['range']>) => {
          counter.calls++;
          const rows = await target.range(...args);
          counter.docs += rows.length;
          return rows;
        };
      return Reflect.get(target, prop, receiver);
    },
  });
  return { store, counter };
}

function rulesOf(tokens: SeededToken[]): AlertInput['rule'][] {
  const rules: AlertInput['rule'][] = [];
  for (const t of tokens) {
    rules.push(
      { type: 'error_rate', threshold: 99, windowMinutes: 5, tokenId: t.tokenId },
      { type: 'response_time', condition: 'p95', threshold: 600_000, windowMinutes: 5, tokenId: t.tokenId },
      { type: 'rate_limiting', condition: 'hitting', threshold: 1_000_000, windowMinutes: 5, tokenId: t.tokenId },
      { type: 'token_usage', condition: 'unusual_traffic', threshold: 1000, windowMinutes: 5, baselineHours: 1, tokenId: t.tokenId },
    );
  }
  for (let i = 0; i < 10; i++) {
    rules.push(
      { type: 'error_rate', threshold: 90 + i, windowMinutes: 5 },
      { type: 'response_time', threshold: 500_000 + i, windowMinutes: 15 },
      { type: 'rate_limiting', condition: 'hitting', threshold: 900_000 + i, windowMinutes: 5 },
    );
  }
  for (let i = 0; i < 5; i++) {
    rules.push(
      { type: 'rate_limiting', condition: 'approaching', threshold: 100, windowMinutes: 5 },
      { type: 'rate_limiting', condition: 'approaching', threshold: 100, windowMinutes: 15 },
    );
  }
  return rules;
}

async function main(): Promise<void> {
  timeLimit(280);
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-alerts-round-'));
  const runtime = await openRuntime(loadConfig(embeddedEnv(dataDir, { ALERT_EVALUATION_INTERVAL_SECONDS: '0' })));
  try {
    await runtime.projector?.start();
    const now = Date.now();
    const tokens = await seedAccounts(runtime.store, ACCOUNTS, TOKENS_PER_ACCOUNT, new Date(now - 2 * HOUR).toISOString());
    await seedUsage(runtime.store, tokens, CALLS, now - HOUR, HOUR - 1000, 100);
    const head = await runtime.store.headPosition();
    if (head) await runtime.projector?.waitFor(head, 120_000);
    log(`seeded ${tokens.length} tokens and ${CALLS} calls; creating the rules`);
    let rules = 0;
    for (let a = 0; a < ACCOUNTS; a++) {
      const own = tokens.slice(a * TOKENS_PER_ACCOUNT, (a + 1) * TOKENS_PER_ACCOUNT);
      const accountId = (own[0] as SeededToken).accountId;
      for (const [i, rule] of rulesOf(own).entries()) {
        await runtime.alerts.commands.create(accountId, { name: `rule ${i}`, rule, channels: [{ type: 'email', to: 'ops@example.com' }] });
        rules++;
      }
    }
    const last = await runtime.store.headPosition();
    if (last) await runtime.projector?.waitFor(last, 120_000);
    log(`${rules} rules created`);

    const { store, counter } = counting(runtime.readModels);
    const queries = new Queries(store);
    const plans = runtime.config.plans;
    const evaluator = new AlertEvaluator({
      alerts: new AlertQueries(runtime.readModels), // the rules themselves: one range a round, not counted
      queries,
      plans,
      metrics: new RollupAlertMetrics(new UsageQueries(store), queries, plans),
      commands: runtime.alerts.commands,
      now: () => new Date(),
    });
    const cpuMs: number[] = [];
    const wallMs: number[] = [];
    const calls: number[] = [];
    const docs: number[] = [];
    for (let r = 0; r <= ROUNDS; r++) {
      counter.calls = 0;
      counter.docs = 0;
      const cpu = process.cpuUsage();
      const started = performance.now();
      const report = await evaluator.runOnce();
      const wall = performance.now() - started;
      const used = process.cpuUsage(cpu);
      if (report.evaluated !== rules || report.transitions.length > 0 || report.failed > 0)
        throw new Error(`round ${r}: evaluated ${report.evaluated} of ${rules}, ${report.transitions.length} transitions, ${report.failed} failed`);
      if (r === 0) continue; // warm-up
      cpuMs.push((used.user + used.system) / 1000);
      wallMs.push(wall);
      calls.push(counter.calls);
      docs.push(counter.docs);
      log(`round ${r}: cpu ${round(cpuMs[cpuMs.length - 1] as number)} ms, wall ${round(wall)} ms, ${counter.calls} reads, ${counter.docs} documents`);
    }
    const method = `${rules} rules over ${tokens.length} tokens (${ACCOUNTS} Unlimited accounts), ${CALLS} calls in the last hour, embedded stores; median of ${ROUNDS} rounds after a warm-up; wall ${round(median(wallMs))} ms`;
    emit({
      name: 'alerts_round_cpu_ms',
      target: null,
      result: round(median(cpuMs)),
      unit: 'ms',
      command: COMMAND,
      method: `process CPU (all threads) of one round; ${method}`,
    });
    emit({
      name: 'alerts_round_reads',
      target: null,
      result: median(calls),
      unit: 'reads',
      command: COMMAND,
      method: `read-model gets and range scans of one round; ${method}`,
    });
    emit({
      name: 'alerts_round_documents',
      target: null,
      result: median(docs),
      unit: 'documents',
      command: COMMAND,
      method: `documents those reads returned; ${method}`,
    });
  } finally {
    await runtime.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runMain(main);
