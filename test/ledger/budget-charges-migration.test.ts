// Migration 0023 moves each hold's budget charges from the table hold_budget_charges onto the hold row: a
// gateway upgraded with holds open must give back to exactly the periods those holds were charged to, so the
// view that replaces the table must show the same rows the table held.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { PGlite } from '@electric-sql/pglite';
import { afterAll, describe, expect, it } from 'vitest';
import { listMigrations } from '../../src/platform/db/migrate.ts';

describe('migration 0023: budget charges on the hold row', () => {
  const db = new PGlite();
  afterAll(() => db.close());

  it('carries every charge over, and the view reads them as the table did', async () => {
    // The two tables as 0018 made them, without the rest of the schema (0023 touches nothing else).
    await db.exec(`
      CREATE TABLE holds (id TEXT PRIMARY KEY);
      CREATE TABLE hold_budget_charges (
        hold_id TEXT NOT NULL REFERENCES holds (id), agent_id TEXT NOT NULL, budget_id TEXT NOT NULL, period_start_s BIGINT NOT NULL,
        PRIMARY KEY (hold_id, agent_id, budget_id));
      INSERT INTO holds VALUES ('hold_a'), ('hold_b'), ('hold_none');
      INSERT INTO hold_budget_charges VALUES
        ('hold_a', 'agt_child', 'daily', 1764000000), ('hold_a', 'agt_child', 'total', 0), ('hold_a', 'agt_root', 'monthly', 1761955200),
        ('hold_b', 'agt_root', 'daily', 1764086400);
    `);
    const before = (await db.query('SELECT hold_id, agent_id, budget_id, period_start_s FROM hold_budget_charges ORDER BY 1, 2, 3')).rows;

    const migration = listMigrations().find((m) => m.version === 23)!;
    expect(migration.name).toBe('hold_budget_charges_inline');
    await db.exec(migration.sql);

    const after = (await db.query('SELECT hold_id, agent_id, budget_id, period_start_s FROM hold_budget_charges ORDER BY 1, 2, 3')).rows;
    expect(after).toEqual(before);
    const none = await db.query<{ budget_charges: unknown }>(`SELECT budget_charges FROM holds WHERE id = 'hold_none'`);
    expect(none.rows[0]!.budget_charges).toBeNull();
    const kinds = await db.query<{ relkind: string }>(`SELECT relkind FROM pg_class WHERE relname = 'hold_budget_charges'`);
    expect(kinds.rows).toEqual([{ relkind: 'v' }]);
  });
});

describe('migration 0026: budget charges in a compact form', () => {
  const db = new PGlite();
  afterAll(() => db.close());

  it('rewrites every charge as [agent or null, budget, period], and the view reads the same rows', async () => {
    // The hold columns the view reads, and the view, as 0023 left them.
    await db.exec(`
      CREATE TABLE holds (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, budget_charges JSONB);
      INSERT INTO holds VALUES
        ('hold_a', 'agt_child', '[{"agent_id": "agt_child", "budget_id": "daily", "period_start_s": 1764000000},
                                  {"agent_id": "agt_child", "budget_id": "total", "period_start_s": 0},
                                  {"agent_id": "agt_root", "budget_id": "monthly", "period_start_s": 1761955200}]'),
        ('hold_b', 'agt_root', '[{"agent_id": "agt_root", "budget_id": "daily", "period_start_s": 1764086400}]'),
        ('hold_none', 'agt_root', NULL);
    `);
    const inline = listMigrations().find((m) => m.version === 23)!.sql;
    await db.exec(inline.slice(inline.indexOf('CREATE VIEW')));
    const before = (await db.query('SELECT hold_id, agent_id, budget_id, period_start_s FROM hold_budget_charges ORDER BY 1, 2, 3')).rows;
    expect(before).toHaveLength(4);

    const migration = listMigrations().find((m) => m.version === 26)!;
    expect(migration.name).toBe('budget_charges_compact');
    await db.exec(migration.sql);

    expect((await db.query('SELECT hold_id, agent_id, budget_id, period_start_s FROM hold_budget_charges ORDER BY 1, 2, 3')).rows).toEqual(before);
    const stored = await db.query<{ id: string; budget_charges: unknown }>('SELECT id, budget_charges FROM holds ORDER BY id');
    expect(stored.rows).toEqual([
      { id: 'hold_a', budget_charges: [[null, 'daily', 1764000000], [null, 'total', 0], ['agt_root', 'monthly', 1761955200]] },
      { id: 'hold_b', budget_charges: [[null, 'daily', 1764086400]] },
      { id: 'hold_none', budget_charges: null },
    ]);
  });
});
