// The ledger's invariants over a whole database, for tests that drive the gateway from outside (real
// processes, the CLI) and then look at what it wrote.
import { expect } from 'vitest';
import type { Queryable } from '../../src/platform/db/database.ts';

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

export async function expectLedgerInvariants(db: Queryable): Promise<void> {
  const { rows: lots } = await db.query<{ id: string; granted_uc: bigint; remaining_uc: bigint; open_uc: bigint; captured_uc: bigint; journal_uc: bigint }>(
    `SELECT l.id, l.granted_uc, l.remaining_uc,
            COALESCE((SELECT SUM(a.amount_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'held'), 0)::bigint AS open_uc,
            COALESCE((SELECT SUM(a.captured_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'captured'), 0)::bigint AS captured_uc,
            COALESCE((SELECT SUM(amount_uc) FROM journal_entries WHERE account = 'lot:' || l.id), 0)::bigint AS journal_uc
       FROM credit_lots l`,
  );
  for (const lot of lots) {
    expect(lot.remaining_uc >= 0n, `${lot.id} never negative`).toBe(true);
    expect(lot.granted_uc, `${lot.id}: granted = remaining + open + captured`).toBe(lot.remaining_uc + lot.open_uc + lot.captured_uc);
    expect(lot.journal_uc, `${lot.id}: the journal replays to its remainder`).toBe(lot.remaining_uc);
  }
  const { rows: holds } = await db.query<{ id: string; state: string; amount_uc: bigint; captured_uc: bigint; journal_uc: bigint }>(
    `SELECT h.id, h.state, h.amount_uc, h.captured_uc,
            COALESCE((SELECT SUM(amount_uc) FROM journal_entries WHERE account = 'hold:' || h.id), 0)::bigint AS journal_uc
       FROM holds h`,
  );
  for (const hold of holds) {
    expect(hold.captured_uc <= hold.amount_uc, `${hold.id} captured at most what it held`).toBe(true);
    expect(hold.journal_uc, `${hold.id}: open holds carry their amount, resolved ones nothing`).toBe(hold.state === 'held' ? hold.amount_uc : 0n);
  }
  // Each agent's running totals (its balance row) agree with the holds it pays for and its lots: a delegate's
  // holds are paid for by its root (holds.payer_id), whose lots fund them; a delegate owns no lots.
  const { rows: payers } = await db.query<{ id: string; payer_id: string; root_id: string }>(
    `SELECT h.id, h.payer_id, COALESCE(a.ancestor_ids[1], a.id) AS root_id FROM holds h JOIN agents a ON a.id = h.agent_id`,
  );
  for (const hold of payers) expect(hold.payer_id, `${hold.id}: paid for by the root of its agent's tree`).toBe(hold.root_id);
  const { rows: delegateLots } = await db.query<{ id: string }>(`SELECT l.id FROM credit_lots l JOIN agents a ON a.id = l.agent_id WHERE a.parent_id IS NOT NULL`);
  expect(delegateLots, 'a delegate owns no lots').toEqual([]);
  const { rows: agents } = await db.query<{ agent_id: string; held_uc: bigint; captured_uc: bigint; granted_uc: bigint; holds_held_uc: bigint; holds_captured_uc: bigint; lots_granted_uc: bigint; lots_remaining_uc: bigint }>(
    `SELECT b.agent_id, b.held_uc, b.captured_uc, b.granted_uc,
            (SELECT COALESCE(SUM(amount_uc) FILTER (WHERE state = 'held'), 0) FROM holds WHERE payer_id = b.agent_id)::bigint AS holds_held_uc,
            (SELECT COALESCE(SUM(captured_uc) FILTER (WHERE state = 'captured'), 0) FROM holds WHERE payer_id = b.agent_id)::bigint AS holds_captured_uc,
            (SELECT COALESCE(SUM(granted_uc), 0) FROM credit_lots WHERE agent_id = b.agent_id)::bigint AS lots_granted_uc,
            (SELECT COALESCE(SUM(remaining_uc), 0) FROM credit_lots WHERE agent_id = b.agent_id)::bigint AS lots_remaining_uc
       FROM agent_balances b`,
  );
  for (const agent of agents) {
    expect(agent.held_uc, `${agent.agent_id}: held = Σ open holds it pays for`).toBe(agent.holds_held_uc);
    expect(agent.captured_uc, `${agent.agent_id}: captured = Σ captured holds it pays for`).toBe(agent.holds_captured_uc);
    expect(agent.granted_uc, `${agent.agent_id}: granted = Σ its lots`).toBe(agent.lots_granted_uc);
    expect(agent.granted_uc, `${agent.agent_id}: granted = remaining + held + captured`).toBe(agent.lots_remaining_uc + agent.held_uc + agent.captured_uc);
  }
  const { rows: totals } = await db.query<{ earned: bigint; captured: bigint; journal: bigint }>(
    `SELECT (SELECT COALESCE(SUM(balance_uc), 0) FROM ledger_accounts WHERE id LIKE 'merchant:%')::bigint AS earned,
            (SELECT COALESCE(SUM(captured_uc - refunded_uc), 0) FROM holds WHERE merchant_id IS NOT NULL)::bigint AS captured,
            (SELECT COALESCE(SUM(amount_uc), 0) FROM journal_entries)::bigint AS journal`,
  );
  expect(totals[0]!.earned, 'merchant earnings = everything captured for merchants and not refunded').toBe(totals[0]!.captured);
  expect(totals[0]!.journal, 'the whole journal sums to zero').toBe(0n);
  await expectBudgetInvariants(db);
}
