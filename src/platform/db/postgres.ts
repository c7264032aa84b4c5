import pg from 'pg';
import { DEFAULT_DATABASE_TIMEOUTS, DEFAULT_POOL_SIZE_MAX, endStatementSpan, retryTransaction, statementSpan, type Database, type DatabaseTimeouts, type Queryable, type QueryResult, type Tx } from './database.ts';
import { asStorageError, isStorageUnavailable, OutageTracker, type OutageLog } from './faults.ts';

const INT8_OID = 20;
/** How much longer than statement_timeout the client waits on a silent server before giving the connection up. */
const CLIENT_READ_MARGIN_MS = 1000;

function parseTypes(oid: number, format: 'text' | 'binary') {
  if (oid === INT8_OID) return (value: string) => BigInt(value);
  return pg.types.getTypeParser(oid, format);
}

function wrap(client: pg.Pool | pg.PoolClient | pg.Client): Queryable {
  return {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      const span = statementSpan('pg', sql);
      try {
        const result = await client.query(sql, params as unknown[] | undefined);
        if (span) endStatementSpan(span, { rows: result.rows.length });
        return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
      } catch (error) {
        const failure = asStorageError(error);
        if (span) endStatementSpan(span, { failure });
        throw failure;
      }
    },
    async exec(sql: string): Promise<void> {
      const span = statementSpan('pg', sql);
      try {
        await client.query(sql);
        if (span) endStatementSpan(span, { rows: 0 });
      } catch (error) {
        const failure = asStorageError(error);
        if (span) endStatementSpan(span, { failure });
        throw failure;
      }
    },
  };
}

export interface PostgresOptions {
  poolSizeMax?: number;
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
  };
  const pool = new pg.Pool({
    ...connection,
    max: options.poolSizeMax ?? DEFAULT_POOL_SIZE_MAX,
    idleTimeoutMillis: 30_000,
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
  const root = wrap(pool);
  return {
    kind: 'postgres',
    query: (sql, params) => outage.observe(() => root.query(sql, params)),
    exec: (sql) => outage.observe(() => root.exec(sql)),
    transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return outage.observe(() =>
        retryTransaction(() =>
          withClient(pool, async (client, discard) => {
            const tx: Tx = { ...wrap(client), inTransaction: true };
            await tx.query('BEGIN');
            try {
              const result = await fn(tx);
              await tx.query('COMMIT');
              return result;
            } catch (error) {
              // On a broken connection ROLLBACK cannot be sent (and could wait on a stalled server):
              // the server rolls back when the connection goes, and withClient makes sure it goes. A
              // ROLLBACK that fails leaves the session in doubt, so it goes too; the caller still
              // learns the original failure, since nothing was committed.
              if (!isStorageUnavailable(error)) await tx.query('ROLLBACK').catch(discard);
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
          const conn = wrap(client);
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
