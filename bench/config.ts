// What `npm run bench` can be told: environment variables (and --help). Defaults fit the whole run in
// under five minutes on the project's 2-core machine.

export interface BenchConfig {
  adminUrl: string;
  cellS: number;
  warmupS: number;
  /** PGlite compiles its WebAssembly engine in its first seconds under load: its cell warms longer. */
  pgliteWarmupS: number;
  pgbenchS: number;
  agents: number;
  /** Budgets in every agent's mandate (0: the mandate has none, only its allowances). */
  budgets: number;
  connections: number[];
  port: number;
  /** wrk or autocannon; undefined: wrk when installed. */
  load: string | undefined;
  nodeOptions: string[];
  pglite: boolean;
  captureMints: number;
  /** Measure the owner console's cold load in Chromium (step 8). */
  console: boolean;
  consoleLoads: number;
  chromium: string;
  /** The open-loop cell: arrival rate (requests a second), seconds, and requests waiting at once before one is shed; 0 seconds skips it. */
  openRatePerS: number;
  openS: number;
  /** Seconds of the same open loop run first and not measured (BENCH_OPEN_WARMUP_S). */
  openWarmupS: number;
  /** Seconds of the open loop's mixed work each gateway on PostgreSQL answers after its start, before its first cell (BENCH_GATEWAY_WARMUP_S). */
  gatewayWarmupS: number;
  openInFlightMax: number;
  /** A git ref whose gateway runs the same gateway cells, alternated with the current code (see docs/benchmark.md). */
  baselineRef: string | undefined;
  /**
   * Traces from the measured gateways (BENCH_OTEL): none (undefined, the default), exported to a sink in the
   * bench process (`endpoint` undefined), or to a collector's OTLP endpoint.
   */
  otel: { endpoint: string | undefined; protocol: string } | undefined;
  /** The PostgreSQL gateway cells to run (BENCH_ONLY): all by default. */
  only: ReadonlySet<GatewayPart>;
}

/** The groups of gateway cells on PostgreSQL that BENCH_ONLY can pick. */
export const GATEWAY_PARTS = ['mint', 'execute', 'budgets', 'capture', 'open'] as const;
export type GatewayPart = (typeof GATEWAY_PARTS)[number];

export const HELP = `npm run bench [-- --help]

Measures, in one run (about 6 minutes with the defaults; twice the PostgreSQL part, and the open loop four times, with
BENCH_BASELINE_REF):
  - the minimal reserve transaction (one balance decrement, one hold, one idempotency row) by pgbench, spread over the agents and on one hot
    agent, at each connection count: the baseline every ratio is taken to;
  - the gateway's own mint SQL by pgbench, captured from a running gateway (bench/gateway-sql.ts);
  - the gateway (bin/acg.js serve) on PostgreSQL: mint and capture, spread and hot, at each connection count;
  - the gateway on PostgreSQL: execute (github-public repository.get against a local GitHub stand-in), spread, at
    each connection count; and the budgets pair at the last count: mint, spread, on agents whose mandates have
    three budgets and on as many agents without (with BENCH_BUDGETS=0), both sets new to the gateway, each
    twice in a mirrored order (ABBA), then the capture of each one's holds (each half in a cell of its own,
    in the same order), with the ratio of their means beside the noise (how far apart the two cells of one
    variant came) and the CPU per request of each side;
  - an open-loop cell: a fixed arrival rate of mixed work (60% mint, 20% capture, 10% release, 10% reads) over
    the agents, after a few unmeasured seconds of the same load, with p50/p99 from the scheduled send time,
    requests shed or failed, machine busy %, and CPU per request of the gateway, of PostgreSQL (its processes'
    /proc times) and of the whole machine;
  - with BENCH_BASELINE_REF, every gateway cell on PostgreSQL again on that ref's code, alternated with the current
    cell by cell (the open-loop cell twice on each side, in a mirrored order);
  - the gateway on embedded PGlite: mint, spread, at the first connection count;
  - for each: throughput, p50/p99 latency, CPU per request of the gateway and of PostgreSQL, peak RSS, ratio to
    the baseline;
  - the owner console's cold load in headless Chromium (no HTTP cache, until the agents list shows), on the
    embedded default: median and slowest of several loads, requests and bytes transferred;
then checks the ledger invariants on both databases and exits non-zero if any does not hold.
Writes a markdown table to stdout and bench/results/latest.json.

Needs: a PostgreSQL it may create databases in, pgbench on the PATH, and wrk (apt-get install wrk) or else
autocannon (a dev dependency) as the load generator.

Environment:
  BENCH_DATABASE_URL   admin connection (default postgres://postgres@127.0.0.1:5432/postgres)
  BENCH_CELL_S         seconds measured per gateway cell (default 8)
  BENCH_WARMUP_S       unmeasured seconds before each mint cell (default 2)
  BENCH_PGLITE_WARMUP_S  unmeasured seconds before the PGlite cell (default 5: its engine compiles first)
  BENCH_PGBENCH_S      seconds per pgbench cell (default 5)
  BENCH_AGENTS         agents in the spread workload (default 200)
  BENCH_BUDGETS        budgets in each agent's mandate, 0 to 3: a daily one over all spending, a monthly one on
                       the bench merchant, a total one on its category (default 0); none is ever reached; above 0
                       the gateway's mint SQL is not captured nor replayed by pgbench (a mint's budget statements
                       name its own agent's period rows)
  BENCH_CONNECTIONS    connection counts, comma-separated (default 16,64)
  BENCH_LOAD           wrk | autocannon (default: wrk when installed)
  BENCH_PORT           the gateway's port (default 18080)
  BENCH_PGLITE         0 skips the embedded PGlite cell (default 1)
  BENCH_CAPTURE_MINTS  mints captured to derive the gateway SQL (default 7)
  BENCH_CONSOLE        0 skips the console's cold load (default 1; skipped with a note when Chromium is missing)
  BENCH_CONSOLE_LOADS  cold loads of the console measured (default 7)
  BENCH_CHROMIUM       the Chromium executable (default /usr/bin/chromium)
  BENCH_ONLY           the gateway cells on PostgreSQL to run, comma-separated, of mint (with its pgbench cells),
                       execute, budgets (the pair), capture (of what mint held: needs mint), open (default: all);
                       e.g. budgets alone takes about two minutes a side
  BENCH_OPEN_RATE      the open-loop cell's arrival rate, requests a second (default 300)
  BENCH_OPEN_S         the open-loop cell's seconds (default 60; e.g. 10 to try; 0 skips the cell)
  BENCH_OPEN_INFLIGHT  requests waiting at once beyond which the open loop sheds the next (default 128)
  BENCH_OPEN_WARMUP_S  seconds of the same open loop before each open-loop cell, answered but not measured (default
                       5; 0 for none); the cell notes their p99
  BENCH_GATEWAY_WARMUP_S  seconds of the open loop's mixed work at BENCH_OPEN_RATE that each gateway on PostgreSQL
                       answers right after its start, before its first cell, not measured, so its cells measure code
                       V8 has optimized (default 20; 0 for none)
  BENCH_OPEN_TRACE     a file for every answer of the last open loop run (due ms, latency ms, operation, status)
  BENCH_BASELINE_REF   a git ref (e.g. main~3, 9d54156): its code is checked out in a temporary git worktree, built,
                       and runs every gateway cell on PostgreSQL in its own database, alternated with the current code
  BENCH_NODE_OPTIONS   extra node options for the gateway, e.g. --cpu-prof --cpu-prof-dir=/tmp/prof
  BENCH_OTEL           traces from the measured gateways: 0 none (default); 1 exported to an OTLP sink in the bench
                       process; an http(s) URL: exported to that collector (OTEL_EXPORTER_OTLP_ENDPOINT)
  BENCH_OTEL_PROTOCOL  http/protobuf (default) or http/json (with a URL, also grpc)
`;

function positive(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive whole number, got "${raw}"`);
  return value;
}

function wholeNumber(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a whole number, got "${raw}"`);
  return value;
}

function gatewayParts(env: NodeJS.ProcessEnv): ReadonlySet<GatewayPart> {
  const raw = env.BENCH_ONLY ?? '';
  if (raw.trim() === '') return new Set(GATEWAY_PARTS);
  const parts = raw.split(',').map((part) => part.trim());
  const unknown = parts.filter((part) => !(GATEWAY_PARTS as readonly string[]).includes(part));
  if (unknown.length > 0) throw new Error(`BENCH_ONLY takes ${GATEWAY_PARTS.join(', ')}; got "${unknown.join(', ')}"`);
  if (parts.includes('capture') && !parts.includes('mint')) throw new Error('BENCH_ONLY: capture captures what the mint cells held, so it needs mint too');
  return new Set(parts as GatewayPart[]);
}

function budgetCount(env: NodeJS.ProcessEnv): number {
  const raw = env.BENCH_BUDGETS ?? '0';
  const value = Number(raw);
  if (raw === '' || !Number.isInteger(value) || value < 0 || value > 3) throw new Error(`BENCH_BUDGETS must be 0, 1, 2 or 3, got "${raw}"`);
  return value;
}

const OTEL_PROTOCOLS = ['http/protobuf', 'http/json', 'grpc'];

function otelSetting(env: NodeJS.ProcessEnv): BenchConfig['otel'] {
  const raw = env.BENCH_OTEL ?? '0';
  if (raw === '' || raw === '0') return undefined;
  const protocol = env.BENCH_OTEL_PROTOCOL || 'http/protobuf';
  if (!OTEL_PROTOCOLS.includes(protocol)) throw new Error(`BENCH_OTEL_PROTOCOL must be one of ${OTEL_PROTOCOLS.join(', ')}, got "${protocol}"`);
  if (raw === '1') {
    if (protocol === 'grpc') throw new Error('BENCH_OTEL=1 starts an OTLP/HTTP sink: use http/protobuf or http/json, or give a collector URL for grpc');
    return { endpoint: undefined, protocol };
  }
  if (!/^https?:\/\//.test(raw)) throw new Error(`BENCH_OTEL must be 0, 1 or a collector's http(s) URL, got "${raw}"`);
  return { endpoint: raw, protocol };
}

export function benchConfig(env: NodeJS.ProcessEnv): BenchConfig {
  const connections = (env.BENCH_CONNECTIONS ?? '16,64').split(',').map((c) => Number(c.trim()));
  if (connections.length === 0 || connections.some((c) => !Number.isInteger(c) || c < 2)) {
    throw new Error(`BENCH_CONNECTIONS must be comma-separated whole numbers of at least 2, got "${env.BENCH_CONNECTIONS}"`);
  }
  const load = env.BENCH_LOAD || undefined;
  if (load !== undefined && load !== 'wrk' && load !== 'autocannon') throw new Error(`BENCH_LOAD must be wrk or autocannon, got "${load}"`);
  const agents = positive(env, 'BENCH_AGENTS', 200);
  if (agents < 2) throw new Error('BENCH_AGENTS must be at least 2 (agent 1 is the hot one, the SQL capture runs as agent 2)');
  return {
    adminUrl: env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    cellS: positive(env, 'BENCH_CELL_S', 8),
    warmupS: positive(env, 'BENCH_WARMUP_S', 2),
    pgliteWarmupS: positive(env, 'BENCH_PGLITE_WARMUP_S', 5),
    pgbenchS: positive(env, 'BENCH_PGBENCH_S', 5),
    agents,
    budgets: budgetCount(env),
    connections,
    port: positive(env, 'BENCH_PORT', 18_080),
    load,
    nodeOptions: env.BENCH_NODE_OPTIONS ? env.BENCH_NODE_OPTIONS.split(' ').filter(Boolean) : [],
    pglite: env.BENCH_PGLITE !== '0',
    captureMints: Math.max(2, positive(env, 'BENCH_CAPTURE_MINTS', 7)),
    console: env.BENCH_CONSOLE !== '0',
    consoleLoads: positive(env, 'BENCH_CONSOLE_LOADS', 7),
    chromium: env.BENCH_CHROMIUM || '/usr/bin/chromium',
    openRatePerS: positive(env, 'BENCH_OPEN_RATE', 300),
    openS: wholeNumber(env, 'BENCH_OPEN_S', 60),
    openWarmupS: wholeNumber(env, 'BENCH_OPEN_WARMUP_S', 5),
    gatewayWarmupS: wholeNumber(env, 'BENCH_GATEWAY_WARMUP_S', 20),
    openInFlightMax: positive(env, 'BENCH_OPEN_INFLIGHT', 128),
    baselineRef: env.BENCH_BASELINE_REF || undefined,
    otel: otelSetting(env),
    only: gatewayParts(env),
  };
}
