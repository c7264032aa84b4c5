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

export async function migrate(db: Database, onApply: (m: Migration) => void = () => {}): Promise<MigrationReport> {
  const migrations = listMigrations();
  return db.withAdvisoryLock(MIGRATION_LOCK_KEY, async (conn) => {
    await conn.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`);
    const { rows } = await conn.query<{ version: number; checksum: string }>('SELECT version, checksum FROM schema_migrations');
    const done = new Map(rows.map((r) => [r.version, r.checksum]));
    for (const m of migrations) {
      const checksum = done.get(m.version);
      if (checksum !== undefined && checksum !== m.checksum) {
        throw new Error(`migration ${m.version}_${m.name} was changed after it was applied; add a new migration instead`);
      }
    }
    const applied: Migration[] = [];
    for (const m of migrations.filter((m) => !done.has(m.version))) {
      await conn.query('BEGIN');
      try {
        await conn.exec(m.sql);
        await conn.query('INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [m.version, m.name, m.checksum]);
        await conn.query('COMMIT');
      } catch (error) {
        // A lost connection rolled the migration back already; start-up retries it once the database is back.
        if (isStorageUnavailable(error)) throw error;
        await conn.query('ROLLBACK');
        throw new Error(`migration ${m.version}_${m.name} failed: ${(error as Error).message}`);
      }
      applied.push(m);
      onApply(m);
    }
    return { applied, alreadyApplied: done.size };
  });
}

/** True when every migration file is applied: what /readyz reports. */
export async function isSchemaCurrent(db: Database): Promise<boolean> {
  const latest = listMigrations().at(-1)?.version ?? 0;
  const { rows } = await db.query<{ version: number | null }>('SELECT max(version) AS version FROM schema_migrations');
  return (rows[0]?.version ?? 0) >= latest;
}
