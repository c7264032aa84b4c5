// The budgets' running totals (budget_usage, holds.budget_charges), owned by the spending policy: the one read
// a budget check makes (a row per budget period, never a sum of history), and the parts of the ledger's own
// statements that change them, so a hold, a settlement or a refund changes its budgets in the same statement
// (and round trip) as its credit. Lock order: budget rows are the last rows any of those statements lock, in
// sorted order.
import type { Queryable } from '../platform/db/database.ts';

/** One budget's period: whose, which budget, from when. */
export interface BudgetPeriodKey {
  agentId: string;
  budgetId: string;
  periodStartS: number;
}

const keyOf = (key: BudgetPeriodKey) => `${key.agentId}\n${key.budgetId}\n${key.periodStartS}`;

/** One budget period's running total, as a read returns it. */
export interface BudgetUsageRow {
  agent_id: string;
  budget_id: string;
  period_start_s: bigint;
  spent_uc: bigint;
  alerted_pct: number;
}

/**
 * The CTE part `budget_read` that reads the running totals of these budget periods (columns of
 * BudgetUsageRow), for a statement that has more to do in the same round trip (the hold pass reads them with
 * its lots). Its parameters are numbered from `$firstParameter`.
 */
export function budgetReadPart(keys: readonly BudgetPeriodKey[], firstParameter: number): { sql: string; params: unknown[] } {
  const p = (offset: number) => `$${firstParameter + offset}`;
  return {
    sql: `budget_read AS (
       SELECT u.agent_id, u.budget_id, u.period_start_s, u.spent_uc, u.alerted_pct
         FROM unnest(${p(0)}::text[], ${p(1)}::text[], ${p(2)}::bigint[]) AS k(agent_id, budget_id, period_start_s)
         JOIN budget_usage u ON u.agent_id = k.agent_id AND u.budget_id = k.budget_id AND u.period_start_s = k.period_start_s
     )`,
    params: [keys.map((key) => key.agentId), keys.map((key) => key.budgetId), keys.map((key) => key.periodStartS)],
  };
}

/** Running totals by `agent\nbudget\nperiodStart`, from the rows a read returned. */
export function budgetUsageFrom(rows: readonly BudgetUsageRow[]): Map<string, { spentUc: bigint; alertedPct: number }> {
  return new Map(rows.map((row) => [keyOf({ agentId: row.agent_id, budgetId: row.budget_id, periodStartS: Number(row.period_start_s) }), { spentUc: row.spent_uc, alertedPct: row.alerted_pct }]));
}

/** The running totals of these budget periods (one statement; none for no key), by `agent\nbudget\nperiodStart`. */
export async function budgetUsageOf(db: Queryable, keys: readonly BudgetPeriodKey[]): Promise<Map<string, { spentUc: bigint; alertedPct: number }>> {
  if (keys.length === 0) return new Map();
  const read = budgetReadPart(keys, 1);
  const { rows } = await db.query<BudgetUsageRow>(`WITH ${read.sql} SELECT * FROM budget_read`, read.params);
  return budgetUsageFrom(rows);
}

export { keyOf as budgetPeriodKey };

/** What one new hold counts in one budget period, and the alert threshold it announced there (0: none). */
export interface BudgetChargeRow extends BudgetPeriodKey {
  holdId: string;
  amountUc: bigint;
  alertedPct: number;
}

/**
 * What the ledger's statement that inserts new holds writes for their budget charges: each hold's
 * `budget_charges` column (`charges`, in the order of `holdIds`: a JSON array of the periods it counts in, or null),
 * and the CTE part that raises each budget period's running total by what its new holds take, in sorted order,
 * after the part `after` (the agents' balance rows): budget rows are the last rows a hold locks, in the order
 * the give-back part locks them. The totals are summed here, so the statement upserts one row per period
 * whatever the number of holds.
 * Its parameters are numbered from `$firstParameter`; `counts.periods` names the part whose rows (`periods` of
 * them) the statement may count to check its writes.
 */
export function budgetChargeParts(
  charges: readonly BudgetChargeRow[],
  holdIds: readonly string[],
  after: string,
  firstParameter: number,
): { charges: Array<string | null>; sql: string; params: unknown[]; counts: { periods: string }; periods: number } {
  const byHold = new Map<string, Array<{ agent_id: string; budget_id: string; period_start_s: number }>>();
  const periods = new Map<string, { key: BudgetPeriodKey; amountUc: bigint; alertedPct: number }>();
  for (const charge of charges) {
    const held = byHold.get(charge.holdId) ?? [];
    held.push({ agent_id: charge.agentId, budget_id: charge.budgetId, period_start_s: charge.periodStartS });
    byHold.set(charge.holdId, held);
    const key = keyOf(charge);
    const period = periods.get(key);
    if (period) {
      period.amountUc += charge.amountUc;
      period.alertedPct = Math.max(period.alertedPct, charge.alertedPct);
    } else {
      periods.set(key, { key: charge, amountUc: charge.amountUc, alertedPct: charge.alertedPct });
    }
  }
  const totals = [...periods.values()];
  const p = (offset: number) => `$${firstParameter + offset}`;
  return {
    charges: holdIds.map((holdId) => {
      const held = byHold.get(holdId);
      return held ? JSON.stringify(held) : null;
    }),
    sql: `budget_counted AS (
       INSERT INTO budget_usage (agent_id, budget_id, period_start_s, spent_uc, alerted_pct)
       SELECT agent_id, budget_id, period_start_s, spent_uc, alerted_pct
         FROM unnest(${p(0)}::text[], ${p(1)}::text[], ${p(2)}::bigint[], ${p(3)}::bigint[], ${p(4)}::int[])
           AS c(agent_id, budget_id, period_start_s, spent_uc, alerted_pct)
        WHERE (SELECT count(*) FROM ${after}) >= 0
        ORDER BY agent_id, budget_id, period_start_s
       ON CONFLICT (agent_id, budget_id, period_start_s) DO UPDATE
         SET spent_uc = budget_usage.spent_uc + EXCLUDED.spent_uc, alerted_pct = GREATEST(budget_usage.alerted_pct, EXCLUDED.alerted_pct)
       RETURNING 1
     )`,
    params: [
      totals.map(({ key }) => key.agentId),
      totals.map(({ key }) => key.budgetId),
      totals.map(({ key }) => key.periodStartS),
      totals.map(({ amountUc }) => amountUc.toString()),
      totals.map(({ alertedPct }) => alertedPct),
    ],
    counts: { periods: 'budget_counted' },
    periods: totals.length,
  };
}

/**
 * The CTE part that gives back to the budget periods a hold counted in: `givenBackSql` is a query of
 * `(hold_id, amount_uc)` rows (what each hold no longer spends: the uncaptured rest of a settled hold, a
 * refund), each taken off the periods its hold was charged to, in sorted order. Written as an upsert that only
 * ever updates (the rows exist since the hold), so the rows are locked in that order, after the part `after`;
 * a row inserted instead would mean a charge without its running total: the caller counts the rows with
 * `existed` false and fails.
 */
export function budgetGiveBackPart(givenBackSql: string, after: string): string {
  return `budget_given_back AS (
       INSERT INTO budget_usage (agent_id, budget_id, period_start_s, spent_uc)
       SELECT c.agent_id, c.budget_id, c.period_start_s, SUM(g.amount_uc)::bigint
         FROM (${givenBackSql}) g JOIN hold_budget_charges c ON c.hold_id = g.hold_id
        WHERE g.amount_uc > 0 AND (SELECT count(*) FROM ${after}) >= 0
        GROUP BY c.agent_id, c.budget_id, c.period_start_s ORDER BY c.agent_id, c.budget_id, c.period_start_s
       ON CONFLICT (agent_id, budget_id, period_start_s) DO UPDATE SET spent_uc = budget_usage.spent_uc - EXCLUDED.spent_uc
       RETURNING xmax::text <> '0' AS existed
     )`;
}
