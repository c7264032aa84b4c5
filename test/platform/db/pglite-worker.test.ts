// The embedded engine in its worker thread answers as PGlite in process does: the same values (bigint,
// Date, JSON, arrays, bytes), the same errors (SQLSTATE and constraint, so faults.ts and the services read
// them), the same transactions (commit, rollback on a throw, one at a time), and StorageUnavailableError
// once closed. One run is enough: the PostgreSQL pass does not use PGlite.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../../../src/platform/db/database.ts';
import { StorageUnavailableError } from '../../../src/platform/db/faults.ts';
import { openPglite } from '../../../src/platform/db/pglite.ts';
import { onPostgres } from '../../support/database.ts';

const VALUES_SQL = `SELECT 9007199254740993::int8 AS big, '2026-01-02T03:04:05.678Z'::timestamptz AS at,
  '{"a":[1,"x",null]}'::jsonb AS doc, ARRAY[1,2]::int8[] AS bigs, ARRAY['p','q'] AS texts, '\\x0102ff'::bytea AS bytes, NULL::text AS nothing`;

describe.skipIf(onPostgres())('PGlite in a worker thread', () => {
  let inWorker: Database;
  let inProcess: Database;
  beforeAll(async () => {
    [inWorker, inProcess] = await Promise.all([openPglite(undefined, undefined, true), openPglite(undefined, undefined, false)]);
    for (const db of [inWorker, inProcess]) await db.exec('CREATE TABLE t (id int PRIMARY KEY, amount_uc bigint NOT NULL)');
  });
  afterAll(async () => {
    await Promise.all([inWorker.close(), inProcess.close()]);
  });

  it('returns the values PGlite returns in process, bigint and Date included', async () => {
    const [fromWorker, fromProcess] = await Promise.all([inWorker.query(VALUES_SQL), inProcess.query(VALUES_SQL)]);
    expect(fromWorker).toEqual(fromProcess);
    expect(fromWorker.rows[0]).toMatchObject({ big: 9007199254740993n, bigs: [1n, 2n], doc: { a: [1, 'x', null] } });
    expect(fromWorker.rows[0]!.at).toBeInstanceOf(Date);
    expect(fromWorker.rows[0]!.bytes).toBeInstanceOf(Uint8Array);
    const params = [7, 12345678901234567n, new Date('2026-05-06T07:08:09Z'), JSON.stringify({ k: [1n.toString()] }), ['a', 'b']];
    const sql = 'SELECT $1::int AS i, $2::int8 AS b, $3::timestamptz AS d, $4::jsonb AS j, $5::text[] AS arr';
    expect((await inWorker.query(sql, params)).rows).toEqual((await inProcess.query(sql, params)).rows);
  });

  it('carries an error across with its SQLSTATE and constraint', async () => {
    await inWorker.query('INSERT INTO t VALUES (1, 10)');
    const error = await inWorker.query('INSERT INTO t VALUES (1, 10)').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ code: '23505', constraint: 't_pkey', message: expect.stringContaining('duplicate key') });
    expect(error).not.toBeInstanceOf(StorageUnavailableError);
  });

  it('commits a transaction, rolls one back when its function throws, and runs them one at a time', async () => {
    await inWorker.transaction(async (tx) => {
      await tx.query('INSERT INTO t VALUES (2, 20)');
      await tx.query('UPDATE t SET amount_uc = amount_uc + 1 WHERE id = 2');
    });
    const thrown = new Error('the caller changed its mind');
    await expect(
      inWorker.transaction(async (tx) => {
        await tx.query('INSERT INTO t VALUES (3, 30)');
        throw thrown;
      }),
    ).rejects.toBe(thrown);
    await expect(inWorker.transaction((tx) => tx.query('INSERT INTO t VALUES (2, 0)'))).rejects.toMatchObject({ code: '23505' });
    // Ten transactions at once, each reading then writing: serialised on the engine's one session, none lost.
    await Promise.all(
      Array.from({ length: 10 }, () =>
        inWorker.transaction(async (tx) => {
          const { rows } = await tx.query<{ amount_uc: bigint }>('SELECT amount_uc FROM t WHERE id = 2');
          await tx.query('UPDATE t SET amount_uc = $1 WHERE id = 2', [rows[0]!.amount_uc + 1n]);
        }),
      ),
    );
    const { rows } = await inWorker.query<{ id: number; amount_uc: bigint }>('SELECT id, amount_uc FROM t ORDER BY id');
    expect(rows).toEqual([
      { id: 1, amount_uc: 10n },
      { id: 2, amount_uc: 31n },
    ]);
  });

  it('fails with StorageUnavailableError once closed', async () => {
    const db = await openPglite(undefined, undefined, true);
    await db.close();
    await expect(db.query('SELECT 1')).rejects.toBeInstanceOf(StorageUnavailableError);
    await expect(db.transaction((tx) => tx.query('SELECT 1'))).rejects.toBeInstanceOf(StorageUnavailableError);
  });
});
