// Numbered SQL migrations (`migrations/NNNN_name.sql`), the same files for PostgreSQL and PGlite.
// Applied under an advisory lock so that instances starting together migrate exactly once.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApiError } from '../errors.ts';
import type { Database } from './database.ts';
import { isStorageUnavailable, UNDEFINED_TABLE } from './faults.ts';

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

/** What a run of `migrate` tells its caller as it goes. */
export interface MigrationHooks {
  /** Before the run's transaction, when some are pending: a command line says what it is about to do (it takes seconds). */
  pending?: (migrations: readonly Migration[]) => void;
  /** After the run's transaction committed, once per migration it applied. */
  applied?: (migration: Migration) => void;
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

/** A migration as its file names it: `0040_name`. */
export function migrationName(m: { version: number; name: string }): string {
  return `${String(m.version).padStart(4, '0')}_${m.name}`;
}

/** The database's applied migrations this release does not know: written by a newer release. */
function newerThanThisRelease(applied: ReadonlyArray<{ version: number; name: string }>, known: readonly Migration[]): string[] {
  const versions = new Set(known.map((m) => m.version));
  return applied.filter((row) => !versions.has(row.version)).map(migrationName);
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
export async function migrate(db: Database, hooks: MigrationHooks = {}, dir = MIGRATIONS_DIR): Promise<MigrationReport> {
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
        throw new MigrationError(`migration ${migrationName(m)} was changed after it was applied; add a new migration instead`);
      }
    }
    const pending = migrations.filter((m) => !done.has(m.version));
    if (pending.length === 0) return { applied: [], alreadyApplied: done.size };
    const at = rows.at(-1);
    hooks.pending?.(pending);
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
      // A lost connection rolled the migrations back already (its ROLLBACK fails too, which is fine); a timeout (a lock
      // wait given up) leaves the connection in the failed transaction, which ROLLBACK ends. Start-up retries them.
      await conn.query('ROLLBACK').catch(() => {});
      if (isStorageUnavailable(error)) throw error;
      const stays = at === undefined ? 'empty' : `at ${migrationName(at)}, as the release before ran it`;
      throw new MigrationError(`migration ${migrationName(running!)} failed: ${(error as Error).message}. None of the ${pending.length} pending migrations was applied: the database stays ${stays}.`);
    }
    for (const m of pending) hooks.applied?.(m);
    return { applied: pending, alreadyApplied: done.size };
  });
}

/** Where the database's schema stands against this release: what /readyz reports. */
export type SchemaState = { state: 'current' } | { state: 'behind' } | { state: 'none' } | { state: 'newer'; refusal: string };

/**
 * Every migration file applied (current), some not yet (behind), no gateway schema at all (none: no `schema_migrations`),
 * or migrations this release does not know (newer).
 */
export async function schemaState(db: Database, dir = MIGRATIONS_DIR): Promise<SchemaState> {
  const migrations = listMigrations(dir);
  let rows: Array<{ version: number; name: string }>;
  try {
    ({ rows } = await db.query<{ version: number; name: string }>('SELECT version, name FROM schema_migrations ORDER BY version'));
  } catch (error) {
    // A database without the gateway's schema (replaced or restored empty under a running instance) answers: it
    // holds none, which is not silence (found from outside: /readyz said "the database does not answer").
    if (sqlStateOf(error) === UNDEFINED_TABLE) return { state: 'none' };
    throw error;
  }
  const unknown = newerThanThisRelease(rows, migrations);
  if (unknown.length > 0) return { state: 'newer', refusal: newerSchemaRefusal(unknown) };
  return rows.length >= migrations.length ? { state: 'current' } : { state: 'behind' };
}

/**
 * What a command that needs this release's schema and never migrates (`acg credit check`, which must not change what it
 * checks; `acg keys`) says of a database at any other, or undefined when it is current.
 */
export function schemaRefusal(schema: SchemaState): string | undefined {
  switch (schema.state) {
    case 'current':
      return undefined;
    case 'none':
      return "this database holds no gateway schema: run acg migrate (or start the gateway) first, or point DATABASE_URL / ACG_DATA_DIR at the gateway's";
    case 'behind':
      return 'the database\'s schema is behind this release: run acg migrate first (during an upgrade, once the older instances are drained: docs/operations.md, "Upgrading to a new release"), or run the release the gateway runs';
    case 'newer':
      return schema.refusal;
  }
}

/** How often a running instance looks for a newer release's migrations (see SchemaWatch). */
export const SCHEMA_WATCH_INTERVAL_MS = 5_000;

/**
 * The SQLSTATE of an error the database answered, itself or as a cause (node-postgres' and PGlite's errors carry the
 * server's `severity` beside it; a five-letter errno such as EPIPE has none).
 */
export function sqlStateOf(error: unknown): string | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    const { code, severity } = current as { code?: unknown; severity?: unknown };
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && typeof severity === 'string') return code;
  }
  return undefined;
}

/** How soon after a look a failed statement may ask for another (a bug answering 500 must not query on every request). */
const SCHEMA_LOOK_GAP_MS = 1_000;

/**
 * Looks, every `intervalMs` once started, for migrations this release does not know, and calls `onNewer` once when
 * it finds some: a newer release migrated the database under this running instance, which must stop writing (its rows
 * would be in the older form) rather than only leave the load balancer's rotation (found from outside: an older
 * instance answered /readyz 503 yet went on taking grants and registrations, and its background jobs on writing). A
 * failed look (the database away) is tried again at the next tick.
 *
 * `lookNow` is asked by a request whose statement failed unexpectedly: a newer schema is what makes an older release's
 * statements fail (a column it does not fill, a table it does not know), so that request answers 503 and the instance
 * stops at once, not 500 until the next tick (found from outside: 9 and 20 answers 500 in the seconds between an
 * upgrade's migration and the older instance's stop). `stop` resolves once a look in flight has ended: a stop closes
 * the database next, and a look on a closed pool read as an outage (found from outside: "database unavailable" at a
 * graceful stop, from a watch that went on after the close).
 */
export class SchemaWatch {
  private looking: Promise<boolean> | undefined;
  private found = false;
  private lookedAtMs = -Infinity;
  private timer: NodeJS.Timeout | undefined;
  private onNewer: ((refusal: string) => void) | undefined;

  constructor(
    private readonly db: Database,
    private readonly intervalMs = SCHEMA_WATCH_INTERVAL_MS,
  ) {}

  start(onNewer: (refusal: string) => void): void {
    this.onNewer = onNewer;
    this.timer = setInterval(() => void this.look().catch(() => false), this.intervalMs);
    this.timer.unref();
  }

  /** Whether a newer release migrated the database, looked at now (false while not watching, or within a second of the last look). */
  async lookNow(): Promise<boolean> {
    if (this.found) return true;
    if (!this.onNewer || this.timer === undefined) return false;
    if (!this.looking && performance.now() - this.lookedAtMs < SCHEMA_LOOK_GAP_MS) return false;
    return this.look().catch(() => false);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.looking?.catch(() => {});
  }

  /**
   * What a request answers for `error`: 503 storage_unavailable when it is a statement the database refused (it has
   * a SQLSTATE and is no refusal of ours) and a newer release migrated the database, which is what makes an older
   * release's statements fail; the error itself otherwise. The look stops the instance (`start`'s `onNewer`).
   */
  async answerFor(error: unknown): Promise<unknown> {
    if (error instanceof ApiError || isStorageUnavailable(error) || sqlStateOf(error) === undefined) return error;
    if (await this.lookNow()) {
      return new ApiError('storage_unavailable', {
        detail: 'a newer release of the gateway migrated the database, and this instance of an older one is stopping; retry (another instance answers)',
      });
    }
    // A table this release reads is not there, and no newer release dropped it: the database was replaced or restored
    // without the schema under this instance. No request is at fault, and the cure is the operator's (found from
    // outside: 500 internal_error).
    if (sqlStateOf(error) === UNDEFINED_TABLE) {
      return new ApiError('storage_unavailable', { detail: "the database lacks the gateway's tables (replaced or restored without its schema?): run `acg migrate`" });
    }
    return error;
  }

  private look(): Promise<boolean> {
    if (this.found) return Promise.resolve(true);
    this.looking ??= schemaState(this.db)
      .then((schema) => {
        if (schema.state !== 'newer' || this.found) return this.found;
        this.found = true;
        if (this.timer) clearInterval(this.timer);
        this.onNewer?.(schema.refusal);
        return true;
      })
      .finally(() => {
        this.lookedAtMs = performance.now();
        this.looking = undefined;
      });
    return this.looking;
  }
}
