// The migrator, on both databases: every pending migration applies in one transaction (all or none, so a failing
// one leaves the database as the release before ran it, not halfway), and a database migrated by a newer release
// is refused, at start and by /readyz, since an older release would write its rows in their older form.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../../src/platform/db/database.ts';
import { migrate, MigrationError, schemaState } from '../../../src/platform/db/migrate.ts';
import { openTestDatabase, testDbKind } from '../../support/database.ts';

describe(`migrations (${testDbKind()})`, () => {
  let db: Database;
  let drop: () => Promise<void>;
  let dir: string;

  beforeEach(async () => {
    ({ db, drop } = await openTestDatabase());
    dir = mkdtempSync(path.join(tmpdir(), 'acg-migrations-'));
  });
  afterEach(async () => {
    await drop();
    rmSync(dir, { recursive: true, force: true });
  });

  const write = (file: string, sql: string) => writeFileSync(path.join(dir, file), sql);
  const versions = async () => (await db.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')).rows.map((row) => row.version);
  const tables = async () =>
    (await db.query<{ table_name: string }>("SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'mig_%' ORDER BY 1")).rows.map((row) => row.table_name);

  it('applies the pending migrations all or none: one that fails leaves the earlier ones of the run unapplied, and says where the database stays', async () => {
    write('0001_first.sql', 'CREATE TABLE mig_a (amount BIGINT NOT NULL);');
    expect((await migrate(db, {}, dir)).applied.map((m) => m.name)).toEqual(['first']);
    await db.query('INSERT INTO mig_a VALUES (5), (2000000000000000000)');
    write('0002_second.sql', 'CREATE TABLE mig_b (id INT);');
    write('0003_limit.sql', 'ALTER TABLE mig_a ADD CONSTRAINT mig_a_limit CHECK (amount < 1000000000000000000);');
    write('0004_fourth.sql', 'CREATE TABLE mig_c (id INT);');

    const applied: string[] = [];
    const failure = await migrate(db, { applied: (m) => applied.push(m.name) }, dir).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(MigrationError);
    expect((failure as Error).message).toMatch(/^migration 0003_limit failed: .*mig_a_limit.*\. None of the 3 pending migrations was applied: the database stays at 0001_first, as the release before ran it\.$/);
    expect([applied, await versions(), await tables()]).toEqual([[], [1], ['mig_a']]);
    expect(await schemaState(db, dir)).toEqual({ state: 'behind' });

    // The rows mended, the same run applies whole.
    await db.query('DELETE FROM mig_a WHERE amount > 5');
    expect((await migrate(db, { applied: (m) => applied.push(m.name) }, dir)).applied.map((m) => m.name)).toEqual(['second', 'limit', 'fourth']);
    expect([applied, await versions(), await tables()]).toEqual([['second', 'limit', 'fourth'], [1, 2, 3, 4], ['mig_a', 'mig_b', 'mig_c']]);
    expect(await schemaState(db, dir)).toEqual({ state: 'current' });
  });

  it('refuses a database a newer release migrated, naming what it does not know', async () => {
    write('0001_first.sql', 'CREATE TABLE mig_a (id INT);');
    write('0002_second.sql', 'CREATE TABLE mig_b (id INT);');
    await migrate(db, {}, dir);
    // This release knows only 0001: the database is ahead of it.
    rmSync(path.join(dir, '0002_second.sql'));
    write('0003_not_here_either.sql', 'CREATE TABLE mig_c (id INT);');
    const failure = await migrate(db, {}, dir).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(MigrationError);
    expect((failure as Error).message).toMatch(/^the database was migrated by a newer release of the gateway \(it has 0002_second, which this release does not know\): this release must not write to it/);
    expect([await versions(), await tables()]).toEqual([[1, 2], ['mig_a', 'mig_b']]);
    expect(await schemaState(db, dir)).toEqual({ state: 'newer', refusal: (failure as Error).message });
  });

  it('refuses a migration changed after it was applied', async () => {
    write('0001_first.sql', 'CREATE TABLE mig_a (id INT);');
    await migrate(db, {}, dir);
    write('0001_first.sql', 'CREATE TABLE mig_a (id BIGINT);');
    await expect(migrate(db, {}, dir)).rejects.toThrow(new MigrationError('migration 0001_first was changed after it was applied; add a new migration instead'));
  });
});
