import path from 'node:path';
import type { Config } from '../config.ts';
import type { Database } from './database.ts';
import { openPglite } from './pglite.ts';
import { openPostgres } from './postgres.ts';

export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>): Promise<Database> {
  if (config.databaseUrl) return openPostgres(config.databaseUrl);
  return openPglite(path.join(config.dataDir, 'pglite'));
}

export function describeStorage(db: Database): string {
  return db.kind === 'postgres' ? 'postgresql' : 'pglite';
}
