import { chmodSync, linkSync, readFileSync, readlinkSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PGlite, type Transaction } from '@electric-sql/pglite';
import { DatabaseInUseError, endStatementSpan, FirstFailure, retryTransaction, SentStatements, statementSpan, type Database, type Queryable, type QueryResult, type Tx } from './database.ts';
import { asStorageError, OutageTracker, type OutageLog } from './faults.ts';
import { NamedStatements } from './pglite-statements.ts';
import { makePrivateDirectory } from '../data-dir.ts';

const INT8_OID = 20;

/** `failures`: a transaction's `FirstFailure`, through which each of the engine's answers passes. */
function wrap(named: NamedStatements, target: PGlite | Transaction, failures?: FirstFailure): Queryable {
  const answerOf = <R>(answer: Promise<R>): Promise<R> => (failures ? failures.observe(answer) : answer);
  return {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      const span = statementSpan('pglite', sql);
      try {
        const result = await answerOf(named.query(target, sql, params));
        if (span) endStatementSpan(span, { rows: result.rows.length });
        return { rows: result.rows as R[], rowCount: result.affectedRows ?? result.rows.length };
      } catch (error) {
        const failure = asStorageError(error);
        if (span) endStatementSpan(span, { failure });
        throw failure;
      }
    },
    async exec(sql: string): Promise<void> {
      const span = statementSpan('pglite', sql);
      try {
        await answerOf(target.exec(sql));
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
 * A transaction of the embedded database: it commits when the transaction's function returns, so its last
 * statement is any. PGlite runs statements one at a time in the order called, so a statement sent without
 * waiting (`send`) still runs before the next; its failure is every later statement's, and the transaction's.
 */
async function inPgliteTx<T>(inner: Queryable, fn: (tx: Tx) => Promise<T>): Promise<T> {
  const sent = new SentStatements();
  const after = <R>(answer: () => Promise<R>): Promise<R> => {
    const before = sent.count;
    return before === 0 ? answer() : sent.follow(answer(), before);
  };
  const tx: Tx = {
    inTransaction: true,
    query: (sql, params) => after(() => inner.query(sql, params)),
    exec: (sql) => after(() => inner.exec(sql)),
    lastStatement: () => tx,
    send: (sql, params) => {
      const answer = after(() => inner.query(sql, params));
      answer.catch(() => {});
      sent.add(answer);
    },
  };
  const result = await fn(tx);
  await sent.settled();
  return result;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * When a process started, in clock ticks since boot (field 22 of /proc/<pid>/stat), so that a pid the system has
 * since given to another process is not taken for the one that wrote a lock; undefined where there is no /proc.
 */
function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: count from after it (field 3 onwards).
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/**
 * Whether the process a lock names still runs: the pid alive and, when the lock recorded it, started when it did. A
 * lock written before start times were (its pid alone) is held by a live Node process only, where /proc tells.
 */
function lockHolderAlive(pid: number, started: string | undefined): boolean {
  if (!processAlive(pid)) return false;
  if (started === undefined) return runsNode(pid);
  const now = processStart(pid);
  return now === undefined || now === started;
}

/**
 * Whether a process runs Node: its executable (`/proc/<pid>/exe`, which `exec -a` cannot rename; its command line where
 * that link may not be read) is this one or named node or nodejs. A name that only contains "node" is another program
 * (found from outside: node-exporter's pid in an old lock refused the start). True where there is no /proc to ask.
 */
function runsNode(pid: number): boolean {
  let program: string;
  try {
    program = readlinkSync(`/proc/${pid}/exe`).replace(/ \(deleted\)$/, '');
  } catch {
    try {
      program = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] ?? '';
    } catch {
      return true;
    }
  }
  const name = path.basename(program);
  return name === path.basename(process.execPath) || /^node(js)?$/.test(name);
}

/**
 * PGlite has no lock of its own, and two processes writing one data directory would corrupt it. A lock
 * file holding our pid (and when this process started) refuses a second opener; a lock left by a dead process is
 * taken over, also when its pid now names another process (found from outside: after a kill -9, a recycled pid
 * refused every start, saying to stop an unrelated program). Of several starts at once exactly one gets it: the
 * lock file is created whole only when absent (`createWith`), or replaced whole while it still holds the stale
 * lock, by the one start that holds the take-over guard (`takeOver`). Before, each start that read the dead process's lock removed
 * "it" and wrote its own, a later one removing an earlier one's new lock: four starts at once left two or three
 * running on one directory in 7 races of 20. Exported for its test.
 */
export function lockDataDir(dataDir: string): () => void {
  const lockFile = path.join(dataDir, 'acg.lock');
  const started = processStart(process.pid);
  const mine = started === undefined ? String(process.pid) : `${process.pid} ${started}`;
  const unlock = () => rmSync(lockFile, { force: true });
  for (let attempt = 0; attempt < LOCK_ATTEMPTS; attempt++) {
    if (createWith(lockFile, mine)) return unlock;
    const held = readIfThere(lockFile);
    // Gone meanwhile (its holder stopped): try again.
    if (held === undefined) continue;
    const holder = liveHolder(held);
    if (holder !== undefined) {
      throw new DatabaseInUseError(`the embedded database in ${dataDir} is in use by process ${holder}; stop it first, or run on PostgreSQL (DATABASE_URL)`);
    }
    if (takeOver(lockFile, held, mine)) return unlock;
    // Another start is taking it over: its lock will be there to read in a moment.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, LOCK_RETRY_WAIT_MS);
  }
  throw new DatabaseInUseError(`the embedded database in ${dataDir} could not be locked: other processes kept taking its lock; stop them first`);
}

const LOCK_ATTEMPTS = 100;
const LOCK_RETRY_WAIT_MS = 5;

/** The pid of the live process a lock's text names, other than this one; undefined when none (a stale lock). */
function liveHolder(lockText: string): number | undefined {
  const [pidText, holderStarted] = lockText.trim().split(' ');
  const holder = Number(pidText);
  return Number.isInteger(holder) && holder > 0 && holder !== process.pid && lockHolderAlive(holder, holderStarted) ? holder : undefined;
}

/**
 * Creates `file` holding `text` unless it exists: written whole under another name first, then linked (which fails
 * when the name is taken), so no reader ever finds it empty, as one created and then written could be read.
 */
function createWith(file: string, text: string): boolean {
  const written = `${file}.${process.pid}.new`;
  writeFileSync(written, text);
  try {
    linkSync(written, file);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    // A file system without hard links: created, then written (the instant between is read as a stale lock).
    if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP') return createThenWrite(file, text);
    throw error;
  } finally {
    rmSync(written, { force: true });
  }
}

function createThenWrite(file: string, text: string): boolean {
  try {
    writeFileSync(file, text, { flag: 'wx' });
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return false;
  }
}

function readIfThere(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/**
 * Replaces the lock file with this process's lock if it still holds `stale` (what was read and judged stale), under
 * a guard file that one start at a time holds (written only when absent): the lock file is never absent on the way
 * (a rename over it), and no other start changes it meanwhile, since every other writer writes it only when absent.
 * False when another start holds the guard (a guard whose holder died is removed, for the next attempt) or the lock
 * changed since it was read.
 */
function takeOver(lockFile: string, stale: string, mine: string): boolean {
  const guard = `${lockFile}.takeover`;
  if (!createWith(guard, mine)) {
    const guardText = readIfThere(guard);
    if (guardText !== undefined && liveHolder(guardText) === undefined) rmSync(guard, { force: true });
    return false;
  }
  try {
    if (readIfThere(lockFile) !== stale) return false;
    const written = `${lockFile}.${process.pid}`;
    writeFileSync(written, mine);
    renameSync(written, lockFile);
    return true;
  } finally {
    rmSync(guard, { force: true });
  }
}

export interface PgliteOpenOptions {
  /**
   * A data directory to start from, as PGlite's `dumpDataDir` wrote it (a tarball), instead of an empty one made
   * by initdb: the test suite starts each in-memory database from one migrated once, which skips initdb's
   * seconds. Only for a database in memory.
   */
  from?: Blob;
  /**
   * The engine's buffer cache in MB (PostgreSQL's `shared_buffers`; PGlite's default is 128). PGlite clears the
   * whole cache at start, so a small one starts faster: a test's in-memory copy of the migrated database opens in
   * about 0.7 s with 16 MB against 1.1 s with the default. The gateway keeps the default.
   */
  sharedBuffersMb?: number;
}

/**
 * Opens the embedded database. `dataDir` undefined means in memory (tests). PGlite runs inside this
 * process and serialises every statement, so it admits one gateway process per data directory.
 * `log` hears of an outage: PGlite runs in this process, so it has no connection to lose; it fails
 * only once closed (shutdown) or when its engine aborted.
 */
export async function openPglite(dataDir: string | undefined, log?: OutageLog, options: PgliteOpenOptions = {}): Promise<Database> {
  if (options.from && dataDir) throw new Error('openPglite: a database on disk cannot start from a dump');
  let unlock = () => {};
  if (dataDir) {
    // The database's files are the ledger and, in dev mode, the signing key: the directory is the owner's alone
    // (PGlite writes its files 0666 less the umask, so a shared umask left them readable and writable by every local
    // user; found from outside). As PostgreSQL requires of its data directory; made so again at every open.
    makePrivateDirectory(dataDir);
    try {
      chmodSync(dataDir, 0o700);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EPERM') throw error;
      throw new Error(`the embedded database directory ${dataDir} belongs to another user: run the gateway as its owner (the directory is kept to its owner, 0700, as PostgreSQL keeps its own)`, { cause: error });
    }
    unlock = lockDataDir(dataDir);
  }
  let db: PGlite;
  try {
    db = await PGlite.create(dataDir, {
      parsers: { [INT8_OID]: (value: string) => BigInt(value) },
      loadDataDir: options.from,
      ...(options.sharedBuffersMb ? { postgresqlconf: [`shared_buffers = ${options.sharedBuffersMb}MB`] } : {}),
    });
  } catch (error) {
    unlock();
    throw error;
  }
  const named = new NamedStatements(db);
  const root = wrap(named, db);
  const outage = new OutageTracker(log);
  return {
    kind: 'pglite',
    query: (sql, params) => outage.observe(() => root.query(sql, params)),
    exec: (sql) => outage.observe(() => root.exec(sql)),
    transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return outage.observe(() => retryTransaction(() => db.transaction((tx) => inPgliteTx(wrap(named, tx, new FirstFailure()), fn))));
    },
    withAdvisoryLock<T>(_lockKey: number, fn: (conn: Queryable) => Promise<T>): Promise<T> {
      // One process owns a PGlite data directory, so there is no other session to exclude.
      return outage.observe(() => fn(root));
    },
    async close() {
      try {
        await db.close();
      } finally {
        unlock();
      }
    },
  };
}
