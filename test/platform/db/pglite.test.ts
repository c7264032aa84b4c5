// The embedded database with its statements named answers as PGlite's own query() does: the same values
// (bigint, Date, JSON, arrays, bytes), the same errors (SQLSTATE and constraint, so faults.ts and the services
// read them), the same transactions (commit, rollback on a throw, one at a time, plain statements waiting for
// them); its names survive a schema change; StorageUnavailableError once closed; one process per data
// directory; a database in memory started from another's dump. One run is enough: the PostgreSQL pass does not
// use PGlite.
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseInUseError, type Database } from '../../../src/platform/db/database.ts';
import { StorageUnavailableError } from '../../../src/platform/db/faults.ts';
import { openPglite } from '../../../src/platform/db/pglite.ts';
import { NamedStatements, PLAN_LIFETIME_MS } from '../../../src/platform/db/pglite-statements.ts';
import { onPostgres } from '../../support/database.ts';

const VALUES_SQL = `SELECT 9007199254740993::int8 AS big, '2026-01-02T03:04:05.678Z'::timestamptz AS at,
  '{"a":[1,"x",null]}'::jsonb AS doc, ARRAY[1,2]::int8[] AS bigs, ARRAY['p','q'] AS texts, '\\x0102ff'::bytea AS bytes, NULL::text AS nothing`;

describe.skipIf(onPostgres())('the embedded database', () => {
  describe('with its statements named', () => {
    let db: Database;
    beforeAll(async () => {
      db = await openPglite(undefined);
      await db.exec('CREATE TABLE t (id int PRIMARY KEY, amount_uc bigint NOT NULL)');
    });
    afterAll(() => db.close());

    it('returns values as PGlite parses them, bigint and Date included, with and without parameters', async () => {
      const { rows } = await db.query(VALUES_SQL);
      expect(rows[0]).toMatchObject({ big: 9007199254740993n, bigs: [1n, 2n], texts: ['p', 'q'], doc: { a: [1, 'x', null] }, nothing: null });
      expect(rows[0]!.at).toEqual(new Date('2026-01-02T03:04:05.678Z'));
      expect(rows[0]!.bytes).toEqual(new Uint8Array([1, 2, 255]));
      const params = [7, 12345678901234567n, new Date('2026-05-06T07:08:09Z'), JSON.stringify({ k: ['1'] }), ['a', 'b'], null];
      const sql = 'SELECT $1::int AS i, $2::int8 AS b, $3::timestamptz AS d, $4::jsonb AS j, $5::text[] AS arr, $6::text AS none';
      for (let run = 0; run < 2; run++) {
        expect((await db.query(sql, params)).rows).toEqual([{ i: 7, b: 12345678901234567n, d: new Date('2026-05-06T07:08:09Z'), j: { k: ['1'] }, arr: ['a', 'b'], none: null }]);
      }
    });

    it('names each parameterised statement once per session, and runs a statement without parameters unnamed', async () => {
      for (let run = 0; run < 3; run++) await db.query('SELECT $1::int + 1 AS n', [run]);
      await db.query('SELECT 2 AS unnamed');
      const { rows } = await db.query<{ name: string; statement: string }>("SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE 'SELECT $1::int + 1%'");
      expect(rows).toEqual([{ name: expect.stringMatching(/^acg_\d+$/), statement: 'SELECT $1::int + 1 AS n' }]);
    });

    it('counts the rows a write touched', async () => {
      await db.query('INSERT INTO t SELECT g, 0 FROM generate_series(100, 104) g');
      expect((await db.query('UPDATE t SET amount_uc = amount_uc + $1 WHERE id >= $2', [1n, 100])).rowCount).toBe(5);
      expect((await db.query('DELETE FROM t WHERE id >= $1', [100])).rowCount).toBe(5);
    });

    it('throws an error with its SQLSTATE and constraint, and goes on answering', async () => {
      await db.query('INSERT INTO t VALUES ($1, $2)', [1, 10n]);
      const duplicate = await db.query('INSERT INTO t VALUES ($1, $2)', [1, 10n]).catch((e: unknown) => e);
      expect(duplicate).toBeInstanceOf(Error);
      expect(duplicate).toMatchObject({ code: '23505', constraint: 't_pkey', message: expect.stringContaining('duplicate key') });
      expect(duplicate).not.toBeInstanceOf(StorageUnavailableError);
      await expect(db.query('SELECT * FROM nowhere WHERE id = $1', [1])).rejects.toMatchObject({ code: '42P01' });
      expect((await db.query<{ n: bigint }>('SELECT count(*) AS n FROM t WHERE id = $1', [1])).rows).toEqual([{ n: 1n }]);
    });

    it('commits a transaction, and rolls one back when its function throws or a statement fails', async () => {
      await db.transaction(async (tx) => {
        await tx.query('INSERT INTO t VALUES ($1, $2)', [2, 20n]);
        await tx.query('UPDATE t SET amount_uc = amount_uc + 1 WHERE id = $1', [2]);
      });
      const thrown = new Error('the caller changed its mind');
      await expect(
        db.transaction(async (tx) => {
          await tx.query('INSERT INTO t VALUES ($1, $2)', [3, 30n]);
          throw thrown;
        }),
      ).rejects.toBe(thrown);
      await expect(db.transaction((tx) => tx.query('INSERT INTO t VALUES ($1, $2)', [2, 0n]))).rejects.toMatchObject({ code: '23505' });
      // A transaction that ran nothing commits nothing, and answers.
      await expect(db.transaction(async () => 'nothing')).resolves.toBe('nothing');
      expect((await db.query('SELECT id, amount_uc FROM t ORDER BY id')).rows).toEqual([
        { id: 1, amount_uc: 10n },
        { id: 2, amount_uc: 21n },
      ]);
    });

    it('runs concurrent transactions one at a time and plain statements between them, losing nothing', async () => {
      await db.query('INSERT INTO t VALUES ($1, 0)', [50]);
      const increments = Array.from({ length: 40 }, (_, i) =>
        db.transaction(async (tx) => {
          const { rows } = await tx.query<{ amount_uc: bigint }>('SELECT amount_uc FROM t WHERE id = $1', [50]);
          await tx.query('UPDATE t SET amount_uc = $2 WHERE id = $1', [50, rows[0]!.amount_uc + 1n]);
          return i;
        }),
      );
      const reads = Array.from({ length: 40 }, () => db.query<{ amount_uc: bigint }>('SELECT amount_uc FROM t WHERE id = $1', [50]));
      expect(await Promise.all(increments)).toEqual(Array.from({ length: 40 }, (_, i) => i));
      // Each read saw a committed value: never one a transaction had written and not yet committed.
      for (const { rows } of await Promise.all(reads)) expect(rows[0]!.amount_uc).toBeLessThanOrEqual(40n);
      expect((await db.query('SELECT amount_uc FROM t WHERE id = $1', [50])).rows).toEqual([{ amount_uc: 40n }]);
    });

    it('prepares a statement again when a schema change altered its result columns', async () => {
      await db.exec('CREATE TABLE shifting (id int PRIMARY KEY, a text)');
      await db.query('INSERT INTO shifting VALUES ($1, $2)', [1, 'x']);
      expect((await db.query('SELECT * FROM shifting WHERE id = $1', [1])).rows).toEqual([{ id: 1, a: 'x' }]);
      await db.exec("ALTER TABLE shifting ADD COLUMN b text NOT NULL DEFAULT 'y'");
      // Inside a transaction the statement failed it: the transaction's retry runs it again, prepared anew.
      expect(await db.transaction((tx) => tx.query('SELECT * FROM shifting WHERE id = $1', [1])).then((r) => r.rows)).toEqual([{ id: 1, a: 'x', b: 'y' }]);
      await db.exec('ALTER TABLE shifting DROP COLUMN a');
      // Outside one, the driver runs it again at once.
      expect((await db.query('SELECT * FROM shifting WHERE id = $1', [1])).rows).toEqual([{ id: 1, b: 'y' }]);
    });

    it('fails with StorageUnavailableError once closed', async () => {
      const closing = await openPglite(undefined);
      await closing.close();
      await expect(closing.query('SELECT 1')).rejects.toBeInstanceOf(StorageUnavailableError);
      await expect(closing.query('SELECT $1::int', [1])).rejects.toBeInstanceOf(StorageUnavailableError);
      await expect(closing.transaction((tx) => tx.query('SELECT 1'))).rejects.toBeInstanceOf(StorageUnavailableError);
    });
  });

  it("keeps its data directory to its owner (0700), a new one and one made more open before (found from outside: the ledger and the dev signing key readable and writable by every local user)", async () => {
    const parent = mkdtempSync(path.join(tmpdir(), 'acg-pglite-mode-'));
    try {
      const fresh = path.join(parent, 'data', 'pglite');
      const made = await openPglite(fresh);
      await made.close();
      expect(statSync(fresh).mode & 0o777).toBe(0o700);
      chmodSync(fresh, 0o777);
      const reopened = await openPglite(fresh);
      await reopened.close();
      expect(statSync(fresh).mode & 0o777).toBe(0o700);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it('holds its data directory against a second opener until closed, and keeps what it committed', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'acg-pglite-'));
    try {
      const first = await openPglite(dir);
      expect(readFileSync(path.join(dir, 'acg.lock'), 'utf8')).toMatch(new RegExp(`^${process.pid}( \\d+)?$`));
      await first.exec('CREATE TABLE kept (id int PRIMARY KEY)');
      await first.transaction((tx) => tx.query('INSERT INTO kept VALUES ($1)', [7]));
      // The lock names this process: a second open here is refused only by another live process, so fake one.
      const other = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 10000)']);
      try {
        writeFileSync(path.join(dir, 'acg.lock'), String(other.pid));
        await expect(openPglite(dir)).rejects.toBeInstanceOf(DatabaseInUseError);
        if (existsSync(`/proc/${other.pid}/stat`)) {
          // With the start time the lock records, when it is that process's.
          const stat = readFileSync(`/proc/${other.pid}/stat`, 'utf8');
          writeFileSync(path.join(dir, 'acg.lock'), `${other.pid} ${stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]}`);
          await expect(openPglite(dir)).rejects.toBeInstanceOf(DatabaseInUseError);
        }
        writeFileSync(path.join(dir, 'acg.lock'), String(process.pid));
      } finally {
        other.kill();
      }
      await first.close();
      const second = await openPglite(dir);
      expect((await second.query('SELECT id FROM kept')).rows).toEqual([{ id: 7 }]);
      await second.close();
      // A lock left by a process that died, whose pid now names another (a live process that started at another
      // time): taken over (found from outside: it refused every start, naming an unrelated process).
      if (existsSync('/proc/self/stat')) {
        const recycled = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 10000)']);
        // A lock of the format before start times (its pid alone), naming a live program that is not Node.
        const unrelated = spawn('sleep', ['10']);
        const exporter = spawn('sleep', ['10'], { argv0: '/opt/node-exporter/bin/node-exporter' });
        try {
          writeFileSync(path.join(dir, 'acg.lock'), `${recycled.pid} 1`);
          const third = await openPglite(dir);
          expect((await third.query('SELECT id FROM kept')).rows).toEqual([{ id: 7 }]);
          await third.close();
          writeFileSync(path.join(dir, 'acg.lock'), String(unrelated.pid));
          const fourth = await openPglite(dir);
          expect((await fourth.query('SELECT id FROM kept')).rows).toEqual([{ id: 7 }]);
          await fourth.close();
          // Nor one whose name only contains "node", as its command line shows it (found from outside: node-exporter).
          writeFileSync(path.join(dir, 'acg.lock'), String(exporter.pid));
          const fifth = await openPglite(dir);
          expect((await fifth.query('SELECT id FROM kept')).rows).toEqual([{ id: 7 }]);
          await fifth.close();
        } finally {
          recycled.kill();
          unrelated.kill();
          exporter.kill();
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('lets exactly one of several starts at once take over a lock left by a dead process (found from outside: two starts that read the stale lock both removed it, and both opened the directory)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'acg-pglite-race-'));
    const module = pathToFileURL(path.resolve('dist/platform/db/pglite.js')).href;
    // Each contender says it is ready, is told an instant, waits for it, takes the lock once and holds it a while.
    const contender = `
      const { lockDataDir } = await import(${JSON.stringify(module)});
      process.stdout.write('ready ');
      process.stdin.once('data', (chunk) => {
        const at = Number(String(chunk));
        while (Date.now() < at) {}
        let outcome;
        try { lockDataDir(${JSON.stringify(dir)}); outcome = 'locked'; } catch (error) { outcome = error.name; }
        process.stdout.write(outcome);
        setTimeout(() => process.exit(0), 300);
      });`;
    try {
      const dead = spawn(process.execPath, ['-e', '']);
      await new Promise((resolve) => dead.once('exit', resolve));
      for (let trial = 0; trial < 10; trial++) {
        writeFileSync(path.join(dir, 'acg.lock'), String(dead.pid));
        const contenders = Array.from({ length: 4 }, () => {
          const child = spawn(process.execPath, ['--input-type=module', '-e', contender]);
          let out = '';
          const ready = new Promise<void>((resolve) => child.stdout.on('data', (chunk: Buffer) => ((out += chunk.toString()), out.startsWith('ready') && resolve())));
          const done = new Promise<string>((resolve) => child.once('exit', () => resolve(out.replace(/^ready /, ''))));
          return { child, ready, done };
        });
        await Promise.all(contenders.map((one) => one.ready));
        const at = String(Date.now() + 30);
        for (const one of contenders) one.child.stdin.end(at);
        const outcomes = await Promise.all(contenders.map((one) => one.done));
        expect(outcomes.sort(), `trial ${trial}`).toEqual(['DatabaseInUseError', 'DatabaseInUseError', 'DatabaseInUseError', 'locked']);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('starts a database in memory from a dump of another, with what that one held, and refuses a dump for one on disk', async () => {
    const source = await PGlite.create();
    await source.exec('CREATE TABLE copied (id int PRIMARY KEY, amount_uc bigint NOT NULL); INSERT INTO copied VALUES (1, 9007199254740993)');
    const dump = await source.dumpDataDir('gzip');
    await source.close();
    const copy = await openPglite(undefined, undefined, { from: dump, sharedBuffersMb: 16 });
    try {
      expect((await copy.query('SELECT * FROM copied')).rows).toEqual([{ id: 1, amount_uc: 9007199254740993n }]);
      // The test databases' smaller buffer cache (test/support/database.ts) is the one asked for.
      expect((await copy.query('SHOW shared_buffers')).rows).toEqual([{ shared_buffers: '16MB' }]);
      await copy.transaction((tx) => tx.query('INSERT INTO copied VALUES ($1, $2)', [2, 5n]));
      expect((await copy.query('SELECT count(*)::int AS n FROM copied')).rows).toEqual([{ n: 2 }]);
    } finally {
      await copy.close();
    }
    const dir = mkdtempSync(path.join(tmpdir(), 'acg-pglite-'));
    try {
      await expect(openPglite(dir, undefined, { from: dump })).rejects.toThrow(/cannot start from a dump/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('renews a plan once it has lived PLAN_LIFETIME_MS, so one made on a nearly empty table does not scan it whole forever', async () => {
    const engine = await PGlite.create();
    try {
      let nowMs = 0;
      const named = new NamedStatements(engine, () => nowMs);
      await engine.exec('CREATE TABLE lookups (id int PRIMARY KEY, code text NOT NULL); CREATE INDEX lookups_code ON lookups (code)');
      await engine.exec("INSERT INTO lookups VALUES (1, 'a'), (2, 'b'); ANALYZE lookups");
      const sql = 'SELECT id FROM lookups WHERE code = $1';
      // Planned (custom, then generic) while the table has one page: a sequential scan is the cheapest.
      for (let run = 0; run < 8; run++) expect((await named.query(engine, sql, ['a'])).rows).toEqual([{ id: 1 }]);
      const plan = async () => {
        const [{ name }] = (await engine.query<{ name: string }>('SELECT name FROM pg_prepared_statements WHERE statement = $1', [sql])).rows as [{ name: string }];
        return { name, plan: (await engine.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE ${name}('a')`)).rows.map((row) => row['QUERY PLAN']).join('\n') };
      };
      const tiny = await plan();
      expect(tiny.plan).toMatch(/Seq Scan on lookups/);
      await engine.exec("INSERT INTO lookups SELECT g, 'c' || g FROM generate_series(3, 50000) g");
      nowMs += PLAN_LIFETIME_MS - 1;
      await named.query(engine, sql, ['a']);
      expect(await plan()).toEqual(tiny); // still the plan made on the tiny table: the engine has no autovacuum to renew it
      nowMs += 1;
      for (let run = 0; run < 8; run++) expect((await named.query(engine, sql, ['a'])).rows).toEqual([{ id: 1 }]);
      const renewed = await plan();
      expect(renewed.name).not.toBe(tiny.name);
      expect(renewed.plan).toMatch(/Index (Only )?Scan using lookups_code/);
      // The one it replaced was closed: one prepared statement per text.
      expect((await engine.query('SELECT name FROM pg_prepared_statements WHERE statement = $1', [sql])).rows).toHaveLength(1);
    } finally {
      await engine.close();
    }
  });
});
