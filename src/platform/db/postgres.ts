import pg from 'pg';
import { retryTransaction, type Database, type Queryable, type QueryResult, type Tx } from './database.ts';

const INT8_OID = 20;

function parseTypes(oid: number, format: 'text' | 'binary') {
  if (oid === INT8_OID) return (value: string) => BigInt(value);
  return pg.types.getTypeParser(oid, format);
}

function wrap(client: pg.Pool | pg.PoolClient): Queryable {
  return {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      const result = await client.query(sql, params as unknown[] | undefined);
      return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
    },
    async exec(sql: string): Promise<void> {
      await client.query(sql);
    },
  };
}

export interface PostgresOptions {
  poolSizeMax?: number;
}

export function openPostgres(connectionString: string, options: PostgresOptions = {}): Database {
  const pool = new pg.Pool({
    connectionString,
    max: options.poolSizeMax ?? 20,
    types: { getTypeParser: parseTypes } as pg.CustomTypesConfig,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
  });
  // An idle client that loses its server emits 'error' on the pool; without a listener it would crash
  // the process. The next checkout simply opens a new connection.
  pool.on('error', () => {});
  const root = wrap(pool);
  return {
    kind: 'postgres',
    query: root.query,
    exec: root.exec,
    transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
      return retryTransaction(async () => {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          const result = await fn({ ...wrap(client), inTransaction: true });
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => {});
          throw error;
        } finally {
          client.release();
        }
      });
    },
    async withAdvisoryLock<T>(lockKey: number, fn: (conn: Queryable) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      try {
        await client.query('SELECT pg_advisory_lock($1)', [lockKey]);
        try {
          return await fn(wrap(client));
        } finally {
          await client.query('SELECT pg_advisory_unlock($1)', [lockKey]);
        }
      } finally {
        client.release();
      }
    },
    async close() {
      await pool.end();
    },
  };
}
