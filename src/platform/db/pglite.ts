import { mkdirSync } from 'node:fs';
import { PGlite, type Transaction } from '@electric-sql/pglite';
import { retryTransaction, type Database, type Queryable, type QueryResult } from './database.ts';

const INT8_OID = 20;

function wrap(target: PGlite | Transaction): Queryable {
  return {
    async query<R>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>> {
      const result = await target.query<R>(sql, params as unknown[] | undefined);
      return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length };
    },
    async exec(sql: string): Promise<void> {
      await target.exec(sql);
    },
  };
}

/**
 * Opens the embedded database. `dataDir` undefined means in memory (tests). PGlite runs inside this
 * process and serialises every statement, so it admits one gateway process per data directory.
 */
export async function openPglite(dataDir: string | undefined): Promise<Database> {
  if (dataDir) mkdirSync(dataDir, { recursive: true });
  const db = await PGlite.create(dataDir, { parsers: { [INT8_OID]: (value: string) => BigInt(value) } });
  const root = wrap(db);
  return {
    kind: 'pglite',
    query: root.query,
    exec: root.exec,
    transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      return retryTransaction(() => db.transaction((tx) => fn(wrap(tx))));
    },
    async withAdvisoryLock<T>(_lockKey: number, fn: (conn: Queryable) => Promise<T>): Promise<T> {
      // One process owns a PGlite data directory, so there is no other session to exclude.
      return fn(root);
    },
    async close() {
      await db.close();
    },
  };
}
