// One fresh database per test gateway: an in-memory PGlite, or a new PostgreSQL database created
// from TEST_DATABASE_URL and dropped afterwards. Never a mock.
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { inject } from 'vitest';
import { randomBase32 } from '../../src/platform/ids.ts';
import type { Database } from '../../src/platform/db/database.ts';
import { openPglite } from '../../src/platform/db/pglite.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';

export type TestDbKind = 'pglite' | 'postgres';

export function testDbKind(): TestDbKind {
  return process.env.ACG_TEST_DB === 'postgres' ? 'postgres' : 'pglite';
}

export const onPostgres = () => testDbKind() === 'postgres';

export interface TestDatabase {
  db: Database;
  /** Connection string of the fresh PostgreSQL database (undefined on PGlite). */
  url?: string;
  drop(): Promise<void>;
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Creates an empty PostgreSQL database and returns its URL (for tests that start processes). */
export async function createPostgresDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  if (!process.env.TEST_DATABASE_URL) throw new Error('TEST_DATABASE_URL is not set');
  const name = `acg_test_${randomBase32(8)}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(process.env.TEST_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: () => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

let migratedPglite: Blob | undefined;

/** The migrated PGlite data directory the run's global setup dumped (test/support/global-setup.ts), read once per file. */
function migratedPgliteDump(): Blob {
  migratedPglite ??= new Blob([readFileSync(inject('migratedPglite'))]);
  return migratedPglite;
}

export interface OpenTestDatabaseOptions {
  /**
   * The database may come with every migration applied (for a gateway, which migrates anyway): a PGlite one then
   * starts from the run's migrated copy, in about a third of the time of initdb and the migrations. PostgreSQL's
   * is empty either way.
   */
  migrated?: boolean;
}

export async function openTestDatabase(kind: TestDbKind = testDbKind(), options: OpenTestDatabaseOptions = {}): Promise<TestDatabase> {
  if (kind === 'pglite') {
    const db = await openPglite(undefined, undefined, { from: options.migrated ? migratedPgliteDump() : undefined });
    return { db, drop: async () => {} };
  }
  const created = await createPostgresDatabase();
  const db = openPostgres(created.url);
  return {
    db,
    url: created.url,
    drop: async () => {
      await db.close().catch(() => {});
      await created.drop();
    },
  };
}
