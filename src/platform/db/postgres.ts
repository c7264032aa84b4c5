import { createHash } from 'node:crypto';
import pg from 'pg';
import { DEFAULT_DATABASE_TIMEOUTS, DEFAULT_POOL_SIZE_MAX, endStatementSpan, FirstFailure, isStalePlan, retryTransaction, SentStatements, statementSpan, type Database, type DatabaseTimeouts, type Queryable, type QueryResult, type StatementServer, type Tx } from './database.ts';
import { queryKeepingShapes } from './pg-query.ts';
import { asStorageError, isStorageUnavailable, OutageTracker, type OutageLog } from './faults.ts';

const INT8_OID = 20;
/** How much longer than statement_timeout the client waits on a silent server before giving the connection up. */
const CLIENT_READ_MARGIN_MS = 1000;

/**
 * How long a pool connection lives (docs/decisions.md "Plans are renewed, so none outlives the tables it was made
 * for"): a connection keeps the plans it made of its prepared statements until their tables' statistics change,
 * which autovacuum's ANALYZE does on a production server; on one that runs without it, a plan made while a
 * table was nearly empty would scan it whole for as long as the connection lives. A connection older than this
 * is closed when it is next idle, and its successor plans again, for the tables as they are.
 */
export const CONNECTION_LIFETIME_S = 300;

function parseTypes(oid: number, format: 'text' | 'binary') {
  if (oid === INT8_OID) return (value: string) => BigInt(value);
  return pg.types.getTypeParser(oid, format);
}

/**
 * Named (prepared) statements: each parameterised statement is sent under a name derived from its text, so a
 * connection parses and plans it once and later runs only bind and execute (measured: the mint's statements
 * take half the server time prepared; docs/decisions.md "Statements go prepared, named by their text"). The texts are the code's own
 * templates, never data; a process names at most STATEMENTS_NAMED_MAX of them, and sends any beyond unnamed.
 * A schema change under a running process (a rolling deploy's migration) makes the server refuse a prepared
 * statement whose result columns changed ("cached plan must not change result type"): the names then start a
 * new generation, so every connection prepares them again, and the statement (or its transaction) is retried.
 */
export const STATEMENTS_NAMED_MAX = 1000;
const statementNames = new Map<string, string>();
let statementGeneration = 0;

function statementName(sql: string): string | undefined {
  let name = statementNames.get(sql);
  if (name === undefined && statementNames.size < STATEMENTS_NAMED_MAX) {
    name = `acg${statementGeneration}_${createHash('sha256').update(sql).digest('base64url').slice(0, 24)}`;
    statementNames.set(sql, name);
  }
  return name;
}

/** Forgets every name: the next use of each statement prepares it again, under a new name, on every connection. */
function renameStatements(): void {
  statementNames.clear();
  statementGeneration += 1;
}

/**
 * `observe`: a transaction's connection passes each of the driver's answers through its `FirstFailure` (the
 * answers of one connection settle there in the order sent).
 */
function wrap(client: pg.Pool | pg.PoolClient | pg.Client, options: { retryStalePlan: boolean; server: StatementServer; failures?: FirstFailure }): Queryable {
  const answerOf = <R>(answer: Promise<R>): Promise<R> => (options.failures ? options.failures.observe(answer) : answer);
  const send = async (sql: string, params: readonly unknown[] | undefined) => {
    // Named at each run: a rename gives the same text a new name.
    const run = () => answerOf(queryKeepingShapes(client, sql, params, params === undefined ? undefined : statementName(sql)));
    try {
      return await run();
    } catch (error) {
      if (!isStalePlan(error)) throw error;
      renameStatements();
      // Inside a transaction the statement failed it: the transaction's retry runs it again, renamed.
      if (!options.retryStalePlan) throw error;
      return run();
    }
  };
  return {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      const span = statementSpan('pg', sql, options.server);
      try {
        const result = await send(sql, params);
        if (span) endStatementSpan(span, { rows: result.rows.length });
        return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
      } catch (error) {
        const failure = asStorageError(error);
        if (span) endStatementSpan(span, { failure });
        throw failure;
      }
    },
    async exec(sql: string): Promise<void> {
      const span = statementSpan('pg', sql, options.server);
      try {
        await answerOf(client.query(sql));
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
 * A transaction on `client` whose BEGIN goes out with its first statement, and whose COMMIT with its last
 * (`lastStatement`), each in one socket write: the pool's connections pipeline (node-postgres `pipeline`: a
 * statement is sent without waiting for the answer to the one before), so a transaction costs two round trips
 * and two writes fewer. BEGIN's failure is the first statement's. A transaction that ran no statement sends
 * neither BEGIN nor COMMIT. `ended` tells the caller that the last statement closed it, committed or rolled back.
 */
function transactionOn(client: pg.PoolClient, server: StatementServer): { tx: Tx; begun: () => boolean; ended: () => boolean; sent: SentStatements; rollback: () => Promise<unknown> } {
  const inner = wrap(client, { retryStalePlan: false, server, failures: new FirstFailure() });
  let begun = false;
  let ended = false;
  const sent = new SentStatements();
  const { stream } = (client as unknown as { connection: { stream: { cork(): void; uncork(): void } } }).connection;
  // The statements sent by one run of code go out in one write: each driver call writes synchronously, so the
  // stream is corked at the first and uncorked in a microtask, once that code has run. So BEGIN and the first
  // statement, a last statement and COMMIT, and the reads a batch sends together (Promise.all) are one write each.
  let corked = false;
  const together = <T>(send: () => T): T => {
    if (!corked) {
      corked = true;
      stream.cork();
      queueMicrotask(() => {
        corked = false;
        stream.uncork();
      });
    }
    return send();
  };
  const open = () => {
    if (ended) throw new Error('the transaction has ended: its last statement was sent with its COMMIT');
    if (begun) return undefined;
    begun = true;
    const opened = inner.query('BEGIN');
    opened.catch(() => {});
    return opened;
  };
  const run = <R>(statement: () => Promise<R>): Promise<R> => {
    const before = sent.count;
    const [opened, sentAnswer] = together(() => [open(), statement()] as const);
    // After a statement sent without waiting (`send`), an answer is that statement's failure if it failed.
    const answer = before === 0 ? sentAnswer : sent.follow(sentAnswer, before);
    if (!opened) return answer;
    answer.catch(() => {});
    return opened.then(() => answer);
  };
  const last = async <R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> => {
    const before = sent.count;
    const [opened, answer, committed] = together(() => [open(), inner.query<R>(sql, params), inner.query('COMMIT')] as const);
    ended = true;
    answer.catch(() => {});
    committed.catch(() => {});
    // A failed statement aborts the transaction; PostgreSQL then answers the COMMIT by rolling it back.
    const done = (async () => {
      await opened;
      const result = await answer;
      await committed;
      return result;
    })();
    return before === 0 ? done : sent.follow(done, before);
  };
  // A script that opens the transaction (a batch's plan settings) goes out in BEGIN's own message: PostgreSQL
  // parses and answers the two as one simple query, one message and one answer fewer. (Not yet begun, so not
  // ended either: only a last statement ends a transaction, and it begins one first.)
  const beginWith = (script: string): Promise<void> => {
    begun = true;
    return together(() => inner.exec(`BEGIN; ${script}`));
  };
  const tx: Tx = {
    inTransaction: true,
    query: (sql, params) => run(() => inner.query(sql, params)),
    exec: (sql) => (begun ? run(() => inner.exec(sql)) : beginWith(sql)),
    lastStatement: () => ({ query: last, exec: (sql) => last(sql).then(() => undefined) }),
    send: (sql, params) => {
      const answer = run(() => inner.query(sql, params));
      answer.catch(() => {});
      sent.add(answer);
    },
  };
  // A rollback answers for itself: a sent statement's failure, already the transaction's, must not fail it too.
  return { tx, begun: () => begun, ended: () => ended, sent, rollback: () => inner.query('ROLLBACK') };
}

export interface PostgresOptions {
  poolSizeMax?: number;
  /** Seconds a pool connection lives (CONNECTION_LIFETIME_S by default). */
  connectionLifetimeS?: number;
  timeouts?: DatabaseTimeouts;
  /** Where an outage is announced (one warn when it starts, one info when it ends). */
  log?: OutageLog;
}

/**
 * Checks a client out for `fn`. While we hold it, its 'error' event (the server went away) is ours to
 * listen to, or it would end the process. A client that failed at the connection level, or that `fn`
 * discards, is destroyed on release, never handed to another request.
 */
async function withClient<T>(pool: pg.Pool, fn: (client: pg.PoolClient, discard: (reason: Error) => void) => Promise<T>): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw asStorageError(error);
  }
  let broken: Error | undefined;
  const discard = (reason: Error) => {
    broken ??= reason;
  };
  client.on('error', discard);
  try {
    return await fn(client, discard);
  } catch (error) {
    if (isStorageUnavailable(error)) discard(error as Error);
    throw error;
  } finally {
    client.off('error', discard);
    client.release(broken);
  }
}

export function openPostgres(connectionString: string, options: PostgresOptions = {}): Database {
  const timeouts = options.timeouts ?? DEFAULT_DATABASE_TIMEOUTS;
  const connection = {
    connectionString,
    types: { getTypeParser: parseTypes } as pg.CustomTypesConfig,
    connectionTimeoutMillis: timeouts.connectTimeoutMs,
    keepAlive: true,
    // Statements are sent without waiting for the one before (BEGIN with the first statement, transactionOn);
    // every caller still awaits each answer before its next statement.
    pipeline: true,
  };
  const pool = new pg.Pool({
    ...connection,
    max: options.poolSizeMax ?? DEFAULT_POOL_SIZE_MAX,
    idleTimeoutMillis: 30_000,
    maxLifetimeSeconds: options.connectionLifetimeS ?? CONNECTION_LIFETIME_S,
    // Server-side bounds, sent with each connection's start-up: no per-transaction round trip.
    statement_timeout: timeouts.statementTimeoutMs,
    lock_timeout: timeouts.lockTimeoutMs,
    // A stopped or partitioned server never answers, so the server-side bound never fires: the client
    // gives up a little later and the connection is discarded.
    query_timeout: timeouts.statementTimeoutMs + CLIENT_READ_MARGIN_MS,
  });
  // An idle client that loses its server emits 'error' on the pool, which has already discarded it;
  // without a listener it would end the process. The next checkout opens a new connection.
  pool.on('error', () => {});
  const outage = new OutageTracker(options.log);
  // Where the statements go, for their spans: read from the URL as the driver reads it (a client not connected).
  const parsed = new pg.Client({ connectionString });
  const server: StatementServer = { namespace: parsed.database, address: parsed.host, port: parsed.port };
  const root = wrap(pool, { retryStalePlan: true, server });
  return {
    kind: 'postgres',
    query: (sql, params) => outage.observe(() => root.query(sql, params)),
    exec: (sql) => outage.observe(() => root.exec(sql)),
    transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return outage.observe(() =>
        retryTransaction(() =>
          withClient(pool, async (client, discard) => {
            const { tx, begun, ended, sent, rollback } = transactionOn(client, server);
            try {
              const result = await fn(tx);
              await sent.settled();
              if (begun() && !ended()) await tx.query('COMMIT');
              return result;
            } catch (error) {
              // On a broken connection ROLLBACK cannot be sent (and could wait on a stalled server):
              // the server rolls back when the connection goes, and withClient makes sure it goes. A
              // ROLLBACK that fails leaves the session in doubt, so it goes too; the caller still
              // learns the original failure, since nothing was committed.
              if (begun() && !ended() && !isStorageUnavailable(error)) await rollback().catch(discard);
              throw error;
            }
          }),
        ),
      );
    },
    withAdvisoryLock<T>(lockKey: number, fn: (conn: Queryable) => Promise<T>): Promise<T> {
      // Its own session, outside the pool and without the request timeouts: waiting for another
      // instance's migrations, or running a long one, is not a stalled database.
      return outage.observe(async () => {
        const client = new pg.Client(connection);
        client.on('error', () => {});
        try {
          await client.connect();
        } catch (error) {
          throw asStorageError(error);
        }
        try {
          const conn = wrap(client, { retryStalePlan: true, server });
          await conn.query('SELECT pg_advisory_lock($1)', [lockKey]);
          return await fn(conn);
        } finally {
          // Ending the session releases the lock, also when the work failed. Not awaited: a stalled
          // server would never confirm the goodbye.
          client.end().catch(() => {});
        }
      });
    },
    async close() {
      await pool.end();
    },
  };
}
