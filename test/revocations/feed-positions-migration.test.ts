// Migration 0045 numbers each merchant's revocations feed on its own: a gateway upgraded with revocations in its
// feeds must give their rows the positions 1, 2, 3, … per merchant in their old order, and leave each feed's count
// at its last position, so the next append numbers on without a gap or a collision.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { PGlite } from '@electric-sql/pglite';
import { afterAll, describe, expect, it } from 'vitest';
import { listMigrations } from '../../src/platform/db/migrate.ts';

describe('migration 0045: revocation feed positions', () => {
  const db = new PGlite();
  afterAll(() => db.close());

  it("numbers each merchant's rows in their seq order and sets each feed's count to its last position", async () => {
    // The two tables as 0022 made them, without the rest of the schema (0045 touches nothing else).
    await db.exec(`
      CREATE TABLE hold_revocations (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, hold_id TEXT NOT NULL UNIQUE, merchant_id TEXT NOT NULL,
        agent_id TEXT NOT NULL, freeze_id TEXT, event_id TEXT NOT NULL, reason TEXT NOT NULL, revoked_at_s BIGINT NOT NULL);
      CREATE TABLE revocation_feeds (merchant_id TEXT PRIMARY KEY, revoked_holds BIGINT NOT NULL CHECK (revoked_holds >= 0));
      INSERT INTO hold_revocations (hold_id, merchant_id, agent_id, event_id, reason, revoked_at_s) VALUES
        ('hold_a1', 'mer_a', 'agt_x', 'evt_1', 'agent_frozen', 1), ('hold_b1', 'mer_b', 'agt_x', 'evt_2', 'agent_frozen', 1),
        ('hold_a2', 'mer_a', 'agt_x', 'evt_1', 'agent_frozen', 1), ('hold_b2', 'mer_b', 'agt_y', 'evt_3', 'agent_retired', 2),
        ('hold_a3', 'mer_a', 'agt_y', 'evt_4', 'agent_retired', 2);
      INSERT INTO revocation_feeds VALUES ('mer_a', 3), ('mer_b', 2);
    `);
    const migration = listMigrations().find((m) => m.version === 45)!;
    expect(migration.name).toBe('revocation_feed_positions');
    await db.exec(migration.sql);

    const rows = (await db.query('SELECT hold_id, merchant_id, feed_position::int AS position FROM hold_revocations ORDER BY seq')).rows;
    expect(rows).toEqual([
      { hold_id: 'hold_a1', merchant_id: 'mer_a', position: 1 },
      { hold_id: 'hold_b1', merchant_id: 'mer_b', position: 1 },
      { hold_id: 'hold_a2', merchant_id: 'mer_a', position: 2 },
      { hold_id: 'hold_b2', merchant_id: 'mer_b', position: 2 },
      { hold_id: 'hold_a3', merchant_id: 'mer_a', position: 3 },
    ]);
    expect((await db.query('SELECT merchant_id, revoked_holds::int AS n FROM revocation_feeds ORDER BY 1')).rows).toEqual([
      { merchant_id: 'mer_a', n: 3 },
      { merchant_id: 'mer_b', n: 2 },
    ]);
    // One position per merchant at most.
    await expect(db.exec(`INSERT INTO hold_revocations (hold_id, merchant_id, agent_id, event_id, reason, revoked_at_s, feed_position) VALUES ('hold_dup', 'mer_a', 'agt_x', 'evt_5', 'agent_frozen', 3, 3)`)).rejects.toThrow(/unique/);
  });
});
