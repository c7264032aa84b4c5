// The budgets' running totals (budget_usage, holds.budget_charges), owned by the spending policy: the one read
// a budget check makes (a row per budget period, never a sum of history), and the statements that change them, so
// a hold, a settlement or a refund changes its budgets in the same transaction (and round trip) as its credit.
//
// Lock order: a budget row is only ever written by a transaction that already holds the row lock of its tree's
// payer in `agent_balances` (a budget belongs to an agent, whose tree has one payer, its root), and by a statement
// that began after that lock was taken: a hold pass takes it with its lots (`lockSpendableLotsOf`), before its hold
// statement; a settlement statement takes it inside itself, so its budget statement is sent right after it
// (`sendBudgetGiveBack`); a refund inserts its lot (which updates the payer's row) before its give-back. So two transactions never wait on each other for budget rows, and each
// statement finds a row where its snapshot says it is: the writes address rows by the address they read (`ctid`,
// `probedByKey`) with plain UPDATEs, in whatever order the plan takes (an upsert, which writes a lock record
// before each update, cost 137 bytes of WAL a row against 78: pgbench, 90 rows a statement).
//
// A statement that took the payer's lock inside itself cannot write them: its snapshot is older than the lock,
// and a writer that held the lock and committed meanwhile has moved the row, which the update by the old
// address then misses (PostgreSQL re-checks a moved row's new version against the TID it looked for). Done so
// in one statement, it was retried (SQLSTATE 40001, migration 0030, whose function no statement calls now); under
// contention on one payer every attempt met the same race, and a capture answered 500 after five.
import type { Queryable, Tx } from '../platform/db/database.ts';

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
 *
 * Each period is one probe of the primary key (a lateral lookup, which the planner cannot turn into a join): a
 * plain join of the keys with the table was planned, for a batch's generic plan, as a hash join over a
 * sequential scan of every period of every agent while the table was small (cheaper by the cost model), and a
 * cached plan keeps that shape as the table grows; on a copy of the bench's table (600 periods, 21 keys a
 * statement, pgbench) the probes took 0.07 ms against 0.13.
 */
export function budgetReadPart(keys: readonly BudgetPeriodKey[], firstParameter: number): { sql: string; params: unknown[] } {
  const p = (offset: number) => `$${firstParameter + offset}`;
  return {
    sql: `budget_read AS (
       SELECT u.agent_id, u.budget_id, u.period_start_s, u.spent_uc, u.alerted_pct
         FROM unnest(${p(0)}::text[], ${p(1)}::text[], ${p(2)}::bigint[]) AS k(agent_id, budget_id, period_start_s)
        CROSS JOIN LATERAL (
              SELECT * FROM budget_usage u
               WHERE u.agent_id = k.agent_id AND u.budget_id = k.budget_id AND u.period_start_s = k.period_start_s
               LIMIT 1) u
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

/**
 * The rows of a query of budget periods (`agent_id, budget_id, period_start_s`, and whatever else it has), each with
 * `row_tid`, where its running total is: one probe of the primary key per period (a lateral lookup, never a
 * join). The update that follows finds each row by that address, so no plan of it can read the table or its
 * index whole: an update joined with its periods by key was planned, on a young table, as a hash join over the
 * whole primary key, and a connection keeps such a plan as the table grows. The address holds until the
 * statement ends: only a transaction holding the budget's payer's row lock writes the row, and the statement
 * began after its own transaction took that lock (the lock order above), so no row moved since its snapshot;
 * each period appears once. A period without a row has none here (the callers count them).
 */
function probedByKey(periodsSql: string): string {
  return `SELECT p.*, t.row_tid FROM (${periodsSql}) p
       CROSS JOIN LATERAL (
             SELECT u.ctid AS row_tid FROM budget_usage u
              WHERE u.agent_id = p.agent_id AND u.budget_id = p.budget_id AND u.period_start_s = p.period_start_s
              LIMIT 1) t`;
}

/** What one new hold counts in one budget period, and the alert threshold it announced there (0: none). */
export interface BudgetChargeRow extends BudgetPeriodKey {
  holdId: string;
  amountUc: bigint;
  alertedPct: number;
}

/**
 * What the ledger's statement that inserts new holds writes for their budget charges: each hold's
 * `budget_charges` column (`columns`, in the order of `holds`: a JSON array of `[agent_id, budget_id,
 * period_start_s]`, agent_id null for the holding agent's own budgets (migration 0026), or null for none), and the
 * CTE parts that raise each budget period's running total by what its new holds take, after the part `after` (the
 * payers' balance rows): an update of the periods that have a row (`existing`, by `budgetPeriodKey`, as the hold
 * pass read them), and an insert of those that have none yet (a period's first hold). The pass read them under its
 * agents' row locks, and only a hold creates a period's row, under the lock of the budget's agent (its own or a
 * delegate's, whose ancestors it locks too), so the split holds until commit: were it wrong, the insert would
 * violate the primary key, or the update would count fewer rows than `periods`. The pass locked its payers'
 * balance rows with their lots (`lockSpendableLotsOf`), before the statement began, so every row is where its
 * snapshot says (see the lock order above). The totals are summed here, so the statement writes one row per
 * period whatever the number of holds. Its parameters are numbered from `$firstParameter`; `counted` is the SQL
 * of the number of periods the parts wrote, which the statement checks against `periods`.
 */
export function budgetChargeParts(
  charges: readonly BudgetChargeRow[],
  holds: ReadonlyArray<{ id: string; agentId: string }>,
  existing: ReadonlySet<string>,
  after: string,
  firstParameter: number,
): { columns: Array<string | null>; sql: string; params: unknown[]; counted: string; periods: number } {
  const agentOf = new Map(holds.map((hold) => [hold.id, hold.agentId]));
  const byHold = new Map<string, Array<[string | null, string, number]>>();
  const periods = new Map<string, { key: BudgetPeriodKey; amountUc: bigint; alertedPct: number }>();
  for (const charge of charges) {
    const held = byHold.get(charge.holdId) ?? [];
    held.push([charge.agentId === agentOf.get(charge.holdId) ? null : charge.agentId, charge.budgetId, charge.periodStartS]);
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
  const raised: Array<{ key: BudgetPeriodKey; amountUc: bigint; alertedPct: number }> = [];
  const opened: typeof raised = [];
  for (const [key, total] of periods) (existing.has(key) ? raised : opened).push(total);
  const params: unknown[] = [];
  const arrays = (totals: typeof raised) => {
    const first = firstParameter + params.length;
    params.push(
      totals.map(({ key }) => key.agentId),
      totals.map(({ key }) => key.budgetId),
      totals.map(({ key }) => key.periodStartS),
      totals.map(({ amountUc }) => amountUc.toString()),
      totals.map(({ alertedPct }) => alertedPct),
    );
    const p = (offset: number) => `$${first + offset}`;
    return `unnest(${p(0)}::text[], ${p(1)}::text[], ${p(2)}::bigint[], ${p(3)}::bigint[], ${p(4)}::int[])`;
  };
  const parts: string[] = [];
  const written: string[] = [];
  if (raised.length > 0) {
    parts.push(`budget_taken AS (
       ${probedByKey(`SELECT * FROM ${arrays(raised)} AS c(agent_id, budget_id, period_start_s, spent_uc, alerted_pct) WHERE (SELECT count(*) FROM ${after}) >= 0`)}
     ), budget_counted AS (
       UPDATE budget_usage u SET spent_uc = u.spent_uc + c.spent_uc, alerted_pct = GREATEST(u.alerted_pct, c.alerted_pct)
         FROM budget_taken c WHERE u.ctid = c.row_tid
       RETURNING 1
     )`);
    written.push('(SELECT count(*) FROM budget_counted)');
  }
  if (opened.length > 0) {
    parts.push(`budget_opened AS (
       INSERT INTO budget_usage (agent_id, budget_id, period_start_s, spent_uc, alerted_pct)
       SELECT * FROM ${arrays(opened)} AS o(agent_id, budget_id, period_start_s, spent_uc, alerted_pct)
        WHERE (SELECT count(*) FROM ${after}) >= 0
       RETURNING 1
     )`);
    written.push('(SELECT count(*) FROM budget_opened)');
  }
  return {
    columns: holds.map((hold) => {
      const held = byHold.get(hold.id);
      return held ? JSON.stringify(held) : null;
    }),
    sql: parts.join(', '),
    params,
    counted: written.length > 0 ? `(${written.join(' + ')})` : '0::bigint',
    periods: periods.size,
  };
}

/**
 * The CTE parts that give back to the budget periods a hold counted in: `givenBackSql` is a query of
 * `(amount_uc, agent_id, budget_charges)` rows, one per hold (what it no longer spends: the uncaptured rest of a
 * settled hold, a refund; the hold row's own holding agent and charges, never joined through the view
 * `hold_budget_charges`, a join the planner could answer by reading the holds' primary key whole), each taken off
 * the periods its hold was charged to, after the part `after` when there is one (a refund's: see the lock order
 * above). Every such period has its row (the hold's creation wrote it); `missing` is the SQL of the number of
 * periods owed a give-back that had none, which the caller checks is 0 (a charge without its running total).
 * The statement must have begun after its transaction took the payer's lock (see above): a row found by its
 * address is then always updated.
 */
export function budgetGiveBackPart(givenBackSql: string, after?: string): { sql: string; missing: string } {
  return {
    sql: `budget_owed AS (
       SELECT COALESCE(c.charge->>0, g.agent_id) AS agent_id, c.charge->>1 AS budget_id, (c.charge->>2)::bigint AS period_start_s,
              SUM(g.amount_uc)::bigint AS amount_uc
         FROM (${givenBackSql}) g
        CROSS JOIN LATERAL jsonb_array_elements(g.budget_charges) AS c(charge)
        WHERE g.amount_uc > 0 AND g.budget_charges IS NOT NULL${after ? ` AND (SELECT count(*) FROM ${after}) >= 0` : ''}
        GROUP BY 1, 2, 3
     ), budget_owed_rows AS (
       ${probedByKey('SELECT * FROM budget_owed')}
     ), budget_given_back AS (
       UPDATE budget_usage u SET spent_uc = u.spent_uc - o.amount_uc
         FROM budget_owed_rows o WHERE u.ctid = o.row_tid
       RETURNING 1
     )`,
    missing: '((SELECT count(*) FROM budget_owed) - (SELECT count(*) FROM budget_given_back))',
  };
}

/**
 * Sends the statement that gives back to their budget periods what settled holds no longer spend (the
 * uncaptured rest of each: `budgetGiveBackPart`), to follow the settlement's statement, which took their
 * payers' locks (see the lock order above); `holdIds` are the settled holds that were charged to a budget. The
 * holds are read again by their keys, as the settlement left them. It is sent without waiting for its answer
 * (`Tx.send`); a period owed a give-back without its row raises `ledger invariant`.
 */
export function sendBudgetGiveBack(tx: Tx, holdIds: readonly string[]): void {
  if (holdIds.length === 0) return;
  const givenBack = budgetGiveBackPart('SELECT amount_uc - captured_uc AS amount_uc, agent_id, budget_charges FROM holds WHERE id = ANY($1::text[])');
  tx.send(
    `WITH ${givenBack.sql}
     SELECT ledger_invariant(${givenBack.missing} = 0, format('settled holds owed a give-back to %s budget periods without a running total', ${givenBack.missing}))`,
    [[...holdIds]],
  );
}

/**
 * A budget a mandate change redefines (same id, another period, time zone or scope) or adds (a new id: counted as a
 * rescoped one, from no scope to its own), with where now falls under it.
 */
/**
 * Takes the row lock of a tree's payer in `agent_balances`, which every writer of that tree's budget rows holds first
 * ("A budget row is written by the statement after the payer's lock", docs/decisions.md): the owner's recount and
 * re-arm, outside a hold's or a settlement's own statements.
 */
async function lockPayer(tx: Tx, payerId: string): Promise<void> {
  await tx.query('SELECT 1 FROM agent_balances WHERE agent_id = $1 FOR UPDATE', [payerId]);
}

/**
 * After the owner changed kept budgets' limits or the mandate's alert thresholds: each such budget's periods re-armed
 * to the highest threshold their spend already reaches under the new rules (the owner's own change crossed those, so
 * they are not announced), so spending on announces the thresholds above it again; `budget.threshold` stays once per
 * threshold and period under one limit. Without it a raised limit stayed silent after its first 100% (found from
 * outside). The payer's balance row lock first, as every writer of budget rows takes it (the statement that writes them
 * begins after it).
 */
export async function rearmBudgetAlerts(
  tx: Tx,
  scope: { agentId: string; payerId: string },
  budgets: ReadonlyArray<{ budgetId: string; limitUc: bigint }>,
  thresholds: readonly number[],
): Promise<void> {
  if (budgets.length === 0) return;
  await lockPayer(tx, scope.payerId);
  await tx.query(
    `UPDATE budget_usage u SET alerted_pct = COALESCE((SELECT max(t) FROM unnest($4::int[]) AS t WHERE u.spent_uc::numeric * 100 >= b.limit_uc::numeric * t), 0)
       FROM unnest($2::text[], $3::bigint[]) AS b(budget_id, limit_uc)
      WHERE u.agent_id = $1 AND u.budget_id = b.budget_id`,
    [scope.agentId, budgets.map((budget) => budget.budgetId), budgets.map((budget) => budget.limitUc.toString()), [...thresholds]],
  );
}

export interface RedefinedBudget {
  budgetId: string;
  /** The start of the period that contains now under the new definition (0 for `total`). */
  periodStartS: number;
  /** Its new scope, when the change gave it another one (the purchases it counts: `chargesOf`'s rule). */
  rescoped?: { merchantId?: string; category?: string; serviceId?: string };
}

/** What a hold was for, as a budget's scope reads it. */
interface HoldTarget {
  merchant_id: string | null;
  category: string;
  service_id: string | null;
}

/** Whether a budget of this scope counts a hold (the rule `chargesOf` applies when the hold is taken). */
function inScope(scope: NonNullable<RedefinedBudget['rescoped']>, hold: HoldTarget): boolean {
  if (scope.merchantId !== undefined) return hold.merchant_id === scope.merchantId;
  if (scope.category !== undefined) return hold.category === scope.category;
  if (scope.serviceId !== undefined) return hold.service_id === scope.serviceId;
  return true;
}

/**
 * Recounts budgets whose period, time zone or scope a mandate change redefines, or that it adds, so that the period
 * now falls in counts what its holds took, as if the budget had always been defined so: each open or captured hold of the agent's tree
 * created since that period began, and charged to the budget in another period (the old definition's), has its
 * charge moved to the new period, with what it still spends (held, or captured less refunded) taken off the old
 * period's total and added to the new one's. Holds made before stay in their periods, which no current period
 * reads again. Without it a budget's new period began at nothing: a day budget whose time zone changed in the
 * middle of a day allowed that day's limit once more.
 *
 * Locks, in the order every writer of these rows takes them (see the lock order above): the caller holds the
 * agent's row lock (the mandate's writer; every hold pass of its tree takes it too, so no hold is being added),
 * then the holds in id order, then the payer's balance row, then the budget rows are written. Returns how many
 * charges moved.
 */
export async function recountRedefinedBudgets(
  tx: Tx,
  scope: { agentId: string; subtreeIds: readonly string[]; payerId: string },
  budgets: readonly RedefinedBudget[],
): Promise<number> {
  if (budgets.length === 0) return 0;
  // A rescoped budget may come to count holds that were charged to none.
  const anyRescoped = budgets.some((budget) => budget.rescoped !== undefined);
  const { rows } = await tx.query<HoldTarget & { id: string; agent_id: string; created_at_s: bigint; spends_uc: bigint; charges: string | null }>(
    `SELECT id, agent_id, created_at_s, budget_charges::text AS charges, merchant_id, category,
            CASE WHEN merchant_id IS NULL THEN offer_snapshot->>'serviceId' END AS service_id,
            CASE state WHEN 'held' THEN amount_uc ELSE captured_uc - refunded_uc END AS spends_uc
       FROM holds
      WHERE agent_id = ANY($1::text[]) AND created_at_s >= $2 AND state IN ('held', 'captured') AND ($3 OR budget_charges IS NOT NULL)
      ORDER BY id FOR UPDATE`,
    [[...scope.subtreeIds], Math.min(...budgets.map((budget) => budget.periodStartS)), anyRescoped],
  );
  const rewritten = new Map<string, Array<[string | null, string, number]>>();
  const totals = new Map<string, bigint>();
  const add = (budgetId: string, periodStartS: number, amountUc: bigint) => {
    const key = `${budgetId}\n${periodStartS}`;
    totals.set(key, (totals.get(key) ?? 0n) + amountUc);
  };
  let moved = 0;
  for (const row of rows) {
    let charges = rewritten.get(row.id) ?? (JSON.parse(row.charges ?? '[]') as Array<[string | null, string, number]>);
    for (const budget of budgets) {
      if (Number(row.created_at_s) < budget.periodStartS) continue;
      const counts = budget.rescoped === undefined || inScope(budget.rescoped, row);
      const ofBudget = (charge: [string | null, string, number]) => (charge[0] ?? row.agent_id) === scope.agentId && charge[1] === budget.budgetId;
      for (const charge of charges.filter(ofBudget)) {
        const periodStartS = Number(charge[2]);
        if (!counts) {
          // Out of the budget's new scope: the hold no longer counts in it.
          add(budget.budgetId, periodStartS, -row.spends_uc);
          charges = charges.filter((other) => other !== charge);
          rewritten.set(row.id, charges);
          moved += 1;
        } else if (periodStartS !== budget.periodStartS) {
          add(budget.budgetId, periodStartS, -row.spends_uc);
          add(budget.budgetId, budget.periodStartS, row.spends_uc);
          charge[2] = budget.periodStartS;
          rewritten.set(row.id, charges);
          moved += 1;
        }
      }
      if (budget.rescoped !== undefined && counts && !charges.some(ofBudget)) {
        // Within its new scope and charged to it before under none: it counts there now.
        add(budget.budgetId, budget.periodStartS, row.spends_uc);
        charges = [...charges, [row.agent_id === scope.agentId ? null : scope.agentId, budget.budgetId, budget.periodStartS]];
        rewritten.set(row.id, charges);
        moved += 1;
      }
    }
  }
  if (moved === 0) return 0;
  await lockPayer(tx, scope.payerId);
  const deltas = [...totals].map(([key, deltaUc]) => {
    const [budgetId, periodStartS] = key.split('\n') as [string, string];
    return { budgetId, periodStartS, deltaUc };
  });
  // The old periods give (their holds wrote their rows: one missing is a broken ledger, as the give-back's check
  // says); the new ones take, and get their row if they have none (a change of 0 too: a charge's period always has
  // its row). Two statements: an INSERT's CHECK reads the proposed row before ON CONFLICT, so a negative one fails.
  const from = deltas.filter((delta) => delta.deltaUc < 0n);
  const taken = await tx.query(
    `UPDATE budget_usage u SET spent_uc = u.spent_uc + d.delta_uc
       FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS d(budget_id, period_start_s, delta_uc)
      WHERE u.agent_id = $1 AND u.budget_id = d.budget_id AND u.period_start_s = d.period_start_s`,
    [scope.agentId, from.map((d) => d.budgetId), from.map((d) => d.periodStartS), from.map((d) => d.deltaUc)],
  );
  if (taken.rowCount !== from.length) throw new Error(`ledger invariant: budget recount of agent ${scope.agentId}: a charged period has no running total`);
  const to = deltas.filter((delta) => delta.deltaUc >= 0n);
  await tx.query(
    `INSERT INTO budget_usage AS u (agent_id, budget_id, period_start_s, spent_uc)
     SELECT $1, budget_id, period_start_s, delta_uc FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS d(budget_id, period_start_s, delta_uc)
     ON CONFLICT (agent_id, budget_id, period_start_s) DO UPDATE SET spent_uc = u.spent_uc + EXCLUDED.spent_uc`,
    [scope.agentId, to.map((d) => d.budgetId), to.map((d) => d.periodStartS), to.map((d) => d.deltaUc)],
  );
  // A hold left with no charge has none (null), as one taken outside every budget.
  await tx.query(
    `UPDATE holds h SET budget_charges = c.charges::jsonb
       FROM unnest($1::text[], $2::text[]) AS c(id, charges)
      WHERE h.id = c.id`,
    [[...rewritten.keys()], [...rewritten.values()].map((charges) => (charges.length === 0 ? null : JSON.stringify(charges)))],
  );
  return moved;
}
