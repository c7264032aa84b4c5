import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { listMigrations } from '../../src/platform/db/migrate.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { spawnGateway, type GatewayProcess } from '../support/process.ts';
import { waitFor } from '../support/wait.ts';

describe.runIf(onPostgres())('start-up on PostgreSQL', () => {
  it('two instances started at the same moment on one empty database both come up and migrate once', async () => {
    const database = await createPostgresDatabase();
    try {
      const [a, b] = await Promise.all([
        spawnGateway({ DATABASE_URL: database.url }),
        spawnGateway({ DATABASE_URL: database.url }),
      ]);
      try {
        for (const instance of [a, b]) expect((await fetch(`${instance.url}/readyz`)).status).toBe(200);
        // One of them made the new database: one line for every migration (each at debug), none from the other.
        const made = [...a.logs, ...b.logs].filter((l) => String(l.msg).startsWith('new database: '));
        expect(made).toHaveLength(1);
        expect(made[0]).toMatchObject({ applied: listMigrations().length, msg: `new database: ${listMigrations().length} migrations applied (0001_foundation … ${made[0]!.last})` });
        expect([...a.logs, ...b.logs].filter((l) => l.msg === 'migration applied')).toHaveLength(0);
        const client = new pg.Client({ connectionString: database.url });
        await client.connect();
        const { rows } = await client.query('SELECT version FROM schema_migrations ORDER BY version');
        await client.end();
        expect(rows.map((r) => r.version)).toEqual(listMigrations().map((m) => m.version));
      } finally {
        await Promise.all([a.kill(), b.kill()]);
      }
    } finally {
      await database.drop();
    }
  }, 90_000);

  it('a running instance stops (exit 2, one line) once a newer release migrated its database, and neither serve nor migrate starts on it', async () => {
    await withWatchedGateway(async ({ database, client, stderr, exited }) => {
      await client.connect();
      await client.query(`INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'from_a_newer_release', 'x')`);
      // The watch looks every 5 s; it stops the instance gracefully.
      expect(await Promise.race([exited, new Promise((resolve) => setTimeout(() => resolve('still running'), 20_000))])).toBe(2);
      expect(stderr.join('')).toMatch(/^stopping: the database was migrated by a newer release of the gateway \(it has 9999_from_a_newer_release, which this release does not know\)/m);

      for (const command of ['migrate', 'serve']) {
        const refused = await acg({ DATABASE_URL: database.url, PORT: '0' }, command);
        expect(refused.code, command).toBe(2);
        expect(refused.stderr, command).toMatch(/the database was migrated by a newer release of the gateway \(it has 9999_from_a_newer_release/);
        expect(refused.stderr, command).not.toMatch(/\n\s+at /);
      }
    });
  }, 90_000);

  it('a request whose statement a newer release broke answers 503 and the instance stops at once, not 500 until its next look (found from outside: 9 and 20 answers 500 during an upgrade)', async () => {
    await withWatchedGateway(async ({ client, running, stderr, exited }) => {
      await waitFor(() => running.logs.some((line) => String(line.msg).startsWith('gateway ready')), { what: 'the gateway to be ready' });
      await client.connect();
      // A newer release's migration: a column this release does not fill, in a table a registration writes.
      await client.query('BEGIN');
      await client.query('ALTER TABLE oauth_clients ADD COLUMN from_a_newer_release int NOT NULL DEFAULT 0');
      await client.query('ALTER TABLE oauth_clients ALTER COLUMN from_a_newer_release DROP DEFAULT');
      await client.query(`INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'from_a_newer_release', 'x')`);
      await client.query('COMMIT');
      const registered = await fetch(`${running.url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ redirect_uris: ['https://app.example/callback'] }),
    });
    expect(registered.status).toBe(503);
    expect(registered.headers.get('retry-after')).toBe('1');
    expect(await registered.json()).toEqual({ error: 'temporarily_unavailable', error_description: expect.stringContaining('a newer release of the gateway migrated the database') });
    expect(await exited).toBe(2);
    expect(stderr.join('')).toMatch(/^stopping: the database was migrated by a newer release of the gateway/m);
    });
  }, 90_000);

  it("a database emptied under a running instance (replaced, or restored without its schema) answers 503 naming acg migrate, and /readyz says it holds no gateway schema (found from outside: 500, and \"does not answer\")", async () => {
    await withWatchedGateway(async ({ client, running }) => {
      await waitFor(() => running.logs.some((line) => String(line.msg).startsWith('gateway ready')), { what: 'the gateway to be ready' });
      await client.connect();
      await client.query('DROP SCHEMA public CASCADE');
      await client.query('CREATE SCHEMA public');
      const registered = await fetch(`${running.url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ redirect_uris: ['https://app.example/callback'] }),
      });
      expect(registered.status).toBe(503);
      expect(await registered.json()).toEqual({ error: 'temporarily_unavailable', error_description: "the database lacks the gateway's tables (replaced or restored without its schema?): run `acg migrate`" });
      const ready = await fetch(`${running.url}/readyz`);
      expect([ready.status, ((await ready.json()) as { detail: string }).detail]).toEqual([503, 'the database holds no gateway schema; run `acg migrate`']);
      expect(running.child.exitCode).toBeNull();
    });
  }, 90_000);

  it('acg migrate says in one line, exit 2, when the database fails during the migrations (a lock wait given up), and nothing is applied', async () => {
    const database = await createPostgresDatabase();
    const holder = new pg.Client({ connectionString: database.url });
    try {
      await holder.connect();
      await holder.query('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())');
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE');
      // The migrations' own session waits for locks without a limit (another instance's migrations are not a stalled
      // database); a lock_timeout of the migration's own (a common practice, given here to every session through
      // libpq's PGOPTIONS, which node-postgres reads) gives the wait up.
      const failed = await acg({ DATABASE_URL: database.url, PGOPTIONS: '-c lock_timeout=200' }, 'migrate');
      expect(failed.code).toBe(2);
      expect(failed.stderr).toMatch(/^connecting to PostgreSQL at [^\n]+…\ncannot migrate: the database failed during the migrations \(.+\); none was applied, run it again\n$/);
      await holder.query('ROLLBACK');
      expect((await holder.query('SELECT count(*)::int AS n FROM schema_migrations')).rows[0].n).toBe(0);
      const applied = await acg({ DATABASE_URL: database.url }, 'migrate');
      expect(applied.code, applied.stderr).toBe(0);
      expect(applied.stdout).toContain(`${listMigrations().length} migration(s) applied, 0 already present (PostgreSQL)`);
    } finally {
      await holder.end().catch(() => {});
      await database.drop();
    }
  }, 90_000);
});

const ACG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/acg.js');

/**
 * Runs `test` with a gateway process on a new database, what it writes to stderr, its exit code once it exits, and a
 * client of the database; the gateway is killed (if a failed test left it running) and the database dropped after.
 */
async function withWatchedGateway(
  test: (g: { database: { url: string }; client: pg.Client; running: GatewayProcess; stderr: string[]; exited: Promise<number | null> }) => Promise<void>,
): Promise<void> {
  const database = await createPostgresDatabase();
  const client = new pg.Client({ connectionString: database.url });
  let running: GatewayProcess | undefined;
  try {
    running = await spawnGateway({ DATABASE_URL: database.url });
    const stderr: string[] = [];
    running.child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    const exited = new Promise<number | null>((resolve) => running!.child.once('exit', resolve));
    await test({ database, client, running, stderr, exited });
  } finally {
    await running?.kill('SIGKILL');
    await client.end().catch(() => {});
    await database.drop();
  }
}

async function acg(env: Record<string, string>, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [ACG, ...args], { env: { ...process.env, ACG_PRECOMPILE_SCHEMAS: '0', ...env }, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}
