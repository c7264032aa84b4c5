// The embedded database (PGlite, a WebAssembly Postgres) as a `Database`. Its engine runs on a worker thread
// (`pglite-worker.ts`), so its work, most of the gateway's CPU on PGlite, uses a second core beside the HTTP
// work; this side sends each statement as one message and answers the caller from the reply. See
// docs/decisions.md, "PGlite runs in a worker thread".
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { DatabaseInUseError, endStatementSpan, retryTransaction, statementSpan, type Database, type Queryable, type QueryResult, type Tx } from './database.ts';
import { asStorageError, OutageTracker, StorageUnavailableError, type OutageLog } from './faults.ts';
import type { CrossingError, Engine, EngineAnswer, EngineOptions, EngineReply, EngineRequest } from './pglite-engine.ts';
import type { WorkerOptions } from './pglite-worker.ts';

/** What a caller sends: a request without its id, which the engine's client assigns. */
type Call = EngineRequest extends infer R ? (R extends EngineRequest ? Omit<R, 'id'> : never) : never;
type Answer = EngineAnswer;

/** The engine as this thread sees it: in a worker thread, or in this thread. */
interface EngineClient {
  call(request: Call): Promise<Answer>;
  close(): Promise<void>;
  /** Ends the engine at once, as a crash would (tests). */
  kill(): Promise<void>;
}

/** An error from the engine, as PGlite in process would have thrown it: its SQLSTATE and fields on it. */
function revive(crossing: CrossingError): Error {
  const error = crossing.wasmTrap ? new WebAssembly.RuntimeError(crossing.message) : new Error(crossing.message);
  Object.assign(error, crossing.fields);
  if (!crossing.wasmTrap) error.name = crossing.name;
  return error;
}

let compiled: Promise<Pick<EngineOptions, 'pgliteWasmModule' | 'initdbWasmModule'>> | undefined;

/**
 * PGlite's two WebAssembly modules, compiled once per process and handed to every engine worker (a compiled
 * module crosses threads without being compiled again); in process PGlite kept them between instances.
 */
function compiledModules(): Promise<Pick<EngineOptions, 'pgliteWasmModule' | 'initdbWasmModule'>> {
  compiled ??= (async () => {
    const dist = path.dirname(createRequire(import.meta.url).resolve('@electric-sql/pglite'));
    const compile = async (file: string) => WebAssembly.compile(await readFile(path.join(dist, file)));
    const [pgliteWasmModule, initdbWasmModule] = await Promise.all([compile('pglite.wasm'), compile('initdb.wasm')]);
    return { pgliteWasmModule, initdbWasmModule };
  })();
  compiled.catch(() => (compiled = undefined));
  return compiled;
}

/**
 * The worker's entry: the built `.js` beside this file in dist/, or the `.ts` source under tsx and vitest, where
 * a worker does not inherit the parent's TypeScript loader: a small bootstrap registers tsx first.
 */
function startWorker(options: WorkerOptions): Worker {
  const fromSources = import.meta.url.endsWith('.ts');
  const entry = new URL(fromSources ? './pglite-worker.ts' : './pglite-worker.js', import.meta.url);
  if (!fromSources) return new Worker(entry, { workerData: options });
  // tsx's ESM API, as the `import` condition of its exports names it (require.resolve gives the CommonJS twin).
  const tsxApi = pathToFileURL(createRequire(import.meta.url).resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;
  const bootstrap = `import(${JSON.stringify(tsxApi)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(bootstrap, { eval: true, workerData: options });
}

/** A storage failure (503 storage_unavailable), never a hang: what every call gets once the engine is gone. */
function engineGone(reason: string, cause?: unknown): StorageUnavailableError {
  return new StorageUnavailableError('unreachable', new Error(`the embedded database engine ${reason}`, { cause }));
}

/**
 * The request thread's side of the engine: one message per call, answered by id. A worker that exits or
 * fails fails every waiting call and every later one with a StorageUnavailableError. An idle engine does not
 * hold the process open (as PGlite in process did not); a call waiting on it does.
 */
class EngineThread implements EngineClient {
  private readonly pending = new Map<number, { resolve(answer: Answer): void; reject(error: unknown): void }>();
  private nextId = 1;
  private stopped: StorageUnavailableError | undefined;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (reply: EngineReply) => this.answer(reply));
    worker.on('error', (error) => this.stop(engineGone(`failed: ${error.message}`, error)));
    worker.on('exit', (code) => this.stop(engineGone(`stopped (exit code ${code})`)));
  }

  /** Starts the worker and waits for its engine to open the data directory (or fail to: that error is thrown here). */
  static async start(dataDir: string | undefined): Promise<EngineThread> {
    const worker = startWorker({ engine: 'pglite', dataDir, ...(await compiledModules()) });
    const ready = await new Promise<EngineReply>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`the embedded database engine stopped while opening (exit code ${code})`)));
    });
    if ('ready' in ready && !ready.ready) {
      await worker.terminate();
      throw revive(ready.error);
    }
    worker.unref();
    return new EngineThread(worker);
  }

  private answer(reply: EngineReply): void {
    const call = this.pending.get(reply.id);
    if (!call) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker.unref();
    if ('error' in reply) call.reject(revive(reply.error));
    else call.resolve(reply as Answer);
  }

  private stop(reason: StorageUnavailableError): void {
    this.stopped ??= reason;
    for (const call of this.pending.values()) call.reject(this.stopped);
    this.pending.clear();
    this.worker.unref();
  }

  call(request: Call): Promise<Answer> {
    if (this.stopped) return Promise.reject(this.stopped);
    const id = this.nextId++;
    if (this.pending.size === 0) this.worker.ref();
    this.worker.postMessage({ ...request, id });
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }

  /** Closes PGlite in the worker (it flushes its data directory), then ends the worker. */
  async close(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.call({ op: 'close' });
    } finally {
      this.stop(new StorageUnavailableError('unreachable', new Error('PGlite is closed')));
      await this.worker.terminate();
    }
  }

  async kill(): Promise<void> {
    await this.worker.terminate();
  }
}

/** The engine in this thread: the same requests, called directly. */
class EngineInThread implements EngineClient {
  private stopped: StorageUnavailableError | undefined;

  private constructor(private readonly engine: Engine) {}

  static async start(dataDir: string | undefined): Promise<EngineInThread> {
    const { openEngine } = await import('./pglite-engine.ts');
    return new EngineInThread(await openEngine({ dataDir }));
  }

  call(request: Call): Promise<Answer> {
    if (this.stopped) return Promise.reject(this.stopped);
    return this.engine({ ...request, id: 0 } as EngineRequest);
  }

  async close(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.call({ op: 'close' });
    } finally {
      this.stopped = new StorageUnavailableError('unreachable', new Error('PGlite is closed'));
    }
  }

  async kill(): Promise<void> {
    this.stopped = engineGone('stopped');
  }
}

/** Statements and scripts on the engine's session, or inside transaction `txId`; `opens` says whether this call sends BEGIN. */
function on(engine: EngineClient, txId?: number, opens: () => boolean = () => false): Queryable {
  return {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      const span = statementSpan('pglite', sql);
      try {
        const open = opens() ? { open: true as const } : {};
        const answer = await engine.call({ op: 'query', sql, params: params as unknown[] | undefined, txId, ...open });
        const rows = (answer.rows ?? []) as R[];
        if (span) endStatementSpan(span, { rows: rows.length });
        return { rows, rowCount: answer.rowCount ?? rows.length };
      } catch (error) {
        const failure = asStorageError(error);
        if (span) endStatementSpan(span, { failure });
        throw failure;
      }
    },
    async exec(sql: string): Promise<void> {
      const span = statementSpan('pglite', sql);
      try {
        await engine.call({ op: 'exec', sql, txId, ...(opens() ? { open: true as const } : {}) });
        if (span) endStatementSpan(span, { rows: 0 });
      } catch (error) {
        const failure = asStorageError(error);
        if (span) endStatementSpan(span, { failure });
        throw failure;
      }
    },
  };
}

/**
 * One transaction on the engine, as PGlite's `transaction()` ran it in process: committed when `fn` returns,
 * rolled back when it throws (the caller hears of its own error). Its first statement opens it in the worker,
 * so BEGIN costs no message; a transaction that ran no statement sends nothing at all.
 */
async function transactionOn<T>(engine: EngineClient, txId: number, fn: (tx: Tx) => Promise<T>): Promise<T> {
  let opened = false;
  const opens = () => !opened && (opened = true);
  // The engine commits when `fn` returns, so the transaction's last statement is any (Tx.lastStatement).
  const tx: Tx = { ...on(engine, txId, opens), inTransaction: true, lastStatement: () => tx };
  let result: T;
  try {
    result = await fn(tx);
  } catch (error) {
    if (opened) await engine.call({ op: 'end', txId, commit: false }).catch(() => {});
    throw error;
  }
  if (opened) {
    try {
      await engine.call({ op: 'end', txId, commit: true });
    } catch (error) {
      throw asStorageError(error);
    }
  }
  return result;
}

/**
 * Opens the embedded database. `dataDir` undefined means in memory (tests). PGlite runs inside this
 * process and serialises every statement, so it admits one gateway process per data directory.
 */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Another live process holds the embedded database: an operator's situation, said in one line, not a crash. */
/**
 * PGlite has no lock of its own, and two processes writing one data directory would corrupt it. A lock
 * file holding our pid refuses a second opener; a lock left by a dead process is taken over.
 */
function lockDataDir(dataDir: string): () => void {
  const lockFile = path.join(dataDir, 'acg.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(lockFile, String(process.pid), { flag: 'wx' });
      return () => rmSync(lockFile, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number(readFileSync(lockFile, 'utf8'));
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && processAlive(holder)) {
        throw new DatabaseInUseError(
          `the embedded database in ${dataDir} is in use by process ${holder}; stop it first, or run on PostgreSQL (DATABASE_URL)`,
        );
      }
      rmSync(lockFile, { force: true });
    }
  }
  throw new Error(`cannot lock ${dataDir}`);
}

/** The engine's thread of a database `openPglite` returned (tests end it as a crash would). */
export const engineOf = new WeakMap<Database, { kill(): Promise<void> }>();

/**
 * `log` hears of an outage: PGlite has no connection to lose; it fails only once closed (shutdown), when its
 * engine aborted, or when the worker thread it runs in ended. `inWorker` false runs the same engine in this
 * thread (measured against the worker; see docs/decisions.md).
 */
export async function openPglite(dataDir: string | undefined, log?: OutageLog, inWorker = true): Promise<Database> {
  let unlock = () => {};
  if (dataDir) {
    mkdirSync(dataDir, { recursive: true });
    unlock = lockDataDir(dataDir);
  }
  let engine: EngineClient;
  try {
    engine = await (inWorker ? EngineThread.start(dataDir) : EngineInThread.start(dataDir));
  } catch (error) {
    unlock();
    throw error;
  }
  const root = on(engine);
  const outage = new OutageTracker(log);
  let nextTxId = 1;
  const db: Database = {
    kind: 'pglite',
    query: (sql, params) => outage.observe(() => root.query(sql, params)),
    exec: (sql) => outage.observe(() => root.exec(sql)),
    transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return outage.observe(() => retryTransaction(() => transactionOn(engine, nextTxId++, fn)));
    },
    withAdvisoryLock<T>(_lockKey: number, fn: (conn: Queryable) => Promise<T>): Promise<T> {
      // One process owns a PGlite data directory, so there is no other session to exclude.
      return outage.observe(() => fn(root));
    },
    async close() {
      try {
        await engine.close();
      } finally {
        unlock();
      }
    },
  };
  engineOf.set(db, engine);
  return db;
}
