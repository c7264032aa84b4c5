// The measured cells: gateway mint and capture over HTTP (with the gateway process's CPU and peak RSS around
// each), and the pgbench cells. Each returns rows for the table; the 200 answers go to the ledger check.
import { randomUUID } from 'node:crypto';
import type { BenchConfig } from './config.ts';
import { cpuSeconds, peakRssMb, resetPeakRss, type Gateway } from './gateway.ts';
import { gatewaySqlForWorkload, type GatewaySqlScript } from './gateway-sql.ts';
import type { Answers } from './invariants.ts';
import { runLoad, type LoadResult, type LoadTool } from './load.ts';
import { minimalScript, pgbench, resetMinimal, type PgbenchResult } from './pgbench.ts';
import { log, type Cell, type Workload } from './report.ts';
import type { World } from './seed.ts';

export const WORKLOADS: readonly Workload[] = ['spread', 'hot'];

interface Measured {
  load: LoadResult;
  /** The gateway process's CPU seconds during the load. */
  cpuS: number;
  rssMb: number;
  /** False when the kernel refused to reset the peak: then it is the peak since the gateway started. */
  ownPeak: boolean;
}

function gatewayCell(operation: Cell['operation'], database: Cell['database'], workload: Workload, connections: number, { load, cpuS, rssMb, ownPeak }: Measured): Cell {
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

/** One measured gateway cell: CPU and peak RSS of the gateway process around the load. */
async function measure(gateway: Gateway, tool: LoadTool, spec: Parameters<typeof runLoad>[1]): Promise<Measured> {
  const ownPeak = resetPeakRss(gateway.pid);
  const before = cpuSeconds(gateway.pid);
  const load = await runLoad(tool, spec);
  const cpuS = cpuSeconds(gateway.pid) - before;
  return { load, cpuS, rssMb: peakRssMb(gateway.pid), ownPeak };
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
  held: Held,
): Promise<Cell> {
  const warmupS = database === 'pglite' ? config.pgliteWarmupS : config.warmupS;
  const items = workload === 'spread' ? world.agentTokens : world.agentTokens.slice(0, 1);
  const spec = { baseUrl: gateway.baseUrl, connections, mode: 'mint' as const, items };
  const warm = await runLoad(tool, { ...spec, durationS: warmupS, keyPrefix: `warm-${randomUUID()}` });
  const measured = await measure(gateway, tool, { ...spec, durationS: config.cellS, keyPrefix: `mint-${randomUUID()}` });
  for (const result of [warm, measured.load]) {
    held[workload].push(...result.holdIds);
    answers.minted.push(...result.holdIds);
    answers.mintOk += result.ok;
  }
  const cell = gatewayCell('mint', database, workload, connections, measured);
  log(`  mint ${database} ${workload} ${connections}: ${cell.throughputPerS.toFixed(0)}/s, p99 ${cell.p99Ms.toFixed(1)} ms, ${cell.cpuMsPerRequest?.toFixed(2)} ms CPU/req, ${cell.ok} ok`);
  return cell;
}

export async function captureCells(config: BenchConfig, tool: LoadTool, gateway: Gateway, world: World, held: Held, answers: Answers): Promise<Cell[]> {
  const cells: Cell[] = [];
  for (const workload of WORKLOADS) {
    // Each hold is captured once: the workload's holds are shared out between its cells.
    const pool = held[workload];
    const share = Math.floor(pool.length / config.connections.length);
    for (const [i, connections] of config.connections.entries()) {
      const items = pool.slice(i * share, (i + 1) * share);
      const measured = await measure(gateway, tool, { baseUrl: gateway.baseUrl, connections, durationS: config.cellS, mode: 'capture', items, merchantKey: world.merchantKey, keyPrefix: `capture-${randomUUID()}` });
      const { load } = measured;
      answers.captured.push(...load.holdIds);
      answers.captureOk += load.ok;
      const cell = gatewayCell('capture', 'postgresql', workload, connections, measured);
      if (load.requests < items.length) cell.notes.push(`${items.length - load.requests} of ${items.length} holds not captured within ${config.cellS} s`);
      cells.push(cell);
      log(`  capture ${workload} ${connections}: ${cell.throughputPerS.toFixed(0)}/s over ${load.seconds.toFixed(1)} s, p99 ${cell.p99Ms.toFixed(1)} ms, ${cell.ok} ok of ${items.length} holds`);
    }
  }
  return cells;
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
