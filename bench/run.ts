// `npm run bench`: issue 16 §5 in one run. See bench/config.ts (or `npm run bench -- --help`) for what it
// measures and how to tune it; docs/decisions.md ("The benchmark") for why it is built this way.
//   1. scratch databases: the gateway's (migrated and seeded through the gateway's own code) and the minimal one;
//   2. the gateway's mint SQL, captured from a gateway behind a recording relay (gateway-sql.ts);
//   3. gateway cells on PostgreSQL: mint (spread, hot) at each connection count, then capture of those holds;
//   4. pgbench cells: the minimal reserve transaction and the gateway's SQL, same workloads;
//   5. the ledger check on PostgreSQL; 6. the embedded PGlite mint cell and its ledger check;
//   7. the table, bench/results/latest.json, and a non-zero exit if anything broke.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { openPglite } from '../src/platform/db/pglite.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';
import type { Database } from '../src/platform/db/database.ts';
import { benchConfig, HELP, type BenchConfig } from './config.ts';
import { cpuSeconds, peakRssMb, resetPeakRss, startGateway, type Gateway } from './gateway.ts';
import { gatewaySqlForWorkload, gatewaySqlScript, type GatewaySqlScript } from './gateway-sql.ts';
import { checkLedger, type Answers } from './invariants.ts';
import { availableTool, runLoad, type LoadResult, type LoadTool } from './load.ts';
import { createMinimalSchema, minimalScript, pgbench, resetMinimal, type PgbenchResult } from './pgbench.ts';
import { table, withRatios, writeResult, type Cell, type Workload } from './report.ts';
import { gatewayEnv, seed, type World } from './seed.ts';
import { startSqlRelay, type CapturedStatement } from './sql-capture.ts';

const CAPTURE_AGENT = 2;
const WARM_MINTS = 3;
const WORKLOADS: readonly Workload[] = ['spread', 'hot'];

const startedMs = Date.now();
function log(line: string): void {
  const s = Math.floor((Date.now() - startedMs) / 1000);
  process.stdout.write(`[${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}] ${line}\n`);
}

function databaseUrl(adminUrl: string, name: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
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

async function mintOnce(gateway: Gateway, token: string): Promise<void> {
  const response = await fetch(`${gateway.baseUrl}/v1/vouchers`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': `bench-capture-${randomUUID()}` },
    body: '{"offerId":"off_bench"}',
  });
  if (response.status !== 200) throw new Error(`a mint for the SQL capture answered ${response.status}: ${(await response.text()).slice(0, 300)}`);
}

/** Step 2: a gateway behind the recording relay mints a few vouchers one at a time; each one's SQL is kept. */
async function captureGatewaySql(config: BenchConfig, url: string, dataDir: string, world: World): Promise<GatewaySqlScript> {
  const relay = await startSqlRelay(url);
  const gateway = await startGateway(gatewayEnv({ databaseUrl: relay.url, dataDir, port: config.port }), config.port, config.nodeOptions);
  const captures: CapturedStatement[][] = [];
  try {
    const token = world.agentTokens[CAPTURE_AGENT - 1]!;
    for (let i = 0; i < WARM_MINTS; i++) await mintOnce(gateway, token);
    for (let i = 0; i < config.captureMints; i++) {
      const stop = relay.record();
      await mintOnce(gateway, token);
      captures.push(stop());
    }
  } finally {
    await gateway.stop();
    await relay.close();
  }
  return gatewaySqlScript(url, captures, { captureAgent: CAPTURE_AGENT });
}

function gatewayCell(operation: Cell['operation'], database: Cell['database'], workload: Workload, connections: number, load: LoadResult, cpuS: number, rssMb: number): Cell {
  return {
    kind: 'gateway',
    operation,
    database,
    workload,
    connections,
    tool: load.tool,
    seconds: load.seconds,
    requests: load.requests,
    ok: load.ok,
    rejected: { ...load.rejected, ...(load.socketErrors ? { 'socket error': load.socketErrors } : {}), ...(load.timeouts ? { timeout: load.timeouts } : {}) },
    throughputPerS: load.throughputPerS,
    p50Ms: load.p50Ms,
    p99Ms: load.p99Ms,
    cpuMsPerRequest: load.requests > 0 ? (cpuS * 1000) / load.requests : undefined,
    peakRssMb: rssMb,
    notes: load.samples.map((s) => `answer: ${s}`),
  };
}

function pgbenchCell(kind: 'minimal' | 'gateway-sql', workload: Workload, connections: number, result: PgbenchResult): Cell {
  return {
    kind,
    operation: kind === 'minimal' ? 'reserve' : 'mint',
    database: 'postgresql',
    workload,
    connections,
    tool: 'pgbench',
    seconds: result.seconds,
    requests: result.transactions + result.failed,
    ok: result.transactions,
    rejected: result.failed ? { failed: result.failed } : {},
    throughputPerS: result.throughputPerS,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    notes: result.errors,
  };
}

/** One measured gateway cell: CPU and peak RSS of the gateway process around the load. */
async function measure(gateway: Gateway, tool: LoadTool, spec: Parameters<typeof runLoad>[1]): Promise<{ load: LoadResult; cpuS: number; rssMb: number }> {
  resetPeakRss(gateway.pid);
  const before = cpuSeconds(gateway.pid);
  const load = await runLoad(tool, spec);
  const cpuS = cpuSeconds(gateway.pid) - before;
  return { load, cpuS, rssMb: peakRssMb(gateway.pid) };
}

interface MintCellsResult {
  cells: Cell[];
  /** Hold ids of the 200 answers by workload, warm-ups included (the capture cells' pool). */
  held: Record<Workload, string[]>;
}

async function mintCells(
  config: BenchConfig,
  tool: LoadTool,
  gateway: Gateway,
  world: World,
  database: Cell['database'],
  workloads: readonly Workload[],
  connectionCounts: readonly number[],
  answers: Answers,
): Promise<MintCellsResult> {
  const warmupS = database === 'pglite' ? config.pgliteWarmupS : config.warmupS;
  const cells: Cell[] = [];
  const held: Record<Workload, string[]> = { spread: [], hot: [] };
  for (const workload of workloads) {
    const items = workload === 'spread' ? world.agentTokens : world.agentTokens.slice(0, 1);
    for (const connections of connectionCounts) {
      const spec = { baseUrl: gateway.baseUrl, connections, mode: 'mint' as const, items };
      const warm = await runLoad(tool, { ...spec, durationS: warmupS, keyPrefix: `warm-${randomUUID()}` });
      const { load, cpuS, rssMb } = await measure(gateway, tool, { ...spec, durationS: config.cellS, keyPrefix: `mint-${randomUUID()}` });
      for (const result of [warm, load]) {
        held[workload].push(...result.holdIds);
        answers.minted.push(...result.holdIds);
        answers.mintOk += result.ok;
      }
      const cell = gatewayCell('mint', database, workload, connections, load, cpuS, rssMb);
      cells.push(cell);
      log(`  mint ${database} ${workload} ${connections}: ${cell.throughputPerS.toFixed(0)}/s, p99 ${cell.p99Ms.toFixed(1)} ms, ${cell.cpuMsPerRequest?.toFixed(2)} ms CPU/req, ${cell.ok} ok`);
    }
  }
  return { cells, held };
}

async function captureCells(config: BenchConfig, tool: LoadTool, gateway: Gateway, world: World, held: Record<Workload, string[]>, answers: Answers): Promise<Cell[]> {
  const cells: Cell[] = [];
  for (const workload of WORKLOADS) {
    // Each hold is captured once: the workload's holds are shared out between its cells.
    const pool = held[workload];
    const share = Math.floor(pool.length / config.connections.length);
    for (const [i, connections] of config.connections.entries()) {
      const items = pool.slice(i * share, (i + 1) * share);
      const { load, cpuS, rssMb } = await measure(gateway, tool, { baseUrl: gateway.baseUrl, connections, durationS: config.cellS, mode: 'capture', items, merchantKey: world.merchantKey, keyPrefix: `capture-${randomUUID()}` });
      answers.captured.push(...load.holdIds);
      answers.captureOk += load.ok;
      const cell = gatewayCell('capture', 'postgresql', workload, connections, load, cpuS, rssMb);
      if (load.requests < items.length) cell.notes.push(`${items.length - load.requests} of ${items.length} holds not captured within ${config.cellS} s`);
      cells.push(cell);
      log(`  capture ${workload} ${connections}: ${cell.throughputPerS.toFixed(0)}/s over ${load.seconds.toFixed(1)} s, p99 ${cell.p99Ms.toFixed(1)} ms, ${cell.ok} ok of ${items.length} holds`);
    }
  }
  return cells;
}

async function pgbenchCells(config: BenchConfig, url: string, minimalUrl: string, script: GatewaySqlScript): Promise<Cell[]> {
  const cells: Cell[] = [];
  for (const workload of WORKLOADS) {
    for (const connections of config.connections) {
      await resetMinimal(minimalUrl);
      const minimal = pgbenchCell('minimal', workload, connections, await pgbench(minimalUrl, minimalScript(config.agents, workload), connections, config.pgbenchS));
      log(`  minimal reserve ${workload} ${connections}: ${minimal.throughputPerS.toFixed(0)} tx/s, p99 ${minimal.p99Ms.toFixed(1)} ms`);
      const own = pgbenchCell('gateway-sql', workload, connections, await pgbench(url, gatewaySqlForWorkload(script, config.agents, workload), connections, config.pgbenchS, script.defines));
      log(`  gateway mint SQL ${workload} ${connections}: ${own.throughputPerS.toFixed(0)} tx/s, p99 ${own.p99Ms.toFixed(1)} ms`);
      cells.push(minimal, own);
    }
  }
  return cells;
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
  return { minted: [], captured: [], mintOk: 0, captureOk: 0 };
}

async function main(): Promise<number> {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    process.stdout.write(HELP);
    return 0;
  }
  const config = benchConfig(process.env);
  execFileSync('pgbench', ['--version'], { stdio: 'ignore' });
  const tool = availableTool(config.load);
  const stamp = `${Date.now()}`;
  const dbName = `acg_bench_${stamp}`;
  const minimalName = `acg_bench_${stamp}_minimal`;
  const url = databaseUrl(config.adminUrl, dbName);
  const minimalUrl = databaseUrl(config.adminUrl, minimalName);
  const pgDataDir = mkdtempSync(path.join(tmpdir(), 'acg-bench-pg-'));
  const liteDataDir = mkdtempSync(path.join(tmpdir(), 'acg-bench-lite-'));
  const problems: string[] = [];
  const cells: Cell[] = [];
  const invariants: Record<string, { checks: string[]; problems: string[] }> = {};
  const startMs: Record<string, number> = {};
  let script: GatewaySqlScript | undefined;
  log(`bench: ${config.cellS} s per gateway cell (+${config.warmupS} s warm-up per mint cell), ${config.pgbenchS} s per pgbench cell, ${config.agents} agents, connections ${config.connections.join('/')}, load by ${tool}`);
  log(`machine: ${cpus().length} cores, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  try {
    await admin(config.adminUrl, `CREATE DATABASE ${dbName}`);
    await admin(config.adminUrl, `CREATE DATABASE ${minimalName}`);
    await createMinimalSchema(minimalUrl, config.agents);
    const world = await seed(gatewayEnv({ databaseUrl: url, dataDir: pgDataDir, port: config.port }), config.agents);
    log(`seeded ${dbName}: ${config.agents} agents, one offer`);

    script = await captureGatewaySql(config, url, pgDataDir, world);
    writeResult('gateway-mint.pgbench', gatewaySqlForWorkload(script, config.agents, 'spread'));
    writeResult('gateway-mint.defines.json', script.defines);
    log(`captured a mint's SQL: ${script.statements} statements (round trips), ${script.transactions} transaction(s); bench/results/gateway-mint.pgbench`);

    const answers = noAnswers();
    const gateway = await startGateway(gatewayEnv({ databaseUrl: url, dataDir: pgDataDir, port: config.port }), config.port, config.nodeOptions);
    startMs.postgresql = gateway.startMs;
    log(`gateway on PostgreSQL ready in ${gateway.startMs} ms (pid ${gateway.pid})`);
    try {
      const minted = await mintCells(config, tool, gateway, world, 'postgresql', WORKLOADS, config.connections, answers);
      cells.push(...minted.cells);
      cells.push(...(await captureCells(config, tool, gateway, world, minted.held, answers)));
    } finally {
      await gateway.stop();
    }
    cells.push(...(await pgbenchCells(config, url, minimalUrl, script)));
    invariants.postgresql = await withDatabase(() => openPostgres(url), (db) => checkLedger(db, answers));
    log(`ledger on PostgreSQL: ${invariants.postgresql.problems.length === 0 ? 'holds' : 'BROKEN'}`);

    if (config.pglite) {
      const liteWorld = await seed(gatewayEnv({ dataDir: liteDataDir, port: config.port }), config.agents);
      const liteAnswers = noAnswers();
      const lite = await startGateway(gatewayEnv({ dataDir: liteDataDir, port: config.port }), config.port, config.nodeOptions);
      startMs.pglite = lite.startMs;
      log(`gateway on PGlite ready in ${lite.startMs} ms (pid ${lite.pid})`);
      try {
        cells.push(...(await mintCells(config, tool, lite, liteWorld, 'pglite', ['spread'], config.connections.slice(0, 1), liteAnswers)).cells);
      } finally {
        await lite.stop();
      }
      invariants.pglite = await withDatabase(() => openPglite(path.join(liteDataDir, 'pglite')), (db) => checkLedger(db, liteAnswers));
      log(`ledger on PGlite: ${invariants.pglite.problems.length === 0 ? 'holds' : 'BROKEN'}`);
    }
  } catch (error) {
    problems.push(`the run stopped: ${(error as Error).stack ?? String(error)}`);
  } finally {
    rmSync(pgDataDir, { recursive: true, force: true });
    rmSync(liteDataDir, { recursive: true, force: true });
    for (const name of [dbName, minimalName]) await admin(config.adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
  }

  const rated = withRatios(cells);
  for (const cell of rated) {
    if (cell.ok === 0) problems.push(`${cell.kind} ${cell.operation} ${cell.database} ${cell.workload} ${cell.connections}: no successful request`);
  }
  for (const [database, result] of Object.entries(invariants)) for (const p of result.problems) problems.push(`ledger on ${database}: ${p}`);
  process.stdout.write(`\n${table(rated)}\n\n`);
  if (script) process.stdout.write(`Gateway mint SQL: ${script.statements} statements in ${script.transactions} transaction(s), captured from the gateway's wire traffic (bench/gateway-sql.ts).\n`);
  for (const cell of rated) for (const note of cell.notes) process.stdout.write(`note (${cell.kind} ${cell.operation} ${cell.workload} ${cell.connections}): ${note}\n`);
  const checked = Object.entries(invariants).map(([database, r]) => `${database}: ${r.checks.length} checks`).join(', ');
  const file = writeResult('latest.json', {
    startedAt: new Date(startedMs).toISOString(),
    elapsedS: (Date.now() - startedMs) / 1000,
    machine: { cpus: cpus().length, loadAverageAtEnd: loadavg() },
    settings: config,
    loadTool: tool,
    gatewayStartMs: startMs,
    gatewaySql: script && { statements: script.statements, transactions: script.transactions, texts: script.texts },
    cells: rated,
    invariants,
    problems,
  });
  if (problems.length > 0) {
    process.stdout.write(`\n${'!'.repeat(72)}\nBENCH FAILED:\n${problems.map((p) => `  - ${p}`).join('\n')}\n${'!'.repeat(72)}\n`);
  } else {
    process.stdout.write(`ledger invariants hold (${checked}).\n`);
  }
  log(`done; results in ${path.relative(process.cwd(), file)}`);
  return problems.length > 0 ? 1 : 0;
}

process.exitCode = await main();
