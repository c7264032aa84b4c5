import path from 'node:path';
import type { Config } from '../config.ts';
import type { Database } from './database.ts';
import type { OutageLog } from './faults.ts';
import { openPglite } from './pglite.ts';
import { openPostgres } from './postgres.ts';

/** Opens the configured database. It connects lazily: a PostgreSQL that is down fails the first call, not this one. */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir' | 'db'>, log?: OutageLog): Promise<Database> {
  if (config.databaseUrl) return openPostgres(config.databaseUrl, { timeouts: config.db, log });
  return openPglite(path.join(config.dataDir, 'pglite'), log);
}

export function describeStorage(db: Database): string {
  return db.kind === 'postgres' ? 'postgresql' : 'pglite';
}
