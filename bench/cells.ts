// The measured cells: gateway mint and capture over HTTP (with the gateway process's CPU and peak RSS around
// each), and the pgbench cells. Each returns rows for the table; the 200 answers go to the ledger check.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import type { BenchConfig } from './config.ts';
import { cpuSeconds, peakRssMb, resetPeakRss, type Gateway } from './gateway.ts';
import { gatewaySqlForWorkload, type GatewaySqlScript } from './gateway-sql.ts';
import type { Answers } from './invariants.ts';
import { runLoad, type LoadResult, type LoadTool } from './load.ts';
import { minimalScript, pgbench, resetMinimal, type PgbenchResult } from './pgbench.ts';
import { runOpenLoop, type OpenLoopResult, type OpenLoopSpec } from './open-loop.ts';
import { CLOCK_TICKS_PER_S, parentPid, readMachineTicks, readProcessTicks, ticksBetween } from './proc.ts';
import { log, type Cell, type OpenLoopCell, type Workload } from './report.ts';
import type { World } from './seed.ts';
import { EXECUTE_BODY } from './upstream.ts';

export const WORKLOADS: readonly Workload[] = ['spread', 'hot'];

interface Measured {
  load: LoadResult;
  /** The gateway process's CPU seconds during the load. */
  cpuS: number;
  /** PostgreSQL's CPU seconds during the load (its processes' /proc times); undefined when not on this machine. */
  databaseCpuS?: number;
  rssMb: number;
  /** False when the kernel refused to reset the peak: then it is the peak since the gateway started. */
  ownPeak: boolean;
}

/** What sets a gateway cell apart: which code ran it (BENCH_BASELINE_REF), and a variant such as "3 budgets". */
export interface CellOptions {
  code?: string;
  variant?: string;
  /** Run between the warm-up and the measured load (the database's ANALYZE: bench/run.ts). */
  afterWarmup?: () => Promise<void>;
}

function gatewayCell(operation: Cell['operation'], database: Cell['database'], workload: Workload, connections: number, { load, cpuS, databaseCpuS, rssMb, ownPeak }: Measured, options: CellOptions = {}): Cell {
  return {
    kind: 'gateway',
    operation,
    ...(options.variant ? { variant: options.variant } : {}),
    ...(options.code ? { code: options.code } : {}),
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
    ...(databaseCpuS !== undefined && load.requests > 0 ? { databaseCpuMsPerRequest: (databaseCpuS * 1000) / load.requests } : {}),
    peakRssMb: rssMb,
    notes: [...load.samples.map((s) => `answer: ${s}`), ...(ownPeak ? [] : ['peak RSS since the gateway started (the kernel refused to reset it)'])],
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
    ...(result.statementLatencies ? { statementLatencies: result.statementLatencies } : {}),
  };
}

/** One measured gateway cell: CPU of the gateway and of PostgreSQL (when it runs here), and peak RSS, around the load. */
async function measure(gateway: Gateway, tool: LoadTool, spec: Parameters<typeof runLoad>[1]): Promise<Measured> {
  const database = gateway.databaseUrl ? await DatabaseCpu.start(gateway.databaseUrl) : undefined;
  try {
    const ownPeak = resetPeakRss(gateway.pid);
    const before = cpuSeconds(gateway.pid);
    await database?.begin();
    const load = await runLoad(tool, spec);
    const cpuS = cpuSeconds(gateway.pid) - before;
    const used = await database?.end();
    return { load, cpuS, ...(used?.measured ? { databaseCpuS: used.ticks / CLOCK_TICKS_PER_S } : {}), rssMb: peakRssMb(gateway.pid), ownPeak };
  } finally {
    await database?.close();
  }
}

/** Hold ids of the 200 mint answers by workload, warm-ups included: the capture cells' pool. */
export type Held = Record<Workload, string[]>;

/** One mint cell: a warm-up (not measured, its holds kept), then the measured load. */
export async function mintCell(
  config: BenchConfig,
  tool: LoadTool,
  gateway: Gateway,
  world: World,
  database: Cell['database'],
  workload: Workload,
  connections: number,
  answers: Answers,
  held: Held | undefined,
  options: CellOptions & { agentTokens?: readonly string[] } = {},
): Promise<Cell> {
  const warmupS = database === 'pglite' ? config.pgliteWarmupS : config.warmupS;
  const tokens = options.agentTokens ?? world.agentTokens;
  const items = workload === 'spread' ? tokens : tokens.slice(0, 1);
  const spec = { baseUrl: gateway.baseUrl, connections, mode: 'mint' as const, items };
  const warm = await runLoad(tool, { ...spec, durationS: warmupS, keyPrefix: `warm-${randomUUID()}` });
  await options.afterWarmup?.();
  const measured = await measure(gateway, tool, { ...spec, durationS: config.cellS, keyPrefix: `mint-${randomUUID()}` });
  for (const result of [warm, measured.load]) {
    held?.[workload].push(...result.holdIds);
    answers.minted.push(...result.holdIds);
    answers.mintOk += result.ok;
  }
  const cell = gatewayCell('mint', database, workload, connections, measured, options);
  log(`  mint ${database} ${workload} ${connections}${options.variant ? ` ${options.variant}` : ''}${codeTag(options)}: ${cell.throughputPerS.toFixed(0)}/s, p99 ${cell.p99Ms.toFixed(1)} ms, ${cpuLine(cell)}, ${cell.ok} ok`);
  return cell;
}

/** The cell's CPU per request for the log: the gateway's, and PostgreSQL's when measured. */
const cpuLine = (cell: Cell) =>
  `CPU ms/req gateway ${cell.cpuMsPerRequest?.toFixed(2) ?? '–'}${cell.databaseCpuMsPerRequest !== undefined ? ` database ${cell.databaseCpuMsPerRequest.toFixed(2)}` : ''}`;

const codeTag = (options: CellOptions) => (options.code && options.code !== 'current' ? ` [${options.code}]` : '');

/**
 * One execute cell: POST /v1/services/execute of github-public repository.get (against the local stand-in,
 * bench/upstream.ts) over the agents, a warm-up then the measured load; every 200 answer's receipt is a
 * captured hold, checked afterwards.
 */
export async function executeCell(config: BenchConfig, tool: LoadTool, gateway: Gateway, world: World, connections: number, answers: Answers, options: CellOptions = {}): Promise<Cell> {
  const spec = { baseUrl: gateway.baseUrl, connections, mode: 'execute' as const, items: world.agentTokens, body: EXECUTE_BODY };
  const warm = await runLoad(tool, { ...spec, durationS: config.warmupS, keyPrefix: `warm-execute-${randomUUID()}` });
  await options.afterWarmup?.();
  const measured = await measure(gateway, tool, { ...spec, durationS: config.cellS, keyPrefix: `execute-${randomUUID()}` });
  for (const result of [warm, measured.load]) {
    answers.executed.push(...result.holdIds);
    answers.executeOk += result.ok;
  }
  const cell = gatewayCell('execute', 'postgresql', 'spread', connections, measured, options);
  log(`  execute spread ${connections}${codeTag(options)}: ${cell.throughputPerS.toFixed(0)}/s, p99 ${cell.p99Ms.toFixed(1)} ms, ${cpuLine(cell)}, ${cell.ok} ok`);
  return cell;
}

const DATABASE_SAMPLE_MS = 500;

/**
 * PostgreSQL's processes that work for this database: the backends connected to it (but the bench's own
 * monitoring one), its background processes (WAL writer, checkpointer, background writer, autovacuum: they
 * have no database or ours), and the postmaster that forks them. Their CPU ticks now, by pid; empty when the
 * server is not on this machine (no /proc entries).
 */
async function databaseProcessTicks(monitor: pg.Client): Promise<Map<number, number>> {
  const { rows } = await monitor.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE (datname IS NULL OR datname = current_database()) AND pid <> pg_backend_pid()',
  );
  const pids = new Set(rows.map((r) => r.pid));
  try {
    pids.add(parentPid(readFileSync(`/proc/${rows[0]?.pid ?? 0}/stat`, 'utf8')));
  } catch {
    // not on this machine: no postmaster to add
  }
  const ticks = new Map<number, number>();
  for (const pid of pids) {
    const t = readProcessTicks(pid);
    if (t !== undefined) ticks.set(pid, t);
  }
  return ticks;
}

/**
 * PostgreSQL's CPU over an interval: its processes' ticks (databaseProcessTicks) at `begin`, read again every
 * half second, so a backend that ends meanwhile (the pool closing an idle connection) still counts up to its
 * last reading (only its last half second is lost, and `ended` says how many did), and at `end`.
 */
class DatabaseCpu {
  private before = new Map<number, number>();
  private readonly latest = new Map<number, number>();
  private sampling = Promise.resolve();
  private sampler: NodeJS.Timeout | undefined;

  private constructor(private readonly monitor: pg.Client) {}

  static async start(databaseUrl: string): Promise<DatabaseCpu> {
    const monitor = new pg.Client({ connectionString: databaseUrl });
    await monitor.connect();
    return new DatabaseCpu(monitor);
  }

  private async sample(): Promise<void> {
    for (const [pid, ticks] of await databaseProcessTicks(this.monitor)) this.latest.set(pid, ticks);
  }

  async begin(): Promise<void> {
    this.before = await databaseProcessTicks(this.monitor);
    for (const [pid, ticks] of this.before) this.latest.set(pid, ticks);
    this.sampler = setInterval(() => (this.sampling = this.sampling.then(() => this.sample(), () => {})), DATABASE_SAMPLE_MS);
  }

  /** The ticks used since `begin`; `measured` false when PostgreSQL is not on this machine (no /proc entries). */
  async end(): Promise<{ ticks: number; ended: number; measured: boolean }> {
    clearInterval(this.sampler);
    await this.sampling;
    await this.sample();
    const after = new Map(this.latest);
    const ended = [...after.keys()].filter((pid) => readProcessTicks(pid) === undefined).length;
    return { ticks: ticksBetween(this.before, after).ticks, ended, measured: this.before.size > 0 };
  }

  async close(): Promise<void> {
    clearInterval(this.sampler);
    await this.monitor.end();
  }
}

/** The open loop's answers that moved money, kept for the ledger check. */
function recordOpenAnswers(answers: Answers, result: OpenLoopResult): void {
  answers.minted.push(...result.minted);
  answers.mintOk += result.byOperation.mint.ok;
  answers.captured.push(...result.captured);
  answers.captureOk += result.byOperation.capture.ok;
  answers.released.push(...result.released);
  answers.releaseOk += result.byOperation.release.ok;
}

/** The open loop's load (bench/open-loop.ts) at the configured rate, for `durationS` seconds. */
function openLoopSpec(config: BenchConfig, gateway: Gateway, world: World, durationS: number): OpenLoopSpec {
  return {
    baseUrl: gateway.baseUrl,
    ratePerS: config.openRatePerS,
    durationS,
    inFlightMax: config.openInFlightMax,
    agentTokens: world.agentTokens,
    merchantKey: world.merchantKey,
    keyPrefix: `open-${randomUUID()}`,
    timeoutS: 10,
  };
}

/**
 * A gateway just started, warmed before its first cell: `gatewayWarmupS` seconds of the open loop's mixed work
 * (mint, capture, release, reads), answered, kept for the ledger check, and not measured. V8 optimizes a path
 * only after it has run it many times: on a gateway just started, perf showed its CPU per request at 300 req/s
 * falling by about two fifths over the first 25 seconds of load while V8's compiler threads ran, and the first
 * mint cell costing half again what the same cell cost later in the run (docs/decisions.md "Each gateway in the
 * bench is warmed before its first cell"). Returns the warm-up's figures for the log.
 */
export async function warmGateway(config: BenchConfig, gateway: Gateway, world: World, answers: Answers): Promise<{ sent: number; shed: number; p99Ms: number }> {
  const result = await runOpenLoop(openLoopSpec(config, gateway, world, config.gatewayWarmupS), { started: async () => {}, ended: () => {} });
  recordOpenAnswers(answers, result);
  return { sent: result.sent, shed: result.shed, p99Ms: result.p99Ms };
}

/**
 * The open-loop cell on PostgreSQL: mixed work at a fixed rate over the agents (bench/open-loop.ts), with the
 * CPU the gateway, PostgreSQL and the whole machine spent per request sent. First `openWarmupS` seconds of the
 * same load, answered but not measured, as each mint cell has its warm-up: on a gateway just started the first
 * two seconds at 300 req/s answered in up to 1.7 s while it ran its paths for the first time, and in a 60 s cell
 * those seconds alone set the p99 (docs/decisions.md "The open loop measures the steady state, after a warm-up").
 * The warm-up's p50 and p99 stay in the cell's notes.
 */
export async function openLoopCell(config: BenchConfig, gateway: Gateway, world: World, databaseUrl: string, answers: Answers, options: CellOptions = {}): Promise<OpenLoopCell> {
  const spec = (durationS: number) => openLoopSpec(config, gateway, world, durationS);
  let warmup: OpenLoopCell['warmup'];
  if (config.openWarmupS > 0) {
    const result = await runOpenLoop(spec(config.openWarmupS), { started: async () => {}, ended: () => {} });
    recordOpenAnswers(answers, result);
    warmup = { durationS: config.openWarmupS, sent: result.sent, shed: result.shed, p50Ms: result.p50Ms, p99Ms: result.p99Ms };
  }
  const database = await DatabaseCpu.start(databaseUrl);
  try {
    // Read at the edges of the load (hooks), not around the generator's own start-up.
    let gatewayBefore = NaN;
    let gatewayAfter = NaN;
    let machineBefore = { busy: 0, total: 0 };
    let machineAfter = { busy: 0, total: 0 };
    const result = await runOpenLoop(
      spec(config.openS),
      {
        started: async () => {
          await database.begin();
          gatewayBefore = readProcessTicks(gateway.pid) ?? NaN;
          machineBefore = readMachineTicks();
        },
        ended: () => {
          machineAfter = readMachineTicks();
          gatewayAfter = readProcessTicks(gateway.pid) ?? NaN;
        },
      },
    );
    const db = await database.end();
    const ended = db.ended;
    recordOpenAnswers(answers, result);
    const msPerRequest = (ticks: number) => (result.sent > 0 ? (ticks * 1000) / CLOCK_TICKS_PER_S / result.sent : NaN);
    const machineBusy = machineAfter.busy - machineBefore.busy;
    const notes: string[] = [...result.samples.map((s) => `answer: ${s}`)];
    if (warmup) {
      notes.push(`warm-up before the cell, not measured: ${warmup.durationS} s, ${warmup.sent} sent, ${warmup.shed} shed, p50 ${warmup.p50Ms.toFixed(1)} ms, p99 ${warmup.p99Ms.toFixed(1)} ms`);
    }
    if (ended > 0) notes.push(`${ended} PostgreSQL process(es) ended during the cell: counted up to their last reading (every ${DATABASE_SAMPLE_MS} ms)`);
    if (!db.measured) notes.push('PostgreSQL is not on this machine (no /proc entries): its CPU is not measured');
    if (result.sendLagMaxMs > 20) notes.push(`the generator sent up to ${result.sendLagMaxMs.toFixed(0)} ms late (latency still counts from the schedule)`);
    const cell: OpenLoopCell = {
      code: options.code ?? 'current',
      ratePerS: config.openRatePerS,
      durationS: config.openS,
      inFlightMax: config.openInFlightMax,
      scheduled: result.scheduled,
      sent: result.sent,
      ok: result.ok,
      shed: result.shed,
      failed: result.failed,
      p50Ms: result.p50Ms,
      p99Ms: result.p99Ms,
      byOperation: result.byOperation,
      machineBusyPct: (100 * machineBusy) / Math.max(1, machineAfter.total - machineBefore.total),
      gatewayCpuMsPerRequest: msPerRequest(gatewayAfter - gatewayBefore),
      ...(db.measured ? { databaseCpuMsPerRequest: msPerRequest(db.ticks) } : {}),
      machineCpuMsPerRequest: msPerRequest(machineBusy),
      sendLagMaxMs: result.sendLagMaxMs,
      ...(warmup ? { warmup } : {}),
      notes,
    };
    log(
      `  open loop ${cell.ratePerS}/s × ${cell.durationS} s${codeTag(options)}: p50 ${cell.p50Ms.toFixed(1)} ms, p99 ${cell.p99Ms.toFixed(1)} ms, ${cell.ok} ok of ${cell.scheduled}, ${cell.shed} shed, ` +
        `machine ${cell.machineBusyPct.toFixed(0)}% busy, CPU ms/req gateway ${cell.gatewayCpuMsPerRequest.toFixed(2)} database ${cell.databaseCpuMsPerRequest?.toFixed(2) ?? '–'} machine ${cell.machineCpuMsPerRequest.toFixed(2)}`,
    );
    return cell;
  } finally {
    await database.close();
  }
}

/**
 * The capture cells' share of a workload's holds: each hold is captured once, so the holds are shared out
 * between the workload's cells, one share per connection count (`index`: that count's place in the list).
 */
export function captureShare(config: BenchConfig, held: Held, workload: Workload, index: number): string[] {
  const pool = held[workload];
  const share = Math.floor(pool.length / config.connections.length);
  return pool.slice(index * share, (index + 1) * share);
}

/** One capture cell: POST /v1/redemptions/capture of each of these holds once, for up to BENCH_CELL_S. */
export async function captureCell(
  config: BenchConfig,
  tool: LoadTool,
  gateway: Gateway,
  world: World,
  items: readonly string[],
  workload: Workload,
  connections: number,
  answers: Answers,
  options: CellOptions = {},
): Promise<Cell> {
  const measured = await measure(gateway, tool, { baseUrl: gateway.baseUrl, connections, durationS: config.cellS, mode: 'capture', items, merchantKey: world.merchantKey, keyPrefix: `capture-${randomUUID()}` });
  const { load } = measured;
  answers.captured.push(...load.holdIds);
  answers.captureOk += load.ok;
  const cell = gatewayCell('capture', 'postgresql', workload, connections, measured, options);
  if (load.requests < items.length) cell.notes.push(`${items.length - load.requests} of ${items.length} holds not captured within ${config.cellS} s`);
  log(`  capture ${workload} ${connections}${options.variant ? ` ${options.variant}` : ''}${codeTag(options)}: ${cell.throughputPerS.toFixed(0)}/s over ${load.seconds.toFixed(1)} s, p99 ${cell.p99Ms.toFixed(1)} ms, ${cpuLine(cell)}, ${cell.ok} ok of ${items.length} holds`);
  return cell;
}

/**
 * The pgbench cells of one workload and connection count: the minimal reserve transaction, then the gateway's
 * own SQL (when it was captured). Run next to the gateway cell they are the baseline of, so both see the same
 * neighbours.
 */
export async function pgbenchCells(config: BenchConfig, url: string, minimalUrl: string, script: GatewaySqlScript | undefined, workload: Workload, connections: number): Promise<Cell[]> {
  await resetMinimal(minimalUrl);
  const minimal = pgbenchCell('minimal', workload, connections, await pgbench(minimalUrl, minimalScript(config.agents, workload), connections, config.pgbenchS));
  log(`  minimal reserve ${workload} ${connections}: ${minimal.throughputPerS.toFixed(0)} tx/s, p99 ${minimal.p99Ms.toFixed(1)} ms`);
  if (!script) return [minimal];
  const own = pgbenchCell('gateway-sql', workload, connections, await pgbench(url, gatewaySqlForWorkload(script, config.agents, workload), connections, config.pgbenchS, { defines: script.defines, perStatement: true }));
  log(`  gateway mint SQL ${workload} ${connections}: ${own.throughputPerS.toFixed(0)} tx/s, p99 ${own.p99Ms.toFixed(1)} ms`);
  return [minimal, own];
}
