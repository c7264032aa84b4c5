// The test databases on PGlite: copies of one migrated tarball, which every copy reads and none may write into.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { migratedPgliteDump, openTestDatabase, testDbKind } from './database.ts';

const sha256 = async (blob: Blob) => createHash('sha256').update(new Uint8Array(await blob.arrayBuffer())).digest('hex');

describe.runIf(testDbKind() === 'pglite')('a test database on PGlite', () => {
  it('is a copy of the migrated tarball: its writes, checkpoints and a VACUUM FULL reach neither the tarball nor a later copy', async () => {
    const dump = migratedPgliteDump();
    const before = await sha256(dump);
    const first = await openTestDatabase(undefined, { migrated: true });
    try {
      await first.db.exec("CREATE TABLE scratch (x text); INSERT INTO scratch SELECT repeat('x', 500) FROM generate_series(1, 5000)");
      await first.db.exec('CHECKPOINT');
      await first.db.exec('VACUUM FULL');
      await first.db.exec('CHECKPOINT');
      expect(await sha256(dump)).toBe(before);
      const second = await openTestDatabase(undefined, { migrated: true });
      try {
        const { rows } = await second.db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_class WHERE relname = 'scratch'");
        expect(rows).toEqual([{ n: 0 }]);
      } finally {
        await second.db.close();
      }
    } finally {
      await first.db.close();
    }
  }, 60_000);
});
