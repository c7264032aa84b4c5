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

/**
 * Creates a PostgreSQL database and returns its URL (for tests that start processes): empty, or a copy of the
 * run's migrated template (test/support/global-setup.ts) when `migrated`.
 */
export async function createPostgresDatabase(options: OpenTestDatabaseOptions = {}): Promise<{ name: string; url: string; drop(): Promise<void> }> {
  if (!process.env.TEST_DATABASE_URL) throw new Error('TEST_DATABASE_URL is not set');
  const name = `acg_test_${randomBase32(8)}`;
  await admin((c) => c.query(options.migrated ? `CREATE DATABASE ${name} TEMPLATE ${postgresTemplate()}` : `CREATE DATABASE ${name}`));
  const url = new URL(process.env.TEST_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: () => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

/**
 * A tarball held in memory whose bytes PGlite takes at once. PGlite reads a dump with `arrayBuffer()`, which Node's
 * own Blob answers chunk by chunk (about 0.15 s of CPU for this 43 MB tarball); a gzipped one it then decompresses
 * in JavaScript (0.5 s more). Every call answers the same bytes, not a copy (a copy cost 0.15 s more): PGlite only
 * reads them, and its in-memory file system copies each file it writes from them, so no database writes into them
 * (test/support/database.test.ts).
 */
class TarInMemory extends Blob {
  readonly #bytes: Uint8Array<ArrayBuffer>;

  constructor(bytes: Uint8Array<ArrayBuffer>) {
    super([bytes], { type: 'application/x-tar' });
    this.#bytes = bytes;
  }

  override async arrayBuffer(): Promise<ArrayBuffer> {
    return this.#bytes.buffer;
  }
}

let migratedPglite: Blob | undefined;

/** The migrated PGlite data directory the run's global setup dumped (test/support/global-setup.ts), read once per worker. */
export function migratedPgliteDump(): Blob {
  const file = inject('migratedPglite');
  if (!file) throw new Error('the global setup made a migrated PGlite copy for the pglite project only');
  // Copied once into a buffer of exactly its bytes (a Buffer may be a view into a larger one): arrayBuffer() answers it whole.
  return (migratedPglite ??= new TarInMemory(new Uint8Array(readFileSync(file))));
}

/** The run's migrated PostgreSQL template database (test/support/global-setup.ts). */
function postgresTemplate(): string {
  const name = inject('postgresTemplate');
  if (!name) throw new Error('the global setup made a PostgreSQL template for the postgres project only');
  return name;
}

export interface OpenTestDatabaseOptions {
  /**
   * The database may come with every migration applied (for a gateway, which migrates anyway): a PGlite one then
   * starts from the run's migrated copy, in about a third of the time of initdb and the migrations, and a
   * PostgreSQL one is a copy of the run's migrated template, in about a tenth of the time of the migrations.
   */
  migrated?: boolean;
}

export async function openTestDatabase(kind: TestDbKind = testDbKind(), options: OpenTestDatabaseOptions = {}): Promise<TestDatabase> {
  if (kind === 'pglite') {
    // A test's database is small, and PGlite's pages are in memory anyway: a 4 MB buffer cache, which PGlite clears at
    // start, opens it 0.55 s sooner than the default 128 MB (0.15 s sooner than 16 MB).
    const db = await openPglite(undefined, undefined, { from: options.migrated ? migratedPgliteDump() : undefined, sharedBuffersMb: 4 });
    return { db, drop: async () => {} };
  }
  const created = await createPostgresDatabase(options);
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
