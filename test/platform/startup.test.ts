import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { listMigrations } from '../../src/platform/db/migrate.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { spawnGateway } from '../support/process.ts';

describe.runIf(onPostgres())('start-up on PostgreSQL', () => {
  it('two instances started at the same moment on one empty database both come up and migrate once', async () => {
    const database = await createPostgresDatabase();
    try {
      const [a, b] = await Promise.all([
        spawnGateway({ DATABASE_URL: database.url }),
        spawnGateway({ DATABASE_URL: database.url }),
      ]);
      try {
        for (const instance of [a, b]) expect((await fetch(`${instance.url}/readyz`)).status).toBe(200);
        const applied = [...a.logs, ...b.logs].filter((l) => l.msg === 'migration applied');
        expect(applied).toHaveLength(listMigrations().length);
        const client = new pg.Client({ connectionString: database.url });
        await client.connect();
        const { rows } = await client.query('SELECT version FROM schema_migrations ORDER BY version');
        await client.end();
        expect(rows.map((r) => r.version)).toEqual(listMigrations().map((m) => m.version));
      } finally {
        await Promise.all([a.kill(), b.kill()]);
      }
    } finally {
      await database.drop();
    }
  }, 90_000);
});
