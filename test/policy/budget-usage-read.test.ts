// The budgets' running totals are read by the primary key, one probe a period, on the plan a group-commit batch
// runs (generic) and whatever the table's size. A plain join of the keys with the table was planned, generic,
// as a hash join over a sequential scan of every period while the table was small (600 periods: cheaper by the
// cost model than ten probes), and a connection keeps the plan it made. Both databases.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/platform/db/migrate.ts';
import { budgetReadPart, budgetUsageOf } from '../../src/policy/budget-usage.ts';
import { openTestDatabase, type TestDatabase } from '../support/database.ts';
import { seedAgents, wholeReadsOf } from '../support/scale.ts';

const AGENTS = 200;
const PERIODS = [
  { budgetId: 'daily', periodStartS: 1_764_028_800 },
  { budgetId: 'monthly', periodStartS: 1_761_955_200 },
  { budgetId: 'books', periodStartS: 0 },
];

let test: TestDatabase;

beforeAll(async () => {
  test = await openTestDatabase();
  const { db } = test;
  await migrate(db);
  await seedAgents(db, 'budgets', AGENTS);
  await db.query(
    `INSERT INTO budget_usage (agent_id, budget_id, period_start_s, spent_uc, alerted_pct)
     SELECT 'agt_budgets_' || i, p.budget_id, p.period_start_s, i * 1000 + p.n, 0
       FROM generate_series(1, $1::int) AS i, unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS p(budget_id, period_start_s, n)`,
    [AGENTS, PERIODS.map((p) => p.budgetId), PERIODS.map((p) => p.periodStartS)],
  );
  await db.exec('ANALYZE budget_usage');
}, 60_000);

afterAll(() => test?.drop());

describe("the budgets' running totals read", () => {
  const keys = [1, 2, 150].flatMap((n) => PERIODS.map((p) => ({ agentId: `agt_budgets_${n}`, ...p })));

  it("returns each period's row, and none for a period that has none yet", async () => {
    const missing = { agentId: 'agt_budgets_3', budgetId: 'daily', periodStartS: 1_764_115_200 };
    const usage = await budgetUsageOf(test.db, [...keys, missing]);
    expect(usage.size).toBe(keys.length);
    expect(usage.get(`agt_budgets_150\nmonthly\n${1_761_955_200}`)).toEqual({ spentUc: 150_002n, alertedPct: 0 });
    expect(usage.has(`agt_budgets_3\ndaily\n${missing.periodStartS}`)).toBe(false);
  });

  it('probes the primary key for each period on a generic plan, with no read of the whole table', async () => {
    const read = budgetReadPart(keys, 1);
    const scans = await test.db.transaction(async (tx) => {
      await tx.exec('SET LOCAL plan_cache_mode = force_generic_plan');
      return wholeReadsOf(tx, `WITH ${read.sql} SELECT * FROM budget_read`, read.params);
    });
    expect(scans).toEqual([]);
  });
});
