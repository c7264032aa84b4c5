// Once per run: brings dist/ up to date with the sources, so every test that spawns `bin/acg.js` runs the
// code under test compiled as users run it (bin/build.js; a no-op when dist/ already matches), tells the
// reader which databases the suite runs on and what it skips, and migrates one embedded database that every
// test gateway on PGlite then starts from (its initdb and migrations cost about three seconds a gateway; a
// copy loads in one). A test that migrates, or needs an empty database, opens its own.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import type { TestProject } from 'vitest/node';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openPglite } from '../../src/platform/db/pglite.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A gzipped tarball of a PGlite data directory with every migration applied (test/support/database.ts). */
    migratedPglite: string;
  }
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let told = false;
let migrated: Promise<{ file: string; remove(): void }> | undefined;

/** Migrates an embedded database on disk and dumps its data directory, in a directory of this run's own. */
async function migratedPglite(): Promise<{ file: string; remove(): void }> {
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
    const tarball = await raw.dumpDataDir('gzip');
    await raw.close();
    const file = path.join(dir, 'migrated.tgz');
    writeFileSync(file, Buffer.from(await tarball.arrayBuffer()));
    return { file, remove };
  } catch (error) {
    remove();
    throw error;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  migrated ??= migratedPglite();
  project.provide('migratedPglite', (await migrated).file);
  if (!told) {
    told = true;
    execFileSync(process.execPath, [path.join(ROOT, 'bin/build.js'), '--if-stale'], { cwd: ROOT, stdio: 'inherit' });
    process.stdout.write(
      process.env.TEST_DATABASE_URL
        ? 'test databases: PGlite and PostgreSQL (TEST_DATABASE_URL)\n'
        : 'test databases: PGlite only. NOTE: TEST_DATABASE_URL is not set, so PostgreSQL-only tests (concurrency, multi-instance) are skipped.\n',
    );
  }
  return async () => (await migrated)?.remove();
}
