// The embedded database's engine on its own thread (a `worker_threads` worker started by
// `pglite-thread.ts`), so PGlite's WebAssembly Postgres runs on a second core beside the HTTP work.
// It owns the one PGlite instance and answers one message per call: a query, a script, the start and
// the end of a transaction, close. A transaction is PGlite's own `transaction()`, held open until the
// request thread says how it ends, so its statements run on the engine's one session exactly as they
// did in process. Values cross by structured clone, which keeps bigint, Date, Uint8Array, arrays and
// JSON objects as PGlite returns them; an error crosses as its message, name and scalar fields
// (SQLSTATE `code`, `constraint`, `detail` …), which is all `faults.ts` and the services read.
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite, type Transaction } from '@electric-sql/pglite';

const INT8_OID = 20;

export type EngineRequest =
  | { id: number; op: 'query'; sql: string; params?: unknown[]; txId?: number }
  | { id: number; op: 'exec'; sql: string; txId?: number }
  | { id: number; op: 'begin'; txId: number }
  | { id: number; op: 'end'; txId: number; commit: boolean }
  | { id: number; op: 'close' };

/** An error as it crosses threads: the fields a reader of a database error looks at. */
export interface CrossingError {
  name: string;
  message: string;
  /** The engine aborted (a WebAssembly trap): nothing more will run until the process restarts. */
  wasmTrap: boolean;
  fields: Record<string, string | number | boolean | bigint>;
}

/** What a call returns: rows for a query, nothing for the rest. */
export interface EngineResult {
  rows?: unknown[];
  rowCount?: number;
}

export type EngineReply =
  | ({ id: number; ok: true } & EngineResult)
  | { id: number; ok: false; error: CrossingError }
  | { id: 0; ready: true }
  | { id: 0; ready: false; error: CrossingError };

export interface EngineOptions {
  /** undefined: in memory (tests). */
  dataDir: string | undefined;
  /** Compiled once by the request thread (pglite-thread.ts), so that no worker compiles them again. */
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

/** Thrown into a transaction the request thread ended without committing; PGlite then rolls it back. */
const ROLLBACK = Symbol('rollback');

interface OpenTransaction {
  tx: Promise<Transaction>;
  finish(commit: boolean): void;
  ended: Promise<void>;
}

async function serve(port: NonNullable<typeof parentPort>, options: EngineOptions): Promise<void> {
  let db: PGlite;
  try {
    db = await PGlite.create(options.dataDir, {
      parsers: { [INT8_OID]: (value: string) => BigInt(value) },
      pgliteWasmModule: options.pgliteWasmModule,
      initdbWasmModule: options.initdbWasmModule,
    });
  } catch (error) {
    port.postMessage({ id: 0, ready: false, error: toCrossingError(error) } satisfies EngineReply);
    return;
  }
  const transactions = new Map<number, OpenTransaction>();

  function begin(txId: number): void {
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
    transactions.set(txId, { tx, finish, ended });
  }

  async function target(txId: number | undefined): Promise<PGlite | Transaction> {
    if (txId === undefined) return db;
    const open = transactions.get(txId);
    if (!open) throw new Error(`no open transaction ${txId}`);
    return open.tx;
  }

  async function handle(request: EngineRequest): Promise<EngineResult> {
    switch (request.op) {
      case 'query': {
        const result = await (await target(request.txId)).query(request.sql, request.params);
        return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length };
      }
      case 'exec':
        await (await target(request.txId)).exec(request.sql);
        return {};
      case 'begin':
        begin(request.txId);
        return {};
      case 'end': {
        const open = transactions.get(request.txId);
        if (!open) throw new Error(`no open transaction ${request.txId}`);
        transactions.delete(request.txId);
        open.finish(request.commit);
        try {
          await open.ended;
        } catch (error) {
          if (error !== ROLLBACK) throw error;
        }
        return {};
      }
      case 'close':
        await db.close();
        return {};
    }
  }

  port.on('message', (request: EngineRequest) => {
    // `begin` has no answer of its own: the request thread sends its statements right behind it, and hears
    // of a transaction that could not open from them and from `end`.
    if (request.op === 'begin') return void handle(request);
    handle(request).then(
      (reply) => {
        port.postMessage({ id: request.id, ok: true, ...reply } satisfies EngineReply);
        if (request.op === 'close') port.close();
      },
      (error: unknown) => port.postMessage({ id: request.id, ok: false, error: toCrossingError(error) } satisfies EngineReply),
    );
  });
  port.postMessage({ id: 0, ready: true } satisfies EngineReply);
}

if (parentPort) await serve(parentPort, workerData as EngineOptions);
