// The PostgreSQL driver sends each parameterised statement prepared, under a name derived from its text
// (src/platform/db/postgres.ts). These tests read the server's own view of the session
// (pg_prepared_statements) and change the schema under prepared statements, as a rolling deploy's migration
// does, on a real PostgreSQL: PGlite has no named statements.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../../../src/platform/db/database.ts';
import { openPostgres } from '../../../src/platform/db/postgres.ts';
import { createPostgresDatabase, onPostgres } from '../../support/database.ts';

describe.runIf(onPostgres())('prepared statements (PostgreSQL)', () => {
  let db: Database;
  let drop: () => Promise<void>;

  beforeAll(async () => {
    const created = await createPostgresDatabase();
    drop = created.drop;
    // One connection: every statement below runs in the same session, so what it prepared is visible.
    db = openPostgres(created.url, { poolSizeMax: 1 });
    await db.exec('CREATE TABLE things (id text PRIMARY KEY, amount_uc bigint NOT NULL)');
  });

  afterAll(async () => {
    await db?.close();
    await drop?.();
  });

  const prepared = async () =>
    (await db.query<{ statement: string }>(`SELECT statement FROM pg_prepared_statements WHERE name LIKE 'acg%' ORDER BY prepare_time`)).rows.map((row) => row.statement);

  it('prepares a parameterised statement once per connection and reuses it', async () => {
    const insert = 'INSERT INTO things (id, amount_uc) VALUES ($1, $2)';
    await db.query(insert, ['a', 1n]);
    await db.query(insert, ['b', 2n]);
    await db.transaction(async (tx) => {
      await tx.query(insert, ['c', 3n]);
    });
    const statements = await prepared();
    expect(statements.filter((text) => text === insert)).toHaveLength(1);
    expect((await db.query<{ total: bigint }>('SELECT sum(amount_uc)::bigint AS total FROM things WHERE id = ANY($1::text[])', [['a', 'b', 'c']])).rows[0]!.total).toBe(6n);
  });

  it('leaves a statement without parameters unnamed (BEGIN, COMMIT, scripts)', async () => {
    await db.query('SELECT 1 AS one');
    expect(await prepared()).not.toContain('SELECT 1 AS one');
  });

  it('answers correctly after a migration changed the columns a prepared statement returns, outside and inside a transaction', async () => {
    const read = 'SELECT * FROM things WHERE id = $1';
    expect((await db.query(read, ['a'])).rows[0]).toEqual({ id: 'a', amount_uc: 1n });
    // What another instance's migration does while this one runs.
    await db.exec("ALTER TABLE things ADD COLUMN note text NOT NULL DEFAULT 'n'");
    expect((await db.query(read, ['a'])).rows[0]).toEqual({ id: 'a', amount_uc: 1n, note: 'n' });
    await db.exec('ALTER TABLE things DROP COLUMN note');
    const inside = await db.transaction(async (tx) => {
      await tx.query('INSERT INTO things (id, amount_uc) VALUES ($1, $2)', ['d', 4n]);
      return (await tx.query(read, ['d'])).rows[0];
    });
    expect(inside).toEqual({ id: 'd', amount_uc: 4n });
    // The retried transaction wrote its row once.
    expect((await db.query<{ n: bigint }>('SELECT count(*) AS n FROM things WHERE id = $1', ['d'])).rows[0]!.n).toBe(1n);
  });
});
