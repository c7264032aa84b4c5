import path from 'node:path';
import type { Config } from '../config.ts';
import type { Database } from './database.ts';
import type { OutageLog } from './faults.ts';

/** Where the embedded database lives inside ACG_DATA_DIR. */
export function embeddedDatabaseDir(dataDir: string): string {
  return path.join(dataDir, 'pglite');
}

/**
 * Opens the configured database. It connects lazily: a PostgreSQL that is down fails the first call, not this one.
 * Each driver is loaded only when configured: a gateway on PostgreSQL never loads PGlite, nor the other way round.
 */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir' | 'db'>, log?: OutageLog): Promise<Database> {
  if (config.databaseUrl) {
    const { openPostgres } = await import('./postgres.ts');
    return openPostgres(config.databaseUrl, { timeouts: config.db, poolSizeMax: config.db.poolSizeMax, log });
  }
  const { openPglite } = await import('./pglite.ts');
  return openPglite(embeddedDatabaseDir(config.dataDir), log);
}

export function describeStorage(db: Pick<Database, 'kind'>): string {
  return db.kind === 'postgres' ? 'postgresql' : 'pglite';
}
