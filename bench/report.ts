// The closing table (markdown) and the JSON record (bench/results/latest.json, not committed).
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './gateway.ts';
import type { StatementLatency } from './pgbench.ts';

export type Workload = 'spread' | 'hot';

export interface Cell {
  /** minimal: the minimal reserve transaction by pgbench; gateway-sql: the gateway's mint SQL by pgbench; gateway: over HTTP. */
  kind: 'minimal' | 'gateway-sql' | 'gateway';
  operation: 'reserve' | 'mint' | 'capture' | 'execute';
  /** What sets this cell apart from others of its operation and workload, e.g. "3 budgets". */
  variant?: string;
  /** Which code the gateway ran: "current", or the git ref of BENCH_BASELINE_REF. Absent on pgbench cells. */
  code?: string;
  database: 'postgresql' | 'pglite';
  workload: Workload;
  connections: number;
  tool: string;
  seconds: number;
  requests: number;
  ok: number;
  /** Answers other than 200 (HTTP status → count), or failed transactions under "failed". */
  rejected: Record<string, number>;
  throughputPerS: number;
  p50Ms: number;
  p99Ms: number;
  cpuMsPerRequest?: number;
  /** PostgreSQL's CPU ms per request (its processes' /proc times), on PostgreSQL on this machine. */
  databaseCpuMsPerRequest?: number;
  peakRssMb?: number;
  /** Throughput ÷ the minimal baseline's of the same workload and connection count. */
  ratioToMinimal?: number;
  notes: string[];
  /** pgbench cells of the gateway's SQL: each statement's average latency. */
  statementLatencies?: StatementLatency[];
}

export const RESULTS_DIR = path.join(ROOT, 'bench/results');

export const startedMs = Date.now();

/** A progress line, stamped with the time since the run started. */
export function log(line: string): void {
  const s = Math.floor((Date.now() - startedMs) / 1000);
  process.stdout.write(`[${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}] ${line}\n`);
}

function label(cell: Cell): string {
  const what =
    cell.kind === 'minimal'
      ? 'minimal reserve tx (pgbench)'
      : cell.kind === 'gateway-sql'
        ? 'gateway mint SQL (pgbench)'
        : `gateway ${cell.operation}${cell.database === 'pglite' ? ' on PGlite' : ''}`;
  const code = cell.code && cell.code !== 'current' ? ` [${cell.code}]` : '';
  return `${what}${code}, ${cell.workload}, ${cell.connections}${cell.variant ? `, ${cell.variant}` : ''}`;
}

const fixed = (value: number | undefined, digits: number) => (value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits));

export function withRatios(cells: Cell[]): Cell[] {
  return cells.map((cell) => {
    if (cell.kind === 'minimal' || cell.database === 'pglite') return cell;
    const baseline = cells.find((b) => b.kind === 'minimal' && b.workload === cell.workload && b.connections === cell.connections);
    return baseline && baseline.throughputPerS > 0 ? { ...cell, ratioToMinimal: cell.throughputPerS / baseline.throughputPerS } : cell;
  });
}

export function table(cells: readonly Cell[]): string {
  const rows = cells.map((c) => {
    const other = Object.entries(c.rejected).map(([status, n]) => `${n}×${status}`).join(' ') || '0';
    return `| ${label(c)} | ${c.tool} | ${fixed(c.throughputPerS, 0)} | ${fixed(c.p50Ms, 1)} | ${fixed(c.p99Ms, 1)} | ${c.ok} | ${other} | ${fixed(c.cpuMsPerRequest, 2)} | ${fixed(c.databaseCpuMsPerRequest, 2)} | ${fixed(c.peakRssMb, 0)} | ${fixed(c.ratioToMinimal, 2)} |`;
  });
  return [
    '| cell (workload, connections) | load | throughput /s | p50 ms | p99 ms | ok | other answers | gateway CPU ms/req | database CPU ms/req | peak RSS MB | × minimal |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
}

/** Writes a file under bench/results/ (JSON for anything but a string) and returns its path. */
export function writeResult(name: string, content: unknown): string {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, name);
  writeFileSync(file, typeof content === 'string' ? content : `${JSON.stringify(content, null, 2)}\n`);
  return file;
}

/** Where the gateway's SQL spends its time, statement by statement (pgbench -r), for one cell. */
export function statementTable(cell: Cell): string {
  const rows = (cell.statementLatencies ?? []).filter((s) => !s.statement.startsWith('\\')).map((s) => `| ${s.ms.toFixed(3)} | \`${s.statement.replace(/\s+/g, ' ').slice(0, 110)}\` |`);
  return [`Gateway mint SQL by statement (pgbench -r, ${cell.workload}, ${cell.connections} connections):`, '', '| avg ms | statement |', '|---|---|', ...rows].join('\n');
}

/** The open-loop cell: a fixed arrival rate of mixed work, what users feel and what each request costs. */
export interface OpenLoopCell {
  /** "current", or the BENCH_BASELINE_REF it ran. */
  code: string;
  ratePerS: number;
  durationS: number;
  inFlightMax: number;
  scheduled: number;
  sent: number;
  ok: number;
  shed: number;
  failed: Record<string, number>;
  p50Ms: number;
  p99Ms: number;
  byOperation: Record<string, { sent: number; ok: number; p50Ms: number; p99Ms: number }>;
  /** Share of the machine's CPU time (all cores) spent busy during the cell, in %. */
  machineBusyPct: number;
  /** CPU ms per sent request: the gateway process; PostgreSQL (the database's backends and its background processes); the whole machine. */
  gatewayCpuMsPerRequest: number;
  databaseCpuMsPerRequest?: number;
  machineCpuMsPerRequest: number;
  /** The generator's worst lateness in sending (ms): above a few ms, the generator itself was starved. */
  sendLagMaxMs: number;
  /** The unmeasured seconds of the same load before the cell (BENCH_OPEN_WARMUP_S), when there were any. */
  warmup?: { durationS: number; sent: number; shed: number; p50Ms: number; p99Ms: number };
  notes: string[];
}

export function openLoopTable(cells: readonly OpenLoopCell[]): string {
  const ops = ['mint', 'capture', 'release', 'me', 'redemption'];
  const rows = cells.map((c) => {
    const failed = Object.entries(c.failed).map(([status, n]) => `${n}×${status}`).join(' ') || '0';
    const perOp = ops.map((op) => fixed(c.byOperation[op]?.p50Ms, 0)).join(' / ');
    return `| ${c.code} | ${c.ratePerS}/s × ${c.durationS} s | ${fixed(c.p50Ms, 1)} | ${fixed(c.p99Ms, 1)} | ${perOp} | ${c.ok} of ${c.scheduled} | ${c.shed} | ${failed} | ${fixed(c.machineBusyPct, 0)} | ${fixed(c.gatewayCpuMsPerRequest, 2)} | ${fixed(c.databaseCpuMsPerRequest, 2)} | ${fixed(c.machineCpuMsPerRequest, 2)} |`;
  });
  return [
    'Open loop, mixed work (60% mint, 20% capture, 10% release, 10% reads), latency from the scheduled send time:',
    '',
    '| code | rate × time | p50 ms | p99 ms | p50 ms mint / capture / release / me / redemption | ok | shed | failed | machine busy % | gateway CPU ms/req | database CPU ms/req | machine CPU ms/req |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
}
