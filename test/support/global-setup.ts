// Once per run: brings dist/ up to date with the sources, so every test that spawns `bin/acg.js` runs the
// code under test compiled as users run it (bin/build.js; a no-op when dist/ already matches), tells the
// reader which databases the suite runs on and what it skips, and migrates the databases every test gateway then
// starts from: for PGlite, an embedded one dumped to a file (its initdb and migrations cost about three seconds a
// gateway; a copy loads in about 0.45 s of CPU); for PostgreSQL, a template database (the migrations cost about 0.35 s a
// gateway; CREATE DATABASE … TEMPLATE copies it in about a tenth). A test that migrates, or needs an empty
// database, opens its own.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import type { TestProject } from 'vitest/node';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openPglite } from '../../src/platform/db/pglite.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { createPostgresDatabase } from './database.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A tarball (not compressed: PGlite would decompress it at every load) of a PGlite data directory with every migration applied (test/support/database.ts); '' in the PostgreSQL project. */
    migratedPglite: string;
    /** The same data directory, closed, for spawned gateways to copy (test/support/process.ts); '' in the PostgreSQL project. */
    migratedPgliteDir: string;
    /** The name of a PostgreSQL database with every migration applied, to copy (TEMPLATE); '' in the PGlite project. */
    postgresTemplate: string;
  }
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let told = false;
let migrated: Promise<{ file: string; dataDir: string; remove(): void }> | undefined;
let template: Promise<{ name: string; remove(): Promise<void> }> | undefined;

/** Migrates an embedded database on disk and dumps its data directory, in a directory of this run's own; both are kept for the run. */
async function migratedPglite(): Promise<{ file: string; dataDir: string; remove(): void }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-test-pglite-'));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    const dataDir = path.join(dir, 'data');
    const db = await openPglite(dataDir);
    try {
      await migrate(db);
    } finally {
      await db.close();
    }
    const raw = await PGlite.create(dataDir);
    const tarball = await raw.dumpDataDir('none');
    await raw.close();
    const file = path.join(dir, 'migrated.tar');
    writeFileSync(file, Buffer.from(await tarball.arrayBuffer()));
    return { file, dataDir, remove };
  } catch (error) {
    remove();
    throw error;
  }
}

/**
 * Creates and migrates a PostgreSQL database for the test databases to copy (named like every test database, so
 * a run killed before its teardown leaves it to the same clean-up). Its pool is closed before any copy: CREATE
 * DATABASE refuses a template anyone is connected to.
 */
async function postgresTemplate(): Promise<{ name: string; remove(): Promise<void> }> {
  const created = await createPostgresDatabase();
  try {
    const db = openPostgres(created.url);
    try {
      await migrate(db);
    } finally {
      await db.close();
    }
    return { name: created.name, remove: created.drop };
  } catch (error) {
    await created.drop();
    throw error;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Each project gets the one its gateways copy (vitest.config.ts names the projects after their databases).
  if (project.name === 'postgres') {
    template ??= postgresTemplate();
    project.provide('postgresTemplate', (await template).name);
    project.provide('migratedPglite', '');
    project.provide('migratedPgliteDir', '');
  } else {
    migrated ??= migratedPglite();
    project.provide('migratedPglite', (await migrated).file);
    project.provide('migratedPgliteDir', (await migrated).dataDir);
    project.provide('postgresTemplate', '');
  }
  if (!told) {
    told = true;
    execFileSync(process.execPath, [path.join(ROOT, 'bin/build.js'), '--if-stale'], { cwd: ROOT, stdio: 'inherit' });
    process.stdout.write(
      process.env.TEST_DATABASE_URL
        ? 'test databases: PGlite and PostgreSQL (TEST_DATABASE_URL)\n'
        : 'test databases: PGlite only. NOTE: TEST_DATABASE_URL is not set, so PostgreSQL-only tests (concurrency, multi-instance) are skipped.\n',
    );
  }
  return async () => {
    (await migrated)?.remove();
    await (await template)?.remove();
  };
}
