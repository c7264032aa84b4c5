// The PostgreSQL driver sends each parameterised statement prepared, under a name derived from its text
// (src/platform/db/postgres.ts). These tests read the server's own view of the session
// (pg_prepared_statements) and change the schema under prepared statements, as a rolling deploy's migration
// does, on a real PostgreSQL: PGlite has no named statements.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../../../src/platform/db/database.ts';
import { CONNECTION_LIFETIME_S, openPostgres } from '../../../src/platform/db/postgres.ts';
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
  it('plans again on a new connection once one has lived its lifetime, so a plan made on a nearly empty table does not scan it whole forever', async () => {
    expect(CONNECTION_LIFETIME_S).toBeGreaterThan(0);
    const created = await createPostgresDatabase();
    const short = openPostgres(created.url, { poolSizeMax: 1, connectionLifetimeS: 1 });
    try {
      await short.exec("CREATE TABLE lookups (id int PRIMARY KEY, code text NOT NULL); CREATE INDEX lookups_code ON lookups (code); INSERT INTO lookups VALUES (1, 'a'), (2, 'b'); ANALYZE lookups");
      const sql = 'SELECT id FROM lookups WHERE code = $1';
      const plan = async () => {
        // One connection: the statement, the name it has there and its plan are all read in the same session.
        for (let run = 0; run < 8; run++) expect((await short.query(sql, ['a'])).rows).toEqual([{ id: 1 }]);
        const { rows } = await short.query<{ name: string; pid: number }>('SELECT name, pg_backend_pid() AS pid FROM pg_prepared_statements WHERE statement = $1', [sql]);
        const plan = (await short.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE "${rows[0]!.name}"('a')`)).rows.map((row) => row['QUERY PLAN']).join('\n');
        return { pid: rows[0]!.pid, plan };
      };
      const tiny = await plan();
      expect(tiny.plan).toMatch(/Seq Scan on lookups/);
      // The table grows; no ANALYZE runs (this test's server may have autovacuum on or off: it does not wait for it).
      await short.exec("INSERT INTO lookups SELECT g, 'c' || g FROM generate_series(3, 50000) g");
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      const renewed = await plan();
      expect(renewed.pid).not.toBe(tiny.pid);
      expect(renewed.plan).toMatch(/Index (Only )?Scan using lookups_code/);
    } finally {
      await short.close();
      await created.drop();
    }
  });
});
