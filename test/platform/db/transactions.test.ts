// What a transaction promises its callers, on both databases: its last statement goes with its COMMIT
// (`Tx.lastStatement`, one round trip fewer on PostgreSQL), statements sent without awaiting one another (a
// batch's independent reads, pipelined on PostgreSQL) each get their own answer, in order, and a statement whose
// answer nobody awaits (`Tx.send`) is waited for by the transaction, whose failure it is if it fails.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../../src/platform/db/database.ts';
import { listMigrations } from '../../../src/platform/db/migrate.ts';
import { openPostgres } from '../../../src/platform/db/postgres.ts';
import { createPostgresDatabase, onPostgres, openTestDatabase, testDbKind } from '../../support/database.ts';

describe(`transactions (${testDbKind()})`, () => {
  let db: Database;
  let drop: () => Promise<void>;

  beforeAll(async () => {
    if (onPostgres()) {
      // One connection: a transaction the driver left open or aborted would show in the next one.
      const created = await createPostgresDatabase();
      db = openPostgres(created.url, { poolSizeMax: 1 });
      drop = async () => {
        await db.close();
        await created.drop();
      };
    } else {
      ({ db, drop } = await openTestDatabase());
    }
    await db.exec('CREATE TABLE things (id text PRIMARY KEY, amount_uc bigint NOT NULL CHECK (amount_uc > 0))');
    // The function a statement checks itself with, as the migrations define it.
    await db.exec(listMigrations().find((m) => m.name.includes('ledger_invariant'))!.sql);
  });

  afterAll(async () => {
    await drop?.();
  });

  beforeEach(async () => {
    await db.exec('DELETE FROM things');
  });

  const ids = async () => (await db.query<{ id: string }>('SELECT id FROM things ORDER BY id')).rows.map((row) => row.id);
  const insert = 'INSERT INTO things (id, amount_uc) VALUES ($1, $2) RETURNING id';

  it('commits with its last statement and answers with that statement’s rows', async () => {
    const answered = await db.transaction(async (tx) => {
      await tx.query(insert, ['a', 1n]);
      return (await tx.lastStatement().query<{ id: string }>(insert, ['b', 2n])).rows;
    });
    expect(answered).toEqual([{ id: 'b' }]);
    expect(await ids()).toEqual(['a', 'b']);
  });

  it('rolls the whole transaction back when its last statement fails, and throws that statement’s error', async () => {
    const failed = db.transaction(async (tx) => {
      await tx.query(insert, ['a', 1n]);
      await tx.lastStatement().query(insert, ['b', -1n]);
    });
    await expect(failed).rejects.toMatchObject({ code: '23514' });
    expect(await ids()).toEqual([]);
    // The connection is clean: the next transaction commits.
    await db.transaction((tx) => tx.query(insert, ['c', 3n]));
    expect(await ids()).toEqual(['c']);
  });

  it('can be a transaction’s only statement (BEGIN, it and COMMIT together)', async () => {
    await db.transaction((tx) => tx.lastStatement().query(insert, ['a', 1n]));
    expect(await ids()).toEqual(['a']);
    await expect(db.transaction((tx) => tx.lastStatement().query(insert, ['a', 1n]))).rejects.toMatchObject({ code: '23505' });
    expect(await ids()).toEqual(['a']);
  });

  it('commits without a COMMIT of its own when the transaction never reaches a last statement', async () => {
    await db.transaction(async (tx) => {
      await tx.query(insert, ['a', 1n]);
    });
    expect(await ids()).toEqual(['a']);
  });

  it.runIf(onPostgres())('takes no statement after its last one (PostgreSQL: the transaction has committed)', async () => {
    const after = db.transaction(async (tx) => {
      await tx.lastStatement().query(insert, ['a', 1n]);
      await tx.query(insert, ['b', 2n]);
    });
    await expect(after).rejects.toThrow(/transaction has ended/);
    expect(await ids()).toEqual(['a']);
    await db.transaction((tx) => tx.query(insert, ['c', 3n]));
    expect(await ids()).toEqual(['a', 'c']);
  });

  it('answers statements sent without waiting for one another each with its own rows, in the transaction', async () => {
    await db.exec("INSERT INTO things (id, amount_uc) VALUES ('x', 7), ('y', 8)");
    const read = 'SELECT id, amount_uc FROM things WHERE id = $1 FOR UPDATE';
    const [first, second, third] = await db.transaction((tx) =>
      Promise.all([tx.query(read, ['x']), tx.query(insert, ['z', 9n]), tx.query<{ n: bigint }>('SELECT count(*) AS n FROM things WHERE id = ANY($1::text[])', [['x', 'y', 'z']])]),
    );
    expect(first.rows).toEqual([{ id: 'x', amount_uc: 7n }]);
    expect(second.rows).toEqual([{ id: 'z' }]);
    // Statements run in the order they were sent: the count sees the insert before it.
    expect(third.rows[0]!.n).toBe(3n);
  });

  it('rolls back every statement sent together when one of them fails', async () => {
    const failed = db.transaction((tx) => Promise.all([tx.query(insert, ['a', 1n]), tx.query(insert, ['b', -1n]), tx.query(insert, ['c', 3n])]));
    await expect(failed).rejects.toMatchObject({ code: '23514' });
    expect(await ids()).toEqual([]);
    await db.transaction((tx) => tx.query(insert, ['d', 4n]));
    expect(await ids()).toEqual(['d']);
  });

  it('throws the failure that aborted it, not the "transaction is aborted" of a statement sent after it whose caller heard first', async () => {
    // The failing statement's answer reaches its caller later than the statement sent after it reaches its own,
    // as a batch's reads (deeper calls) beside its claims: the 25P02 of the second won the Promise.all.
    const failed = db.transaction(async (tx) => {
      await tx.query(insert, ['a', 1n]);
      const failing = tx.query(insert, ['b', -1n]);
      // Its caller hears of it later than the next statement's caller hears of that one (here a timer later).
      const heard = (async () => {
        try {
          return await failing;
        } finally {
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      })();
      return Promise.all([heard, tx.query('SELECT id FROM things')]);
    });
    await expect(failed).rejects.toMatchObject({ code: '23514' });
    expect(await ids()).toEqual([]);
  });

  it('runs a script that opens it inside it (on PostgreSQL in BEGIN’s message), its settings the transaction’s own', async () => {
    const setting = 'SELECT current_setting($1) AS value';
    const inside = await db.transaction(async (tx) => {
      const [, read] = await Promise.all([tx.exec('SET LOCAL lock_timeout = 1234; SET LOCAL enable_seqscan = off'), tx.query<{ value: string }>(setting, ['lock_timeout'])]);
      await tx.query(insert, ['a', 1n]);
      return { lockTimeout: read.rows[0]!.value, seqscan: (await tx.query<{ value: string }>(setting, ['enable_seqscan'])).rows[0]!.value };
    });
    expect(inside).toEqual({ lockTimeout: '1234ms', seqscan: 'off' });
    expect(await ids()).toEqual(['a']);
    const after = await db.transaction(async (tx) => (await tx.query<{ value: string }>(setting, ['enable_seqscan'])).rows[0]!.value);
    expect(after).toBe('on');
  });

  it('rolls back and throws the error of a failing script that opens it, and the connection is clean after', async () => {
    const failed = db.transaction(async (tx) => {
      await Promise.all([tx.exec('SET LOCAL enable_seqscan = off; SET LOCAL no_such_setting_at_all = 1'), tx.query(insert, ['a', 1n])]);
    });
    await expect(failed).rejects.toMatchObject({ code: '42704' });
    expect(await ids()).toEqual([]);
    await db.transaction((tx) => tx.query(insert, ['b', 2n]));
    expect(await ids()).toEqual(['b']);
    expect((await db.query<{ value: string }>("SELECT current_setting('enable_seqscan') AS value")).rows[0]!.value).toBe('on');
  });

  describe('a statement sent without awaiting its answer (Tx.send)', () => {
    it('runs before the statements after it and commits with the last one', async () => {
      const seen = await db.transaction(async (tx) => {
        tx.send(insert, ['a', 1n]);
        const counted = await tx.query<{ n: bigint }>('SELECT count(*) AS n FROM things');
        await tx.lastStatement().query(insert, ['b', 2n]);
        return counted.rows[0]!.n;
      });
      expect(seen).toBe(1n);
      expect(await ids()).toEqual(['a', 'b']);
    });

    it('commits when the transaction ends without a last statement', async () => {
      await db.transaction(async (tx) => {
        tx.send(insert, ['a', 1n]);
      });
      expect(await ids()).toEqual(['a']);
    });

    it('fails its last statement with its own error, and the whole transaction rolls back', async () => {
      const failed = db.transaction(async (tx) => {
        await tx.query(insert, ['a', 1n]);
        tx.send(insert, ['b', -1n]);
        await tx.lastStatement().query(insert, ['c', 3n]);
      });
      // The sent insert's check violation, not "current transaction is aborted" of the statement after it.
      await expect(failed).rejects.toMatchObject({ code: '23514' });
      expect(await ids()).toEqual([]);
      await db.transaction((tx) => tx.query(insert, ['d', 4n]));
      expect(await ids()).toEqual(['d']);
    });

    it('fails every statement after it with its error, and the transaction when it ends with none', async () => {
      const later = db.transaction(async (tx) => {
        tx.send(insert, ['a', -1n]);
        await tx.query('SELECT 1');
      });
      await expect(later).rejects.toMatchObject({ code: '23514' });
      const alone = db.transaction(async (tx) => {
        await tx.query(insert, ['a', 1n]);
        tx.send(insert, ['a', 2n]);
      });
      await expect(alone).rejects.toMatchObject({ code: '23505' });
      expect(await ids()).toEqual([]);
    });

    it('fails the transaction even after a savepoint undid it', async () => {
      const undone = db.transaction(async (tx) => {
        await tx.query('SAVEPOINT s');
        tx.send(insert, ['a', -1n]);
        await tx.query('ROLLBACK TO SAVEPOINT s');
        await tx.lastStatement().query(insert, ['b', 2n]);
      });
      await expect(undone).rejects.toMatchObject({ code: '23514' });
      expect(await ids()).toEqual([]);
    });

    it('raises a ledger invariant in SQL that aborts the transaction', async () => {
      const checked = db.transaction(async (tx) => {
        await tx.query(insert, ['a', 1n]);
        tx.send("SELECT ledger_invariant(count(*) = 2, format('%s things, not 2', count(*))) FROM things");
        await tx.lastStatement().query(insert, ['b', 2n]);
      });
      await expect(checked).rejects.toMatchObject({ code: 'XX000', message: 'ledger invariant: 1 things, not 2' });
      expect(await ids()).toEqual([]);
    });
  });
});
