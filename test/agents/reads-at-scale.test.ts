// The agent reads on the hold's path and the delegation tree's find their rows by index, whatever the number of
// agents: each statement the store sends is planned on a table of 20,000 agents (analyzed, a few of them
// delegates) and its plan must not scan `agents` whole. The lock of a group-commit batch's agents once did
// (`id = ANY(…) OR id IN (SELECT …)` leaves the planner only a filter over every row: 4 ms a batch at 20,000
// agents, growing with every agent registered), and the subtree reads did too (`$1 = ANY(ancestor_ids)`, which
// the GIN index cannot answer). Both databases.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findAgentsByIdentity, findAgentView, findFrozenBy, findSubtree, lockAgentsWithAncestors, lockSubtree, subtreeIds } from '../../src/agents/store.ts';
import type { Queryable, Tx } from '../../src/platform/db/database.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openTestDatabase, type TestDatabase } from '../support/database.ts';
import { seedAgents, wholeReadsOf } from '../support/scale.ts';

const AGENTS = 20_000;

let test: TestDatabase;

beforeAll(async () => {
  test = await openTestDatabase();
  const { db } = test;
  await migrate(db);
  await seedAgents(db, 'scale', AGENTS);
  // agt_scale_1 → agt_scale_2 → agt_scale_3: a delegation chain among them.
  await db.query(`UPDATE agents SET parent_id = 'agt_scale_1', ancestor_ids = ARRAY['agt_scale_1'] WHERE id = 'agt_scale_2'`);
  await db.query(`UPDATE agents SET parent_id = 'agt_scale_2', ancestor_ids = ARRAY['agt_scale_1', 'agt_scale_2'] WHERE id = 'agt_scale_3'`);
  await db.exec('ANALYZE agents');
}, 60_000);

afterAll(() => test?.drop());

/** What `fn` sends, each statement with its parameters, and what it returned. */
async function sent<T>(fn: (tx: Tx) => Promise<T>): Promise<{ statements: Array<{ sql: string; params: readonly unknown[] }>; result: T }> {
  const statements: Array<{ sql: string; params: readonly unknown[] }> = [];
  const result = await test.db.transaction((tx) => {
    const recording: Tx = {
      inTransaction: true,
      query: (sql, params = []) => {
        statements.push({ sql, params });
        return tx.query(sql, params);
      },
      exec: (sql) => tx.exec(sql),
      lastStatement: () => tx.lastStatement(),
      send: (sql, params = []) => {
        statements.push({ sql, params });
        tx.send(sql, params);
      },
    };
    return fn(recording);
  });
  return { statements, result };
}

/** The whole-table reads (sequential or keyless index scans) in the plan of each statement, as the server plans it with these parameters. */
async function wholeReads(db: Queryable, statements: ReadonlyArray<{ sql: string; params: readonly unknown[] }>): Promise<string[]> {
  const scans: string[] = [];
  for (const { sql, params } of statements) scans.push(...(await wholeReadsOf(db, sql, params)));
  return scans;
}

describe('agent reads at scale (20,000 agents)', () => {
  it("locks a batch's agents and their ancestors by the primary key, in id order", async () => {
    const { statements, result } = await sent((tx) => lockAgentsWithAncestors(tx, ['agt_scale_3', 'agt_scale_500', 'agt_scale_19999']));
    expect(result.map((row) => row.id)).toEqual(['agt_scale_1', 'agt_scale_19999', 'agt_scale_2', 'agt_scale_3', 'agt_scale_500']);
    expect(statements).toHaveLength(1);
    expect(await wholeReads(test.db, statements)).toEqual([]);
  });

  it("reads and locks an agent's subtree through the indexes (primary key and ancestors)", async () => {
    const ids = await sent((tx) => subtreeIds(tx, 'agt_scale_1'));
    expect(ids.result).toEqual(['agt_scale_1', 'agt_scale_2', 'agt_scale_3']);
    const found = await sent((tx) => findSubtree(tx, 'agt_scale_2', 10));
    expect(found.result.map((row) => row.id)).toEqual(['agt_scale_2', 'agt_scale_3']);
    const locked = await sent((tx) => lockSubtree(tx, 'agt_scale_2', ['agt_scale_1']));
    expect(locked.result.map((row) => row.id)).toEqual(['agt_scale_1', 'agt_scale_2', 'agt_scale_3']);
    const statements = [...ids.statements, ...found.statements, ...locked.statements];
    expect(statements).toHaveLength(3);
    expect(await wholeReads(test.db, statements)).toEqual([]);
  });

  it('reads what showing agents needs, the agent whose freeze stops each, by the primary key', async () => {
    await test.db.query(`UPDATE agents SET status = 'frozen' WHERE id = 'agt_scale_1'`);
    try {
      const one = await sent((tx) => findAgentView(tx, 'agt_scale_3'));
      expect(one.result).toMatchObject({ id: 'agt_scale_3', frozen_by: 'agt_scale_1', owner_email: 'owner@example.com' });
      const many = await sent((tx) => findFrozenBy(tx, ['agt_scale_1', 'agt_scale_2', 'agt_scale_3', 'agt_scale_500']));
      expect(many.result).toEqual(new Map([['agt_scale_1', 'agt_scale_1'], ['agt_scale_2', 'agt_scale_1'], ['agt_scale_3', 'agt_scale_1'], ['agt_scale_500', null]]));
      const statements = [...one.statements, ...many.statements];
      expect(statements).toHaveLength(2);
      expect(await wholeReads(test.db, statements)).toEqual([]);
    } finally {
      await test.db.query(`UPDATE agents SET status = 'active' WHERE id = 'agt_scale_1'`);
    }
  });

  it('finds agents by identity through the identity index, on one plan the connection keeps for every call', async () => {
    const identity = (n: number) => ({ issuer: 'https://issuer.test', subject: `agent-${n}`, ownerEmail: 'owner@example.com' });
    const calls = [[1], [2, 3], [19_999], [4, 5, 6], [7], [8, 9], [10], [11, 12, 13, 14]];
    const { statements, result } = await sent(async (tx) => {
      const found: string[][] = [];
      for (const call of calls) found.push((await findAgentsByIdentity(tx, [...call.map(identity), { issuer: 'https://issuer.test', subject: 'nobody', ownerEmail: 'owner@example.com' }])).map((row) => row.id).sort());
      const plans = await tx.query<{ statement: string; generic_plans: bigint; custom_plans: bigint }>('SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements');
      return { found, plans: plans.rows };
    });
    expect(result.found).toEqual(calls.map((call) => call.map((n) => `agt_scale_${n}`).sort()));
    const rows = await findAgentsByIdentity(test.db, [identity(1)]);
    expect(rows[0]).toMatchObject({ id: 'agt_scale_1', owner_email: 'owner@example.com', owner_email_verified: true });
    expect(await wholeReads(test.db, statements.slice(0, 1))).toEqual([]);
    // PostgreSQL plans a prepared statement for its parameters five times, then keeps a generic plan unless
    // that one looks costlier: with the arrays' length visible, it planned all eight calls anew.
    const plans = result.plans.filter((plan) => plan.statement === statements[0]!.sql);
    expect(plans).toHaveLength(1);
    expect(Number(plans[0]!.generic_plans)).toBe(calls.length - 5);
  });
});
