// `npm run bench`: the gateway's throughput, latency, CPU and memory against a baseline, in one run. See bench/config.ts (or `npm run bench -- --help`) for what it
// measures and how to tune it; docs/decisions.md ("The benchmark") for why it is built this way.
//   1. scratch databases: the gateway's (migrated and seeded through the gateway's own code) and the minimal one;
//   2. the gateway's mint SQL, captured from a gateway behind a recording relay (gateway-sql.ts);
//   3. for each workload (spread, hot) and connection count: the pgbench cells (the minimal reserve transaction
//      and the gateway's SQL), then the gateway's mint cell; then execute at each connection count, mint on
//      agents with three budgets and on as many with none, each twice, and the capture of their holds (issue 25's
//      pair), capture of the minted holds (each once), and the open-loop cell of mixed work;
//      with BENCH_BASELINE_REF each gateway cell runs on both codes, alternating which goes first;
//   5. the ledger check on PostgreSQL (each code's database); 6. the embedded PGlite mint cell and its ledger check;
//   7. the owner console's cold load in Chromium (console.ts);
//   8. the table, bench/results/latest.json, and a non-zero exit if anything broke.
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { DEFAULT_DATABASE_TIMEOUTS, type Database } from '../src/platform/db/database.ts';
import { openPglite } from '../src/platform/db/pglite.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';
import { prepareBaseline, seedBaseline, type Baseline } from './baseline.ts';
import { captureCell, captureShare, executeCell, mintCell, openLoopCell, pgbenchCells, warmGateway, WORKLOADS, type Held } from './cells.ts';
import { benchConfig, HELP, type BenchConfig } from './config.ts';
import { consoleReport, consoleStepBlocked, measureConsole, type ConsoleLoads } from './console.ts';
import { freePort, startGateway, type Gateway } from './gateway.ts';
import { captureGatewaySql, gatewaySqlForWorkload, type GatewaySqlScript } from './gateway-sql.ts';
import { checkLedger, type Answers } from './invariants.ts';
import { availableTool, type LoadTool } from './load.ts';
import { startOtlpSink, type OtlpSink } from './otlp-sink.ts';
import { createMinimalSchema } from './pgbench.ts';
import { log, openLoopTable, startedMs, statementTable, table, withRatios, writeResult, type Cell, type OpenLoopCell } from './report.ts';
import { gatewayEnv, seed, type World } from './seed.ts';
import { startUpstream } from './upstream.ts';

/** The ledger check's bound per statement: it reads every row the run wrote. */
const LEDGER_CHECK_TIMEOUT_MS = 600_000;

function databaseUrl(adminUrl: string, name: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

function withoutPassword(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}

async function admin(adminUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}
async function withDatabase<T>(open: () => Promise<Database> | Database, fn: (db: Database) => Promise<T>): Promise<T> {
  const db = await open();
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

function noAnswers(): Answers {
  return { minted: [], captured: [], mintOk: 0, captureOk: 0, executed: [], executeOk: 0, released: [], releaseOk: 0 };
}

/** What a run gathers as it goes; every phase adds to it, and a phase that fails says so in `problems`. */
interface Run {
  config: BenchConfig;
  tool: LoadTool;
  cells: Cell[];
  openLoop: OpenLoopCell[];
  baseline?: { ref: string; commit: string };
  invariants: Record<string, { checks: string[]; problems: string[] }>;
  startMs: Record<string, number>;
  script?: GatewaySqlScript;
  console?: ConsoleLoads;
  problems: string[];
  /** The OTEL_* variables of the measured gateways (BENCH_OTEL); empty: they do not trace. */
  otelEnv: Record<string, string>;
  sink?: OtlpSink;
}

async function phase(run: Run, name: string, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (error) {
    run.problems.push(`${name} stopped: ${(error as Error).stack ?? String(error)}`);
    log(`${name} stopped: ${(error as Error).message}`);
  }
}

/** One code under test on PostgreSQL: the current checkout, or BENCH_BASELINE_REF's, each with its own database. */
interface Side {
  code: string;
  root?: string;
  url: string;
  dataDir: string;
  env: Record<string, string>;
  world?: World;
  gateway?: Gateway;
  answers: Answers;
  held: Held;
}

/**
 * Runs one gateway cell on each code: with a baseline, slot by slot the order alternates (current first, then
 * the baseline first), so neither always runs after the other. Each cell starts with its database analyzed, as
 * autovacuum keeps a production server's, and again after its warm-up: a gateway's connections keep the plans
 * they made of its statements until the tables' statistics change, and without it a side that first planned on
 * near-empty tables kept sequential scans as they grew (docs/benchmark.md).
 */
async function onEachSide(run: Run, sides: readonly Side[], slot: { n: number }, cell: (side: Side & { world: World; gateway: Gateway }) => Promise<void>): Promise<void> {
  const order = slot.n++ % 2 === 0 ? sides : [...sides].reverse();
  for (const side of order) {
    if (!side.world || !side.gateway) continue;
    await phase(run, `a gateway cell on ${side.code}`, async () => {
      await admin(side.url, 'ANALYZE');
      await cell(side as Side & { world: World; gateway: Gateway });
    });
  }
}

/** Steps 1–5: everything on PostgreSQL, in scratch databases dropped at the end. */
async function onPostgres(run: Run): Promise<void> {
  const { config, tool } = run;
  const stamp = `${Date.now()}`;
  const names = [`acg_bench_${stamp}`, `acg_bench_${stamp}_minimal`, ...(config.baselineRef ? [`acg_bench_${stamp}_baseline`] : [])];
  const [url, minimalUrl, baselineUrl] = names.map((name) => databaseUrl(config.adminUrl, name)) as [string, string, string | undefined];
  const upstream = await startUpstream();
  const budgetedAgents = config.agents;
  // Agents with no budget for the pair's other side, unless the workload's own have budgets (then no pair).
  const pairAgents = config.budgets > 0 ? 0 : config.agents;
  const sides: Side[] = [];
  let baseline: Baseline | undefined;
  try {
    for (const name of names) await admin(config.adminUrl, `CREATE DATABASE ${name}`);
    await createMinimalSchema(minimalUrl, config.agents);
    const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-bench-pg-'));
    const current: Side = { code: 'current', url, dataDir, env: gatewayEnv({ databaseUrl: url, dataDir, port: config.port, githubUrl: upstream.url }), answers: noAnswers(), held: { spread: [], hot: [] } };
    sides.push(current);
    current.world = await seed(current.env, config.agents, config.budgets, budgetedAgents, pairAgents);
    log(`seeded ${names[0]}: ${config.agents} agents, one offer, ${config.budgets} budget(s) per mandate; ${budgetedAgents} more agents with 3 budgets, ${pairAgents} more with none (the budgets pair)`);
    if (config.baselineRef && baselineUrl) {
      await phase(run, `the baseline ${config.baselineRef}`, async () => {
        baseline = await prepareBaseline(config.baselineRef!);
        run.baseline = { ref: baseline.ref, commit: baseline.commit };
        const baseDir = mkdtempSync(path.join(tmpdir(), 'acg-bench-pg-base-'));
        const port = await freePort();
        const side: Side = { code: config.baselineRef!, root: baseline.root, url: baselineUrl, dataDir: baseDir, env: gatewayEnv({ databaseUrl: baselineUrl, dataDir: baseDir, port, githubUrl: upstream.url }), answers: noAnswers(), held: { spread: [], hot: [] } };
        sides.push(side);
        side.world = await seedBaseline(baseline, side.env, config.agents, config.budgets, budgetedAgents, pairAgents);
        log(`baseline ${config.baselineRef} (${baseline.commit.slice(0, 10)}) built in ${baseline.root} and seeded ${names[2]} with its own code`);
      });
    }
    // With budgets in the workload's mandates a mint's statements address its own agent's budget period rows (by
    // probe, and a count the statement checks), which a replay over the other agents does not find: the replay
    // would only measure its own refusal. The budgets pair measures what budgets cost, over HTTP.
    if (config.budgets > 0) log(`gateway SQL not captured: with BENCH_BUDGETS=${config.budgets} a mint's budget statements name its own agent's period rows, which pgbench's replay over other agents would not find`);
    else await phase(run, 'the gateway SQL capture', async () => {
      const script = await captureGatewaySql(config, url, dataDir, current.world!);
      writeResult('gateway-mint.pgbench', gatewaySqlForWorkload(script, config.agents, 'spread'));
      writeResult('gateway-mint.defines.json', script.defines);
      log(`captured a mint's SQL: ${script.statements} statements (round trips), ${script.transactions} transaction(s); bench/results/gateway-mint.pgbench`);
      run.script = script;
    });
    await phase(run, 'the gateway cells on PostgreSQL', async () => {
      for (const side of sides) {
        if (!side.world) continue;
        await phase(run, `the ${side.code} gateway's start`, async () => {
          side.gateway = await startGateway({ ...side.env, ...run.otelEnv }, Number(side.env.PORT), config.nodeOptions, side.root);
          run.startMs[side.code === 'current' ? 'postgresql' : `postgresql ${side.code}`] = side.gateway.startMs;
          log(`gateway (${side.code}) on PostgreSQL ready in ${side.gateway.startMs} ms (pid ${side.gateway.pid})`);
        });
      }
      if (config.gatewayWarmupS > 0) {
        for (const side of sides) {
          if (!side.gateway || !side.world) continue;
          const warm = await warmGateway(config, side.gateway, side.world, side.answers);
          // Its rows analyzed, as after every cell's warm-up: the tables the first cell writes are no longer empty.
          await admin(side.url, 'ANALYZE');
          log(`gateway (${side.code}) warmed: ${config.gatewayWarmupS} s of mixed work at ${config.openRatePerS}/s, ${warm.sent} sent, ${warm.shed} shed, p99 ${warm.p99Ms.toFixed(1)} ms (not measured)`);
        }
      }
      // Which side runs first alternates from cell to cell, starting with a side drawn at random: with a fixed
      // start, a given cell ran the same side first in every run (capture over 200 agents at 16 connections
      // always ran the baseline first, and read 14-20 % lower for the current code in four runs of four, though
      // no statement on its path had changed).
      const slot = { n: randomInt(2) };
      if (sides.filter((side) => side.world).length > 1) log(`alternating the sides cell by cell, ${sides[slot.n % 2 === 0 ? 0 : 1]!.code} first`);
      // The warm-up's rows analyzed before the measured load: a cell that starts on a table still empty (the
      // first execute cell's service_executions) would otherwise measure plans made for no rows.
      const code = (side: Side) => ({ code: side.code, afterWarmup: () => admin(side.url, 'ANALYZE') });
      for (const workload of config.only.has('mint') ? WORKLOADS : []) {
        for (const connections of config.connections) {
          // The baseline right before its gateway cell (the gateway idles meanwhile): same neighbours for both.
          run.cells.push(...(await pgbenchCells(config, url, minimalUrl, run.script, workload, connections)));
          await onEachSide(run, sides, slot, async (side) => {
            run.cells.push(await mintCell(config, tool, side.gateway, side.world, 'postgresql', workload, connections, side.answers, side.held, code(side)));
          });
        }
      }
      for (const connections of config.only.has('execute') ? config.connections : []) {
        await onEachSide(run, sides, slot, async (side) => {
          run.cells.push(await executeCell(config, tool, side.gateway, side.world, connections, side.answers, code(side)));
        });
      }
      // Issue 25's pair: mint, spread, at the last connection count, on agents whose mandates have all three
      // budgets ("3 budgets") and on as many agents with none ("0 budgets"), both sets new to the gateway when the
      // pair starts (the workload's own agents have minted for minutes by then, and that alone moved the ratio:
      // docs/benchmark.md); each variant twice, in an order that mirrors itself (ABBA, then BAAB on the next
      // side), so neither runs first or later more often; then each variant's holds captured, in the same order.
      // Cell by cell across the sides, as every other cell alternates: run one side's whole pair and then the
      // other's, and the side that ran second read the worse ratio and a larger gateway cost of budgets in seven
      // runs of seven, whichever code it was (docs/decisions.md "Budget totals on the balance row").
      const connections = config.connections.at(-1)!;
      const pairSides = config.only.has('budgets') ? sides.filter((side) => side.world && side.world.budgetedTokens.length > 0) : [];
      const variant = (name: string, tokens: readonly string[]) => ({ name, tokens, held: { spread: [], hot: [] } as Held });
      const orders = new Map<Side, Array<ReturnType<typeof variant>>>();
      pairSides.forEach((side, index) => {
        const budgeted = variant('3 budgets', side.world!.budgetedTokens);
        if (config.budgets > 0) {
          orders.set(side, [budgeted]);
          return;
        }
        const plain = variant('0 budgets', side.world!.pairTokens);
        const [first, second] = index % 2 === 0 ? [plain, budgeted] : [budgeted, plain];
        orders.set(side, [first, second, second, first]);
      });
      const steps = Math.max(0, ...[...orders.values()].map((order) => order.length));
      const mintVariant = (side: Side & { world: World; gateway: Gateway }, step: number, note = '') => {
        const v = orders.get(side)![step]!;
        return mintCell(config, tool, side.gateway, side.world, 'postgresql', 'spread', connections, side.answers, v.held, { ...code(side), variant: `${v.name}${note}`, agentTokens: v.tokens });
      };
      // A cell of each variant first, not measured: the first cell of a side read low whichever variant it was,
      // which the mirrored order does not cancel (the side that began with "3 budgets" read the pair ×0.84–0.87
      // in four A/A runs of four, the other ×0.90–0.94: docs/decisions.md "Budget totals on the balance row").
      for (let step = 0; step < Math.min(steps, 2); step += 1) {
        await onEachSide(run, pairSides, slot, async (side) => {
          await mintVariant(side, step, ', not measured');
        });
      }
      for (let step = 0; step < steps; step += 1) {
        await onEachSide(run, pairSides, slot, async (side) => {
          run.cells.push(await mintVariant(side, step));
        });
      }
      // Capture in the same mirrored order, each cell on its own half of the variant's holds (each hold once).
      if (config.budgets === 0) {
        const halves = new Map(
          [...orders].map(([side, order]) => [side, new Map(order.slice(0, 2).map((v) => [v, [v.held.spread.slice(0, v.held.spread.length >> 1), v.held.spread.slice(v.held.spread.length >> 1)]]))]),
        );
        for (let step = 0; step < steps; step += 1) {
          await onEachSide(run, pairSides, slot, async (side) => {
            const v = orders.get(side)![step]!;
            const holds = halves.get(side)!.get(v)!.shift()!;
            run.cells.push(await captureCell(config, tool, side.gateway, side.world, holds, 'spread', connections, side.answers, { code: side.code, variant: v.name }));
          });
        }
      }
      // Capture, each cell alternated between the sides as mint's are (it ran every cell of one side, then the
      // other's, the baseline first in every run).
      for (const workload of config.only.has('capture') ? WORKLOADS : []) {
        for (const [index, connections] of config.connections.entries()) {
          await onEachSide(run, sides, slot, async (side) => {
            const holds = captureShare(config, side.held, workload, index);
            run.cells.push(await captureCell(config, tool, side.gateway, side.world, holds, workload, connections, side.answers, code(side)));
          });
        }
      }
      // The open loop: with a baseline, twice on each side in a mirrored order (ABBA), since the code that ran it
      // second read the worse p99 in every run when each side ran it once.
      if (config.openS > 0 && config.only.has('open')) {
        for (let round = 0; round < (sides.length > 1 ? 2 : 1); round += 1) {
          // onEachSide reverses the order at every call: the second round mirrors the first.
          await onEachSide(run, sides, slot, async (side) => {
            run.openLoop.push(await openLoopCell(config, side.gateway, side.world, side.url, side.answers, code(side)));
          });
        }
      }
    });
    for (const side of sides) await side.gateway?.stop();
    for (const side of sides) {
      if (!side.world) continue;
      const key = side.code === 'current' ? 'postgresql' : `postgresql ${side.code}`;
      await phase(run, `the ledger check on ${key}`, async () => {
        // An audit of the whole history, not a request: its tables analyzed first (a cell run alone leaves them as
        // young as the seed, and a check planned on that took past the request's 5 s bound), and no request's bound.
        await admin(side.url, 'ANALYZE');
        run.invariants[key] = await withDatabase(
          () => openPostgres(side.url, { timeouts: { ...DEFAULT_DATABASE_TIMEOUTS, statementTimeoutMs: LEDGER_CHECK_TIMEOUT_MS } }),
          (db) => checkLedger(db, side.answers),
        );
        log(`ledger on ${key}: ${run.invariants[key]!.problems.length === 0 ? 'holds' : 'BROKEN'}`);
      });
    }
  } finally {
    for (const side of sides) await side.gateway?.stop();
    await upstream.close();
    await baseline?.remove();
    for (const side of sides) rmSync(side.dataDir, { recursive: true, force: true });
    for (const name of names) await admin(config.adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
  }
}

/** Step 6: mint on the embedded database, in a scratch data directory. */
async function onPglite(run: Run): Promise<void> {
  const { config, tool } = run;
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-bench-lite-'));
  const env = gatewayEnv({ dataDir, port: config.port });
  try {
    const world = await seed(env, config.agents, config.budgets);
    const answers = noAnswers();
    const gateway = await startGateway({ ...env, ...run.otelEnv }, config.port, config.nodeOptions);
    run.startMs.pglite = gateway.startMs;
    log(`gateway on PGlite ready in ${gateway.startMs} ms (pid ${gateway.pid})`);
    try {
      run.cells.push(await mintCell(config, tool, gateway, world, 'pglite', 'spread', config.connections[0]!, answers, undefined));
    } finally {
      await gateway.stop();
    }
    run.invariants.pglite = await withDatabase(() => openPglite(path.join(dataDir, 'pglite')), (db) => checkLedger(db, answers));
    log(`ledger on PGlite: ${run.invariants.pglite.problems.length === 0 ? 'holds' : 'BROKEN'}`);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Step 7: the owner console's cold load, or a note saying why not. */
async function onConsole(run: Run): Promise<void> {
  const blocked = consoleStepBlocked(run.config);
  if (blocked) {
    log(`console cold load not measured: ${blocked}`);
    return;
  }
  run.console = await measureConsole(run.config);
}

/**
 * The budgets pair's verdict, per code and operation: the ratio of the means with and without budgets, and the
 * bench's own noise beside it: how far apart the two cells of one variant came (the larger of the two variants'
 * |first/second − 1|), since they ran the same work on the same code. "Within the noise" when the pair's ratio
 * is no further from 1 than that.
 */
function budgetPair(cells: readonly Cell[]): Array<{
  code: string;
  operation: string;
  cells: number;
  withS: number;
  withoutS: number;
  ratio: number;
  noise: number;
  withinNoise: boolean;
  /** Mean CPU ms per request, with and without budgets: the gateway's, and PostgreSQL's when measured. */
  cpuMsPerRequest: { gateway: [number, number]; database?: [number, number] };
}> {
  const lines = [];
  const meanOf = (xs: readonly Cell[], value: (c: Cell) => number | undefined) => xs.reduce((sum, c) => sum + (value(c) ?? NaN), 0) / xs.length;
  const mean = (xs: readonly Cell[]) => meanOf(xs, (c) => c.throughputPerS);
  const spread = (xs: readonly Cell[]) => (xs.length < 2 ? 0 : Math.abs(xs[0]!.throughputPerS / xs.at(-1)!.throughputPerS - 1));
  for (const code of new Set(cells.map((c) => c.code ?? 'current'))) {
    for (const operation of ['mint', 'capture'] as const) {
      const of = (variant: string) => cells.filter((c) => (c.code ?? 'current') === code && c.operation === operation && c.variant === variant);
      const [withBudgets, without] = [of('3 budgets'), of('0 budgets')];
      if (withBudgets.length === 0 || without.length === 0) continue;
      const ratio = mean(withBudgets) / mean(without);
      const noise = Math.max(spread(withBudgets), spread(without));
      const cpu = (value: (c: Cell) => number | undefined): [number, number] => [meanOf(withBudgets, value), meanOf(without, value)];
      const database = cpu((c) => c.databaseCpuMsPerRequest);
      lines.push({
        code,
        operation,
        cells: withBudgets.length,
        withS: mean(withBudgets),
        withoutS: mean(without),
        ratio,
        noise,
        withinNoise: Math.abs(ratio - 1) <= noise,
        cpuMsPerRequest: { gateway: cpu((c) => c.cpuMsPerRequest), ...(database.every(Number.isFinite) ? { database } : {}) },
      });
    }
  }
  return lines;
}

/** Step 8: the table, the JSON record, and the verdict (the exit code). */
function conclude(run: Run): number {
  const cells = withRatios(run.cells);
  const problems = [...run.problems];
  for (const cell of cells) {
    const name = `${cell.kind} ${cell.operation} ${cell.database} ${cell.workload} ${cell.connections}`;
    if (cell.ok === 0) problems.push(`${name}: no successful request`);
    // Overload may answer 503 with Retry-After; a 500 is a fault whatever the load.
    if (cell.rejected['500']) problems.push(`${name}: ${cell.rejected['500']} answers 500`);
  }
  for (const cell of run.openLoop) {
    if (cell.ok === 0) problems.push(`open loop (${cell.code}): no successful request`);
    if (cell.failed['500']) problems.push(`open loop (${cell.code}): ${cell.failed['500']} answers 500`);
  }
  for (const [database, result] of Object.entries(run.invariants)) for (const p of result.problems) problems.push(`ledger on ${database}: ${p}`);
  process.stdout.write(`\n${table(cells)}\n\n`);
  if (run.script) process.stdout.write(`Gateway mint SQL: ${run.script.statements} statements in ${run.script.transactions} transaction(s), captured from the gateway's wire traffic (bench/gateway-sql.ts).\n`);
  const bySql = cells.find((c) => c.kind === 'gateway-sql' && c.statementLatencies?.length);
  if (bySql) process.stdout.write(`\n${statementTable(bySql)}\n\n`);
  if (run.openLoop.length > 0) process.stdout.write(`\n${openLoopTable(run.openLoop)}\n\n`);
  const pair = budgetPair(cells);
  for (const line of pair) {
    process.stdout.write(
      `Budgets pair (${line.code}): ${line.operation} with 3 budgets at ×${line.ratio.toFixed(2)} of without (means of ${line.cells} cells each: ${line.withS.toFixed(0)} against ${line.withoutS.toFixed(0)} /s); ` +
        `the two cells of one variant differ by up to ${(line.noise * 100).toFixed(0)} %: ${line.withinNoise ? 'within' : 'outside'} the noise; ` +
        `CPU ms/req with/without: gateway ${line.cpuMsPerRequest.gateway.map((ms) => ms.toFixed(3)).join('/')}` +
        `${line.cpuMsPerRequest.database ? `, database ${line.cpuMsPerRequest.database.map((ms) => ms.toFixed(3)).join('/')}` : ''}.\n`,
    );
  }
  if (run.baseline) process.stdout.write(`Cells marked [${run.baseline.ref}] ran the gateway of ${run.baseline.commit} (BENCH_BASELINE_REF), alternated with the current code.\n`);
  if (run.console) process.stdout.write(`\n${consoleReport(run.console)}\n`);
  for (const cell of cells) for (const note of cell.notes) process.stdout.write(`note (${cell.kind} ${cell.operation} ${cell.workload} ${cell.connections}${cell.variant ? ` ${cell.variant}` : ''}${cell.code && cell.code !== 'current' ? ` [${cell.code}]` : ''}): ${note}\n`);
  for (const cell of run.openLoop) for (const note of cell.notes) process.stdout.write(`note (open loop, ${cell.code}): ${note}\n`);
  const file = writeResult('latest.json', {
    startedAt: new Date(startedMs).toISOString(),
    elapsedS: (Date.now() - startedMs) / 1000,
    machine: { cpus: cpus().length, loadAverageAtEnd: loadavg() },
    settings: { ...run.config, adminUrl: withoutPassword(run.config.adminUrl) },
    loadTool: run.tool,
    gatewayStartMs: run.startMs,
    gatewaySql: run.script && { statements: run.script.statements, transactions: run.script.transactions, texts: run.script.texts },
    cells,
    openLoop: run.openLoop,
    budgetPair: pair,
    baseline: run.baseline,
    invariants: run.invariants,
    console: run.console,
    telemetry: run.config.otel && { ...run.otelEnv, ...(run.sink ? { sinkExports: run.sink.exports, sinkBytes: run.sink.bytes } : {}) },
    problems,
  });
  if (problems.length > 0) {
    process.stdout.write(`\n${'!'.repeat(72)}\nBENCH FAILED:\n${problems.map((p) => `  - ${p}`).join('\n')}\n${'!'.repeat(72)}\n`);
  } else {
    const checked = Object.entries(run.invariants).map(([database, r]) => `${database}: ${r.checks.length} checks`).join(', ');
    process.stdout.write(`ledger invariants hold (${checked}).\n`);
  }
  log(`done; results in ${path.relative(process.cwd(), file)}`);
  return problems.length > 0 ? 1 : 0;
}

async function main(): Promise<number> {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    process.stdout.write(HELP);
    return 0;
  }
  const config = benchConfig(process.env);
  execFileSync('pgbench', ['--version'], { stdio: 'ignore' });
  const run: Run = { config, tool: availableTool(config.load), cells: [], openLoop: [], invariants: {}, startMs: {}, problems: [], otelEnv: {} };
  if (config.openS > 0) log(`open loop: ${config.openRatePerS} req/s for ${config.openS} s, shedding beyond ${config.openInFlightMax} waiting`);
  if (config.baselineRef) log(`baseline: the gateway cells on PostgreSQL also run on ${config.baselineRef}, alternated with the current code`);
  if (config.otel) {
    run.sink = config.otel.endpoint ? undefined : await startOtlpSink();
    run.otelEnv = {
      OTEL_EXPORTER_OTLP_ENDPOINT: config.otel.endpoint ?? run.sink!.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: config.otel.protocol,
      OTEL_SERVICE_NAME: 'acg-bench',
    };
    log(`the measured gateways trace every request, exported over OTLP ${config.otel.protocol} to ${config.otel.endpoint ?? `a sink in this process (${run.sink!.url})`}`);
  }
  log(`bench: ${config.cellS} s per gateway cell (+${config.warmupS} s warm-up per mint cell), ${config.pgbenchS} s per pgbench cell, ${config.agents} agents (${config.budgets} budget(s) each), connections ${config.connections.join('/')}, load by ${run.tool}`);
  log(`machine: ${cpus().length} cores, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  await phase(run, 'the PostgreSQL part', () => onPostgres(run));
  if (config.pglite) await phase(run, 'the PGlite part', () => onPglite(run));
  await phase(run, 'the console part', () => onConsole(run));
  if (run.sink) log(`traces received by the sink: ${run.sink.exports} exports, ${(run.sink.bytes / 1e6).toFixed(1)} MB`);
  const exitCode = conclude(run);
  await run.sink?.close();
  return exitCode;
}

process.exitCode = await main();
