/**
 * `npm run bench`: runs every benchmark one after the other, collects their figures (the JSON
 * lines each prints on stdout, see lib/report.ts), keeps them in bench/results.json and rewrites
 * the results in bench/README.md between its markers. `npm run bench -- replay gateway` runs only
 * the benchmarks whose file name contains one of the words; the others keep their last figures.
 * `npx tsx bench/run-all.ts --render` only rewrites README.md from results.json and plans.json.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { ROOT, tsNodeArgs } from './lib/processes.js';
import { type Figure, meetsTarget } from './lib/report.js';

/**
 * Every benchmark, in the order they run. Add yours here: a script that prints one Figure JSON
 * line per figure on stdout (lib/report.ts `emit`), run as `node [nodeFlags] --import tsx <file>`.
 */
const BENCHMARKS: Array<{ file: string; title: string; timeoutSeconds: number; nodeFlags?: string[] }> = [
  { file: 'bench/token-commands.ts', title: 'Token commands on the embedded store', timeoutSeconds: 90 },
  { file: 'bench/replay.ts', title: 'Projection replay of 1,000,000 events, restart to ready', timeoutSeconds: 240 },
  { file: 'bench/gateway.ts', title: 'Gateway throughput and added latency', timeoutSeconds: 900 },
  { file: 'bench/gateway-rss.ts', title: 'Gateway memory with 100,000 tokens cached', timeoutSeconds: 180 },
  { file: 'bench/usage-pipeline.ts', title: 'Usage pipeline: ingest + projection rate, projection lag', timeoutSeconds: 180 },
  { file: 'bench/metrics-latency.ts', title: 'Metrics API latency over 30 days of minute data', timeoutSeconds: 200 },
  { file: 'bench/revocation.ts', title: 'Revocation propagation to another gateway instance', timeoutSeconds: 100 },
  { file: 'bench/login-flood.ts', title: 'Management API during a log-in flood', timeoutSeconds: 400 },
  { file: 'bench/export-memory.ts', title: 'Memory of a 1,000,000-row CSV export', timeoutSeconds: 240, nodeFlags: ['--expose-gc'] },
];

const RESULTS_FILE = join(ROOT, 'bench', 'results.json');
const README = join(ROOT, 'bench', 'README.md');
const PLANS_FILE = join(ROOT, 'bench', 'plans.json');
const START = '<!-- results:start (written by bench/run-all.ts) -->';
const END = '<!-- results:end -->';

interface BenchmarkRun {
  title: string;
  date: string;
  machine: string;
  seconds: number;
  /** Load average (1 min) before and after: how busy the shared machine was. */
  load: [number, number];
  figures: Figure[];
  error: string | null;
}

type Results = Record<string, BenchmarkRun>;

const machine = (): string => {
  const model = cpus()[0]?.model ?? 'unknown CPU';
  return `${cpus().length} × ${model}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
};

function runOne(file: string, timeoutSeconds: number, nodeFlags: string[]): Promise<{ figures: Figure[]; error: string | null; seconds: number }> {
  const started = performance.now();
  return new Promise((done) => {
    const child = spawn(process.execPath, tsNodeArgs(file, nodeFlags), { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderrTail = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      process.stderr.write(chunk);
      stderrTail = (stderrTail + chunk.toString('utf8')).slice(-2000);
    });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutSeconds * 1000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const figures: Figure[] = [];
      for (const line of stdout.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const f = JSON.parse(line) as Figure;
          if (typeof f.name === 'string' && typeof f.result === 'number') figures.push(f);
        } catch {
          // not a figure
        }
      }
      const failed = code !== 0;
      const lastLines = stderrTail.trim().split('\n').slice(-3).join(' / ');
      done({
        figures,
        error: failed ? `exited with ${code ?? signal}${signal === 'SIGTERM' ? ` (time limit ${timeoutSeconds} s)` : ''}: ${lastLines}` : null,
        seconds: (performance.now() - started) / 1000,
      });
    });
  });
}

const fmt = (n: number): string => (Math.abs(n) >= 1000 ? Math.round(n).toLocaleString('en-US') : String(n));
const cell = (s: string): string => s.replaceAll('|', '\\|').replaceAll('\n', ' ');

function render(results: Results, plans: Record<string, string>): string {
  const out: string[] = [START, ''];
  const misses: string[] = [];
  /** Method text → the figures measured that way, so a shared method is written once. */
  const methods = new Map<string, string[]>();
  for (const { file, title } of BENCHMARKS) {
    const run = results[file];
    out.push(`### ${title}`, '');
    if (!run) {
      out.push('Not run yet.', '');
      continue;
    }
    out.push(`${run.date}, ${run.machine}; ${Math.round(run.seconds)} s; load average ${run.load[0].toFixed(1)} before, ${run.load[1].toFixed(1)} after.`, '');
    if (run.error) {
      out.push(`**Failed**: ${cell(run.error)}`, '');
      misses.push(`- **${file} failed** (${run.date}): ${cell(run.error)}`);
    }
    if (run.figures.length > 0) {
      out.push('| figure | result | target | ratio | baseline | command |', '|---|---|---|---|---|---|');
      for (const f of run.figures) {
        const met = meetsTarget(f.target, f.result);
        const mark = met === null ? '' : met ? ' ✅' : ' ❌';
        out.push(
          `| ${f.name} | ${fmt(f.result)} ${cell(f.unit)}${mark} | ${f.target === null ? '—' : cell(f.target)} | ${f.ratio === undefined ? '—' : fmt(f.ratio)} | ${cell(f.baseline ?? '—')} | \`${cell(f.command)}\` |`,
        );
        if (f.method) methods.set(f.method, [...(methods.get(f.method) ?? []), f.name]);
        if (met === false) {
          misses.push(`- **${f.name}**: ${fmt(f.result)} ${f.unit}, target ${f.target}. ${plans[f.name] ?? 'No plan written yet (bench/plans.json).'}`);
        }
      }
      out.push('');
    }
  }
  out.push('### Misses and plans', '', ...(misses.length > 0 ? misses : ['None: every figure with a target meets it.']), '');
  const methodLines = [...methods].map(([method, names]) => `- **${names.join(', ')}**: ${cell(method)}`);
  out.push('### How each figure is measured', '', ...methodLines, '', END);
  return out.join('\n');
}

async function main(): Promise<void> {
  const renderOnly = process.argv.includes('--render');
  const words = process.argv.slice(2).filter((w) => w !== '--render');
  const selected = renderOnly ? [] : BENCHMARKS.filter((b) => words.length === 0 || words.some((w) => b.file.includes(w)));
  if (selected.length === 0 && !renderOnly) {
    console.error(`no benchmark matches ${words.join(' ')}; they are: ${BENCHMARKS.map((b) => b.file).join(', ')}`);
    process.exit(2);
  }
  const results: Results = existsSync(RESULTS_FILE) ? (JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as Results) : {};
  let failures = 0;
  for (const { file, title, timeoutSeconds, nodeFlags } of selected) {
    console.error(`\n── ${file} ──`);
    const load: [number, number] = [loadavg()[0] ?? 0, 0];
    const { figures, error, seconds } = await runOne(file, timeoutSeconds, nodeFlags ?? []);
    load[1] = loadavg()[0] ?? 0;
    if (error) failures++;
    results[file] = { title, date: `${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`, machine: machine(), seconds, load, figures, error };
    for (const f of figures)
      console.error(`  ${f.name}: ${f.result} ${f.unit}${f.ratio === undefined ? '' : ` (ratio ${f.ratio})`}${f.target ? ` target ${f.target}` : ''}`);
    writeFileSync(RESULTS_FILE, `${JSON.stringify(results, null, 2)}\n`);
  }
  const plans = existsSync(PLANS_FILE) ? (JSON.parse(readFileSync(PLANS_FILE, 'utf8')) as Record<string, string>) : {};
  const readme = readFileSync(README, 'utf8');
  const from = readme.indexOf(START);
  const to = readme.indexOf(END);
  if (from < 0 || to < from) throw new Error(`${README} lacks the markers ${START} … ${END}`);
  writeFileSync(README, readme.slice(0, from) + render(results, plans) + readme.slice(to + END.length));
  console.error(`\nresults written to bench/README.md and bench/results.json${failures > 0 ? `; ${failures} benchmark(s) failed` : ''}`);
  process.exit(failures > 0 ? 1 : 0);
}

void main();
