// The ledger checked after the load, with the gateway stopped. Each check names what broke; any problem
// fails the bench (non-zero exit). The answers the load generator saw are checked against the rows: every
// 200 mint names one hold of its own, and every 200 capture names a captured hold.
import type { Queryable } from '../src/platform/db/database.ts';
import { PRICE_UC } from './seed.ts';

export interface Answers {
  /** Hold ids of the 200 mint answers, all cells. */
  minted: string[];
  /** Hold ids of the 200 capture answers, all cells. */
  captured: string[];
  /** How many 200 answers each kind had (each must have named a hold). */
  mintOk: number;
  captureOk: number;
  /** Hold ids (the receipts) of the 200 execute answers, and of the 200 release answers. */
  executed: string[];
  executeOk: number;
  released: string[];
  releaseOk: number;
}

async function count(db: Queryable, sql: string, params: unknown[] = []): Promise<bigint> {
  const { rows } = await db.query<{ n: bigint | number | string }>(sql, params);
  return BigInt(rows[0]!.n);
}

function duplicates(ids: readonly string[]): number {
  return ids.length - new Set(ids).size;
}

export async function checkLedger(db: Queryable, answers: Answers): Promise<{ checks: string[]; problems: string[] }> {
  const checks: string[] = [];
  const problems: string[] = [];
  const expectZero = async (name: string, sql: string, params: unknown[] = []) => {
    checks.push(name);
    const n = await count(db, sql, params);
    if (n !== 0n) problems.push(`${name}: ${n} violation(s)`);
  };
  await expectZero('journal balances per operation', `SELECT count(*) AS n FROM (SELECT operation_id FROM journal_entries GROUP BY operation_id HAVING SUM(amount_uc) <> 0) o`);
  await expectZero('journal balances overall', `SELECT count(*) AS n FROM (SELECT 1 FROM journal_entries HAVING COALESCE(SUM(amount_uc), 0) <> 0) o`);
  await expectZero('no lot below zero', `SELECT count(*) AS n FROM credit_lots WHERE remaining_uc < 0`);
  await expectZero('no ledger account below zero', `SELECT count(*) AS n FROM ledger_accounts WHERE balance_uc < 0`);
  await expectZero(
    'lot remaining = granted − outstanding holds − captured',
    `SELECT count(*) AS n FROM credit_lots l
      WHERE l.granted_uc <> l.remaining_uc
        + COALESCE((SELECT SUM(a.amount_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'held'), 0)
        + COALESCE((SELECT SUM(a.captured_uc) FROM hold_allocations a JOIN holds h ON h.id = a.hold_id WHERE a.lot_id = l.id AND h.state = 'captured'), 0)`,
  );
  await expectZero(
    'each hold = its allocations (amount, and captured part)',
    `SELECT count(*) AS n FROM holds h
       LEFT JOIN (SELECT hold_id, SUM(amount_uc) AS amount_uc, SUM(captured_uc) AS captured_uc FROM hold_allocations GROUP BY hold_id) a ON a.hold_id = h.id
      WHERE a.amount_uc IS DISTINCT FROM h.amount_uc
         OR a.captured_uc <> CASE WHEN h.state = 'captured' THEN h.captured_uc ELSE 0 END
         OR h.captured_uc > h.amount_uc`,
  );
  await expectZero(
    "each lot's journal account = its remaining credit",
    `SELECT count(*) AS n FROM credit_lots l
       LEFT JOIN (SELECT account, SUM(amount_uc) AS s FROM journal_entries WHERE account LIKE 'lot:%' GROUP BY account) j ON j.account = 'lot:' || l.id
      WHERE l.remaining_uc <> COALESCE(j.s, 0)`,
  );
  await expectZero(
    "each hold's journal account = its amount while held, 0 once resolved",
    `SELECT count(*) AS n FROM holds h
       LEFT JOIN (SELECT account, SUM(amount_uc) AS s FROM journal_entries WHERE account LIKE 'hold:%' GROUP BY account) j ON j.account = 'hold:' || h.id
      WHERE COALESCE(j.s, 0) <> CASE WHEN h.state = 'held' THEN h.amount_uc ELSE 0 END`,
  );
  await expectZero(
    "each budget period's running total = its holds (held, or captured − refunded)",
    `SELECT count(*) AS n FROM budget_usage u
       FULL JOIN (SELECT c.agent_id, c.budget_id, c.period_start_s,
                         SUM(CASE h.state WHEN 'held' THEN h.amount_uc WHEN 'captured' THEN h.captured_uc - h.refunded_uc ELSE 0 END) AS covered_uc
                    FROM hold_budget_charges c JOIN holds h ON h.id = c.hold_id
                   GROUP BY c.agent_id, c.budget_id, c.period_start_s) c USING (agent_id, budget_id, period_start_s)
      WHERE COALESCE(u.spent_uc, -1) <> COALESCE(c.covered_uc, 0)`,
  );
  await expectZero(
    'merchant earnings = captured credit',
    `SELECT count(*) AS n FROM (SELECT (SELECT COALESCE(SUM(balance_uc), 0) FROM ledger_accounts WHERE id LIKE 'merchant:%') AS earned,
       (SELECT COALESCE(SUM(captured_uc), 0) FROM holds WHERE merchant_id IS NOT NULL) AS captured) t WHERE earned <> captured`,
  );
  checks.push('every 200 mint answer names a distinct hold of the offer');
  if (answers.minted.length !== answers.mintOk) problems.push(`${answers.mintOk - answers.minted.length} 200 mint answers named no hold`);
  if (duplicates(answers.minted) > 0) problems.push(`${duplicates(answers.minted)} mint answers named a hold another answer named`);
  const missing = await count(
    db,
    `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.id IS NULL OR h.amount_uc <> $2 OR h.offer_id <> 'off_bench'`,
    [answers.minted, PRICE_UC],
  );
  if (missing !== 0n) problems.push(`${missing} 200 mint answers name no hold of the offer's price`);
  checks.push('every 200 capture answer names a distinct captured hold');
  if (answers.captured.length !== answers.captureOk) problems.push(`${answers.captureOk - answers.captured.length} 200 capture answers named no hold`);
  if (duplicates(answers.captured) > 0) problems.push(`${duplicates(answers.captured)} holds were captured twice with 200`);
  const uncaptured = await count(db, `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.state IS DISTINCT FROM 'captured'`, [answers.captured]);
  if (uncaptured !== 0n) problems.push(`${uncaptured} 200 capture answers name a hold that is not captured`);
  checks.push('every 200 execute answer names a distinct captured hold');
  if (answers.executed.length !== answers.executeOk) problems.push(`${answers.executeOk - answers.executed.length} 200 execute answers named no hold`);
  if (duplicates(answers.executed) > 0) problems.push(`${duplicates(answers.executed)} execute answers named a hold another answer named`);
  const unexecuted = await count(db, `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.state IS DISTINCT FROM 'captured'`, [answers.executed]);
  if (unexecuted !== 0n) problems.push(`${unexecuted} 200 execute answers name a hold that is not captured`);
  checks.push('every 200 release answer names a distinct released hold');
  if (answers.released.length !== answers.releaseOk) problems.push(`${answers.releaseOk - answers.released.length} 200 release answers named no hold`);
  if (duplicates(answers.released) > 0) problems.push(`${duplicates(answers.released)} holds were released twice with 200`);
  const unreleased = await count(db, `SELECT count(*) AS n FROM unnest($1::text[]) AS r(id) LEFT JOIN holds h ON h.id = r.id WHERE h.state IS DISTINCT FROM 'released'`, [answers.released]);
  if (unreleased !== 0n) problems.push(`${unreleased} 200 release answers name a hold that is not released`);
  return { checks, problems };
}
