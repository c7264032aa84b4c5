// pgbench cells: the minimal reserve transaction (the baseline the throughput targets are stated against: one balance
// check and decrement, one hold row, one idempotency row, in one transaction), and
// the gateway's own mint SQL (gateway-sql.ts). Prepared statements, one transaction per operation, durable
// commits (the server's default synchronous_commit), latencies from pgbench's per-transaction log.
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';

const PGBENCH_THREADS = 2;
const OVERRUN_MS = 30_000;

export interface PgbenchResult {
  seconds: number;
  transactions: number;
  failed: number;
  throughputPerS: number;
  p50Ms: number;
  p99Ms: number;
  /** pgbench's own complaints (an aborted client, an SQL error), when there were any. */
  errors: string[];
  /** With `perStatement`: each script line's average latency (pgbench -r), in script order. */
  statementLatencies?: StatementLatency[];
}

export interface StatementLatency {
  ms: number;
  statement: string;
}

/** pgbench -r's table: "  0.520  0  SELECT …" (latency, then failures on PostgreSQL 15+, then the line). */
function statementLatencies(stdout: string): StatementLatency[] {
  const table = stdout.split(/statement latencies in milliseconds[^\n]*\n/)[1] ?? '';
  const rows: StatementLatency[] = [];
  for (const line of table.split('\n')) {
    const row = /^\s+([0-9.]+)\s+(?:\d+\s+)?(\S.*)$/.exec(line);
    if (!row) break;
    rows.push({ ms: Number(row[1]), statement: row[2]!.trim() });
  }
  return rows;
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export interface PgbenchOptions {
  /** pgbench -D variables. */
  defines?: Record<string, string>;
  /** Also report each statement's average latency (pgbench -r). */
  perStatement?: boolean;
}

export async function pgbench(url: string, script: string, clients: number, durationS: number, options: PgbenchOptions = {}): Promise<PgbenchResult> {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-bench-pgbench-'));
  try {
    writeFileSync(path.join(dir, 'script.sql'), script);
    const args = ['-n', '-M', 'prepared', '-c', String(clients), '-j', String(PGBENCH_THREADS), '-T', String(durationS), '-l', '--log-prefix', path.join(dir, 'tx')];
    if (options.perStatement) args.push('-r');
    for (const [name, value] of Object.entries(options.defines ?? {})) args.push('-D', `${name}=${value}`);
    args.push('-f', path.join(dir, 'script.sql'), url);
    const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve) =>
      execFile('pgbench', args, { maxBuffer: 1 << 26, timeout: durationS * 1000 + OVERRUN_MS }, (_error, stdout, stderr) => resolve({ stdout, stderr })),
    );
    const latenciesMs: number[] = [];
    for (const file of readdirSync(dir).filter((f) => f.startsWith('tx.'))) {
      for (const line of readFileSync(path.join(dir, file), 'utf8').split('\n')) {
        const latencyUs = Number(line.split(' ')[2]);
        if (line.length > 0 && Number.isFinite(latencyUs)) latenciesMs.push(latencyUs / 1000);
      }
    }
    latenciesMs.sort((a, b) => a - b);
    const transactions = Number(/number of transactions actually processed: (\d+)/.exec(stdout)?.[1] ?? 0);
    const tps = Number(/tps = ([0-9.]+)/.exec(stdout)?.[1] ?? 0);
    const errors = stderr.split('\n').filter((l) => /error|abort/i.test(l)).slice(0, 5);
    if (transactions === 0 && errors.length === 0) errors.push(`pgbench produced no result: ${stderr.trim() || stdout.trim()}`.slice(0, 500));
    return {
      seconds: tps > 0 ? transactions / tps : durationS,
      transactions,
      failed: Number(/number of failed transactions: (\d+)/.exec(stdout)?.[1] ?? 0),
      throughputPerS: tps,
      p50Ms: percentile(latenciesMs, 50),
      p99Ms: percentile(latenciesMs, 99),
      errors,
      ...(options.perStatement ? { statementLatencies: statementLatencies(stdout) } : {}),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The minimal transaction's schema: a balance per agent (200 agents, as the gateway's cells use), holds, idempotency rows. */
export async function createMinimalSchema(url: string, agents: number): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`CREATE TABLE balances (agent_id TEXT PRIMARY KEY, available BIGINT NOT NULL);
      CREATE TABLE holds (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, amount BIGINT NOT NULL, state TEXT NOT NULL, created_at BIGINT NOT NULL);
      CREATE TABLE idem (key TEXT PRIMARY KEY, body JSONB NOT NULL)`);
    await client.query(`INSERT INTO balances SELECT 'agent-' || i, 1000000000000 FROM generate_series(1, $1::int) AS i`, [agents]);
  } finally {
    await client.end();
  }
}

/** Before each run: empty holds and idem, vacuum and analyze balances, so every cell starts alike. */
export async function resetMinimal(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('TRUNCATE holds, idem');
    await client.query('VACUUM ANALYZE balances');
  } finally {
    await client.end();
  }
}

/** The §3b script, verbatim but for the agent range: spread over `agents`, or the one hot agent. */
export function minimalScript(agents: number, workload: 'spread' | 'hot'): string {
  return `${workload === 'spread' ? `\\set a random(1, ${agents})` : '\\set a 1'}
BEGIN;
UPDATE balances SET available = available - 1 WHERE agent_id = 'agent-' || :a AND available >= 1;
INSERT INTO holds(id, agent_id, amount, state, created_at) VALUES (gen_random_uuid()::text, 'agent-' || :a, 1, 'held', (extract(epoch from clock_timestamp())*1000)::bigint);
INSERT INTO idem(key, body) VALUES (gen_random_uuid()::text, '{"voucher":"v","agent":"x","amount":1}'::jsonb);
COMMIT;
`;
}
