// The PostgreSQL driver sends each parameterised statement prepared, under a name derived from its text
// (src/platform/db/postgres.ts). These tests read the server's own view of the session
// (pg_prepared_statements) and change the schema under prepared statements, as a rolling deploy's migration
// does, on a real PostgreSQL: PGlite has no named statements.
import { createServer, connect, type AddressInfo, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../../../src/platform/db/database.ts';
import { CONNECTION_LIFETIME_S, openPostgres } from '../../../src/platform/db/postgres.ts';
import { createPostgresDatabase, onPostgres } from '../../support/database.ts';


/**
 * A TCP relay in front of the test server that counts the messages each client sends, by type (the frontend
 * messages of PostgreSQL's protocol: a type byte and a length; the first, the start-up message, has no type).
 */
async function countingRelay(target: URL): Promise<{ url: string; sent: Map<string, number>; close(): Promise<void> }> {
  const sent = new Map<string, number>();
  const relay: Server = createServer((client) => {
    const server = connect(Number(target.port || 5432), target.hostname);
    server.pipe(client);
    client.on('error', () => server.destroy());
    server.on('error', () => client.destroy());
    let pending = Buffer.alloc(0);
    let started = false;
    client.on('data', (chunk: Buffer) => {
      server.write(chunk);
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        const header = started ? 5 : 4;
        if (pending.length < header) break;
        const length = (started ? pending.readInt32BE(1) : pending.readInt32BE(0)) + (started ? 1 : 0);
        if (pending.length < length) break;
        if (started) sent.set(String.fromCharCode(pending[0]!), (sent.get(String.fromCharCode(pending[0]!)) ?? 0) + 1);
        started = true;
        pending = pending.subarray(length);
      }
    });
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((relay.address() as AddressInfo).port);
  return { url: url.toString(), sent, close: () => new Promise((resolve) => relay.close(() => resolve())) };
}

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
  it('describes a statement once per connection: later runs are Bind, Execute and Sync, and their rows keep their columns and types', async () => {
    const created = await createPostgresDatabase();
    const relay = await countingRelay(new URL(created.url));
    const watched = openPostgres(relay.url, { poolSizeMax: 1 });
    try {
      await watched.exec('CREATE TABLE things (id text PRIMARY KEY, amount_uc bigint NOT NULL, note text)');
      const insert = 'INSERT INTO things (id, amount_uc, note) VALUES ($1, $2, $3)';
      const read = 'SELECT id, amount_uc, note FROM things WHERE id = ANY($1::text[]) ORDER BY id';
      const before = { describe: relay.sent.get('D') ?? 0, parse: relay.sent.get('P') ?? 0 };
      for (let run = 0; run < 5; run++) {
        await watched.query(insert, [`t${run}`, BigInt(run), run % 2 === 0 ? null : 'odd']);
        await watched.transaction(async (tx) => {
          expect((await tx.query(read, [[`t${run}`]])).rows).toEqual([{ id: `t${run}`, amount_uc: BigInt(run), note: run % 2 === 0 ? null : 'odd' }]);
        });
      }
      expect((await watched.query(read, [['t0', 't1']])).rows).toEqual([
        { id: 't0', amount_uc: 0n, note: null },
        { id: 't1', amount_uc: 1n, note: 'odd' },
      ]);
      // Two statements, eleven runs: each parsed and described once (the insert answers NoData, kept as none).
      expect((relay.sent.get('P') ?? 0) - before.parse).toBe(2);
      expect((relay.sent.get('D') ?? 0) - before.describe).toBe(2);
      expect((await watched.query(read, [['none']])).rows).toEqual([]);

      // A migration changes a column's type under the kept shape: the server refuses the old plan, every
      // statement is renamed, and the new name is described again, so the value arrives as its new type.
      await watched.exec('ALTER TABLE things ALTER COLUMN amount_uc TYPE text');
      expect((await watched.query(read, [['t3']])).rows).toEqual([{ id: 't3', amount_uc: '3', note: 'odd' }]);
      expect((await watched.query(read, [['t4']])).rows).toEqual([{ id: 't4', amount_uc: '4', note: null }]);
    } finally {
      await watched.close();
      await relay.close();
      await created.drop();
    }
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
