// Captures a mint's SQL from a gateway behind the recording relay (sql-capture.ts), and turns it into a pgbench
// script that replays it with the same text, the same parameters and the same transaction boundaries, on any
// agent and with fresh ids each time:
//   - which mint to use: several mints are captured one at a time; the statement sequence most of them share
//     is the mint's (a background worker's query that fell into one window makes that window differ);
//   - what varies per request: a token of 16+ id characters (ids, keys, claim tokens, voucher parts) found in
//     one capture and in no other is per-request; pgbench gives it a fresh value each transaction, so unique
//     constraints hold as they do for the gateway;
//   - the agent: its id, its lot and its token subject become the pgbench variable :agent;
//   - everything else is the captured value, sent as a parameter of the same prepared statement, cast to the
//     type PostgreSQL inferred for the gateway's statement (PREPARE + pg_prepared_statements).
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { BenchConfig } from './config.ts';
import { startGateway, type Gateway } from './gateway.ts';
import { gatewayEnv, type World } from './seed.ts';
import { startSqlRelay, type CapturedStatement } from './sql-capture.ts';

const CAPTURE_AGENT = 2;
/** Mints before the captured ones, so that what a first request does once (caches, lazy setup) is not counted. */
const WARM_MINTS = 3;

export interface AgentNaming {
  /** The agent the capture ran as, by its number: agt_bench_<n>, lot_bench_<n>, bench-agent-<n>. */
  captureAgent: number;
}

export interface GatewaySqlScript {
  /** The script body after the \set lines (which pick the agent and the fresh-id seed). */
  body: string;
  /** pgbench -D variables: the captured constant parameters. */
  defines: Record<string, string>;
  statements: number;
  transactions: number;
  /** The captured statements in order, for the record (texts only). */
  texts: string[];
}

type Piece = string | { variable: 'agent' | 'u' };

const TOKEN = /[A-Za-z0-9_-]{16,}/g;

function signature(statements: readonly CapturedStatement[]): string {
  return statements.map((s) => s.text).join('\u0000');
}

/** The capture whose statement sequence most captures share, and another with the same sequence. */
export function modalPair(captures: readonly CapturedStatement[][]): [CapturedStatement[], CapturedStatement[]] {
  const groups = new Map<string, CapturedStatement[][]>();
  for (const capture of captures) {
    if (capture.length === 0) continue;
    const key = signature(capture);
    groups.set(key, [...(groups.get(key) ?? []), capture]);
  }
  const best = [...groups.values()].sort((a, b) => b.length - a.length)[0];
  if (!best || best.length < 2) {
    throw new Error(`no two captured mints ran the same statements (${captures.map((c) => c.length).join(', ')} statements); is a background worker busy?`);
  }
  return [best[0]!, best[1]!];
}

function tokensOf(statements: readonly CapturedStatement[]): Set<string> {
  const tokens = new Set<string>();
  for (const s of statements) for (const p of s.params ?? []) for (const m of (p ?? '').matchAll(TOKEN)) tokens.add(m[0]);
  return tokens;
}

function agentPieces(text: string, naming: AgentNaming): Piece[] {
  const pattern = new RegExp(`(agt_bench_|lot_bench_|bench-agent-)${naming.captureAgent}(?![0-9])`, 'g');
  const pieces: Piece[] = [];
  let last = 0;
  for (const m of text.matchAll(pattern)) {
    pieces.push(text.slice(last, m.index) + m[1]!, { variable: 'agent' });
    last = m.index! + m[0].length;
  }
  pieces.push(text.slice(last));
  return pieces;
}

/** A parameter value as pieces: constant text, the agent number, the per-transaction seed. */
function piecesOf(value: string, fresh: Map<string, number>, naming: AgentNaming): Piece[] {
  const pieces: Piece[] = [];
  let last = 0;
  for (const m of value.matchAll(TOKEN)) {
    const index = fresh.get(m[0]);
    if (index === undefined) continue;
    pieces.push(...agentPieces(value.slice(last, m.index), naming), `f${index}_`, { variable: 'u' });
    last = m.index! + m[0].length;
  }
  pieces.push(...agentPieces(value.slice(last), naming));
  // Merge adjacent constants and drop empty ones.
  const merged: Piece[] = [];
  for (const piece of pieces) {
    if (piece === '') continue;
    const previous = merged.at(-1);
    if (typeof piece === 'string' && typeof previous === 'string') merged[merged.length - 1] = previous + piece;
    else merged.push(piece);
  }
  return merged;
}

/** The parameter types PostgreSQL infers for each statement text, as the gateway's statements get them. */
async function inferredTypes(databaseUrl: string, texts: readonly string[]): Promise<Map<string, string[]>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const types = new Map<string, string[]>();
  try {
    for (const [i, text] of texts.entries()) {
      await client.query(`PREPARE bench_probe_${i} AS ${text}`);
      const { rows } = await client.query<{ types: string[] }>(`SELECT parameter_types::text[] AS types FROM pg_prepared_statements WHERE name = $1`, [`bench_probe_${i}`]);
      types.set(text, rows[0]!.types);
      await client.query(`DEALLOCATE bench_probe_${i}`);
    }
  } finally {
    await client.end();
  }
  return types;
}

export async function gatewaySqlScript(databaseUrl: string, captures: readonly CapturedStatement[][], naming: AgentNaming): Promise<GatewaySqlScript> {
  const [mint, other] = modalPair(captures);
  const otherTokens = tokensOf(other);
  const fresh = new Map<string, number>();
  for (const token of tokensOf(mint)) if (!otherTokens.has(token)) fresh.set(token, fresh.size + 1);
  const withParams = [...new Set(mint.filter((s) => s.params && s.params.length > 0).map((s) => s.text))];
  const types = await inferredTypes(databaseUrl, withParams);
  const defines: Record<string, string> = {};
  const lines: string[] = [];
  let transactions = 0;
  let open = false;
  for (const [i, statement] of mint.entries()) {
    const text = statement.text.trim().replace(/;$/, '');
    if (/(?<!:):[A-Za-z_]/.test(text.replace(/\$\d+/g, ''))) {
      throw new Error(`statement ${i + 1} has a ":name" pgbench would take for a variable: ${text.slice(0, 120)}`);
    }
    const verb = text.split(/[\s;]+/, 1)[0]!.toUpperCase();
    if (verb === 'BEGIN') open = true;
    if (verb === 'COMMIT' || verb === 'ROLLBACK' || !open) transactions += 1;
    if (verb === 'COMMIT' || verb === 'ROLLBACK') open = false;
    const paramTypes = types.get(statement.text) ?? [];
    const replaced = text.replace(/\$(\d+)/g, (_, n: string) => {
      const index = Number(n) - 1;
      const value = statement.params?.[index];
      if (value === null || value === undefined) return 'NULL';
      const pieces = piecesOf(value, fresh, naming);
      const name = `s${i + 1}p${n}`;
      // pgbench makes each use of a variable its own parameter, so a $n used twice would lose the one type
      // PostgreSQL inferred for it: every use carries that type as a cast instead.
      const type = paramTypes[index];
      const cast = type && type !== 'unknown' ? `::${type}` : '';
      if (pieces.length === 1 && typeof pieces[0] === 'string') {
        defines[name] = pieces[0];
        return `:${name}${cast}`;
      }
      const parts = pieces.map((piece, k) => {
        if (typeof piece !== 'string') return `:${piece.variable}::text`;
        defines[`${name}_${k}`] = piece;
        return `:${name}_${k}::text`;
      });
      return `(${parts.join(' || ')})${cast}`;
    });
    lines.push(`${replaced};`);
  }
  return { body: `${lines.join('\n')}\n`, defines, statements: mint.length, transactions, texts: mint.map((s) => s.text) };
}

/** The whole pgbench script for a workload: spread picks an agent at random per transaction, hot uses agent 1. */
export function gatewaySqlForWorkload(script: GatewaySqlScript, agents: number, workload: 'spread' | 'hot'): string {
  const agent = workload === 'spread' ? `\\set agent random(1, ${agents})` : '\\set agent 1';
  return `${agent}\n\\set u random(1, 999999999999999999)\n${script.body}`;
}

async function mintOnce(gateway: Gateway, token: string): Promise<void> {
  const response = await fetch(`${gateway.baseUrl}/v1/vouchers`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': `bench-capture-${randomUUID()}` },
    body: '{"offerId":"off_bench"}',
  });
  if (response.status !== 200) throw new Error(`a mint for the SQL capture answered ${response.status}: ${(await response.text()).slice(0, 300)}`);
}

/** A gateway behind the recording relay mints a few vouchers one at a time; each one's SQL is kept. */
export async function captureGatewaySql(config: BenchConfig, url: string, dataDir: string, world: World): Promise<GatewaySqlScript> {
  const relay = await startSqlRelay(url);
  let gateway: Gateway | undefined;
  const captures: CapturedStatement[][] = [];
  try {
    gateway = await startGateway(gatewayEnv({ databaseUrl: relay.url, dataDir, port: config.port }), config.port, config.nodeOptions);
    const token = world.agentTokens[CAPTURE_AGENT - 1]!;
    for (let i = 0; i < WARM_MINTS; i++) await mintOnce(gateway, token);
    for (let i = 0; i < config.captureMints; i++) {
      const stop = relay.record();
      await mintOnce(gateway, token);
      captures.push(stop());
    }
  } finally {
    // The relay listens: left open (a gateway that failed to start), it would keep the bench from exiting.
    await gateway?.stop();
    await relay.close();
  }
  return gatewaySqlScript(url, captures, { captureAgent: CAPTURE_AGENT });
}
