import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PGlite, type Transaction } from '@electric-sql/pglite';
import { DatabaseInUseError, retryTransaction, type Database, type Queryable, type QueryResult, type Tx } from './database.ts';
import { asStorageError, OutageTracker, type OutageLog } from './faults.ts';

const INT8_OID = 20;

function wrap(target: PGlite | Transaction): Queryable {
  return {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      try {
        const result = await target.query<R>(sql, params as unknown[] | undefined);
        return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length };
      } catch (error) {
        throw asStorageError(error);
      }
    },
    async exec(sql: string): Promise<void> {
      try {
        await target.exec(sql);
      } catch (error) {
        throw asStorageError(error);
      }
    },
  };
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

/** The engine behind the Database: PGlite in this thread, or in a worker thread (pglite-thread.ts). */
interface Engine {
  root: Queryable;
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

async function openInProcess(dataDir: string | undefined): Promise<Engine> {
  const db = await PGlite.create(dataDir, { parsers: { [INT8_OID]: (value: string) => BigInt(value) } });
  return { root: wrap(db), transaction: (fn) => db.transaction((tx) => fn(wrap(tx))), close: () => db.close() };
}

/**
 * The engine in a worker thread: each statement is a message, and a transaction is a `begin`, its statements
 * and an `end` that commits or rolls back, all run by PGlite's own transaction() on the worker's one session.
 */
async function openInWorker(dataDir: string | undefined): Promise<Engine> {
  const { EngineThread } = await import('./pglite-thread.ts');
  const thread = await EngineThread.start({ dataDir });
  const on = (txId: number | undefined): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      try {
        return await thread.query<R>(sql, params, txId);
      } catch (error) {
        throw asStorageError(error);
      }
    },
    async exec(sql: string): Promise<void> {
      try {
        await thread.exec(sql, txId);
      } catch (error) {
        throw asStorageError(error);
      }
    },
  });
  let nextTxId = 1;
  return {
    root: on(undefined),
    async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      const txId = nextTxId++;
      thread.begin(txId);
      let result: T;
      try {
        result = await fn(on(txId));
      } catch (error) {
        // Rolled back; the caller hears of its own error, as with PGlite's transaction().
        await thread.end(txId, false).catch(() => {});
        throw error;
      }
      try {
        await thread.end(txId, true);
      } catch (error) {
        throw asStorageError(error);
      }
      return result;
    },
    close: () => thread.close(),
  };
}

/** Whether the embedded engine runs in a worker thread when the caller does not say (ACG_PGLITE_WORKER). */
export const PGLITE_WORKER_DEFAULT = false;

/**
 * `log` hears of an outage: PGlite has no connection to lose; it fails only once closed (shutdown), when its
 * engine aborted, or when the worker thread it runs in (`inWorker`) ended.
 */
export async function openPglite(dataDir: string | undefined, log?: OutageLog, inWorker = PGLITE_WORKER_DEFAULT): Promise<Database> {
  let unlock = () => {};
  if (dataDir) {
    mkdirSync(dataDir, { recursive: true });
    unlock = lockDataDir(dataDir);
  }
  let engine: Engine;
  try {
    engine = await (inWorker ? openInWorker(dataDir) : openInProcess(dataDir));
  } catch (error) {
    unlock();
    throw error;
  }
  const { root } = engine;
  const outage = new OutageTracker(log);
  return {
    kind: 'pglite',
    query: (sql, params) => outage.observe(() => root.query(sql, params)),
    exec: (sql) => outage.observe(() => root.exec(sql)),
    transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return outage.observe(() => retryTransaction(() => engine.transaction((tx) => fn({ ...tx, inTransaction: true }))));
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
}
