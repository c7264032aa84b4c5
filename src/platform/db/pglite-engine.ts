// The embedded database's engine: the one PGlite instance and what runs on it, driven by requests (a statement,
// a script, the end of a transaction, close) so that it can run on a worker thread (`pglite-worker.ts`, the
// default) or in the caller's own thread. A statement that opens a transaction carries `open`, so BEGIN costs no
// request of its own; the transaction is PGlite's own `transaction()`, held open until an `end` request, and fed
// the statements that arrive for it, so they run on the engine's one session exactly as PGlite runs them.
import { parse, PGlite, protocol, type Results, type Transaction } from '@electric-sql/pglite';

const INT8_OID = 20;

export type EngineRequest =
  | { id: number; op: 'query'; sql: string; params?: unknown[]; txId?: number; open?: true }
  | { id: number; op: 'exec'; sql: string; txId?: number; open?: true }
  | { id: number; op: 'end'; txId: number; commit: boolean }
  | { id: number; op: 'close' };

/** An error as it crosses threads: the fields a reader of a database error looks at. */
export interface CrossingError {
  name: string;
  message: string;
  /** The engine aborted (a WebAssembly trap): faults.ts reads that as an outage, as it does in process. */
  wasmTrap: boolean;
  fields: Record<string, string | number | boolean | bigint>;
}

/** One answer per request, by its id; `id: 0` is the engine's one announcement, that it opened (or could not). */
export type EngineReply =
  | { id: number; rows?: unknown[]; rowCount?: number }
  | { id: number; error: CrossingError }
  | { id: 0; ready: true }
  | { id: 0; ready: false; error: CrossingError };

export interface EngineOptions {
  /** undefined: in memory (tests). */
  dataDir: string | undefined;
  /** Compiled once per process, so that no worker compiles them again. */
  pgliteWasmModule?: WebAssembly.Module;
  initdbWasmModule?: WebAssembly.Module;
}

export function toCrossingError(error: unknown): CrossingError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error), wasmTrap: false, fields: {} };
  const fields: CrossingError['fields'] = {};
  for (const [key, value] of Object.entries(error)) {
    if (key === 'message' || key === 'name' || key === 'stack') continue;
    if (['string', 'number', 'boolean', 'bigint'].includes(typeof value)) fields[key] = value as string | number | boolean | bigint;
  }
  return { name: error.name, message: error.message, wasmTrap: error instanceof WebAssembly.RuntimeError, fields };
}

/**
 * Named (prepared) statements, as the PostgreSQL driver sends them (docs/decisions.md "Statements go prepared,
 * named by their text"): PGlite's own `query()` parses, describes and plans every statement anew, in six calls
 * into the engine; a statement named here is parsed and described once, then each run is one call (bind,
 * describe, execute, sync) on the plan the session keeps. The texts are the code's own templates; a session
 * names at most STATEMENTS_NAMED_MAX of them and runs any beyond through `query()`.
 */
export const STATEMENTS_NAMED_MAX = 1000;

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((length, part) => length + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/** A prepared statement whose result columns a schema change altered: its name is dropped, the caller's retry prepares it anew. */
function isStalePlan(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return code === '0A000' && typeof message === 'string' && message.includes('cached plan must not change result type');
}

class NamedStatements {
  private readonly statements = new Map<string, { name: string; paramOids: number[] }>();
  private namesIssued = 0;

  constructor(private readonly db: PGlite) {}

  /** Whether `sql` has a name, or may get one. */
  accepts(sql: string): boolean {
    return this.statements.has(sql) || this.namesIssued < STATEMENTS_NAMED_MAX;
  }

  /**
   * Runs `sql` with `params` as a named statement (`accepts(sql)` said it may). The caller holds PGlite's query
   * lock (and, outside a transaction, its transaction lock), as `query()` would.
   */
  async run(sql: string, params: readonly unknown[]): Promise<Results> {
    let statement = this.statements.get(sql);
    if (!statement) {
      const name = `acg_${++this.namesIssued}`;
      const { serialize } = protocol;
      const described = await this.db.execProtocol(concat([serialize.parse({ name, text: sql }), serialize.describe({ type: 'S', name }), serialize.sync()]), { syncToFs: false });
      statement = { name, paramOids: parse.parseDescribeStatementResults(described.messages) };
      this.statements.set(sql, statement);
    }
    const { serializers } = this.db;
    const values = params.map((value, index) => {
      if (value === null || value === undefined) return null;
      const serializer = serializers[statement.paramOids[index]!];
      return serializer ? serializer(value) : String(value);
    });
    const { serialize } = protocol;
    try {
      const ran = await this.db.execProtocol(concat([serialize.bind({ statement: statement.name, values }), serialize.describe({ type: 'P' }), serialize.execute({}), serialize.sync()]), { syncToFs: false });
      return parse.parseResults(ran.messages, this.db.parsers)[0]!;
    } catch (error) {
      if (isStalePlan(error)) this.statements.delete(sql);
      throw error;
    }
  }
}

/** Thrown into a transaction the request thread ended without committing: PGlite then rolls it back. */
const ROLLBACK = Symbol('rollback');

interface OpenTransaction {
  /** PGlite's transaction, once its BEGIN ran (rejected when it could not open). */
  tx: Promise<Transaction>;
  finish(commit: boolean): void;
  /** PGlite's `transaction()` itself: settles after COMMIT or ROLLBACK. */
  ended: Promise<void>;
}

/** Answers one request; a failure is thrown as PGlite threw it. */
export type Engine = (request: EngineRequest) => Promise<EngineAnswer>;

export type EngineAnswer = { rows?: unknown[]; rowCount?: number };

function engineOn(db: PGlite): Engine {
  const transactions = new Map<number, OpenTransaction>();
  const named = new NamedStatements(db);

  /** A statement with parameters, named; outside a transaction under both of PGlite's locks, as its `query()` takes them. */
  async function query(target: PGlite | Transaction, sql: string, params: unknown[] | undefined): Promise<Results> {
    if (params === undefined || !named.accepts(sql)) return target.query(sql, params);
    const run = () => named.run(sql, params);
    if (target !== db) return db._runExclusiveQuery(run);
    await db._checkReady();
    const alone = () => db._runExclusiveTransaction(() => db._runExclusiveQuery(run));
    // A statement alone that met a schema change runs once more, prepared anew (in a transaction, its retry does).
    const result = await alone().catch((error: unknown) => (isStalePlan(error) ? alone() : Promise.reject(error)));
    await db.syncToFs();
    return result;
  }

  function open(txId: number): OpenTransaction {
    let started!: (tx: Transaction) => void;
    let failed!: (error: unknown) => void;
    let finish!: (commit: boolean) => void;
    const tx = new Promise<Transaction>((resolve, reject) => ((started = resolve), (failed = reject)));
    const outcome = new Promise<void>((resolve, reject) => (finish = (commit) => (commit ? resolve() : reject(ROLLBACK))));
    const ended = db.transaction(async (opened) => {
      started(opened);
      await outcome;
    });
    // A transaction that never opened (the engine closed) fails the statements waiting for it.
    ended.catch(failed);
    tx.catch(() => {});
    const transaction = { tx, finish, ended };
    transactions.set(txId, transaction);
    return transaction;
  }

  async function target(request: { txId?: number; open?: true }): Promise<PGlite | Transaction> {
    if (request.txId === undefined) return db;
    const transaction = request.open ? open(request.txId) : transactions.get(request.txId);
    if (!transaction) throw new Error(`no open transaction ${request.txId}`);
    return transaction.tx;
  }

  async function end(txId: number, commit: boolean): Promise<void> {
    const transaction = transactions.get(txId);
    if (!transaction) {
      if (commit) throw new Error(`no open transaction ${txId}`);
      return;
    }
    transactions.delete(txId);
    transaction.finish(commit);
    try {
      await transaction.ended;
    } catch (error) {
      if (error !== ROLLBACK) throw error;
    }
  }

  return async (request) => {
    switch (request.op) {
      case 'query': {
        const result = await query(await target(request), request.sql, request.params);
        return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length };
      }
      case 'exec':
        await (await target(request)).exec(request.sql);
        return {};
      case 'end':
        await end(request.txId, request.commit);
        return {};
      case 'close':
        await db.close();
        return {};
    }
  };

}

/** Opens PGlite (`dataDir` undefined: in memory) with BIGINT as bigint, and the engine that runs requests on it. */
export async function openEngine(options: EngineOptions): Promise<Engine> {
  const db = await PGlite.create(options.dataDir, {
    parsers: { [INT8_OID]: (value: string) => BigInt(value) },
    ...(options.pgliteWasmModule ? { pgliteWasmModule: options.pgliteWasmModule } : {}),
    ...(options.initdbWasmModule ? { initdbWasmModule: options.initdbWasmModule } : {}),
  });
  return engineOn(db);
}
