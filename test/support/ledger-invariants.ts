// The ledger's invariants over a whole database, for tests that drive the gateway from outside (real
// processes, the CLI) and then look at what it wrote.
import { expect } from 'vitest';
import type { Queryable } from '../../src/platform/db/database.ts';
import { ledgerViolations } from '../../src/ledger/invariants.ts';

/** One budget period's running total (`budget_usage.spent_uc`) beside what the holds charged to it say it must be. */
export interface BudgetPeriodTotal {
  agent_id: string;
  budget_id: string;
  period_start_s: bigint;
  spent_uc: bigint;
  /** The highest alert threshold announced in the period (`budget_usage.alerted_pct`; -1 without a running total). */
  alerted_pct: number;
  /** Σ over the holds charged to the period: held, the amount; captured, what stays captured (captured − refunded); released or expired, 0. */
  covered_uc: bigint;
  charges: bigint;
}

/**
 * Every budget period of the agents given (or of everyone) that has a running total or a charge, with the total
 * its holds imply. A period with charges but no running total reads spent_uc -1.
 */
export async function budgetPeriodTotals(db: Queryable, agentIds?: readonly string[]): Promise<BudgetPeriodTotal[]> {
  const { rows } = await db.query<BudgetPeriodTotal>(
    `WITH usage AS (
       SELECT agent_id, budget_id, period_start_s, spent_uc, alerted_pct FROM budget_usage WHERE $1::text[] IS NULL OR agent_id = ANY($1::text[])
     ), covered AS (
       SELECT c.agent_id, c.budget_id, c.period_start_s, count(*)::bigint AS charges,
              SUM(CASE h.state WHEN 'held' THEN h.amount_uc WHEN 'captured' THEN h.captured_uc - h.refunded_uc ELSE 0 END)::bigint AS covered_uc
         FROM hold_budget_charges c JOIN holds h ON h.id = c.hold_id
        WHERE $1::text[] IS NULL OR c.agent_id = ANY($1::text[])
        GROUP BY c.agent_id, c.budget_id, c.period_start_s
     )
     SELECT agent_id, budget_id, period_start_s, COALESCE(u.spent_uc, -1)::bigint AS spent_uc, COALESCE(u.alerted_pct, -1) AS alerted_pct,
            COALESCE(c.covered_uc, 0)::bigint AS covered_uc, COALESCE(c.charges, 0)::bigint AS charges
       FROM usage u FULL JOIN covered c USING (agent_id, budget_id, period_start_s)
      ORDER BY agent_id, budget_id, period_start_s`,
    [agentIds ?? null],
  );
  return rows;
}

/** Each budget period's running total equals what the holds charged to it hold, capture and keep. */
export async function expectBudgetInvariants(db: Queryable, agentIds?: readonly string[]): Promise<void> {
  for (const period of await budgetPeriodTotals(db, agentIds)) {
    expect(period.spent_uc, `budget ${period.budget_id} of ${period.agent_id} from ${period.period_start_s}: running total = Σ its holds (held, or captured − refunded)`).toBe(period.covered_uc);
  }
}

/** Every invariant of the ledger (src/ledger/invariants.ts, what `acg ledger check` runs) holds: none names a row. */
export async function expectLedgerInvariants(db: Queryable): Promise<void> {
  const broken = (await ledgerViolations(db)).filter((result) => result.violations > 0);
  expect(broken, broken.map((result) => `${result.name}: ${result.examples.map((e) => `${e.subject} (${e.detail})`).join('; ')}`).join('\n')).toEqual([]);
}
