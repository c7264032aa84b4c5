// Numbered SQL migrations (`migrations/NNNN_name.sql`), the same files for PostgreSQL and PGlite.
// Applied under an advisory lock so that instances starting together migrate exactly once.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Database } from './database.ts';
import { isStorageUnavailable } from './faults.ts';

export const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../migrations');
/** Arbitrary constant shared by every instance: "acg migrate" as a 31-bit number. */
const MIGRATION_LOCK_KEY = 0x61636701;

export interface Migration {
  version: number;
  name: string;
  sql: string;
  checksum: string;
}

export function listMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((file) => /^\d{4}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => {
      const sql = readFileSync(path.join(dir, file), 'utf8');
      return {
        version: Number(file.slice(0, 4)),
        name: file.slice(5, -4),
        sql,
        checksum: createHash('sha256').update(sql).digest('hex'),
      };
    });
}

export interface MigrationReport {
  applied: Migration[];
  alreadyApplied: number;
}

/**
 * A migration the database cannot take, or a database this release must not run on: said in one line, and start-up
 * stops (exit 2) rather than retrying, since no retry cures it.
 */
export class MigrationError extends Error {}

/** The database's applied migrations this release does not know: written by a newer release. */
function newerThanThisRelease(applied: ReadonlyArray<{ version: number; name: string }>, known: readonly Migration[]): string[] {
  const versions = new Set(known.map((m) => m.version));
  return applied.filter((row) => !versions.has(row.version)).map((row) => `${String(row.version).padStart(4, '0')}_${row.name}`);
}

function newerSchemaRefusal(unknown: readonly string[]): string {
  return (
    `the database was migrated by a newer release of the gateway (it has ${unknown.join(', ')}, which this release does not know): ` +
    'this release must not write to it (its rows would be in the older form). Run the newer release; to go back, restore a backup taken before the upgrade.'
  );
}

/**
 * Applies every pending migration in one transaction, under the advisory lock: all of them or none, so a migration
 * that fails (rows an older release let in that a new constraint refuses) leaves the database at the version the
 * running release knows, never halfway between two releases. Refuses a database that holds migrations this release
 * does not know (a newer release migrated it): an older release writing rows in their older form corrupts them for the
 * newer one (found from outside: holds an older instance wrote on a newer schema could never be settled).
 */
export async function migrate(db: Database, onApply: (m: Migration) => void = () => {}, dir = MIGRATIONS_DIR): Promise<MigrationReport> {
  const migrations = listMigrations(dir);
  return db.withAdvisoryLock(MIGRATION_LOCK_KEY, async (conn) => {
    await conn.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`);
    const { rows } = await conn.query<{ version: number; name: string; checksum: string }>('SELECT version, name, checksum FROM schema_migrations ORDER BY version');
    const unknown = newerThanThisRelease(rows, migrations);
    if (unknown.length > 0) throw new MigrationError(newerSchemaRefusal(unknown));
    const done = new Map(rows.map((r) => [r.version, r.checksum]));
    for (const m of migrations) {
      const checksum = done.get(m.version);
      if (checksum !== undefined && checksum !== m.checksum) {
        throw new MigrationError(`migration ${m.version}_${m.name} was changed after it was applied; add a new migration instead`);
      }
    }
    const pending = migrations.filter((m) => !done.has(m.version));
    if (pending.length === 0) return { applied: [], alreadyApplied: done.size };
    const at = rows.at(-1);
    await conn.query('BEGIN');
    let running: Migration | undefined;
    try {
      for (const m of pending) {
        running = m;
        await conn.exec(m.sql);
        await conn.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [m.version, m.name, m.checksum]);
      }
      await conn.query('COMMIT');
    } catch (error) {
      // A lost connection rolled the migrations back already; start-up retries them once the database is back.
      if (isStorageUnavailable(error)) throw error;
      await conn.query('ROLLBACK');
      const stays = at === undefined ? 'empty' : `at ${String(at.version).padStart(4, '0')}_${at.name}`;
      throw new MigrationError(
        `migration ${String(running!.version).padStart(4, '0')}_${running!.name} failed: ${(error as Error).message}. ` +
          `None of the ${pending.length} pending migrations was applied: the database stays ${stays}, as the release before ran it.`,
      );
    }
    for (const m of pending) onApply(m);
    return { applied: pending, alreadyApplied: done.size };
  });
}

/** Where the database's schema stands against this release: what /readyz reports. */
export type SchemaState = { state: 'current' } | { state: 'behind' } | { state: 'newer'; refusal: string };

/** Every migration file applied (current), some not yet (behind), or migrations this release does not know (newer). */
export async function schemaState(db: Database, dir = MIGRATIONS_DIR): Promise<SchemaState> {
  const migrations = listMigrations(dir);
  const { rows } = await db.query<{ version: number; name: string }>('SELECT version, name FROM schema_migrations ORDER BY version');
  const unknown = newerThanThisRelease(rows, migrations);
  if (unknown.length > 0) return { state: 'newer', refusal: newerSchemaRefusal(unknown) };
  return rows.length >= migrations.length ? { state: 'current' } : { state: 'behind' };
}
